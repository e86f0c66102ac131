import re
from typing import AbstractSet, Dict, FrozenSet, Hashable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.models import assigned_a_module_wrapper, picked_from_model_package
from torchlint.analysis.modules import builds_module, names_module_class
from torchlint.analysis.project import PROJECT
from torchlint.analysis.values import Values
from torchlint.analysis.weights_only import whole_object_use
from torchlint.engine.context import last_parts
from torchlint.finding import Fix
from torchlint.rules.base import Rule, quoted
from torchlint.rules.serialization.unsafe_torch_load import SAFE_DEFAULT_SINCE, TORCH_LOAD, TORCH_SAVE
from torchlint.rules.triggers import words

# How deep a saved dictionary is searched for modules and optimizers (`{"model": model, "opt": {...}}`).
_MAX_NESTING = 2


# The functions that allow-list classes for `weights_only=True` loads (torch >= 2.5).
ALLOW_LISTING = frozenset({"torch.serialization.safe_globals", "torch.serialization.add_safe_globals"})


def allow_listed(call: cst.Call) -> List[str]:
    """The class names an allow-listing call (`add_safe_globals([Net, nn.Linear])`, `safe_globals(...)`) names."""
    listed = semantics.keyword(call, "safe_globals") or semantics.positional(call, 0)
    if listed is None or type(listed.value) not in (cst.List, cst.Tuple):
        return []
    return [name for name in (semantics.terminal_name(element.value) for element in listed.value.elements) if name]


