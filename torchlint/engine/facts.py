"""Fact recognizers: the registry of what a function does, noted in the call graph during the walk.

Each recognizer looks at one node type and returns the name of the fact the node
shows (or None). The engine runs all of them in every file where a rule that reads
the call graph runs (`Rule.uses_callgraph`), so one rule's selection never changes
what another rule can see. The engine knows nothing of torch: the recognizers that
do live in `torchlint/analysis/facts.py` and the families' `rules/<family>/_facts.py`,
registered with `recognizes`. A costly check whose fact few questions ask is registered with
`recognizes_when_asked` instead: the walk keeps its nodes, and the check runs when the fact is
asked of the function holding them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

Recognizer = Callable[[cst.CSTNode, "FileContext"], Optional[str]]
# A deferred recognizer (`recognizes_when_asked`): whether the node, inside the nodes of `stack`, shows its fact.
DeferredCheck = Callable[[cst.CSTNode, "FileContext", Tuple[cst.CSTNode, ...]], bool]
RECOGNIZERS: Dict[type, List[Recognizer]] = {}


def recognizes(
    node_type: type, call_parts: Optional[FrozenSet[str]] = None,
    call_heads: Optional[Callable[["FileContext"], FrozenSet[str]]] = None,
) -> Callable[[Recognizer], Recognizer]:
    """Register a recognizer of `node_type`. For calls, `call_parts` as a rule's (`Rule.call_parts`): the engine then
    runs it only on calls whose callee holds one of those names; or `call_heads`, asked once per file: the first names
    of the callees it can recognize (`f` and `m.g` for the calls of what a file's imports bind)."""

    def register(recognizer: Recognizer) -> Recognizer:
        recognizer.call_parts = call_parts
        recognizer.call_heads = call_heads
        RECOGNIZERS.setdefault(node_type, []).append(recognizer)
        return recognizer

    return register


def recognizes_when_asked(node_type: type, shows: str) -> Callable[[DeferredCheck], DeferredCheck]:
    """Register a check of `node_type` nodes for the fact `shows` that runs only when the fact is asked of the
    function holding the node (`FunctionFacts.shown`, `CallGraph.facts_of`), not during the walk: for a check that
    follows values through the file and the project (costly at every loop of a library) when few functions are ever
    asked (those a module-level statement calls). The walk keeps the node with the nodes around it, which the check
    receives as `stack` (outermost first, the node last), since by then the walk is elsewhere."""

    def register(check: DeferredCheck) -> DeferredCheck:
        def defer(node: cst.CSTNode, ctx: "FileContext") -> None:
            stack = tuple(ctx.stack)
            ctx.callgraph.defer_fact(shows, node, lambda: check(node, ctx, stack), ctx.scope_nodes)
            return None

        defer.__name__ = check.__name__
        recognizes(node_type)(defer)
        return check

    return register
