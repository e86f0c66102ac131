"""What several autograd rules ask about the code: loops and the facts in them,
loss computations, models, the names an expression reads.

Everything here is fed from the engine's single walk (a rule calls `observe`
from its visitor methods); nothing walks the tree again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.engine.scopes import dotted_name
from torchlint.rules.autograd import _facts  # noqa: F401  (registers the facts the loops record)

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Sets of exact types, tested with `type(node) in ...`: these helpers scan the stack at every visit, and
# `isinstance` on libcst's abstract node classes costs several times more.
LOOPS = frozenset({cst.For, cst.While})
FUNCTION_BOUNDARIES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})

_CRITERION_NAME = re.compile(r"^(criterion|.*_criterion|criterion_.*|loss_?fn|loss_?func(tion)?|.*_loss_?fn|.*_loss_?func)$")
# Functional losses whose name does not end in `_loss`.
LOSS_FUNCTIONS = frozenset({"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"})
_MODEL_BUILDERS = ("torchvision.models.", "timm.create_model", "torch.hub.load")
_MODULE_BASES = ("LightningModule", "PreTrainedModel")
# Function names that say "this evaluates": evaluate, run_validation, test, predict_batch, inference_loop, ...
_EVALUATION_WORDS = frozenset({
    "eval", "evaluate", "evaluation", "val", "valid", "validate", "validation", "test", "testing", "predict", "prediction",
})


def loop_nodes(stack: Sequence[cst.CSTNode]) -> List[cst.CSTNode]:
    """The `for`/`while` nodes whose body holds the innermost point of `stack`, innermost first, within its function."""
    found = []
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            break
        if type(node) in LOOPS and stack[index + 1] is node.body:
            found.append(node)
    return found


def facts_at(node: cst.CSTNode, ctx: "FileContext") -> FrozenSet[str]:
    """The call-graph facts the engine noted for `node`; call it from `node`'s visit (recognizers run just before)."""
    facts = ctx.callgraph.current(ctx.scope_nodes, node).facts
    return frozenset(name for name, nodes in facts.items() if nodes and nodes[-1] is node)


def is_accumulating_backward(call: cst.CSTNode) -> bool:
    """`.backward()` or `torch.autograd.backward(...)`: they add into `.grad`; `torch.autograd.grad` returns instead."""
    if not isinstance(call, cst.Call):
        return False
    name = dotted_name(call.func) or ""
    return semantics.method_name(call) == "backward" or name.endswith("autograd.backward")


def uses_autograd_grad(function_key: str, ctx: "FileContext") -> bool:
    function = ctx.callgraph.functions.get(function_key)
    return function is not None and any(not is_accumulating_backward(node) for node in function.facts.get("backward", ()))


def names_an_evaluation(name: str) -> bool:
    words = [word for word in name.lower().split("_") if word]
    return any(word in _EVALUATION_WORDS or word.startswith("infer") for word in words)


def evaluates(function_key: str, ctx: "FileContext") -> bool:
    """The function puts a model in eval mode or is named like an evaluation."""
    function = ctx.callgraph.functions.get(function_key)
    return names_an_evaluation(function_key.rpartition(".")[2]) or (function is not None and "sets-eval" in function.facts)


def innermost_function(stack: Sequence[cst.CSTNode]) -> Optional[cst.FunctionDef]:
    for node in reversed(stack[:-1]):
        if type(node) is cst.FunctionDef:
            return node
    return None


def names_in(expr: Optional[cst.CSTNode]) -> Iterator[str]:
    """Variables (`loss`) and attribute chains (`self.total`) an expression reads."""
    if expr is None:
        return
    dotted = dotted_name(expr)
    if dotted is not None:
        yield dotted
        return
    if isinstance(expr, cst.Call):
        yield from names_in(semantics.receiver(expr))
        for arg in expr.args:
            yield from names_in(arg.value)
    elif isinstance(expr, cst.BinaryOperation):
        yield from names_in(expr.left)
        yield from names_in(expr.right)
    elif isinstance(expr, cst.UnaryOperation):
        yield from names_in(expr.expression)
    elif isinstance(expr, (cst.Subscript, cst.Attribute)):
        yield from names_in(expr.value)
    elif isinstance(expr, (cst.Tuple, cst.List)):
        for element in expr.elements:
            yield from names_in(element.value)
    elif isinstance(expr, cst.Dict):
        for element in expr.elements:
            yield from names_in(element.value)