class WholeObjectCheckpoint(Rule):
    """
    ## What it does
    Flags:

    - `torch.save(obj, f)` where `obj` is a whole `nn.Module` (a torch layer or container, a
      `torchvision.models` builder's result, a class of the file or of a project module it imports
      that has a `forward` or derives from `nn.Module` through any number of project classes
      (`class RNNModelSearch(RNNModel)` with `class RNNModel(nn.Module)`), a model
      picked by name from a package of models, `models.__dict__[args.model]()`, where
      `models` is `torchvision.models` or a project package that defines or star-imports
      Module classes, or a name assigned an `nn.DataParallel` / `DistributedDataParallel`
      wrapper, whatever it wraps, or `torch.compile` of one; not the result of an unknown call, nor a checkpoint's
      entry such as `checkpoint["net"]`), an
      optimizer or scheduler of `torch.optim`, or a dictionary, list or tuple holding one
      (`{"model": model, "epoch": epoch}`, `[encoder, decoder]`), followed through the file's
      assignments and both arms of a conditional expression (`{"net": net.module if use_cuda else net}`),
      and from a parameter of a helper to what its calls pass where every use of it is a call, also in the files that import
      it: `def save_checkpoint(model, optimizer, epoch, path): torch.save(model, ...)` in `utils.py`,
      called by `train.py` with `model = model.RNNModel(...)` of `model.py` (darts), is reported at the
      helper's save; likewise `self.bert` set from a constructor's parameter, joined over the calls of the class
      in the project (`BERTTrainer(bert)` in the package's `__main__.py`); where those calls are not all known,
      a parameter annotated with a Module class of the project (`def __init__(self, bert: BERT)`) is taken to
      hold one, as the annotation declares (given up: a caller that passes something else despite it);
    - when the project supports only torch 2.6 or later (`torch-version`), `torch.load(f)`
      without `weights_only=False` of a file that such a save in the same file writes: the
      same path string (also through a module-level constant), the same
      module-level variable, the same expression built only of module-level names anywhere in
      the file (`os.path.join(work_dir, "model.pt")` in `train()` and at the top; names,
      their attributes, string literals and formatting, `+`, `%`, `/`, `os.path.join`), or
      the same expression in the same function. A file object of
      the builtin `open` stands for the path it opens: `torch.load(open(model_name, "rb"))`
      reads what `with open(model_name, "wb") as f: torch.save(model, f)` wrote (also a name
      assigned `open(path)` once), and two `with open(...) as f` blocks on different paths
      are different files;
    - a load, without `weights_only=False` (under torch 2.6's default, or with `weights_only=True`), whose
      result the code uses as a whole module, wherever the file came from: a method only modules have is
      called on it or on an item of it (`model = torch.load(path)` then `model.eval()`, the tutorial's
      "entire model"; `ckpt["model"].float().state_dict()`, `.parameters()`), or it is called like a
      function (`net(x)`); followed through subscripts, `.get(...)`, `.float()`, `.half()`, `.to(...)`,
      `.cuda()`, `.cpu()` and up to two names in the load's function (every binding of the name that reaches
      the use binds the loaded value), and from `self.ckpt = torch.load(...)` into every method of the
      class when no other statement assigns `self.ckpt` (a trainer that loads in `__init__` and resumes
      later). Such a file holds a pickled module, written by `torch.save(model)`. Not when the code tests
      what it got (`isinstance(ckpt, nn.Module)`, `hasattr`: written for either kind), when the file
      allow-lists classes (`add_safe_globals`, whatever it names: the module's classes are not known) or
      sets `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`. A loaded value handed to a function of the file or the
      project is followed into it through the parameter that takes it, one call deep: EDM's
      `copy_params_and_buffers(src_module=data["net"], ...)`, whose body asserts `isinstance(src_module,
      torch.nn.Module)`. Given up: a value used as a module two calls down (`extract_scales(ckpt)` handing
      `ckpt["model"]` to another helper) or by a method it is handed to.

    Not flagged: `torch.save(model.state_dict(), f)` and dictionaries of state dicts; loads
    passing `weights_only=False` (TL501 reports those that should not); loads in projects that
    support torch before 2.6, where `weights_only=False` was the default and TL501 reports
    the load. The save is reported whatever the version: the file it writes does not load
    under the default of the torch releases since 2.6.
    Not flagged either: saves and loads of objects whose classes the file allow-lists for
    weights-only loading (`torch.serialization.add_safe_globals([Net, ...])`, `with
    torch.serialization.safe_globals([Net, ...]):`), which then load; and a save whose
    classes a file next to it allow-lists (the script that loads what a training script
    saves: a `.py` file in the same folder that calls `safe_globals` and names each class).
    Nor a save of a file that the same file loads with `weights_only=False` (the same
    path string, module-level variable, expression of module-level names, or expression in
    the same function): a deliberate
    round trip of a trusted checkpoint, which loads (TL501 reports the load).
    Given up: a load in another file than the save, a save whose classes are allow-listed
    by a file in another folder (still flagged), and paths built in two functions from
    names of their own (`os.path.join(out, "best.pth")` twice, `out` a parameter or local
    of each): the rule cannot tell they are the same file.

    ## Why is this bad?
    `torch.save(model)` pickles the module's class by reference, together with its
    parameters. Since torch 2.6 `torch.load` defaults to `weights_only=True`, which rebuilds
    only tensors and plain containers: loading such a file raises `UnpicklingError: Weights
    only load failed ... Unsupported global` (observed on torch 2.13, also for optimizers and
    for a dictionary holding a module). The file also breaks when the class is renamed or
    moved. A `state_dict()` loads under the default and into any instance of the class.
    Other values a weights-only load refuses (an `argparse.Namespace`, numpy values, a
    `Path`, a config object) are TL503's: this rule is about whole objects, whose remedy is
    the state dict.

    ## Fix safety
    Unsafe: each module or optimizer named in the save (`model`, `{"model": model}`,
    `[encoder, decoder]`) becomes `model.state_dict()`, which loads under the default. It
    changes what the loading code gets back: a dictionary to pass to `load_state_dict` of a
    model built first, not a model. No fix when an object is built in the save itself or
    may be something else on one path. `weights_only=False` at the load would keep the
    file as it is, for a file you trust.

    ## Options
    `torch-version`: below 2.6 loads are not reported (saves are).
    """

    code = "TL502"
    name = "whole-object-checkpoint"
    fix_safety = "unsafe"
    # Every finding is a whole-object save or a load (of a file one writes, or used as a whole module).
    triggers = words("save", "load")
    # `order` counts only these calls: what matters is whether a load comes after a save.
    call_parts = last_parts(TORCH_LOAD | TORCH_SAVE | ALLOW_LISTING)
    message = (
        "`torch.save` of a whole module or optimizer pickles its class: since torch 2.6, `torch.load`'s default "
        "`weights_only=True` refuses it (`UnpicklingError: Weights only load failed`); save its `state_dict()`"
    )
    load_message = (
        "this file is written by `torch.save({saved}, ...)`, a whole module or optimizer: under torch 2.6's default "
        "`weights_only=True` this load raises `UnpicklingError: Weights only load failed`; save and load "
        "`state_dict()`s"
    )
    used_message = (
        "this load gets a whole module back (`{use}`), which only a file written by `torch.save(model)` holds: under "
        "torch 2.6's default `weights_only=True` it raises `UnpicklingError: Weights only load failed`; save and load "
        "`state_dict()`s, or pass `weights_only=False` for a file you trust"
    )
    example = """
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(784, 10))
    torch.save(model, "model.pt")  # expect: TL502:1
    """
    use_instead = """
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(784, 10))
    torch.save(model.state_dict(), "model.pt")
    model.load_state_dict(torch.load("model.pt", weights_only=True))
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # Per file key, each save in source order: (order, the saved expression if it is a whole object, else None).
        self.saves: Dict[Hashable, List[Tuple[int, Optional[cst.BaseExpression]]]] = {}
        self.loads: List[Tuple[Hashable, int, cst.Call]] = []
        # Loads whose result the code uses as a whole module (`model = torch.load(path)`, `model.eval()`), with that use.
        self.used_whole: List[Tuple[cst.Call, cst.CSTNode]] = []
        # Each whole-object save, with the names of the classes it pickles (`Net`, `Sequential`), its fix and its file key.
        self.whole_saves: List[Tuple[cst.Call, List[str], Optional[Fix], Optional[Hashable]]] = []
        # The files the file loads with `weights_only=False`: a whole-object round trip it trusts, which loads.
        self.trusted: Set[Hashable] = set()
        self.saved_classes: Dict[int, List[str]] = {}  # id(saved expression) -> the classes it pickles
        # The classes the file allow-lists for weights-only loads (`add_safe_globals([Net, nn.Linear])`): code
        # written for the weights-only default, whose loads of those classes succeed.
        self.allowed: Set[str] = set()
        self.order = 0

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        self.order += 1
        if name in ALLOW_LISTING:
            self.allowed.update(allow_listed(node))
        elif name in TORCH_SAVE:
            saved = semantics.keyword(node, "obj") or semantics.positional(node, 0)
            if saved is None:
                return
            classes = self._whole_objects(self.ctx, saved.value, self.ctx.stack, 0)
            target = semantics.keyword(node, "f") or semantics.positional(node, 1)
            key = file_key(self.ctx, target.value) if target is not None else None
            if classes:
                self.whole_saves.append((node, classes, self._state_dict_fix(saved.value), key))
                self.saved_classes[id(saved.value)] = classes
            if target is not None:
                self.saves.setdefault(key, []).append((self.order, saved.value if classes else None))
        elif name in TORCH_LOAD and not semantics.has_star_kwargs(node):
            weights_only = semantics.keyword(node, "weights_only")
            source = semantics.keyword(node, "f") or semantics.positional(node, 0)
            if weights_only is not None and semantics.literal(weights_only.value, None) is False and source is not None:
                self.trusted.add(file_key(self.ctx, source.value))
            # Weights only: asked for, or by default on the torch versions the project supports.
            asked = weights_only is not None and semantics.literal(weights_only.value) is True
            if not asked and (weights_only is not None or self.ctx.config.torch_version < SAFE_DEFAULT_SINCE):
                return
            if source is not None:
                self.loads.append((file_key(self.ctx, source.value), self.order, node))
            use = whole_object_use(self.ctx, node, self.ctx.stack)
            if use is not None:
                self.used_whole.append((node, use))

    def finish(self) -> None:
        # The neighbours are read once for each set of saved classes, not once for each save.
        nearby: Dict[FrozenSet[str], bool] = {}
        for save, classes, fix, written_to in self.whole_saves:
            if self.allowed.issuperset(classes) or written_to in self.trusted:
                continue
            key = frozenset(classes)
            if key not in nearby:
                nearby[key] = _allow_listed_nearby(self.ctx.filename, key)
            if not nearby[key]:
                self.report(save, fix=fix)
        reported = set()
        for key, order, load in self.loads:
            saved = saved_before(self.saves.get(key, []), order)
            if saved is not None and not self.allowed.issuperset(self.saved_classes[id(saved)]):
                shown = self.ctx.code(saved)
                self.report(load, self.load_message.format(saved=quoted(shown)))
                reported.add(id(load))
        # Which classes the loaded module has is not known here: a file that allow-lists any may have listed them.
        if self.allowed or _WEIGHTS_ONLY_FORCED_OFF in self.ctx.text:
            return
        for load, use in self.used_whole:
            if id(load) not in reported:
                self.report(load, self.used_message.format(use=quoted(self.ctx.code(use), 60)))

    def _state_dict_fix(self, saved: cst.BaseExpression) -> Optional[Fix]:
        """Save `x.state_dict()` for each whole object named in the save itself (`torch.save(model, f)`,
        `{"model": model, "epoch": epoch}`, `[encoder, decoder]`); None when one is built in place or reached
        through another name, whose code is not here to change."""
        if type(saved) is cst.Dict:
            written = [element.value for element in saved.elements if isinstance(element, cst.DictElement)]
        elif type(saved) in (cst.List, cst.Tuple):
            written = [element.value for element in saved.elements]
        else:
            written = [saved]
        edits = []
        for value in written:
            if not self._whole_objects(self.ctx, value, self.ctx.stack, 0):
                continue
            if type(value) not in (cst.Name, cst.Attribute) or not _all_whole_objects(self, value):
                return None
            edits.append(self.ctx.replace(value, self.ctx.code(value) + ".state_dict()"))
        return Fix.unsafe("Save the `state_dict()`", *edits) if edits else None

    def _whole_objects(self, ctx, expr: cst.BaseExpression, stack: Sequence[cst.CSTNode], nesting: int) -> List[str]:
        """The classes, by the names the code builds them with (`Net`, `Sequential`, `Adam`), of the whole modules and
        optimizers `expr` (evaluated inside `stack` in the file of `ctx`) may be or hold; [] when it is none. An
        origin may lie in another project file (a helper's parameter holds what its importers' calls pass: darts'
        `save_checkpoint(model, ...)` with `model = model.RNNModel(...)` in train.py): it is read in its own file."""
        # `net = nn.DataParallel(net)`: a module whatever it wraps (the origins are what it wraps).
        wrapper = assigned_a_module_wrapper(expr, ctx, stack)
        found: List[str] = [wrapper] if wrapper is not None else []
        for origin in Values.of(ctx).origins(expr, stack):
            node, there, octx = origin.node, origin.place.stack, origin.place.context
            if origin.instance_of is not None and names_module_class(origin.instance_of):
                found.append(origin.instance_of.node.name.value)  # `bert: BERT`, a Module class of the project
            if origin.opaque or origin.applied:
                continue
            if type(node) is cst.Call and _builds_whole_object(octx, node, there):
                found.append(semantics.terminal_name(node.func) or "?")
            elif type(node) is cst.Dict and nesting < _MAX_NESTING:
                for element in node.elements:
                    if isinstance(element, cst.DictElement):
                        found += self._whole_objects(octx, element.value, there, nesting + 1)
            elif type(node) in (cst.List, cst.Tuple) and nesting < _MAX_NESTING:
                # `torch.save([encoder, decoder], path)`
                for element in node.elements:
                    found += self._whole_objects(octx, element.value, there, nesting + 1)
        return found


# The environment variable that turns the weights-only default off (`os.environ[...] = "1"` in the file itself).
_WEIGHTS_ONLY_FORCED_OFF = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


def file_key(ctx, file: cst.BaseExpression) -> Hashable:
    """The same key for two expressions that name the same file: a path string, a module-level variable, the same
    code built of module-level names anywhere in the file (`os.path.join(work_dir, "model.pt")` in `train()` and at
    the top, `_of_module_names`), or the same code in the same function. A file object of the builtin `open` is the
    path it opens (`torch.load(open(model_name, "rb"))`, `with open(model_name, "wb") as f: torch.save(model, f)`)."""
    file = _opened_path(ctx, file) or file
    constant = Values.of(ctx).constant(file)
    if isinstance(constant, str):
        return ("path", constant)
    if type(file) is cst.Name:
        scope = ctx.scopes.binding_scope(file.value, ctx.scope_nodes)
        if scope is not None and scope.node is ctx.module:
            return ("module variable", file.value)
    if _of_module_names(ctx, file):
        return ("module code", ctx.code(file))
    function = ctx.enclosing(cst.FunctionDef, cst.Lambda)
    return ("code", id(function) if function is not None else None, ctx.code(file))


# Path builders whose result depends on their arguments only.
_PATH_JOINS = frozenset({"os.path.join", "posixpath.join"})


def _of_module_names(ctx, file: cst.BaseExpression) -> bool:
    """`file` is built only of names bound at module level (read where no local binding hides them), their
    attributes, literals, string formatting, `+`, `%`, `/` and `os.path.join`: it names the same file in every
    function of the file, as a module-level variable does (`os.path.join(work_dir, "model.pt")`)."""
    pending: List[cst.CSTNode] = [file]
    names = 0
    while pending:
        node = pending.pop()
        kind = type(node)
        if kind is cst.Name:
            scope = ctx.scopes.binding_scope(node.value, ctx.scope_nodes)
            if scope is None or scope.node is not ctx.module:
                return False
            names += 1
        elif kind is cst.Attribute:
            pending.append(node.value)
        elif kind in (cst.SimpleString, cst.Integer, cst.FormattedStringText):
            continue
        elif kind is cst.ConcatenatedString:
            pending += [node.left, node.right]
        elif kind is cst.FormattedString:
            pending += list(node.parts)
        elif kind is cst.FormattedStringExpression:
            if node.format_spec is not None:
                return False
            pending.append(node.expression)
        elif kind is cst.BinaryOperation and type(node.operator) in (cst.Add, cst.Modulo, cst.Divide):
            pending += [node.left, node.right]
        elif kind is cst.Call and ctx.qualified_name_in(node.func, _PATH_JOINS) and all(
            not argument.star and argument.keyword is None for argument in node.args
        ):
            pending += [argument.value for argument in node.args]
        else:
            return False
    return names > 0


def _opened_path(ctx, file: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The path `file` is opened on when it is the builtin `open(path, ...)` itself, or a name bound to it by the
    innermost `with ... as` around here that binds the name, or by its only assignment (`f = open(path, "rb")`);
    else None."""
    if type(file) is cst.Name:
        for node in reversed(ctx.stack):
            if type(node) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                break
            if type(node) is cst.With:
                bound = [item.item for item in node.items if item.asname is not None
                         and type(item.asname.name) is cst.Name and item.asname.name.value == file.value]
                if bound:
                    return _open_path(ctx, bound[-1])
        assigned = Values.of(ctx).assigned_here(file)
        return _open_path(ctx, assigned[0]) if len(assigned) == 1 else None
    return _open_path(ctx, file)


