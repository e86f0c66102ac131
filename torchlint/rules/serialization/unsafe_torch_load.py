import re
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis import syntax
from torchlint.analysis.modules import decorator_name
from torchlint.finding import Edit, Fix
from torchlint.engine.context import last_parts
from torchlint.engine.scopes import parameters
from torchlint.rules.base import Rule, quoted
from torchlint.analysis.weights_only import whole_object_use
from torchlint.rules.triggers import words

TORCH_LOAD = frozenset({"torch.load", "torch.serialization.load"})
TORCH_SAVE = frozenset({"torch.save", "torch.serialization.save"})
SAFE_DEFAULT_SINCE = (2, 6)
# `torch.load` has taken `weights_only` since torch 1.13 (its documentation); before, passing it raises TypeError.
WEIGHTS_ONLY_SINCE = (1, 13)
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
# pytest's fixtures that give a private temporary directory.
_TEMPORARY_FIXTURES = frozenset({"tmp_path", "tmp_path_factory", "tmpdir", "tmpdir_factory"})
_DELIBERATE_TEST = re.compile(r"weights_only|trust|safe", re.IGNORECASE)
_LOOPS = (cst.For, cst.While)
# Where a `torch.save` sits, innermost first within its function: ("if", id of the `if`, True for its body) for each
# `if` arm, ("loop", id of the loop, False) for each loop body.
_Place = Tuple[Tuple[str, int, bool], ...]


