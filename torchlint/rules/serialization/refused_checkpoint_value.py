from typing import Dict, Hashable, List, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.values import Values
from torchlint.analysis.syntax import argument_for
from torchlint.analysis.weights_only import Caller, Leaf, allow_listed_nearby, refused_leaves, stacks_to
from torchlint.engine.context import FileContext
from torchlint.engine.walk import OwnScopeVisitor, walk_visitor
from torchlint.finding import Fix
from torchlint.rules.base import Rule, quoted
from torchlint.rules.serialization.unsafe_torch_load import SAFE_DEFAULT_SINCE, TORCH_LOAD, TORCH_SAVE
from torchlint.rules.serialization.whole_object_checkpoint import ALLOW_LISTING, allow_listed, file_key, saved_before
from torchlint.rules.triggers import fragments


class RefusedCheckpointValue(Rule):
    """
    ## What it does
    Flags `torch.save(obj, f)` where `obj` holds a value that `torch.load`'s `weights_only=True`
    refuses to rebuild, naming the key that holds it and its type:

    - an `argparse.Namespace` (`"args": args` after `args = parser.parse_args()`);
    - a numpy scalar (`"best_acc": np.mean(accs)`, `np.float64(x)`) or array (`np.zeros(...)`,
      `tensor.numpy()`, `np.sin(x)` and other elementwise functions, `.astype(...)` of a numpy value);
    - a `pathlib.Path` (also `Path(root) / "run"`), a `functools.partial`, a
      `collections.defaultdict`, a `datetime`, a `frozenset`;
    - an instance of a class of the project that is not a module (a config object, a dataclass); a class
      deriving from `nn.Module` through other project classes is a module, left to TL502.

    The saved value is followed through names, dict, list and tuple literals, `dict(...)`,
    `ckpt["key"] = value` and `ckpt.update(...)` in the same function, the function of the
    project that builds the checkpoint (`torch.save(make_checkpoint(), path)`, also imported
    from another file), and a parameter of a module-level function: what the file's calls
    pass for it (`save_checkpoint({"args": args, ...})`), or else its annotation
    (`args: argparse.Namespace`). A call of a module-level function of the project that passes what
    it is given on to `torch.save` is a save too, reported at the call: `def save_on_master(*args,
    **kwargs): torch.save(*args, **kwargs)` (DETR, DeiT, MAE, DINO, ConvNeXt) saves the call's first
    argument, and a helper of another file that saves a dict of its parameters (`save_model(model,
    optimizer, opt, epoch, path)`) saves what the call passes for them; the helper's name holds "save".
    The save is reported when the project supports only torch 2.6 or later (`torch-version`), or when a
    load in the file reads the same file (as TL502 matches paths) with `weights_only=True`;
    such a load is reported too, where torch's default or the call asks for weights only.

    Not flagged: `vars(args)`, `float(x)`, `x.item()`, `x.tolist()`, `str(path)`, tensors,
    state dicts and plain Python values (numbers, strings, `None`, lists, tuples, sets, dicts,
    `OrderedDict`), which load; whole modules, optimizers and schedulers (TL502 reports those);
    classes allow-listed with `add_safe_globals`/`safe_globals` by the file, by a file next to
    it (the script that loads what it saves), or by a file in the folder of a project module
    it imports (a project's own `load()` that allow-lists numpy's `_reconstruct`); and values the rule
    cannot follow (a method's parameter, an attribute set by a method, a value read from a dict
    a method returns where the value model does not follow the method's object: a method of a
    class of the project on an instance it follows is read, `meter.scores()["mean"]` holding
    `np.nanmean(...)` is reported; the result of an installed package's function other than the numpy ones
    above). Given up: a load in another file than the save; a parameter of a function whose name
    the file also uses otherwise than in calls (passed on, or another function's local variable of
    the same name): what its calls pass is then not followed.

    ## Why is this bad?
    Since torch 2.6 `torch.load` defaults to `weights_only=True`, which rebuilds tensors and
    plain containers only. A checkpoint holding any other object fails to load as a whole:
    `UnpicklingError: Weights only load failed ... Unsupported global: GLOBAL
    argparse.Namespace` (observed on torch 2.13 for each kind above; numpy values name
    `numpy._core.multiarray.scalar` or `_reconstruct`). The file was fine when it was written
    and breaks on the first load after an upgrade. `torchlint checkpoint FILE` lists what an
    existing file holds.

    ## Fix safety
    Unsafe, where the replacement is exact (not for a value passed whole to a function that saves it,
    which may read it otherwise): `vars(args)` for a Namespace, `x.item()` for a
    numpy scalar, `x.tolist()` for an array, `str(p)` for a path, `dict(d)` for a
    `defaultdict`, `set(s)` for a `frozenset`. The loading code then gets a dict, a Python
    number, a list or a string back, and code that reads `ckpt["args"].lr` or calls array
    methods must change with it. For a file you trust, loading it under
    `torch.serialization.safe_globals([...])` (the message names the classes) or with
    `weights_only=False` keeps the file as it is.

    ## Options
    `torch-version`: below 2.6 a save is reported only when a load of the file in the same
    file asks for `weights_only=True`.
    """

    code = "TL503"
    name = "refused-checkpoint-value"
    # `torch.save`, or a function that saves (`save_on_master`, `save_checkpoint`), of this file or another.
    triggers = fragments("save")
    # Every call: besides torch's (`last_parts(TORCH_LOAD | TORCH_SAVE | ALLOW_LISTING)`) and `checkpoint.update(...)`,
    # a project function that saves (`utils.save_on_master(state, path)`) may have any name holding "save".
    call_parts = None
    fix_safety = "unsafe"
    message = (
        "`torch.save` writes {label} ({shown}){where}: `torch.load` with `weights_only=True`, the default since torch "
        "2.6, refuses it (`UnpicklingError: ... Unsupported global: GLOBAL {global_name}`); {remedy}, or, for a file "
        "you trust, load it under `torch.serialization.safe_globals([{allow}])`{allow_note}"
    )
    load_message = (
        "this file is written by `torch.save` with {label}{where}: `torch.load` with `weights_only=True` refuses it "
        "(`UnpicklingError: ... Unsupported global: GLOBAL {global_name}`); {remedy}, or allow-list it for a file you "
        "trust"
    )
    example = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    args = parser.parse_args()
    torch.save({"weights": torch.zeros(2), "args": args}, "checkpoint.pt")  # expect: TL503:1
    checkpoint = torch.load("checkpoint.pt", weights_only=True)  # expect: TL503:14
    """
    use_instead = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    args = parser.parse_args()
    torch.save({"weights": torch.zeros(2), "args": vars(args)}, "checkpoint.pt")
    checkpoint = torch.load("checkpoint.pt", weights_only=True)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loads: List[Tuple[Hashable, int, cst.Call, bool]] = []
        # Items added to a dict variable after it is built: (scope, name) -> [(key, value, stack)].
        self.added: Dict[Tuple[Optional[int], str], List[Tuple[str, cst.BaseExpression, tuple]]] = {}
        # Each save, judged in `finish` once the items added to its checkpoint are known: the call, the saved
        # expression, its stack and file (another project file's for a function that saves what it is given), the
        # key of the written file, the order, and the call of that function.
        self.pending: List[Tuple[cst.Call, cst.BaseExpression, tuple, FileContext, Hashable, int, Optional[Caller]]] = []
        self.allowed: Set[str] = set()
        # The saves of each project function called here (`_saves_in`), found once per function.
        self.saves_of: Dict[Tuple[int, bool], List[_Save]] = {}
        # Whether files near this one allow-list each kind's names, read once per kind.
        self.nearby: Dict[Tuple[str, ...], bool] = {}
        self.order = 0

    def visit_Call(self, node: cst.Call) -> None:
        self.order += 1
        name = self.ctx.qualified_name(node.func)
        if name in ALLOW_LISTING:
            self.allowed.update(allow_listed(node))
        elif name in TORCH_SAVE:
            saved = semantics.keyword(node, "obj") or semantics.positional(node, 0)
            target = semantics.keyword(node, "f") or semantics.positional(node, 1)
            if saved is not None and target is not None:
                self.pending.append(
                    (node, saved.value, tuple(self.ctx.stack), self.ctx, file_key(self.ctx, target.value), self.order, None)
                )
        elif name in TORCH_LOAD and not semantics.has_star_kwargs(node):
            weights_only = semantics.keyword(node, "weights_only")
            explicit = weights_only is not None and semantics.literal(weights_only.value) is True
            if weights_only is not None and not explicit:
                return
            source = semantics.keyword(node, "f") or semantics.positional(node, 0)
            if source is not None:
                self.loads.append((file_key(self.ctx, source.value), self.order, node, explicit))
        elif "save" in (semantics.terminal_name(node.func) or ""):
            self._saved_by_function(node)
        elif semantics.method_name(node) == "update" and type(node.func) is cst.Attribute and type(node.func.value) is cst.Name:
            # `checkpoint.update(args=args)` / `checkpoint.update({"args": args})`
            added = self.added.setdefault(self._variable(node.func.value.value), [])
            for argument in node.args:
                if argument.keyword is not None:
                    added.append((f'["{argument.keyword.value}"]', argument.value, tuple(self.ctx.stack)))
                elif not argument.star:
                    added.append(("", argument.value, tuple(self.ctx.stack)))

    def visit_Assign(self, node: cst.Assign) -> None:
        # `checkpoint["args"] = args`
        for target in node.targets:
            subscript = target.target
            if type(subscript) is cst.Subscript and type(subscript.value) is cst.Name and len(subscript.slice) == 1:
                index = subscript.slice[0].slice
                key = index.value if isinstance(index, cst.Index) else None
                shown = f'["{key.evaluated_value}"]' if isinstance(key, cst.SimpleString) else "[...]"
                self.added.setdefault(self._variable(subscript.value.value), []).append((shown, node.value, tuple(self.ctx.stack)))

    def finish(self) -> None:
        new_default = self.ctx.config.torch_version >= SAFE_DEFAULT_SINCE
        saves: Dict[Hashable, List[Tuple[int, Optional[Tuple[cst.Call, List[Leaf]]]]]] = {}
        for node, saved, stack, context, key, order, caller in self.pending:
            leaves = [leaf for leaf in refused_leaves(context, saved, stack, caller=caller) if not self._allow_listed(leaf)]
            if type(saved) is cst.Name and context is self.ctx:
                for where, value, there in self.added.get(self._variable(saved.value, stack), []):
                    leaves += [
                        leaf._replace(where=where + leaf.where)
                        for leaf in refused_leaves(self.ctx, value, there) if not self._allow_listed(leaf)
                    ]
            saves.setdefault(key, []).append((order, (node, leaves) if leaves else None))
            if not leaves:
                continue
            # Below torch 2.6 the file is still read by a load that asks for weights only.
            if new_default or any(load_key == key and explicit for load_key, _, _, explicit in self.loads):
                for leaf in leaves:
                    self.report(node, self._message(leaf), self._fix(leaf))
        for key, order, load, explicit in self.loads:
            if not (new_default or explicit):
                continue
            written = saved_before(saves.get(key, []), order)
            if written is not None:
                leaf = written[1][0]
                self.report(load, self.load_message.format(
                    label=leaf.refused.label, where=_where(leaf), global_name=leaf.refused.global_name,
                    remedy=leaf.refused.remedy.format(value=_shown(leaf)),
                ))

    def _saved_by_function(self, node: cst.Call) -> None:
        """A call of a module-level function of the project that passes what it is given on to `torch.save`:
        `def save_on_master(*args, **kwargs): torch.save(*args, **kwargs)` saves this call's first argument;
        `def save_model(model, optimizer, opt, ...): torch.save({"opt": opt, ...}, path)` in another file saves a
        dict whose parameters hold this call's arguments, also when it saves through such a `save_on_master`
        (MAE's and ConvNeXt's `save_model(args, ...)`). (In this file, its own save follows its calls.)"""
        for function, context in _module_functions(self.ctx, node.func, tuple(self.ctx.stack)):
            for save, saved, target, save_stack in _saves_in(context, function, True, self.saves_of):
                if saved is None:  # `torch.save(*args, **kwargs)`: this call's own arguments
                    saved = semantics.keyword(node, "obj") or semantics.positional(node, 0)
                    written = semantics.keyword(node, "f") or semantics.positional(node, 1)
                    if saved is not None:
                        key = file_key(self.ctx, written.value) if written is not None else ("saved by", id(save))
                        self.pending.append((node, saved.value, tuple(self.ctx.stack), self.ctx, key, self.order, None))
                    continue
                if context is self.ctx:
                    continue
                written = (
                    argument_for(node, function, target.value.value)
                    if target is not None and type(target.value) is cst.Name else None
                )
                key = file_key(self.ctx, written) if written is not None else ("saved by", id(save))
                caller = Caller(function, node, self.ctx, tuple(self.ctx.stack))
                self.pending.append((node, saved.value, save_stack, context, key, self.order, caller))

    def _variable(self, name: str, stack=None) -> Tuple[Optional[int], str]:
        function = self.ctx.enclosing(cst.FunctionDef, cst.Lambda, stack=stack if stack is not None else self.ctx.stack)
        return (id(function) if function is not None else None, name)

    def _allow_listed(self, leaf: Leaf) -> bool:
        listed = leaf.refused.listed
        if not self.allowed.isdisjoint(listed):
            return True
        if listed not in self.nearby:
            self.nearby[listed] = allow_listed_nearby(self.ctx, listed)
        return self.nearby[listed]

    def _message(self, leaf: Leaf) -> str:
        shown = _shown(leaf)
        return self.message.format(
            label=leaf.refused.label, shown=f"`{shown}`", where=_where(leaf), global_name=leaf.refused.global_name,
            remedy=leaf.refused.remedy.format(value=shown), allow=leaf.refused.allow,
            allow_note=leaf.refused.allow_note,
        )

    def _fix(self, leaf: Leaf) -> Optional[Fix]:
        """Replace the refused value where the checkpoint is written, in this file."""
        if not (leaf.refused.fix and leaf.uniform and leaf.context is self.ctx):
            return None
        code = self.ctx.code(leaf.written)
        if "\n" in code:
            return None
        # `{value}.item()` binds tighter than an operator: `(a / b).item()`.
        atom = type(leaf.written) in (cst.Name, cst.Call, cst.Attribute, cst.Subscript)
        value = f"({code})" if leaf.refused.fix.startswith("{") and not atom else code
        replacement = leaf.refused.fix.format(value=value)
        return Fix.unsafe(f"Save `{replacement}`", self.ctx.replace(leaf.written, replacement))


def _module_functions(ctx: FileContext, func: cst.BaseExpression, stack) -> List[Tuple[cst.FunctionDef, FileContext]]:
    """The module-level functions of the project a call of `func` may run, each with its file."""
    return [
        (callee.node, callee.place.context) for callee in Values.of(ctx).origins(func, stack)
        if type(callee.node) is cst.FunctionDef and len(callee.place.scopes) == 1
    ]


class _Saves(OwnScopeVisitor):
    def __init__(self, context: FileContext, function: cst.FunctionDef, nested: bool):
        super().__init__()
        self.context = context
        self.function = function
        self.nested = nested
        self.found: List[Tuple[cst.Call, Optional[cst.Arg], Optional[cst.Arg]]] = []
        self.nested_calls: List[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        last = semantics.terminal_name(node.func) or ""
        if "save" not in last:
            return
        stack = (self.context.module, self.function)
        if last == "save" and self.context.qualified_name(node.func, stack) in TORCH_SAVE:
            first = node.args[0] if node.args else None
            forwarded = self.function.params.star_arg
            if first is not None and first.star == "*" and isinstance(forwarded, cst.Param) and (
                type(first.value) is cst.Name and first.value.value == forwarded.name.value
            ):
                self.found.append((node, None, None))
            else:
                self.found.append(
                    (node, semantics.keyword(node, "obj") or semantics.positional(node, 0),
                     semantics.keyword(node, "f") or semantics.positional(node, 1))
                )
        elif self.nested:
            self.nested_calls.append(node)


# A save in a function's body: the call, the saved argument (None: the function's own `*args`), the file argument,
# and the stack down to the call in its file.
_Save = Tuple[cst.Call, Optional[cst.Arg], Optional[cst.Arg], Tuple[cst.CSTNode, ...]]


def _saves_in(context: FileContext, function: cst.FunctionDef, nested: bool, known: dict) -> List[_Save]:
    """The saves of a function's own body (not of the functions it defines), each with the saved argument and the
    file argument: its `torch.save` calls (the saved argument None for `torch.save(*args, **kwargs)` of the function's
    own `*args`) and, when `nested`, its calls of a function of the project that forwards its arguments that way.
    Only calls whose name holds "save" are looked at. `known`: the answers so far, by function and `nested`."""
    key = (id(function), nested)
    if key in known:
        return known[key]
    visitor = _Saves(context, function, nested)
    walk_visitor(function.body, visitor)
    found = visitor.found
    stacks = stacks_to(context.module, [save for save, _, _ in found] + visitor.nested_calls)
    for call in visitor.nested_calls:
        if any(
            forwarded is None
            for callee, callee_context in _module_functions(context, call.func, stacks[id(call)])
            for _, forwarded, _, _ in _saves_in(callee_context, callee, False, known)
        ):  # `save_on_master(to_save, path)`, a function that forwards its arguments to torch.save
            found.append(
                (call, semantics.keyword(call, "obj") or semantics.positional(call, 0),
                 semantics.keyword(call, "f") or semantics.positional(call, 1))
            )
    known[key] = [(save, saved, target, stacks[id(save)]) for save, saved, target in found]
    return known[key]


def _shown(leaf: Leaf) -> str:
    return quoted(leaf.context.code(leaf.written))


def _where(leaf: Leaf) -> str:
    return f" under `{leaf.where}`" if leaf.where else ""
