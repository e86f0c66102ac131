"""Fact recognizers: the registry of what a function does, noted in the call graph during the walk.

Each recognizer looks at one node type and returns the name of the fact the node
shows (or None). The engine runs all of them in every file where a rule that reads
the call graph runs (`Rule.uses_callgraph`), so one rule's selection never changes
what another rule can see. The engine knows nothing of torch: the recognizers that
do live in `torchlint/analysis/facts.py` and the families' `rules/<family>/_facts.py`,
registered with `recognizes`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional

import libcst as cst

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

Recognizer = Callable[[cst.CSTNode, "FileContext"], Optional[str]]
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
