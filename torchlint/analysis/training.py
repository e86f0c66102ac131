"""What one training iteration does, in the order it does it: the training-loop rules' shared facts.

The loop index (`loops.py`) records, for each loop body, the calls that show a call-graph fact. The
rules about the *order* of a training step (clearing gradients between backward and step, clipping
before `unscale_`, a step between two backwards of one graph) also need what a function of the file
called in the loop does, at the place of the call: `Iterations.iteration(loop)` gives the loop body's
fact-bearing nodes in source order with the top level of each same-module function it calls spliced
in where it is called (`train_step(batch)`, `self.optimize(loss)`), as one iteration runs them.

The vocabulary of a training step lives here too: optimizer constructors, gradient clipping,
`GradScaler` and what a step call steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.loops import Event, Loop, LoopIndex, is_accumulating_backward, loop_nodes
from torchlint.analysis.values import Values
from torchlint.engine.scopes import dotted_name

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

CLIP_FUNCTIONS = frozenset({
    "torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_", "torch.nn.utils.clip_grad_norm",
    "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_",
    "torch.nn.utils.clip_grad.clip_grad_norm", "torch.nn.utils.clip_grads_with_norm_",
    "torch.nn.utils.clip_grad.clip_grads_with_norm_",
})
CLIP_NAMES = frozenset(name.rpartition(".")[2] for name in CLIP_FUNCTIONS)
GRAD_SCALERS = frozenset({
    "torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler", "torch.cpu.amp.GradScaler",
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
})
# Optimizer classes outside `torch.optim` whose step is a plain optimizer step.
_OTHER_OPTIMIZERS = ("transformers.AdamW", "transformers.optimization.AdamW", "bitsandbytes.optim.", "apex.optimizers.")
# A part every name `optimizer_class` accepts holds (`torch.optim.SGD`, `apex.optimizers.FusedAdam`): a rule acting on
# optimizer constructions needs only the calls whose callee holds one (`Rule.call_parts`).
OPTIMIZER_PARTS = frozenset({"optim", "optimizers", "AdamW"})


# ------------------------------------------------------------------ vocabulary


def is_clip_call(call: cst.Call, ctx: "FileContext", stack=None) -> bool:
    """`torch.nn.utils.clip_grad_norm_(...)` / `clip_grad_value_(...)` under any import, an alias included
    (`from torch.nn.utils import clip_grad_norm_ as clip`; not Accelerate's `accelerator.clip_grad_norm_`, which
    unscales first)."""
    return ctx.qualified_name_in(call.func, CLIP_FUNCTIONS, stack)


def optimizer_class(call: cst.CSTNode, ctx: "FileContext", stack=None) -> Optional[str]:
    """The qualified name of the optimizer class `call` constructs (`torch.optim.SGD`), else None."""
    # Optimizer classes are capitalised: most calls are ruled out before their name is resolved.
    if type(call) is not cst.Call or not (semantics.terminal_name(call.func) or "")[:1].isupper():
        return None
    name = ctx.qualified_name(call.func, stack) or ""
    last = name.rpartition(".")[2]
    if name.startswith("torch.optim.") and not name.startswith(("torch.optim.lr_scheduler.", "torch.optim.swa_utils.")):
        return name if last[:1].isupper() and last != "Optimizer" else None
    return name if name.startswith(_OTHER_OPTIMIZERS) and last[:1].isupper() else None


def stepped_optimizer(call: cst.Call) -> Optional[cst.BaseExpression]:
    """What a step call steps: `opt` for `opt.step()`, and for `scaler.step(opt)`."""
    first = semantics.positional(call, 0) or semantics.keyword(call, "optimizer")
    if first is not None and semantics.method_name(call) == "step":
        return first.value
    return semantics.receiver(call)


def is_grad_scaler(expr: Optional[cst.BaseExpression], ctx: "FileContext", stack=None) -> bool:
    """Built from a `GradScaler` (followed through the value model)."""
    if expr is None or not ctx.may_name(GRAD_SCALERS):
        return False
    return any(
        type(origin.node) is cst.Call
        and origin.place.context.qualified_name_in(origin.node.func, GRAD_SCALERS, origin.place.stack)
        for origin in Values.of(ctx).origins(expr, stack)
    )


def scaler_of_backward(call: cst.Call, ctx: "FileContext", stack=None) -> Optional[cst.Call]:
    """For `scaler.scale(loss).backward()` (or `scaled = scaler.scale(loss)`, then `scaled.backward()`): the
    `scaler.scale(...)` call, when its receiver is a `GradScaler` or nothing else is known of it."""
    loss = semantics.receiver(call)
    if loss is None or semantics.method_name(call) != "backward":
        return None
    candidates = [loss] if type(loss) is cst.Call else [
        origin.node for origin in Values.of(ctx).origins(loss, stack) if type(origin.node) is cst.Call
    ]
    for candidate in candidates:
        if semantics.method_name(candidate) == "scale" and len(candidate.args) == 1:
            scaler = semantics.receiver(candidate)
            if scaler is not None and (is_grad_scaler(scaler, ctx, stack) or not _built_elsewhere(scaler, ctx, stack)):
                return candidate
    return None


def _built_elsewhere(expr: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    """The value model knows what `expr` was built from, and it is not a GradScaler."""
    origins = Values.of(ctx).origins(expr, stack)
    return any(type(origin.node) is cst.Call and not origin.opaque for origin in origins)


def scaler_disabled(scaler: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """Every construction of `scaler` passes `enabled=False`: `scale()` then returns the loss unchanged."""
    origins = [origin for origin in Values.of(ctx).origins(scaler, stack) if type(origin.node) is cst.Call]
    if not origins:
        return False
    for origin in origins:
        enabled = semantics.keyword(origin.node, "enabled")
        if enabled is None or semantics.literal(enabled.value) is not False:
            return False
    return True


def optimizer_model(optimizer: cst.BaseExpression, ctx: "FileContext", stack=None) -> Optional[str]:
    """`model` (dotted) when every construction of `optimizer` is `torch.optim.X(model.parameters(), ...)`."""
    found: Set[str] = set()
    for origin in Values.of(ctx).origins(optimizer, stack):
        if optimizer_class(origin.node, origin.place.context, origin.place.stack) is None:
            return None
        params = semantics.positional(origin.node, 0) or semantics.keyword(origin.node, "params")
        value = params.value if params is not None else None
        if type(value) is not cst.Call or semantics.method_name(value) != "parameters":
            return None
        owner = dotted_name(semantics.receiver(value))
        if owner is None:
            return None
        found.add(owner)
    return found.pop() if len(found) == 1 else None


# ------------------------------------------------------------------ one iteration, in order


@dataclass(frozen=True)
class Moment:
    """A node showing training facts, as one iteration of a loop meets it."""

    node: cst.CSTNode
    facts: FrozenSet[str]
    # The event of the loop body that leads here: the node itself, or the call of the function holding it.
    site: Event
    # The `if` arms that hold it: the site's in the loop, then the node's in the called function.
    arms: Tuple[Tuple[int, bool], ...]
    # The function (call-graph key) whose body holds the node.
    function: str

    def runs_whenever(self, other: "Moment") -> bool:
        """Every `if` arm around this moment also holds `other`: when `other` runs, so does this."""
        return set(self.arms) <= set(other.arms)

    def excludes(self, other: "Moment") -> bool:
        return any((node, not arm) in other.arms for node, arm in self.arms)

    def shows(self, fact: str) -> bool:
        return fact in self.facts


@dataclass(frozen=True)
class _FunctionEvent:
    event: Event
    # Inside a loop of its own function: the called function's loop is a training loop of its own.
    in_loop: bool


class Iterations:
    """One per file (`ctx.shared(Iterations)`), fed by the rules' visits like the loop index.

    Keeps every function's fact-bearing events and same-module calls in source order, and the
    stack at each node that shows a fact, so rules can ask the value model about it afterwards.
    """

    _DEPTH = 2

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.loops = ctx.shared(LoopIndex)
        self.functions: Dict[str, List[_FunctionEvent]] = {}
        self.stacks: Dict[int, Tuple[cst.CSTNode, ...]] = {}
        # id of an observed node -> the function whose body holds it
        self._function_of: Dict[int, str] = {}
        self._last: Optional[cst.CSTNode] = None

    def observe(self, node: cst.CSTNode) -> Event:
        event = self.loops.observe(node)
        if self._last is node:
            return event
        self._last = node
        if event.facts or event.callee:
            ctx = self.ctx
            key = ctx.callgraph.current(ctx.scope_nodes, node).key
            self.functions.setdefault(key, []).append(_FunctionEvent(event, bool(loop_nodes(ctx.stack))))
            self._function_of[id(node)] = key
            if event.facts:
                self.stacks[id(node)] = tuple(ctx.stack)
        return event

    def events(self, function: str) -> List[Event]:
        """The fact-bearing events and same-module calls of `function`'s body in source order, its loops' included:
        everything a call of it runs, once or more."""
        return [item.event for item in self.functions.get(function, ())]

    def stack(self, node: cst.CSTNode) -> Tuple[cst.CSTNode, ...]:
        return self.stacks[id(node)]

    def iteration(self, loop: Loop) -> List[Moment]:
        """The loop body's fact-bearing nodes in source order, the top level of the same-module functions it
        calls spliced in at each call (`_DEPTH` calls deep)."""
        function = self._function_of.get(id(loop.events[0].node), "") if loop.events else ""
        found: List[Moment] = []
        for event in sorted(loop.events, key=lambda item: item.seq):
            if event.facts:
                found.append(Moment(event.node, event.facts, event, event.arms, function))
            elif event.callee is not None:
                found += self._called(event.callee, event, event.arms, self._DEPTH, {event.callee})
        return found

    def body(self, function: str) -> List[Moment]:
        """The top level (outside its loops) of a function's body in source order, calls spliced in."""
        found: List[Moment] = []
        for item in self.functions.get(function, ()):
            if item.in_loop:
                continue
            event = item.event
            if event.facts:
                found.append(Moment(event.node, event.facts, event, event.arms, function))
            elif event.callee is not None and event.callee != function:
                found += self._called(event.callee, event, event.arms, self._DEPTH, {function, event.callee})
        return found

    def _called(self, key: str, site: Event, arms, depth: int, seen: Set[str]) -> List[Moment]:
        found: List[Moment] = []
        for item in self.functions.get(key, ()):
            if item.in_loop:
                continue
            event = item.event
            if event.facts:
                found.append(Moment(event.node, event.facts, site, arms + event.arms, key))
            elif event.callee is not None and depth > 1 and event.callee not in seen:
                found += self._called(event.callee, site, arms + event.arms, depth - 1, seen | {event.callee})
        return found

    def sequences(self) -> Iterator[List[Moment]]:
        """Every loop's iteration, then every function's top level: each a run of moments in the order they happen."""
        for loop in self.loops.loops.values():
            yield self.iteration(loop)
        for function in list(self.functions):
            yield self.body(function)

    def training_loops(self) -> List[Tuple[Loop, List[Moment]]]:
        """The innermost loops that train (an accumulating backward and an optimizer step in one iteration,
        calls spliced in), each with its iteration."""
        iterations = {id(loop.node): self.iteration(loop) for loop in self.loops.loops.values()}
        children = self.loops.children()
        found = []
        for loop in self.loops.loops.values():
            moments = iterations[id(loop.node)]
            if trains(moments) and not any(trains(iterations[id(child.node)]) for child in children.get(id(loop.node), ())):
                found.append((loop, moments))
        return found


def trains(moments: Sequence[Moment]) -> bool:
    return any(is_backward(moment) for moment in moments) and any(moment.shows("optimizer-step") for moment in moments)


def is_backward(moment: Moment) -> bool:
    """An accumulating backward: `.backward()` or `torch.autograd.backward(...)`, not `torch.autograd.grad`."""
    return moment.shows("backward") and is_accumulating_backward(moment.node)


def nearest(
    moments: Sequence[Moment], index: int, accepts: Callable[[Moment], bool], forward: bool = False, cyclic: bool = True,
) -> Optional[int]:
    """The index of the first moment `accepts` going back (or on) from `moments[index]`, round the loop to the
    previous (next) iteration when `cyclic`; the moment itself is not considered."""
    count = len(moments)
    for distance in range(1, count if cyclic else (count - index if forward else index + 1)):
        position = (index + distance) % count if forward else (index - distance) % count
        if accepts(moments[position]):
            return position
    return None