def _open_path(ctx, call: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    if (
        type(call) is not cst.Call or type(call.func) is not cst.Name or call.func.value != "open"
        or ctx.scopes.binding_scope("open", ctx.scope_nodes) is not None
    ):
        return None
    path = semantics.keyword(call, "file") or semantics.positional(call, 0)
    return path.value if path is not None else None


def saved_before(saves: List[Tuple[int, Optional[cst.BaseExpression]]], order: int) -> Optional[cst.BaseExpression]:
    """The whole object a load at `order` reads back: the last save of the file before it, when that is a whole
    object (a state dict saved over it in between is what is read); with no save before (a load in a function
    defined above the code that saves), any whole-object save of the file."""
    before = [saved for saved_order, saved in saves if saved_order < order]
    if before:
        return before[-1]
    return next((saved for _, saved in saves if saved is not None), None)


def _allow_listed_nearby(filename: str, classes: AbstractSet[str]) -> bool:
    """A file next to this one allow-lists every one of `classes` for weights-only loads: the script that loads
    what this one saves (`main.py` trains and saves a `Net`, `infer.py` loads under `safe_globals([Net, ...])`)."""
    names = [re.compile(rb"\b" + re.escape(name.encode()) + rb"\b") for name in classes]
    return PROJECT.neighbours_hold(
        filename, lambda data: b"safe_globals" in data and all(name.search(data) for name in names)
    )


def _all_whole_objects(rule: WholeObjectCheckpoint, value: cst.BaseExpression) -> bool:
    """Every value `value` may hold is a module or optimizer (not `None` on one path, not a parameter)."""
    origins = Values.of(rule.ctx).origins(value)
    return bool(origins) and all(
        not (origin.opaque or origin.applied) and type(origin.node) is cst.Call
        and _builds_whole_object(origin.place.context, origin.node, origin.place.stack)
        for origin in origins
    )


def _builds_whole_object(ctx, call: cst.Call, stack) -> bool:
    """`call` builds a module (a torch layer, a model builder, a Module class of the project, a model picked by name
    from a package of models) or an optimizer."""
    return (
        builds_module(ctx, call, stack) or _builds_optimizer(ctx, call, stack)
        or picked_from_model_package(call, ctx, stack) is not None
    )


def _builds_optimizer(ctx, call: cst.Call, stack) -> bool:
    """An optimizer or learning-rate scheduler of `torch.optim` (a scheduler holds its optimizer)."""
    name = ctx.qualified_name(call.func, stack) or ""
    return name.startswith("torch.optim.") and name.rpartition(".")[2][:1].isupper()
