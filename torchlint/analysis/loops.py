"""Loops and what their bodies do, in order: the loop index several rules share.

Fed node by node from the rules' visits (`LoopIndex.observe`), from the engine's single
walk: each loop body's calls and assignments that show a call-graph fact (backward,
clearing gradients, an optimizer step, a mode switch) or call a function of the file,
in source order, so rules ask what a loop trains and in which order things happen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.values import PROGRESS_BARS, Values
from torchlint.engine.scopes import dotted_name

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Sets of exact types, tested with `type(node) in ...`: these helpers scan the stack at every visit, and
# `isinstance` on libcst's abstract node classes costs several times more.
LOOPS = frozenset({cst.For, cst.While})
FUNCTION_BOUNDARIES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})


def enclosing(stack: Sequence[cst.CSTNode]) -> Iterator[Tuple[int, cst.CSTNode]]:
    """The nodes around the innermost point of `stack`, innermost first, with their index in it, within its function."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            return
        yield index, node


def loop_nodes(stack: Sequence[cst.CSTNode]) -> List[cst.CSTNode]:
    """The `for`/`while` nodes whose body holds the innermost point of `stack`, innermost first, within its function."""
    return [node for index, node in enclosing(stack) if type(node) in LOOPS and stack[index + 1] is node.body]


class Iteration(NamedTuple):
    """What a loop goes through: each pass binds `target` to the next item of `iterable`, evaluated at the innermost
    point of `evaluated_at` (the loop's own stack for a `for`, the `iter(...)` call's statement for a `while`)."""

    target: cst.BaseExpression
    iterable: cst.BaseExpression
    evaluated_at: Tuple[cst.CSTNode, ...]