class UnsafeTorchLoad(Rule):
    """
    ## What it does
    Flags `torch.load(...)` calls that unpickle arbitrary objects:

    - `weights_only=False`;
    - no `weights_only` while the project's minimum torch version (the
      `torch-version` option) is below 2.6, where the default was `False`;
    - no `weights_only` with an explicit `pickle_module`: torch then defaults to
      `weights_only=False` on every version, 2.6 and later included.

    Not flagged: `weights_only=True`, a `weights_only` given by a variable, and a
    load, with `weights_only=False` or none, that reads back what its function has just
    written: the same function saved to that file or buffer earlier with `torch.save`
    (the same expression: `torch.save(obj, buffer)` ... `torch.load(buffer)`, a deep
    copy or a checkpoint in a private temporary directory; `torch.save(net, path)`
    then `torch.load(path, weights_only=False)`, the round trip of a whole module,
    which `weights_only=True` would refuse), and did not assign that variable since; a
    file another process could swap in between is not considered. The save must run
    before the load on its path: one in the other arm of an `if` (`if not exists(p):
    torch.save(x, p)` / `else: x = torch.load(p)`), or under an `if` the load is not
    under, leaves the load reading a file an earlier run (or anyone) wrote, and the
    load is reported; a save under an `if` in a loop's body counts for a load after
    the loop (the best model saved during the epochs).

    Nor a missing `weights_only` when the minimum torch version is 2.6 or newer (the
    default is already `True`), or when:

    - the call passes `**kwargs`, which may carry `weights_only` (the caller's
      choice: the rule cannot see what the dictionary holds);
    - the file is a test's parameter named after a pytest fixture of the same file that
      writes it with `torch.save` into pytest's temporary directory (`tmp_path`,
      `tmp_path_factory`, `tmpdir`): the test reads back its own checkpoint;
    - it is the fallback in an `except TypeError:` after a load that passes
      `weights_only`, for a torch too old to know the keyword.

    A `weights_only=False` load in the `except` handler of a `try` whose load passes
    `weights_only` is the fallback taken after the weights-only load refused the file: the
    message says so (the refused file is unpickled anyway) and asks to allow-list what the
    file needs instead; passing `weights_only=True` there is what failed.

    Where the code uses what it loads as a whole module (`model = torch.load(path)`
    then `model.eval()`, `ckpt["model"].float().state_dict()`: the shapes TL502 reads),
    `weights_only=True` is no remedy, as it refuses the file: the message says so and
    asks for a saved `state_dict()` instead, and no fix is offered.

    ## Why is this bad?
    A checkpoint loaded with `weights_only=False` is an ordinary pickle: loading it
    runs whatever code the file's author put in it. With `weights_only=True` torch
    only rebuilds tensors, containers and primitive types, which covers state
    dicts; other classes fail with `UnpicklingError: Weights only load failed` and
    can be allowed one by one with `torch.serialization.add_safe_globals([...])`.

    ## Fix safety
    Unsafe: `weights_only=True` refuses checkpoints that pickle whole modules,
    optimizers' custom classes or numpy arrays, which then need
    `add_safe_globals`. The fix is not offered when the project supports torch before
    1.13, whose `torch.load` has no `weights_only` (the keyword would raise `TypeError`
    there), nor when a `pickle_module` is given
    (torch refuses the two together), and where `weights_only=False` looks like the point of the code: in
    a branch whose condition is about `weights_only` or trust (`if not
    weights_only:`, `if trusted:`), or in an `except` handler that falls back after
    a safe load failed; nor for a load whose result the code uses as a whole module.

    ## Options
    `torch-version` (default: the lowest version the project's own dependency on
    torch admits, else 2.6): below 2.6, a `torch.load` without `weights_only` is
    flagged; below 1.13 the message asks for `weights_only=True` once the project
    requires torch 1.13 or later, and for trusted files only until then.
    """

    code = "TL501"
    name = "unsafe-torch-load"
    preview = (
        "In preview after held-out rounds 56-58 (docs/precision.md): 37 of 52 findings true at first sight. Every load "
        "it reported was unsafe, but the advice to pass `weights_only=True` was wrong for files the weights-only "
        "unpickler refuses: checkpoints of whole modules the code uses as modules after the load (round 57, 8; now "
        "advised to save a `state_dict()`, with no fix), a file of numpy values (round 58, 1), a fallback taken after "
        "the weights-only load refused the file (round 58, 1; now reported as such), files a pickler of the project "
        "writes at protocol 5 (round 58, 4; the message now says such files are refused) and an `argparse.Namespace` "
        "another file saves (round 57, 1; not fixed). The rule leaves preview again when two rounds in a row read it at "
        "least 9 in 10 true."
    )
    # Only `torch.load` calls are reported, and `load`, the last part of that name, is written however it is imported.
    triggers = words("load")
    call_parts = last_parts(TORCH_LOAD | TORCH_SAVE)
    fix_safety = "unsafe"
    message = (
        "`torch.load(..., weights_only=False)` unpickles arbitrary objects: a malicious checkpoint runs its code on "
        "load; pass `weights_only=True`{refuses}"
    )
    old_default_message = (
        "`torch.load` without `weights_only`: before torch 2.6 (this project supports {version}) the default is "
        "`weights_only=False`, which unpickles arbitrary objects and runs a malicious checkpoint's code{advice}"
    )
    weights_only_advice = "; pass `weights_only=True`{refuses}{until}"
    # What the advice holds for: the weights-only unpickler's types (observed on torch 2.13, docs/observed.md).
    refuses = (
        " (it loads tensors, numbers, strings and plain containers, a state dict among them, and refuses other objects, "
        "a whole module, numpy values, an `argparse.Namespace`, and files pickled at protocol 4 or later)"
    )
    # `weights_only=False` in the `except` of a `try` whose load passes `weights_only`: the file was refused.
    fallback_message = (
        "`torch.load(..., weights_only=False)` after the weights-only load failed: a file that load refused is "
        "unpickled anyway, running any code it holds; allow-list the classes the file needs "
        "(`torch.serialization.add_safe_globals([...])`) and drop the fallback, or take it only where the user asks "
        "for it, for files they trust"
    )
    # Where the project supports a torch whose `torch.load` has no `weights_only`, the advice waits for it.
    before_weights_only = (
        " once the project requires torch 1.13 or later (the keyword raises `TypeError` before it); until then, "
        "load only files you trust"
    )
    # Where the code uses what it loads as a whole module, `weights_only=True` is no remedy: it refuses the file.
    whole_object_message = (
        "`torch.load(..., weights_only=False)` unpickles arbitrary objects: a malicious checkpoint runs its code on "
        "load{whole}"
    )
    whole_object_advice = (
        "; this file holds a whole module (`{use}`), which `weights_only=True` (the default since torch 2.6) refuses "
        "with `UnpicklingError: Weights only load failed`: save the module's `state_dict()` instead and load it into a "
        "model built first; until then, load only files you trust"
    )
    pickle_module_message = (
        "`torch.load` with `pickle_module` and no `weights_only`: torch then defaults to `weights_only=False` on "
        "every version and unpickles arbitrary objects, running a malicious checkpoint's code; drop `pickle_module` "
        "and pass `weights_only=True` if the file holds only tensors"
    )
    example = """
    import torch

    checkpoint = torch.load("checkpoint.pt", weights_only=False)  # expect: TL501:14
    """
    use_instead = """
    import torch

    checkpoint = torch.load("checkpoint.pt", weights_only=True)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # (function, code of the file argument) -> where each `torch.save` to it sits (`_place`)
        self.saved: Dict[Tuple[Optional[int], str], List[_Place]] = {}
        # `try` statements whose body loads with `weights_only`
        self.tries_passing_weights_only: Set[int] = set()
        # ids of the functions that call `torch.save`
        self.saving_functions: Set[int] = set()
        # Loads of a file a pytest fixture gives, with what to report unless the fixture saves it (`finish`: the
        # fixture may come later in the file).
        self.fixture_loads: List[Tuple[cst.Call, str, Optional[Fix], int]] = []

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name in TORCH_SAVE:
            target = semantics.keyword(node, "f") or semantics.positional(node, 1)
            if target is not None:
                key = self._file_key(target.value)
                self.saved.setdefault(key, []).append(_place(self.ctx.stack))
                self.saving_functions.add(key[0])
            return
        if name not in TORCH_LOAD:
            return
        weights_only = semantics.keyword(node, "weights_only")
        # torch.load(f, map_location, pickle_module, *, weights_only, ...)
        pickle_module = semantics.keyword(node, "pickle_module") or semantics.positional(node, 2)
        if weights_only is not None:
            self._note_try_body()
            if semantics.literal(weights_only.value) is False and not self._reads_back_own_save(node):
                whole = self._whole_object_advice(node)
                if whole:
                    self.report(node, self.whole_object_message.format(whole=whole))
                elif self._in_handler_of(lambda caught: True):
                    self.report(node, self.fallback_message)
                else:
                    fixable = pickle_module is None and not self._chosen_deliberately()
                    message = self.message.format(refuses=self.refuses)
                    self.report(node, message, self._set_true(weights_only) if fixable else None)
        elif pickle_module is not None:
            self.report(node, self.pickle_module_message)
        elif self.ctx.config.torch_version < SAFE_DEFAULT_SINCE and not (
            semantics.has_star_kwargs(node) or self._reads_back_own_save(node) or self._old_torch_fallback()
        ):
            version = ".".join(map(str, self.ctx.config.torch_version))
            until = self.before_weights_only if self.ctx.config.torch_version < WEIGHTS_ONLY_SINCE else ""
            whole = self._whole_object_advice(node)
            advice = whole or self.weights_only_advice.format(refuses=self.refuses, until=until)
            message = self.old_default_message.format(version=version, advice=advice)
            fix = None if whole else self._add_keyword(node)
            fixture = self._temporary_fixture_read(node)
            if fixture is None:
                self.report(node, message, fix)
            else:
                self.fixture_loads.append((node, message, fix, id(fixture)))

    def finish(self) -> None:
        for node, message, fix, fixture in self.fixture_loads:
            if fixture not in self.saving_functions:
                self.report(node, message, fix)

    def _whole_object_advice(self, node: cst.Call) -> str:
        """The advice for a load whose result the code uses as a whole module, or ""."""
        use = whole_object_use(self.ctx, node, self.ctx.stack)
        if use is None:
            return ""
        return self.whole_object_advice.format(use=quoted(self.ctx.code(use), 60))

    def _set_true(self, weights_only: cst.Arg) -> Fix:
        return Fix.unsafe("Pass `weights_only=True`", self.ctx.replace(weights_only.value, "True"))

    def visit_Assign(self, node: cst.Assign) -> None:
        # `buffer = io.BytesIO(received)`: what `buffer` holds is no longer what was saved to it. (Most files save
        # nothing, and the key costs the target's code.)
        if not self.saved:
            return
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.saved.pop(self._file_key(target.target), None)

    def _file_key(self, file: cst.BaseExpression) -> Tuple[Optional[int], str]:
        function = self.ctx.enclosing(cst.FunctionDef, cst.Lambda)
        return (id(function) if function is not None else None, syntax.expression_key(self.ctx.code(file)))

    def _reads_back_own_save(self, node: cst.Call) -> bool:
        """An earlier save to the same file runs whenever the load does: every `if` arm holding the save holds the
        load, up to a loop the load is not in (`if acc > best: torch.save(...)` in the epochs, the best model
        loaded after them). A save in the other arm (`if not exists(p): torch.save(x, p)` / `else: torch.load(p)`)
        or under an `if` the load is not under leaves the load reading a file written by anyone."""
        source = semantics.keyword(node, "f") or semantics.positional(node, 0)
        if source is None:
            return False
        around = {(kind, node_id, arm) for kind, node_id, arm in _place(self.ctx.stack)}
        return any(_runs_before(place, around) for place in self.saved.get(self._file_key(source.value), ()))

    def _temporary_fixture_read(self, node: cst.Call) -> Optional[cst.FunctionDef]:
        """The pytest fixture of the module, given a temporary-directory fixture, whose value the load reads: the
        file is the enclosing test's parameter named after it."""
        source = semantics.keyword(node, "f") or semantics.positional(node, 0)
        function = self.ctx.enclosing(cst.FunctionDef)
        if source is None or type(source.value) is not cst.Name or function is None:
            return None
        name = source.value.value
        if name not in {param.name.value for param in parameters(function.params)}:
            return None
        return next(
            (
                statement for statement in self.ctx.module.body
                if type(statement) is cst.FunctionDef and statement.name.value == name
                and any(decorator_name(decorator) == "fixture" for decorator in statement.decorators)
                and not _TEMPORARY_FIXTURES.isdisjoint(param.name.value for param in parameters(statement.params))
            ),
            None,
        )

    def _note_try_body(self) -> None:
        """Remember the `try` whose body holds this load (stopping at handlers and scopes)."""
        for parent, child in zip(reversed(self.ctx.stack[:-1]), reversed(self.ctx.stack)):
            if isinstance(parent, (cst.ExceptHandler, cst.Finally, *_SCOPES)):
                return
            if isinstance(parent, cst.Try) and child is parent.body:
                self.tries_passing_weights_only.add(id(parent))
                return

    def _old_torch_fallback(self) -> bool:
        """In `except TypeError:` of a `try` whose body loads with `weights_only`: the retry for old torch."""
        return self._in_handler_of(lambda caught: "TypeError" in caught)

    def _in_handler_of(self, catches: Callable[[Set[str]], bool]) -> bool:
        """In an `except` handler, whose caught names `catches` accepts, of a `try` whose body loads with
        `weights_only` (the load that failed)."""
        for parent, child in zip(reversed(self.ctx.stack[:-1]), reversed(self.ctx.stack)):
            if isinstance(parent, _SCOPES):
                return False
            if isinstance(parent, cst.Try) and isinstance(child, cst.ExceptHandler):
                caught = child.type
                names = [element.value for element in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
                caught_names = {name.value for name in names if isinstance(name, cst.Name)}
                return catches(caught_names) and id(parent) in self.tries_passing_weights_only
        return False

    def _add_keyword(self, node: cst.Call) -> Optional[Fix]:
        if not node.args or self.ctx.config.torch_version < WEIGHTS_ONLY_SINCE:
            return None
        _, end = self.ctx.location(node.args[-1].value)
        return Fix.unsafe("Pass `weights_only=True`", Edit(", weights_only=True", end, end))

    def _chosen_deliberately(self) -> bool:
        """`weights_only=False` as the point of its branch: under an `if`/`else` whose test is about trust or
        `weights_only`, or in an `except` handler (the fallback after a safe load failed)."""
        for ancestor in reversed(self.ctx.stack[:-1]):
            if isinstance(ancestor, _SCOPES):
                return False
            if isinstance(ancestor, cst.ExceptHandler):
                return True
            if isinstance(ancestor, (cst.If, cst.IfExp)) and _DELIBERATE_TEST.search(self.ctx.code(ancestor.test)):
                return True
        return False


def _place(stack: Sequence[cst.CSTNode]) -> _Place:
    found = []
    for parent, child in zip(reversed(stack[:-1]), reversed(stack)):
        if isinstance(parent, _SCOPES):
            break
        if isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test:
            found.append(("if", id(parent), child is parent.body))
        elif isinstance(parent, _LOOPS) and child is parent.body:
            found.append(("loop", id(parent), False))
    return tuple(found)


def _runs_before(save: _Place, load: Set[Tuple[str, int, bool]]) -> bool:
    """Each `if` arm holding the save holds the load, from the function down to a loop that does not hold the load
    (an iteration has saved by the time the loop is done)."""
    for entry in reversed(save):
        if entry not in load:
            return entry[0] == "loop"
    return True
