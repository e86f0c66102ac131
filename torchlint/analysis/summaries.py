"""What the functions of an imported project file do: its call graph with the engine's facts.

A rule that meets a call of a function imported from a project file (`from data import
train_epoch`, found by the value model) asks `function_facts(origin)`: the same facts
("starts-workers", "clears-grad", ...) the engine notes while walking a linted file,
for the imported file, built by one walk of it on first use and kept with its parsed
module (`analysis/project.py`), so a second importer reads them for free.

The walk is a plain one, not the engine's: the engine's walker lives in the runner,
which imports the rules, and the rules import this module; and an imported file
needs the recognizers only, not the rules' dispatch the runner's walk is tuned for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Set, Tuple

import libcst as cst

from torchlint.engine.callgraph import CallGraph
# Filled by analysis/facts.py and the families' _facts.py, which the rules asking these questions import.
from torchlint.engine.facts import RECOGNIZERS
from torchlint.engine.scopes import SCOPE_TYPES
from torchlint.engine.walk import walk

if TYPE_CHECKING:
    from torchlint.analysis.values import Origin
    from torchlint.engine.context import FileContext


# The files being summarised now: a file that imports one that imports it back sees no facts the second time.
_IN_PROGRESS: Set[int] = set()


class _Summary:
    """One imported file's call graph with facts (`ctx.shared(_Summary)`)."""

    def __init__(self, ctx: "FileContext"):
        graph = ctx.callgraph = CallGraph()
        stack, scope_nodes = ctx.stack, ctx.scope_nodes

        def on_visit(node: cst.CSTNode) -> bool:
            stack.append(node)
            if type(node) in SCOPE_TYPES:
                scope_nodes.append(node)
                if type(node) is cst.FunctionDef:
                    graph.key_of(node, scope_nodes)
            for recognizer in RECOGNIZERS.get(type(node), ()):
                fact = recognizer(node, ctx)
                if fact:
                    graph.add_fact(fact, node, scope_nodes)
            if type(node) is cst.Call:
                callee = graph.callee_key(node, stack)
                if callee:
                    graph.add_call(node, callee, stack, scope_nodes)
            return True

        def on_leave(node: cst.CSTNode) -> None:
            stack.pop()
            if scope_nodes and scope_nodes[-1] is node:
                scope_nodes.pop()

        self.graph = graph
        _IN_PROGRESS.add(id(ctx))
        try:
            walk(ctx.module, on_visit, on_leave)
        finally:
            _IN_PROGRESS.discard(id(ctx))


def function_facts(function: "Origin", fact: str, depth: int = 8) -> List[cst.CSTNode]:
    """The nodes showing `fact` in the function `function` (an origin in an imported project file) or in the
    functions of that file it calls, `depth` calls deep; [] for a function of the linted file itself."""
    ctx = function.place.context
    if type(function.node) is not cst.FunctionDef or id(ctx) in _IN_PROGRESS:
        return []
    summary = ctx.shared(_Summary)
    key = summary.graph.key_of(function.node, function.place.scopes + (function.node,))
    return summary.graph.facts_of(key, fact, depth)


def imported_function(origins: List["Origin"], ctx: "FileContext") -> Optional[Tuple["Origin", str]]:
    """The function of another project file among `origins` (what a callee name may be), and its name."""
    for origin in origins:
        if type(origin.node) is cst.FunctionDef and origin.place.context is not ctx:
            return origin, origin.node.name.value
    return None
