"""Loops and what their bodies do, in order: the loop index several rules share.

Fed node by node from the rules' visits (`LoopIndex.observe`), from the engine's single
walk: each loop body's calls and assignments that show a call-graph fact (backward,
clearing gradients, an optimizer step, a mode switch) or call a function of the file,
in source order, so rules ask what a loop trains and in which order things happen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.engine.scopes import dotted_name

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Sets of exact types, tested with `type(node) in ...`: these helpers scan the stack at every visit, and
# `isinstance` on libcst's abstract node classes costs several times more.
LOOPS = frozenset({cst.For, cst.While})
FUNCTION_BOUNDARIES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})


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
        facts = self._facts_at(node)
        event = Event(self.seq, node, facts, callee, _arms(ctx.stack) if facts or callee else ())
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
