"""Where gradients are off or may be, and code that evaluates.

The grad mode at a point (`grad_enabled_at`): the innermost `no_grad`/`enable_grad`/`set_grad_enabled` region or
decorator around it in its function, or a `torch.set_grad_enabled(flag)` statement before it in the same function,
which switches the mode for the rest of the function (deeplab's `test()` starts with one). Also where the mode is
set but known only at runtime, a same-module caller under `no_grad`, another library's context manager that sets
the grad mode, a function named like an evaluation or switching a model to eval mode, and a model whose parameters
are all frozen at a point (`parameters_frozen_at`): its forward records no graph whatever the grad mode.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from torchlint.analysis.loops import FUNCTION_BOUNDARIES, iteration
from torchlint.analysis.syntax import MISSING, keyword, literal, method_name, positional, receiver, terminal_name
from torchlint.analysis.values import COPIES, MODULE_WRAPPERS, PROGRESS_BARS, RETURNING_SELF, Argument, Values
from torchlint.engine.walk import statement_structure, walk

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


GRAD_DISABLING = frozenset({
    "torch.no_grad", "torch.inference_mode",
    "torch.autograd.no_grad", "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
})
GRAD_ENABLING = frozenset({"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"})
SET_GRAD_ENABLED = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"})


class _Dynamic:
    """The grad mode is set there, but to a value known only at runtime: `set_grad_enabled(phase == "train")`, or
    a `set_grad_enabled` statement in a branch or loop before the point."""

    def __repr__(self) -> str:
        return "DYNAMIC"


_DYNAMIC = _Dynamic()
_GradMode = Union[bool, _Dynamic, None]


def grad_mode_of(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> Optional[bool]:
    """False for a grad-disabling context/decorator expression, True for a grad-enabling one, else None."""
    target = expr.func if isinstance(expr, cst.Call) else expr
    name = ctx.qualified_name(target, stack)
    if name in GRAD_DISABLING:
        if name.endswith("inference_mode") and isinstance(expr, cst.Call):
            mode = positional(expr, 0) or keyword(expr, "mode")
            if mode is not None and literal(mode.value) is False:
                return None
        return False
    if name in GRAD_ENABLING:
        return True
    if name in SET_GRAD_ENABLED and isinstance(expr, cst.Call):
        mode = positional(expr, 0) or keyword(expr, "mode")
        value = literal(mode.value) if mode is not None else MISSING
        if value is True or value is False:
            return value
    return None


def grad_enabled_at(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> Optional[bool]:
    """Grad mode at the innermost point of `stack` as far as the code shows: False, True, or None if unknown."""
    mode = _reaching_grad_mode(stack, ctx)
    return mode if mode is True or mode is False else None


def _reaching_grad_mode(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> _GradMode:
    """What sets the grad mode at the innermost point of `stack`, read outward: in each block, the last
    `set_grad_enabled` statement before the point; at each `with`, its items; at the function, its decorators.
    A function body is not inside the regions around its definition, so the search stops there (None: nothing in
    the function sets the mode)."""
    switches = ctx.shared(_GradSwitches)
    for index in range(len(stack) - 1, -1, -1):
        node = stack[index]
        node_type = type(node)
        inner = stack[index + 1] if index + 1 < len(stack) else None
        if switches.present and inner is not None:
            if node_type in _BLOCKS:
                mode = switches.before(node, inner, stack[: index + 1])
                if mode is not None:
                    return mode
            elif _repeats(node, inner) and switches.holds_one(node.body, stack[: index + 1]):
                # A switch later in the loop's body: the next iteration starts in the mode it leaves.
                return _DYNAMIC
        if node_type is cst.With and inner is node.body:
            for item in reversed(node.items):
                mode = grad_mode_of(item.item, ctx, stack[: index + 1])
                if mode is not None:
                    return mode
                if _is_dynamic_grad_mode(item.item, ctx, stack[: index + 1]):
                    return _DYNAMIC
        elif node_type in FUNCTION_BOUNDARIES:
            if node_type is cst.FunctionDef and inner is node.body:
                for decorator in node.decorators:
                    mode = grad_mode_of(decorator.decorator, ctx, stack[:index])
                    if mode is None:
                        mode = _project_decorator_grad_mode(decorator.decorator, ctx, stack[:index])
                    if mode is not None:
                        return mode
            return None
    return None


def _repeats(node: cst.CSTNode, inner: cst.CSTNode) -> bool:
    """`inner` runs once per iteration of the loop `node`."""
    return (type(node) is cst.For and inner is node.body) or (type(node) is cst.While and (inner is node.body or inner is node.test))


# The nodes whose `body` is a sequence of statements run in order.
_BLOCKS = frozenset({cst.Module, cst.IndentedBlock, cst.SimpleStatementLine, cst.SimpleStatementSuite})


class _GradSwitches:
    """Per file (`ctx.shared`): the statements of each block that set the grad mode for what follows them, read
    once: `torch.set_grad_enabled(flag)` called on its own, or a compound statement with one inside."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.present = "set_grad_enabled" in ctx.text
        self._blocks: Dict[int, Tuple[Dict[int, int], List[Tuple[int, _GradMode]]]] = {}
        self._holds: Dict[int, bool] = {}

    def before(self, block: cst.CSTNode, inner: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> _GradMode:
        """The mode left by the last statement of `block` before `inner` that sets one (None: none does)."""
        if id(block) not in self._blocks:
            positions = {id(statement): position for position, statement in enumerate(block.body)}
            modes = [(position, self._mode_after(statement, stack)) for position, statement in enumerate(block.body)]
            self._blocks[id(block)] = positions, [(position, mode) for position, mode in modes if mode is not None]
        positions, modes = self._blocks[id(block)]
        position = positions.get(id(inner))
        if position is None:
            return None
        for earlier, mode in reversed(modes):
            if earlier < position:
                return mode
        return None

    def holds_one(self, statements: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> bool:
        """A `set_grad_enabled` statement anywhere in `statements`, outside nested functions and classes."""
        if id(statements) not in self._holds:
            found = []

            def on_visit(node: cst.CSTNode) -> bool:
                if type(node) is cst.Expr and self._switch(node, stack) is not None:
                    found.append(node)
                return not found

            walk(statements, on_visit, lambda node: None, descend=statement_structure(type(statements)))
            self._holds[id(statements)] = bool(found)
        return self._holds[id(statements)]

    def _mode_after(self, statement: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> _GradMode:
        statement_type = type(statement)
        if statement_type is cst.Expr:
            return self._switch(statement, stack)
        if statement_type is cst.SimpleStatementLine:
            modes = [self._switch(small, stack) for small in statement.body if type(small) is cst.Expr]
            return next((mode for mode in reversed(modes) if mode is not None), None)
        if statement_type in FUNCTION_BOUNDARIES or not isinstance(statement, cst.BaseCompoundStatement):
            return None
        # A switch in a branch, loop or `try`: whether it ran is known only at runtime.
        return _DYNAMIC if self.holds_one(statement, stack) else None

    def _switch(self, statement: cst.Expr, stack: Sequence[cst.CSTNode]) -> _GradMode:
        call = statement.value
        if type(call) is not cst.Call or not self.ctx.qualified_name_in(call.func, SET_GRAD_ENABLED, stack):
            return None
        mode = grad_mode_of(call, self.ctx, stack)
        return _DYNAMIC if mode is None else mode


def _is_dynamic_grad_mode(expr: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    """`set_grad_enabled(flag)` with a flag only known at runtime: the mode below it is unknown."""
    return (
        isinstance(expr, cst.Call)
        and ctx.qualified_name_in(expr.func, SET_GRAD_ENABLED, stack)
        and grad_mode_of(expr, ctx, stack) is None
    )


def _project_decorator_grad_mode(expr: cst.BaseExpression, ctx: "FileContext", stack) -> Optional[bool]:
    """False for a decorator the project defines (in the file or a project file) around torch's grad-disabling ones
    (yolov5's `@smart_inference_mode()`: `torch.inference_mode()(fn)`, or `torch.no_grad()` on older torch), when
    nothing in it names a grad-enabling one or `set_grad_enabled`; else None."""
    target = expr.func if type(expr) is cst.Call else expr
    if type(target) not in (cst.Name, cst.Attribute):
        return None
    for origin in Values.of(ctx).origins(target, stack):
        if type(origin.node) is cst.FunctionDef and not origin.opaque:
            return origin.place.context.shared(_GradDecorators).mode(origin.node, origin.place.stack)
    return None


class _GradDecorators:
    """Per file (`ctx.shared`): the grad mode each of its functions applies as a decorator, read once."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self._modes = {}

    def mode(self, function: cst.FunctionDef, around: Sequence[cst.CSTNode]) -> Optional[bool]:
        if id(function) not in self._modes:
            stack = tuple(around) + (function,)
            named = []

            def on_visit(node: cst.CSTNode) -> bool:
                if type(node) is cst.Name or type(node) is cst.Attribute:
                    named.append(node)
                return True

            walk(function.body, on_visit, lambda node: None)
            disabling = any(self.ctx.qualified_name_in(node, GRAD_DISABLING, stack) for node in named)
            enabling = any(self.ctx.qualified_name_in(node, GRAD_ENABLING | SET_GRAD_ENABLED, stack) for node in named)
            self._modes[id(function)] = False if disabling and not enabling else None
        return self._modes[id(function)]


# Function names that say "this evaluates": evaluate, run_validation, test, predict_batch, inference_loop, ...
_EVALUATION_WORDS = frozenset({
    "eval", "evaluate", "evaluation", "val", "valid", "validate", "validation", "test", "testing", "predict", "prediction",
})


# Asked of the function around every call some rules visit: a few names per file, each many times.
@lru_cache(maxsize=4096)
def names_an_evaluation(name: str) -> bool:
    words = [word for word in name.lower().split("_") if word]
    return any(word in _EVALUATION_WORDS or word.startswith("infer") for word in words)


def evaluates(function_key: str, ctx: "FileContext") -> bool:
    """The function puts a model in eval mode or is named like an evaluation."""
    function = ctx.callgraph.functions.get(function_key)
    return names_an_evaluation(function_key.rpartition(".")[2]) or (function is not None and "sets-eval" in function.facts)


def grad_disabled_by_a_caller(function_key: str, ctx: "FileContext") -> Optional[cst.Call]:
    """A same-module call of `function_key` made with gradients disabled, if there is one."""
    for site in ctx.callgraph.call_sites(function_key):
        if grad_enabled_at(site.stack, ctx) is False:
            return site.node
    return None


def called_only_without_grad(calls: Sequence[Argument]) -> bool:
    """There are calls among `calls` (`Values.arguments`: in this file or other project files), and every one of them
    is made with gradients disabled."""
    return bool(calls) and all(grad_enabled_at(call.call_stack, call.site.context) is False for call in calls)


def under_dynamic_grad_mode(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> bool:
    """Inside `with torch.set_grad_enabled(<not a literal>)` (or such a decorator) in the same function, or after a
    `set_grad_enabled` statement whose flag, or whether it ran, is known only at runtime."""
    if _reaching_grad_mode(stack, ctx) is _DYNAMIC:
        return True
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) is cst.With and stack[index + 1] is node.body:
            if any(_is_dynamic_grad_mode(item.item, ctx, stack[: index + 1]) for item in node.items):
                return True
        elif type(node) in FUNCTION_BOUNDARIES:
            return isinstance(node, cst.FunctionDef) and any(
                _is_dynamic_grad_mode(decorator.decorator, ctx, stack[:index]) for decorator in node.decorators
            )
    return False


def under_grad_mode_context(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> bool:
    """Inside a `with` of a context manager from outside torch, in the same function, whose name says it
    switches to evaluation or sets the grad mode: monai's `eval_mode(model)` enters `no_grad` itself."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            return False
        if type(node) is cst.With and stack[index + 1] is node.body:
            for item in node.items:
                manager = item.item.func if isinstance(item.item, cst.Call) else item.item
                qualified = ctx.qualified_name(manager, stack[: index + 1]) or ""
                if not qualified.startswith("torch.") and _names_a_grad_mode(terminal_name(manager) or ""):
                    return True
    return False


def _names_a_grad_mode(name: str) -> bool:
    words = [word for word in name.lower().split("_") if word]
    return names_an_evaluation(name) or any(word in ("grad", "grads", "nograd") for word in words)


# Loops around a point: a switch anywhere in one runs again before the point's next iteration.
_LOOPS_AROUND = frozenset({cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})


def parameters_frozen_at(ctx: "FileContext", model: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
    """Every parameter of `model` (a name or attribute) has `requires_grad` False at the innermost point of `stack`:
    a statement before it in its function, outside any branch, freezes the whole model (`model.requires_grad_(False)`,
    `for p in model.parameters(): p.requires_grad = False`), and nothing after that statement up to the point, nor in a
    loop around the point, makes anything require grad (`requires_grad = True`, `requires_grad_()`,
    `torch.zeros(..., requires_grad=True)`): then a forward of `model` on the inputs records no graph (crnn.pytorch's
    `val`). The freezing loop may be written through `enumerate`, a progress bar or `iter`/`next` in a `while`. A freeze
    of another expression (`model.features.parameters()`) covers only part of the model."""
    if type(model) not in (cst.Name, cst.Attribute):
        return False
    before: List[Tuple[cst.CSTNode, Tuple[cst.CSTNode, ...]]] = []
    loops: List[cst.CSTNode] = []
    for index in range(len(stack) - 2, -1, -1):
        node, inner = stack[index], stack[index + 1]
        node_type = type(node)
        if node_type is cst.IndentedBlock or node_type is cst.Module:
            position = next((position for position, statement in enumerate(node.body) if statement is inner), None)
            if position is not None:
                before[:0] = [(statement, (*stack[:index + 1], statement)) for statement in node.body[:position]]
        elif node_type in _LOOPS_AROUND:
            loops.append(node)
        elif node_type in FUNCTION_BOUNDARIES:
            break
    frozen = False
    for statement, at in before:
        bound = _binds(ctx, statement, at, model)
        if bound is not None:  # `model = ...`: what it is bound to now decides
            frozen = bound
        elif _freezes(ctx, statement, at, model):
            frozen = True
        elif frozen and _makes_require_grad(statement):
            frozen = False
    return frozen and not any(_makes_require_grad(loop) for loop in loops)


# The wrappers whose `requires_grad_` sets the wrapped module's parameters, by their last name (read without the file's
# imports, as the rest of this look is).
_MODULE_WRAPPER_NAMES = frozenset(name.rpartition(".")[2] for name in MODULE_WRAPPERS)


def _chain_freezes(call: cst.BaseExpression) -> Tuple[Optional[bool], cst.BaseExpression]:
    """Whether a chain of the module's own methods (`x.eval().requires_grad_(False).to(device)`) freezes its module
    (True), makes it require grad (False) or leaves that as it was (None: no `requires_grad_` in it), and the
    expression the chain starts from (`x`)."""
    freezes: Optional[bool] = None
    # nn.Module's methods that return the module itself: a freeze anywhere in a chain of them freezes what it returns.
    while type(call) is cst.Call and method_name(call) in RETURNING_SELF:
        flag = _sets_requires_grad(call)
        if method_name(call) == "requires_grad_" and freezes is None:
            freezes = flag is False  # the last `requires_grad_` of the chain decides (a flag not written: not frozen)
        call = receiver(call)
    return freezes, call


def _binds(ctx: "FileContext", statement: cst.CSTNode, at: Tuple[cst.CSTNode, ...], model: cst.BaseExpression) -> Optional[bool]:
    """For a statement `model = value`: whether the module it binds is frozen (`Net().eval().requires_grad_(False)`,
    or a copy of a frozen model, `copy.deepcopy(frozen_model)`, which copies `requires_grad` with the parameters);
    None for any other statement (round 52: StyleGAN2-ADA's samplers and its `G_ema`)."""
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1 or type(statement.body[0]) is not cst.Assign:
        return None
    assign = statement.body[0]
    if len(assign.targets) != 1 or not _same(model, assign.targets[0].target):
        return None
    freezes, start = _chain_freezes(assign.value)
    if freezes is not None:
        return freezes
    if _same(model, start):
        return None  # `model = model.to(device)`: the same module, frozen as it was
    if type(start) is cst.Call and ctx.qualified_name_in(start.func, COPIES, at) and len(start.args) == 1:
        copied = start.args[0].value
        return type(copied) in (cst.Name, cst.Attribute) and not _same(model, copied) and parameters_frozen_at(ctx, copied, at)
    return False


def _freezes(ctx: "FileContext", statement: cst.CSTNode, at: Tuple[cst.CSTNode, ...], model: cst.BaseExpression) -> bool:
    """`statement` (with `at`, the nodes around it ending with it) is `model.requires_grad_(False)` or a loop over
    `model.parameters()` / `named_parameters()` whose body sets `requires_grad` False on each (outside any branch)."""
    if type(statement) is cst.SimpleStatementLine:
        for small in statement.body:
            if type(small) is cst.Expr:
                freezes, start = _chain_freezes(small.value)
                if freezes is True and _same(model, start):
                    return True
        return False
    looped = iteration(ctx, statement, at)
    if looped is None or not isinstance(statement.body, cst.IndentedBlock):
        return False
    iterable, target = _unwrapped(ctx, looped.iterable, looped.target, at)
    if type(iterable) is not cst.Call:
        return False
    if method_name(iterable) not in ("parameters", "named_parameters") or not _same(model, receiver(iterable)):
        return False
    if type(target) is cst.Tuple and target.elements:
        target = target.elements[-1].value
    if type(target) is not cst.Name:
        return False
    for line in _pass_body(statement):
        for small in line.body if type(line) is cst.SimpleStatementLine else ():
            if type(small) is cst.Expr and type(small.value) is cst.Call and _sets_requires_grad(small.value) is False:
                parameter = receiver(small.value)
            elif type(small) is cst.Assign and literal(small.value) is False and len(small.targets) == 1:
                parameter = _requires_grad_owner(small.targets[0].target)
            else:
                continue
            if type(parameter) is cst.Name and parameter.value == target.value:
                return True
    return False


def _unwrapped(
    ctx: "FileContext", iterable: cst.BaseExpression, target: cst.BaseExpression, at: Sequence[cst.CSTNode],
) -> Tuple[cst.BaseExpression, cst.BaseExpression]:
    """What a loop really goes through, and the name each of its items gets: `enumerate(xs)` with `(i, x)` is `xs`
    with `x`; a progress bar (`tqdm(xs)`) is `xs`."""
    while type(iterable) is cst.Call and iterable.args and iterable.args[0].keyword is None and not iterable.args[0].star:
        func = iterable.func
        if type(func) is cst.Name and func.value == "enumerate" and ctx.qualified_name(func, at) is None:
            if type(target) is not cst.Tuple or len(target.elements) != 2:
                break
            iterable, target = iterable.args[0].value, target.elements[1].value
        elif ctx.qualified_name_in(func, PROGRESS_BARS, at):
            iterable = iterable.args[0].value
        else:
            break
    return iterable, target


def _pass_body(loop: cst.CSTNode) -> Sequence[cst.BaseStatement]:
    """The statements of one pass: a `while` stepping an iterator by hand starts with taking the item (`try: p =
    next(it) except StopIteration: break`), which `iteration` has read already."""
    return loop.body.body[1:] if type(loop) is cst.While else loop.body.body


def _same(model: cst.BaseExpression, other: Optional[cst.BaseExpression]) -> bool:
    return other is not None and model.deep_equals(other)


def _sets_requires_grad(call: cst.Call) -> Optional[bool]:
    """The flag of a `requires_grad_(flag)` call (True when not given, None when not a literal or another call)."""
    if method_name(call) != "requires_grad_":
        return None
    flag = positional(call, 0) or keyword(call, "requires_grad")
    if flag is None:
        return True
    value = literal(flag.value)
    return value if value is True or value is False else None


def _requires_grad_owner(target: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`p` of an assignment target `p.requires_grad`."""
    if type(target) is cst.Attribute and target.attr.value == "requires_grad":
        return target.value
    return None


def _makes_require_grad(root: cst.CSTNode) -> bool:
    """Code in `root` (not in functions it defines) that may make a tensor or parameter require grad: an assignment
    to `.requires_grad` or a `requires_grad_` call of other than a literal False, or `requires_grad=` other than False
    passed to a call. A `requires_grad_(True)` undone further down its block does not (`_undone_in_their_blocks`)."""
    found = []
    undone: Optional[Set[int]] = None

    def on_visit(node: cst.CSTNode) -> bool:
        nonlocal undone
        node_type = type(node)
        if node_type is cst.Assign:
            if any(_requires_grad_owner(target.target) is not None for target in node.targets) and literal(node.value) is not False:
                found.append(node)
        elif node_type is cst.Call:
            if method_name(node) == "requires_grad_" and _sets_requires_grad(node) is not False:
                if undone is None:
                    undone = _undone_in_their_blocks(root)
                if id(node) not in undone:
                    found.append(node)
            flag = keyword(node, "requires_grad")
            if flag is not None and literal(flag.value) is not False:
                found.append(node)
        return not found and node_type not in FUNCTION_BOUNDARIES

    walk(root, on_visit, lambda node: None)
    return bool(found)


def _undone_in_their_blocks(root: cst.CSTNode) -> Set[int]:
    """The `m.requires_grad_(True)` statements of `root` that a later statement of the same block undoes with
    `m.requires_grad_(False)`, `m` rebound in between only to a wrapper of itself (`m = DistributedDataParallel(m)`,
    whose `requires_grad_` reaches the same parameters): StyleGAN2-ADA wraps its frozen modules that way (DDP wants
    their parameters to require grad while it is built), and they stay frozen (round 52)."""
    undone: Set[int] = set()

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.IndentedBlock:
            lines = node.body
            for index, line in enumerate(lines):
                call = _expression_call(line)
                if call is not None and method_name(call) == "requires_grad_" and _sets_requires_grad(call) is True:
                    if _undone_after(receiver(call), lines[index + 1:]):
                        undone.add(id(call))
        return type(node) not in FUNCTION_BOUNDARIES

    walk(root, on_visit, lambda node: None)
    return undone


def _expression_call(line: cst.CSTNode) -> Optional[cst.Call]:
    """The call a statement line is made of alone (`m.requires_grad_(True)`), else None."""
    if type(line) is cst.SimpleStatementLine and len(line.body) == 1 and type(line.body[0]) is cst.Expr:
        value = line.body[0].value
        return value if type(value) is cst.Call else None
    return None


def _undone_after(module: Optional[cst.BaseExpression], lines: Sequence[cst.CSTNode]) -> bool:
    """`module.requires_grad_(False)` follows in `lines`, with nothing before it but statement lines that leave
    `module` alone or wrap it (`module = DistributedDataParallel(module, ...)`)."""
    if module is None or type(module) not in (cst.Name, cst.Attribute):
        return False
    for line in lines:
        call = _expression_call(line)
        if call is not None:
            if method_name(call) == "requires_grad_" and _same(module, receiver(call)):
                return _sets_requires_grad(call) is False
            continue
        if type(line) is not cst.SimpleStatementLine:
            if _may_leave_or_rebind(line, module):
                return False  # the freeze below may not run, or may freeze another module
            continue
        for small in line.body:
            if type(small) in _LEAVING:
                return False
            if type(small) is cst.Assign and any(_same(module, target.target) for target in small.targets) and not _wraps(
                small.value, module,
            ):
                return False
    return False


# Statements after which the rest of their block may not run.
_LEAVING = frozenset({cst.Return, cst.Raise, cst.Break, cst.Continue})


def _may_leave_or_rebind(statement: cst.CSTNode, module: cst.BaseExpression) -> bool:
    """A compound statement (a loop over the batches, a `with` block) may leave the block (a `return` or `raise`, a
    `break` or `continue` of no loop inside it) or binds `module`: the block's later statements may not run, or may
    see another module."""
    found = []
    loops = [0]  # the loops around the node visited, `statement` included: a `break` in one leaves only that loop

    def on_visit(node: cst.CSTNode) -> bool:
        node_type = type(node)
        rebinds = (node_type is cst.Assign and any(_same(module, target.target) for target in node.targets)) or (
            node_type is cst.For and _same(module, node.target)
        )
        leaves = node_type in (cst.Return, cst.Raise) or (node_type in (cst.Break, cst.Continue) and loops[0] == 0)
        if leaves or rebinds:
            found.append(node)
        if node_type in (cst.For, cst.While):
            loops[0] += 1
        return not found and node_type not in FUNCTION_BOUNDARIES

    def on_leave(node: cst.CSTNode) -> None:
        if type(node) in (cst.For, cst.While):
            loops[0] -= 1

    walk(statement, on_visit, on_leave)
    return bool(found)


def _wraps(value: cst.BaseExpression, module: cst.BaseExpression) -> bool:
    """`value` is `DataParallel(module, ...)` or `DistributedDataParallel(module, ...)` however they are imported."""
    if type(value) is not cst.Call or terminal_name(value.func) not in _MODULE_WRAPPER_NAMES:
        return False
    wrapped = positional(value, 0) or keyword(value, "module")
    return wrapped is not None and _same(module, wrapped.value)