def iteration(ctx: "FileContext", loop: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> Optional[Iteration]:
    """The items `loop` (with `stack`, the nodes around it ending with it) goes through: a `for`'s, or those of a
    `while` that takes the next item of an iterator first thing in each pass, as code that steps a loader by hand does:

        batches = iter(loader)
        while True:
            try:
                images, labels = next(batches)
            except StopIteration:
                break

    (the `try` may be left out, the handler may start the iterator again). None for any other loop."""
    if type(loop) is cst.For:
        return Iteration(loop.target, loop.iter, tuple(stack))
    if type(loop) is not cst.While or type(loop.body) is not cst.IndentedBlock or not loop.body.body:
        return None
    around = (*stack, loop.body)
    first = loop.body.body[0]
    if type(first) is cst.Try and type(first.body) is cst.IndentedBlock and first.body.body and any(
        handler.type is not None and syntax.terminal_name(handler.type) == "StopIteration" for handler in first.handlers
    ):
        around = (*around, first, first.body)
        first = first.body.body[0]
    if type(first) is not cst.SimpleStatementLine or len(first.body) != 1 or type(first.body[0]) is not cst.Assign:
        return None
    assign = first.body[0]
    if len(assign.targets) != 1:
        return None
    item_of = Values.of(ctx).next_item(assign.value, (*around, first))
    if item_of is None or item_of[1].context is not ctx:
        return None
    return Iteration(assign.targets[0].target, item_of[0], item_of[1].stack)


def iterations_around(ctx: "FileContext", stack: Sequence[cst.CSTNode]) -> List[Iteration]:
    """What each loop whose body holds the innermost point of `stack` goes through (`iteration`), innermost first,
    within its function; loops that go through no items are left out."""
    found = []
    for index, node in enclosing(stack):
        if type(node) in LOOPS and stack[index + 1] is node.body:
            looped = iteration(ctx, node, stack[: index + 1])
            if looped is not None:
                found.append(looped)
    return found


def counters_around(ctx: "FileContext", stack: Sequence[cst.CSTNode]) -> FrozenSet[str]:
    """The names counting the passes of the loops around the innermost point of `stack` (`loop_counters`), within its
    function: `i` in `for i in range(n): ...` and `for i, item in enumerate(items): ...`."""
    return frozenset(name for looped in iterations_around(ctx, stack) for name in loop_counters(ctx, looped))


def is_accumulating_backward(call: cst.CSTNode) -> bool:
    """`.backward()` or `torch.autograd.backward(...)`: they add into `.grad`; `torch.autograd.grad` returns instead."""
    if not isinstance(call, cst.Call):
        return False
    name = dotted_name(call.func) or ""
    return syntax.method_name(call) == "backward" or name.endswith("autograd.backward")



class Event(NamedTuple):
    """A call or assignment inside a loop body, in source order (a tuple: one is made for every observed node, and
    a frozen dataclass costs several times more to make)."""

    seq: int
    node: cst.CSTNode
    facts: FrozenSet[str]
    # The same-module function the call may invoke (`f` for `f(...)`, `Class.m` for `self.m(...)`).
    callee: Optional[str]
    # The `if` statements and `a if c else b` expressions of its function that hold it: (id of each, which arm).
    arms: Tuple[Tuple[int, bool], ...] = ()
    # ids of the `for` loops it runs in on their last iteration only (`if i == len(loader) - 1:`).
    last_of: Tuple[int, ...] = ()

    def excludes(self, other: "Event") -> bool:
        """The two sit in different arms of one `if`: an iteration runs one or the other."""
        return any((node, not arm) in other.arms for node, arm in self.arms)


@dataclass
class Loop:
    node: cst.CSTNode
    parent: Optional["Loop"]
    # The nodes around the loop, outermost first, ending with it: where code in its body is evaluated.
    around: Tuple[cst.CSTNode, ...]
    # Everything in the body, nested loops included, but not in functions defined there.
    events: List[Event] = field(default_factory=list)


def _arms(stack: Sequence[cst.CSTNode]) -> Tuple[Tuple[int, bool], ...]:
    return tuple(
        (id(node), stack[index + 1] is node.body) for index, node in enclosing(stack)
        if type(node) is cst.If or type(node) is cst.IfExp
    )


def _index_of(stack: Sequence[cst.CSTNode], node: cst.CSTNode) -> int:
    return next(index for index in range(len(stack) - 1, -1, -1) if stack[index] is node)


def _last_iteration_of(ctx: "FileContext", stack: Sequence[cst.CSTNode]) -> Tuple[int, ...]:
    """The ids of the loops around the innermost point of `stack` whose body runs it only under a test that holds on
    the loop's last iteration alone."""
    found = []
    tests = []
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            break
        if type(node) is cst.If and stack[index + 1] is node.body:
            tests.append(node.test)
        elif tests and type(node) in LOOPS and stack[index + 1] is node.body:
            looped = iteration(ctx, node, stack[: index + 1])
            if looped is not None and any(is_last_iteration_test(ctx, test, looped) for test in tests):
                found.append(id(node))
    return tuple(found)


def is_last_iteration_test(ctx: "FileContext", test: cst.BaseExpression, looped: Iteration) -> bool:
    """`test` holds on the last iteration of the loop going through `looped` only: `i == len(items) - 1` or
    `i + 1 == len(items)` where `i` counts the iterations (`for i, x in enumerate(items)`, `for i in
    range(len(items))`, `for i, x in items` over a list of `enumerate` pairs, `i` of `for step, (i, x) in
    enumerate(pairs)` or `for step, i in enumerate(range(...))` too) and `items` is what the loop iterates, or what that wraps (`tqdm(items)`,
    `list(enumerate(items))`, also through a name)."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.comparisons[0].operator) is not cst.Equal:
        return False
    counters = loop_counters(ctx, looped)
    if not counters:
        return False
    for left, right in ((test.left, test.comparisons[0].comparator), (test.comparisons[0].comparator, test.left)):
        if type(left) is cst.Name and left.value in counters:
            length = _minus_one(right)
        elif _is_plus_one(left, counters):
            length = right
        else:
            continue
        counted = _length_of(ctx, length) if length is not None else None
        if counted is not None and counted in _iterated_sequences(ctx, looped):
            return True
    return False


def loop_counters(ctx: "FileContext", looped: Iteration) -> FrozenSet[str]:
    """The names counting the iterations: `i` in `for i, x in ...` or `for i in range(...)`, and in
    `for step, (i, x) in enumerate(...)` both `step` and `i` (the index of each pair `enumerate` wraps; the number of
    `range` that `enumerate` wraps), also beneath a progress bar (`tqdm(range(n))`, `tqdm(enumerate(pairs))`)."""
    target, iterable = looped.target, looped.iterable
    found = set()
    while True:
        while type(iterable) is cst.Call and iterable.args and (
            syntax.terminal_name(iterable.func) == "tqdm" or ctx.qualified_name_in(iterable.func, PROGRESS_BARS, looped.evaluated_at)
        ):
            iterable = iterable.args[0].value
        if type(target) is cst.Name:
            if type(iterable) is cst.Call and dotted_name(iterable.func) == "range":
                found.add(target.value)
            break
        if type(target) not in (cst.Tuple, cst.List) or len(target.elements) != 2 or type(target.elements[0].value) is not cst.Name:
            break
        found.add(target.elements[0].value.value)
        if type(iterable) is not cst.Call or dotted_name(iterable.func) != "enumerate" or not iterable.args:
            break
        target, iterable = target.elements[1].value, iterable.args[0].value
    return frozenset(found)


def _iterated_sequences(ctx: "FileContext", looped: Iteration) -> FrozenSet[str]:
    """The keys (`syntax.expression_key`) of the sequences as long as the loop: what it iterates and what that wraps,
    one positional argument deep at a time (`enumerate(tqdm(loader))`, `range(len(items))`), also through names."""
    found = set()
    pending = [looped.iterable]
    while pending and len(found) < 8:
        expr = pending.pop()
        found.add(syntax.expression_key(ctx.code(expr)))
        if type(expr) is cst.Call and expr.args and expr.args[0].keyword is None and not expr.args[0].star:
            length = _length_of(ctx, expr.args[0].value) if dotted_name(expr.func) == "range" else None
            if length is not None:
                found.add(length)
            else:
                pending.append(expr.args[0].value)
        elif type(expr) is cst.Name:
            origins = Values.of(ctx).origins(expr, looped.evaluated_at)
            if len(origins) == 1 and not origins[0].opaque and origins[0].node is not expr:
                pending.append(origins[0].node)
    return frozenset(found)


def _length_of(ctx: "FileContext", expr: cst.BaseExpression) -> Optional[str]:
    """The key (`syntax.expression_key`) of `items` for `len(items)`."""
    if type(expr) is cst.Call and dotted_name(expr.func) == "len" and len(expr.args) == 1:
        return syntax.expression_key(ctx.code(expr.args[0].value))
    return None


def _minus_one(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Subtract and syntax.literal(expr.right, None) == 1:
        return expr.left
    return None


def _is_plus_one(expr: cst.BaseExpression, names: FrozenSet[str]) -> bool:
    return (
        type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Add and type(expr.left) is cst.Name
        and expr.left.value in names and syntax.literal(expr.right, None) == 1
    )


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
        facts = self._facts_at(node)
        if facts or callee:
            event = Event(self.seq, node, facts, callee, _arms(ctx.stack), _last_iteration_of(ctx, ctx.stack))
        else:
            event = Event(self.seq, node, facts, callee)
        if event.facts or callee:
            for loop in self.enclosing():
                loop.events.append(event)
        self._last = event
        return event

    def _facts_at(self, node: cst.CSTNode) -> FrozenSet[str]:
        """The call-graph facts the engine noted for the visited `node` (recognizers run just before the rules)."""
        facts = self.ctx.callgraph.current(self.ctx.scope_nodes, node).facts
        # Asked for every call and assignment observed: in a function without facts, without looking.
        return frozenset([name for name, nodes in facts.items() if nodes and nodes[-1] is node]) if facts else frozenset()

    def enclosing(self, stack: Optional[Sequence[cst.CSTNode]] = None) -> List[Loop]:
        """The loops whose body holds the innermost point of `stack`, innermost first."""
        stack = self.ctx.stack if stack is None else stack
        loops = []
        parent = None
        for node in reversed(loop_nodes(stack)):
            loop = self.loops.get(id(node))
            if loop is None:
                loop = self.loops[id(node)] = Loop(node, parent, tuple(stack[: _index_of(stack, node) + 1]))
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

    def calls_of(self, function: str) -> List[Tuple[Loop, Event]]:
        """Each call of the same-module `function` made in a loop body, with the innermost loop holding it: a loop
        whose every iteration runs the function once (`for epoch in ...: train(epoch)`)."""
        innermost: Dict[int, Tuple[Loop, Event]] = {}
        for loop in self.loops.values():
            for event in loop.events:
                if event.callee == function:
                    found = innermost.get(id(event.node))
                    if found is None or len(found[0].around) < len(loop.around):
                        innermost[id(event.node)] = (loop, event)
        return list(innermost.values())

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
