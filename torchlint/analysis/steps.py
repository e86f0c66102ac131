"""Code that runs once per training step: in a loop that repeats per step (`in_a_step_loop`), or in a function run
once per step (`per_step_function`): a `forward`, a `*_step`, a function named for training, one called from such a
loop or function, in this file or, for a method, in a file that imports its class. What runs there pays its cost every
step.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, AbstractSet, Dict, Iterator, List, Sequence

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.conversions import CONVERSION_METHODS
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.loops import FUNCTION_BOUNDARIES, iteration, loop_nodes
from torchlint.analysis.modules import is_export_stand_in, runs_only_while_built
from torchlint.analysis.summaries import CallStack, method_calls_from_importers
from torchlint.analysis.values import PROGRESS_BARS, Values
from torchlint.engine.scopes import dotted_name, scope_nodes_of
from torchlint.engine.walk import statement_structure, walk

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Name words of functions that run once per step: `forward`, `training_step`, `run_iteration`, `step`.
_STEP_WORDS = frozenset({"forward", "step", "iteration"})
# Name words of training functions: per step too, unless the function holds the loop over the steps itself
# (`def train(): <setup>; for batch in loader: ...` runs its setup once).
_TRAIN_WORDS = frozenset({"train", "training"})
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# How many callers up a function is followed to a loop or a per-step function.
_CALLER_DEPTH = 3
# What a loop that fills a collection calls (`fills_a_collection`): the container's adding methods, tensor methods
# that make, shape or convert a tensor, and builtins of numbers.
_ADDING_METHODS = frozenset({"append", "extend", "insert", "add"})
_BUILDING_METHODS = CONVERSION_METHODS | {
    "normal_", "uniform_", "bernoulli_", "exponential_", "random_", "cauchy_", "log_normal_", "geometric_", "fill_",
    "zero_", "view", "reshape", "unsqueeze", "squeeze", "expand", "repeat", "permute", "transpose", "t", "contiguous",
    "clone", "detach", "requires_grad_",
}
_BUILDING_BUILTINS = frozenset({"range", "len", "int", "float", "min", "max", "abs", "round", "iter", "enumerate"})


def name_words(name: str) -> frozenset:
    """`train_one_epoch` -> {train, one, epoch}; `trainStep` -> {train, step}."""
    return frozenset(word.lower() for part in name.split("_") for word in _CAMEL_HUMP.split(part) if word)


def in_a_step_loop(ctx: "FileContext", stack: Sequence[cst.CSTNode]) -> bool:
    """The innermost point of `stack` is in the body of a loop of its own function that repeats per step: the
    innermost loop holding it, unless that loop holds a loop that runs backward, itself or in a function of the file
    it calls (`for epoch in ...: noise = ...; train(epoch)`), or an inner loop that calls such a function (`for epoch
    in ...: for batch in loader: train_batch(batch)`): what such a loop does besides its inner training loop runs
    once per epoch. Not in a test file, whose loops run the test once per parameter (`for device in devices:`)."""
    if ctx.file_kind is FileKind.TEST:
        return False
    loops = [loop for loop in loop_nodes(stack) if not fills_a_collection(ctx, loop, stack)] or _while_tested(stack)
    return bool(loops) and not ctx.shared(_EpochLoops).holds_a_training_loop(loops[0], stack)


def fills_a_collection(ctx: "FileContext", loop: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> bool:
    """`loop` (inside `stack`, the nodes around the point asked about) only fills a collection, as a comprehension
    would: it goes through `range(...)` or a literal list, tuple or set (also wrapped in `enumerate(...)` or a
    progress bar, or stepped by hand in a `while`, `loops.iteration`), and its every statement adds to a container
    (`tensors.append(...)`, `.extend`, `.insert`, `.add`, `table[i] = ...`), names one (`t = ...`) or is such a loop
    of its own, with values built
    by torch's functions, tensor methods that make or convert a tensor, and a few builtins. Not a step loop: it calls
    no model, runs no backward and reads no loader (`for x in range(10): tensors.append(torch.randn(n, 10).cuda())`,
    a notebook's demo of GPU memory, is `[torch.randn(n, 10).cuda() for x in range(10)]`). A loop around it may be
    one."""
    index = next((index for index in range(len(stack) - 1, -1, -1) if stack[index] is loop), None)
    if index is None or getattr(loop, "orelse", None) is not None or type(loop.body) is not cst.IndentedBlock:
        return False
    around = tuple(stack[: index + 1])
    looped = iteration(ctx, loop, around)
    if looped is None or not _counted(ctx, looped.iterable, looped.evaluated_at):
        return False
    statements = list(loop.body.body)
    if type(loop) is cst.While:
        statements = statements[1:]  # the `next(...)` that `iteration` read
    fills = False  # a loop that only names values (`mask = torch.ones(n).cuda()`) fills nothing: it stands for a step
    for statement in statements:
        if type(statement) in (cst.For, cst.While):
            if not fills_a_collection(ctx, statement, (*around, loop.body, statement)):
                return False
            fills = True
            continue
        if type(statement) is not cst.SimpleStatementLine:
            return False
        for small in statement.body:
            if type(small) is cst.Pass:
                continue
            if type(small) is cst.Expr and type(small.value) is cst.Call and syntax.method_name(small.value) in _ADDING_METHODS:
                added: List[cst.CSTNode] = [arg.value for arg in small.value.args]
                fills = True
            elif type(small) is cst.Assign and all(type(target.target) in (cst.Subscript, cst.Name) for target in small.targets):
                # `table[i] = ...`, or a name for a value built on the way (`t = torch.randn(n).cuda()`, then
                # `tensors.append(t)`)
                added = [small.value] + [
                    element for target in small.targets if type(target.target) is cst.Subscript
                    for element in target.target.slice
                ]
                fills = fills or any(type(target.target) is cst.Subscript for target in small.targets)
            else:
                return False
            if not all(_only_builds(ctx, value, around) for value in added):
                return False
    return fills


def _counted(ctx: "FileContext", iterable: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
    """`range(...)` or a literal list, tuple or set, also inside `enumerate(...)` or a progress bar (`tqdm(...)`):
    items that are numbers or settings, not batches."""
    while type(iterable) is cst.Call and iterable.args and (
        dotted_name(iterable.func) == "enumerate" or syntax.terminal_name(iterable.func) == "tqdm"
        or ctx.qualified_name_in(iterable.func, PROGRESS_BARS, stack)
    ):
        iterable = iterable.args[0].value
    if type(iterable) is cst.Call:
        return type(iterable.func) is cst.Name and iterable.func.value == "range"
    return type(iterable) in (cst.List, cst.Tuple, cst.Set)


def _only_builds(ctx: "FileContext", value: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> bool:
    """Every call in `value` is a torch function, a tensor method that makes or converts a tensor (`.cuda()`,
    `.normal_()`, `.view(...)`) or a builtin of `_BUILDING_BUILTINS`: nothing in it calls a model or a function of
    the file."""
    calls: List[cst.Call] = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Call:
            calls.append(node)
        return type(node) not in FUNCTION_BOUNDARIES

    walk(value, on_visit, lambda node: None)
    scopes = scope_nodes_of(stack)
    for call in calls:
        func = call.func
        if type(func) is cst.Name and func.value in _BUILDING_BUILTINS and ctx.scopes.binding_scope(func.value, scopes) is None:
            continue
        qualified = ctx.qualified_name(func, stack)
        if qualified is not None:
            if not qualified.startswith("torch."):
                return False
        elif type(func) is not cst.Attribute or func.attr.value not in _BUILDING_METHODS:
            return False
    return True


def _while_tested(stack: Sequence[cst.CSTNode]) -> List[cst.CSTNode]:
    """The `while` whose test holds the innermost point of `stack` (`while has_unfinished(...):`, evaluated before
    every iteration), within its function, else []."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            break
        if type(node) is cst.While and stack[index + 1] is node.test:
            return [node]
    return []


class _EpochLoops:
    """Which loops hold a loop that runs backward, themselves or through the file's functions they call (`ctx.shared`)."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self._known: Dict[int, bool] = {}

    def holds_a_training_loop(self, loop: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> bool:
        found = self._known.get(id(loop))
        if found is None:
            function = self.ctx.callgraph.current(stack)
            backward = {id(node) for node in function.facts.get("backward", ())}
            found = self._known[id(loop)] = bool(backward) and _loop_holding(loop.body, backward) or any(
                _calls_a_training_loop(self.ctx, site.callee)
                or (_in_a_loop_inside(site.stack, loop) and bool(self.ctx.callgraph.facts_of(site.callee, "backward")))
                for site in function.calls
                if any(node is loop for node in site.stack)
            )
        return found


_STATEMENTS_OF_A_BODY = statement_structure(cst.IndentedBlock) | {cst.SimpleStatementSuite}


def _loop_holding(body: cst.CSTNode, wanted: AbstractSet[int]) -> bool:
    """A `for` or `while` among the statements of `body` (functions and classes defined there not counted) that
    holds one of the nodes `wanted` (by id)."""
    loops = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.For or type(node) is cst.While:
            loops.append(node)
            return False
        return True

    walk(body, on_visit, lambda node: None, descend=_STATEMENTS_OF_A_BODY)
    return any(_holds(loop, wanted) for loop in loops)


def _holds(root: cst.CSTNode, wanted: AbstractSet[int]) -> bool:
    found = []

    def on_visit(node: cst.CSTNode) -> bool:
        if id(node) in wanted:
            found.append(node)
        return not found and type(node) not in FUNCTION_BOUNDARIES

    walk(root, on_visit, lambda node: None)
    return bool(found)


def _in_a_loop_inside(stack: Sequence[cst.CSTNode], loop: cst.CSTNode) -> bool:
    """`stack` (around a call, `loop` among them) holds a `for` or `while` inside `loop`, in the same function: the
    call runs per iteration of an inner loop (`for epoch ...: for batch in loader: train_batch(batch)`)."""
    inside = False
    for node in stack:
        if node is loop:
            inside = True
        elif inside and (type(node) is cst.For or type(node) is cst.While):
            return True
        elif inside and type(node) in FUNCTION_BOUNDARIES:
            return False
    return False


def _calls_a_training_loop(ctx: "FileContext", callee: str) -> bool:
    """The file's function `callee` runs backward and holds a loop (`train(epoch)`, looping over the batches)."""
    function = ctx.callgraph.functions.get(callee)
    return (
        function is not None and type(function.node) is cst.FunctionDef
        and bool(ctx.callgraph.facts_of(callee, "backward")) and bool(Values.of(ctx).flow(function.node).loop_ends)
    )


def per_step_function(ctx: "FileContext", stack: Sequence[cst.CSTNode], depth: int = 0) -> bool:
    """The innermost point of `stack` is in a function that runs once per training step: a `forward`, a
    `*_step`, a function named for training (that holds no loop of its own), one without a loop of its own called
    from a loop (`in_a_step_loop`), or one called from such a function in the same file; a method of a class at the top
    of the module also through the instances that the files importing the class build (`method_calls_from_importers`:
    `model.init_hidden(n)` in train.py's batch loop). Functions nested in one of those run with it."""
    for index in range(len(stack) - 2, -1, -1):
        function = stack[index]
        if type(function) is not cst.FunctionDef:
            continue
        words = name_words(function.name.value)
        key = ctx.callgraph.key_of(function, scope_nodes_of(stack[: index + 1]))
        if words & _STEP_WORDS and not runs_only_while_built(ctx, function, stack[: index + 1]):
            return not _in_export_stand_in(ctx, stack, index)
        loops = bool(Values.of(ctx).flow(function).loop_ends)
        if words & _TRAIN_WORDS and not loops:
            return True
        if depth < _CALLER_DEPTH:
            for there, site in _callers(ctx, key, function, scope_nodes_of(stack[:index])[-1:]):
                # A function with a loop of its own, called from a loop, is a driver run once per item (`for weight in
                # weights: export(weight)`, `for epoch ...: train_one_epoch()`): its loops repeat, its setup does not.
                if (not loops and in_a_step_loop(there, site)) or per_step_function(there, site, depth + 1):
                    return True
    return False


def _in_export_stand_in(ctx: "FileContext", stack: Sequence[cst.CSTNode], index: int) -> bool:
    """`stack[index]` is the `forward` of an autograd Function that stands in for an operator at export
    (`is_export_stand_in`): traced once, not run every step."""
    owner = stack[index - 2] if index >= 2 else None
    return (
        stack[index].name.value == "forward" and type(owner) is cst.ClassDef
        and is_export_stand_in(ctx, owner, stack[: index - 2])
    )


def _callers(
    ctx: "FileContext", key: str, function: cst.FunctionDef, owner: Sequence[cst.CSTNode],
) -> Iterator[CallStack]:
    """The calls of `function` (`key` in the call graph; `owner`: the scope around it, a class for a method), each in
    the file that makes it: this file's, then, for a method, those through instances here and in the files that
    import its class, asked only when the nearer ones did not answer."""
    for site in ctx.callgraph.call_sites(key):
        yield CallStack(ctx, site.stack)
    if owner and type(owner[0]) is cst.ClassDef:
        for _, stack in Values.of(ctx).method_calls(owner[0], function.name.value):
            yield CallStack(ctx, stack)
        yield from method_calls_from_importers(ctx, owner[0], function.name.value)
