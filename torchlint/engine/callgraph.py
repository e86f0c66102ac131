"""The module's own call graph, with the facts each function establishes.

Built during the single walk: every call of a function defined in the same
module is recorded with where it happens, and fact recognizers (see
`torchlint.analysis.facts`) note what each function does ("backward",
"clears-grad", "starts-workers", ...), keeping the node that showed it. Rules
consult the graph in `finish()`, when it is complete, to see one or more calls
deep without walking the tree again.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

import libcst as cst


MODULE = "<module>"
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class CallSite:
    node: cst.Call
    callee: str
    # The enclosing nodes at the call, outermost first (the call itself last).
    stack: Tuple[cst.CSTNode, ...]


@dataclass
class FunctionFacts:
    key: str
    node: Optional[cst.CSTNode]
    calls: List[CallSite] = field(default_factory=list)
    facts: Dict[str, List[cst.CSTNode]] = field(default_factory=dict)
    # fact -> the nodes a deferred recognizer (`facts.recognizes_when_asked`) has yet to judge, each with its check,
    # in walk order: judged when the fact is asked of this function (`shown`, `shows`).
    deferred: Dict[str, List[Tuple[cst.CSTNode, Callable[[], bool]]]] = field(default_factory=dict)

    def shown(self, fact: str) -> List[cst.CSTNode]:
        """The nodes showing `fact` in this function's own code, the deferred ones judged now."""
        for node, check in self.deferred.pop(fact, ()):
            if check():
                self.facts.setdefault(fact, []).append(node)
        return self.facts.get(fact, [])

    def shows(self, fact: str, node: cst.CSTNode) -> bool:
        """`node` shows `fact`: noted by the walk, or judged now if its recognizer was deferred."""
        if any(found is node for found in self.facts.get(fact, ())):
            return True
        pending = self.deferred.get(fact, ())
        for index, (waiting, check) in enumerate(pending):
            if waiting is node:
                del pending[index]
                if check():
                    self.facts.setdefault(fact, []).append(node)
                    return True
                return False
        return False

    def may_show(self) -> FrozenSet[str]:
        """The facts this function's own code shows or may show (some of its deferred nodes not judged yet)."""
        shown = [fact for fact, nodes in self.facts.items() if nodes]
        return frozenset(shown + [fact for fact, waiting in self.deferred.items() if waiting])


class CallGraph:
    def __init__(self, defined: Optional[AbstractSet[str]] = None):
        self.functions: Dict[str, FunctionFacts] = {MODULE: FunctionFacts(MODULE, None)}
        self._keys: Dict[int, str] = {}
        # (id of the last of `current`'s nodes, whether it is the node asked about) -> the answer: rules and
        # recognizers ask at most nodes, and the answer is fixed by the tree above that last node.
        self._current: Dict[Tuple[int, bool], FunctionFacts] = {}
        # Names the module may define functions with (None: any). A call of any other name is not a call of
        # this module's functions, and recording it would cost a copy of the stack for nothing.
        self.defined = defined

    # ------------------------------------------------------------ building

    def key_of(self, function: cst.FunctionDef, stack: Sequence[cst.CSTNode]) -> str:
        """`Class.method` for methods, the bare name for other functions (nested ones included).

        `stack` holds the nodes enclosing `function` (outermost first), ending with it.
        """
        key = self._keys.get(id(function))
        if key is None:
            owner = next((node for node in reversed(stack[:-1]) if isinstance(node, (cst.FunctionDef, cst.ClassDef))), None)
            key = f"{owner.name.value}.{function.name.value}" if isinstance(owner, cst.ClassDef) else function.name.value
            self._keys[id(function)] = key
            self.functions.setdefault(key, FunctionFacts(key, function))
        return key

    def current(self, nodes: Sequence[cst.CSTNode], node: Optional[cst.CSTNode] = None) -> FunctionFacts:
        """The function whose body holds `node` (default: the last of `nodes`), or the module.

        `nodes` are the enclosing nodes, outermost first: a whole stack or only its
        scope nodes; `node`, when it is among them, is the last. A def's own decorators
        and defaults belong outside it.
        """
        if not nodes:
            return self.functions[MODULE]
        if node is None:
            node = nodes[-1]
        memo = (id(nodes[-1]), nodes[-1] is node)
        found = self._current.get(memo)
        if found is None:
            found = self._current[memo] = self._innermost(nodes, node)
        return found

    def _innermost(self, nodes: Sequence[cst.CSTNode], node: cst.CSTNode) -> FunctionFacts:
        for index in range(len(nodes) - 1, -1, -1):
            function = nodes[index]
            if type(function) is cst.FunctionDef and function is not node:
                return self.functions[self.key_of(function, nodes[: index + 1])]
        return self.functions[MODULE]

    def add_fact(self, name: str, node: cst.CSTNode, scope_nodes: Sequence[cst.CSTNode]) -> None:
        self.current(scope_nodes, node).facts.setdefault(name, []).append(node)

    def defer_fact(self, name: str, node: cst.CSTNode, check: Callable[[], bool], scope_nodes: Sequence[cst.CSTNode]) -> None:
        """`node` shows `name` if `check()` says so, asked only when the fact is asked of its function."""
        self.current(scope_nodes, node).deferred.setdefault(name, []).append((node, check))

    def add_call(self, call: cst.Call, callee: str, stack: Sequence[cst.CSTNode], scope_nodes: Sequence[cst.CSTNode]) -> None:
        self.current(scope_nodes, call).calls.append(CallSite(call, callee, tuple(stack)))

    # ------------------------------------------------------------ queries

    def callee_key(self, call: cst.Call, stack: Sequence[cst.CSTNode]) -> Optional[str]:
        """The key of the same-module function `call` invokes: `f(...)` or `self.m(...)`."""
        func = call.func
        defined = self.defined
        if type(func) is cst.Name:
            name = func.value
            return None if name in _BUILTINS or (defined is not None and name not in defined) else name
        if type(func) is not cst.Attribute or (defined is not None and func.attr.value not in defined):
            return None
        if type(func.value) is cst.Name and func.value.value in ("self", "cls"):
            for node in reversed(stack):
                if type(node) is cst.ClassDef:
                    return f"{node.name.value}.{func.attr.value}"
        return None

    def facts_of(self, key: str, fact: str, depth: int = 1) -> List[cst.CSTNode]:
        """Nodes showing `fact` in function `key` or in functions it calls, up to `depth` calls deep."""
        found = []
        for function in self.reachable(key, depth):
            found.extend(function.shown(fact))
        return found

    def reachable(self, key: str, depth: int = 1) -> Iterator[FunctionFacts]:
        """`key` and the same-module functions it calls, breadth first, each once."""
        seen = set()
        frontier = [key]
        for _ in range(depth + 1):
            next_frontier = []
            for current in frontier:
                function = self.functions.get(current)
                if function is None or current in seen:
                    continue
                seen.add(current)
                yield function
                next_frontier.extend(site.callee for site in function.calls)
            frontier = next_frontier

    def call_sites(self, callee: str) -> List[CallSite]:
        return [site for function in self.functions.values() for site in function.calls if site.callee == callee]