def grad_disabled_by_a_caller(function_key: str, ctx: "FileContext") -> Optional[cst.Call]:
    """A same-module call of `function_key` made with gradients disabled, if there is one."""
    for site in ctx.callgraph.call_sites(function_key):
        if semantics.grad_enabled_at(site.stack, ctx) is False:
            return site.node
    return None


def under_dynamic_grad_mode(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> bool:
    """Inside `with torch.set_grad_enabled(<not a literal>)` (or such a decorator) in the same function."""
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
                if not qualified.startswith("torch.") and _names_a_grad_mode(semantics.terminal_name(manager) or ""):
                    return True
    return False


def _names_a_grad_mode(name: str) -> bool:
    words = [word for word in name.lower().split("_") if word]
    return names_an_evaluation(name) or any(word in ("grad", "grads", "nograd") for word in words)


def _is_dynamic_grad_mode(expr: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    return (
        isinstance(expr, cst.Call)
        and ctx.qualified_name(expr.func, stack) in semantics.SET_GRAD_ENABLED
        and semantics.grad_mode_of(expr, ctx, stack) is None
    )


# ------------------------------------------------------------------ losses


def is_loss_module(qualified: Optional[str]) -> bool:
    return bool(qualified) and qualified.startswith("torch.nn.") and qualified.endswith("Loss")


def is_loss_call(call: cst.CSTNode, ctx: "FileContext", stack=None) -> bool:
    """`F.cross_entropy(...)`, `F.mse_loss(...)`, `nn.MSELoss()(...)`, or `criterion(...)` where the criterion
    is built from an `nn.*Loss` or named like one."""
    if not isinstance(call, cst.Call):
        return False
    if isinstance(call.func, cst.Call):
        return is_loss_module(ctx.qualified_name(call.func.func, stack))
    name = ctx.qualified_name(call.func, stack)
    if name is not None:
        function = name.rpartition(".")[2]
        return name.startswith("torch.nn.functional.") and (function.endswith("_loss") or function in LOSS_FUNCTIONS)
    if is_loss_module(semantics.built_from(call.func, ctx, stack)):
        return True
    terminal = semantics.terminal_name(call.func)
    return bool(terminal) and bool(_CRITERION_NAME.match(terminal.lower()))


def is_loss_value(expr: cst.CSTNode, ctx: "FileContext", stack=None) -> bool:
    """A loss call, possibly scaled or summed: `criterion(out, y) / accumulation_steps`."""
    if isinstance(expr, cst.BinaryOperation):
        return is_loss_value(expr.left, ctx, stack) or is_loss_value(expr.right, ctx, stack)
    if isinstance(expr, cst.UnaryOperation):
        return is_loss_value(expr.expression, ctx, stack)
    return is_loss_call(expr, ctx, stack)


# ------------------------------------------------------------------ models


class Models:
    """What the spec calls a model: built from a user `nn.Module` subclass, `nn.Sequential` or a
    model builder, or a name on which `.eval()`, `.train()` or `.parameters()` is called.

    Fed from the walk (`observe_class`, `observe_call`); ask `is_model` in `finish()`.
    """

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.classes: Set[str] = set()
        self.mode_receivers: Set[str] = set()

    def observe_class(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
            name = self.ctx.qualified_name(value) or ""
            local = dotted_name(value)
            torch_module = name.startswith("torch.nn.") and not is_loss_module(name)
            if torch_module or name.endswith(_MODULE_BASES) or local in self.classes:
                self.classes.add(node.name.value)
                return

    def observe_call(self, node: cst.Call) -> None:
        if semantics.method_name(node) in ("eval", "train", "parameters"):
            receiver = dotted_name(semantics.receiver(node))
            if receiver:
                self.mode_receivers.add(receiver)

    def is_model(self, expr: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
        name = dotted_name(expr)
        if name is None:
            return False
        terminal = semantics.terminal_name(expr) or ""
        if _CRITERION_NAME.match(terminal.lower()):
            return False
        for value in reversed(self.ctx.assigned_values(expr, stack)):
            verdict = self._built_as_model(value, stack)
            if verdict is not None:
                return verdict
        return name in self.mode_receivers

    def _built_as_model(self, value: cst.BaseExpression, stack) -> Optional[bool]:
        """True/False when the assigned value tells, None to look at an earlier assignment (`model = model.to(device)`)."""
        if not isinstance(value, cst.Call):
            return None
        if isinstance(value.func, cst.Name) and value.func.value in self.classes:
            return True
        qualified = self.ctx.qualified_name(value.func, stack)
        if qualified is not None:
            if is_loss_module(qualified):
                return False
            return (
                qualified == "torch.nn.Sequential"
                or qualified.startswith(_MODEL_BUILDERS)
                or qualified.endswith(".from_pretrained")
            )
        if semantics.method_name(value) == "from_pretrained":
            return True
        return None


# ------------------------------------------------------------------ loops


@dataclass(frozen=True)
class Event:
    """A call or assignment inside a loop body, in source order."""

    seq: int
    node: cst.CSTNode
    facts: FrozenSet[str]
    # The same-module function the call may invoke (`f` for `f(...)`, `Class.m` for `self.m(...)`).
    callee: Optional[str]
    # The `if` statements and `a if c else b` expressions of its function that hold it: (id of each, which arm).
    arms: Tuple[Tuple[int, bool], ...] = ()

    def excludes(self, other: "Event") -> bool:
        """The two sit in different arms of one `if`: an iteration runs one or the other."""
        return any((node, not arm) in other.arms for node, arm in self.arms)


@dataclass
class Loop:
    node: cst.CSTNode
    parent: Optional["Loop"]
    # Everything in the body, nested loops included, but not in functions defined there.
    events: List[Event] = field(default_factory=list)


def _arms(stack: Sequence[cst.CSTNode]) -> Tuple[Tuple[int, bool], ...]:
    found = []
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            break
        if type(node) is cst.If or type(node) is cst.IfExp:
            found.append((id(node), stack[index + 1] is node.body))
    return tuple(found)


class LoopIndex:
    """The facts and same-module calls of each loop body, fed node by node from the rules' visits.

    One per file (`ctx.shared(LoopIndex)`): the rules that use it observe the same calls and
    assignments, so the first to visit a node records it and the others get its event.
    """

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.loops: Dict[int, Loop] = {}
        self.seq = 0
        self._last: Optional[Event] = None

    def observe(self, node: cst.CSTNode) -> Event:
        """Record the visited node; its `seq` orders it against every other observed node."""
        if self._last is not None and self._last.node is node:
            return self._last
        ctx = self.ctx
        self.seq += 1
        callee = ctx.callgraph.callee_key(node, ctx.stack) if type(node) is cst.Call else None
        facts = facts_at(node, ctx)
        event = Event(self.seq, node, facts, callee, _arms(ctx.stack) if facts or callee else ())
        if event.facts or callee:
            for loop in self.enclosing():
                loop.events.append(event)
        self._last = event
        return event

    def enclosing(self, stack: Optional[Sequence[cst.CSTNode]] = None) -> List[Loop]:
        """The loops whose body holds the innermost point of `stack`, innermost first."""
        stack = self.ctx.stack if stack is None else stack
        loops = []
        parent = None
        for node in reversed(loop_nodes(stack)):
            loop = self.loops.get(id(node))
            if loop is None:
                loop = self.loops[id(node)] = Loop(node, parent)
            loops.append(loop)
            parent = loop
        return loops[::-1]

    def sites(self, loop: Loop, fact: str, depth: int = 1) -> List[Tuple[Event, List[cst.CSTNode]]]:
        """Events of `loop` showing `fact`, directly or in same-module functions they call (`depth` calls below those):
        each with the nodes that show it."""
        found = []
        for event in loop.events:
            if fact in event.facts:
                found.append((event, [event.node]))
            elif event.callee is not None:
                nodes = self.ctx.callgraph.facts_of(event.callee, fact, depth)
                if nodes:
                    found.append((event, nodes))
        return found

    def trains(self, loop: Loop) -> bool:
        """The loop runs backward (accumulating into `.grad`) and an optimizer step, itself or through calls."""
        backward = any(is_accumulating_backward(node) for _, nodes in self.sites(loop, "backward") for node in nodes)
        return backward and bool(self.sites(loop, "optimizer-step"))

    def children(self) -> Dict[int, List[Loop]]:
        found: Dict[int, List[Loop]] = {}
        for loop in self.loops.values():
            if loop.parent is not None:
                found.setdefault(id(loop.parent.node), []).append(loop)
        return found
