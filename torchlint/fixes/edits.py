"""Turning a round's fixes into new text.

Edits address the text by 1-based row and column (end exclusive), counted the way
libcst counts them, on the text as it is on disk (its own line endings). Fixes are
taken in the order given; a fix whose edits touch an edit already taken this round
waits for the next round, when it is computed again on the new text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

from torchlint.finding import Fix, Location

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class EditError(ValueError):
    """An edit that cannot be applied to the text: a rule's bug."""


class _Lines:
    """Offsets of the text's lines, and the line break that ends each one."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        self.breaks: List[str] = []
        for match in _LINE_BREAK.finditer(text):
            self.breaks.append(match.group())
            self.starts.append(match.end())

    def offset(self, location: Location) -> int:
        row, column = location.row, location.column
        if not 1 <= row <= len(self.starts):
            raise EditError(f"row {row} is outside the file ({len(self.starts)} lines)")
        start = self.starts[row - 1]
        end = self.starts[row] - len(self.breaks[row - 1]) if row < len(self.starts) else len(self.text)
        # The column just past the last character addresses the end of the line.
        if not 1 <= column <= end - start + 1:
            raise EditError(f"column {column} is outside row {row} ({end - start} characters)")
        return start + column - 1

    def newline(self, row: int) -> str:
        """The line break of `row`, so that inserted lines match their neighbours (CRLF stays CRLF)."""
        if row <= len(self.breaks):
            return self.breaks[row - 1]
        return self.breaks[-1] if self.breaks else "\n"


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    content: str


@dataclass
class Applied:
    text: str
    # Positions (in the given sequence) of the fixes applied, and of those rejected as malformed with why.
    applied: List[int] = field(default_factory=list)
    malformed: List[Tuple[int, str]] = field(default_factory=list)


def _spans(fix: Fix, lines: _Lines) -> List[_Span]:
    if not fix.edits:
        raise EditError("the fix has no edits")
    spans = []
    for edit in fix.edits:
        start, end = lines.offset(edit.location), lines.offset(edit.end_location)
        if end < start:
            raise EditError(f"an edit ends ({_where(edit.end_location)}) before it starts ({_where(edit.location)})")
        content = _LINE_BREAK.sub(lines.newline(edit.location.row), edit.content)
        spans.append(_Span(start, end, content))
    spans.sort(key=lambda span: (span.start, span.end))
    for before, after in zip(spans, spans[1:]):
        if after.start < before.end:
            raise EditError("two edits of the fix overlap")
    return spans


def _where(location: Location) -> str:
    return f"{location.row}:{location.column}"


def _touches(span: _Span, other: _Span) -> bool:
    # Edits that only meet at a point still conflict: which goes first would be a guess.
    return span.start <= other.end and other.start <= span.end


def apply_fixes(text: str, fixes: Sequence[Fix]) -> Applied:
    lines = _Lines(text)
    result = Applied(text)
    taken: List[_Span] = []
    for index, fix in enumerate(fixes):
        try:
            spans = _spans(fix, lines)
        except EditError as error:
            result.malformed.append((index, str(error)))
            continue
        # A fix that would leave the text as it is changes nothing and must not count as applied.
        if all(text[span.start:span.end] == span.content for span in spans):
            continue
        if any(_touches(span, other) for span in spans for other in taken):
            continue
        taken.extend(spans)
        result.applied.append(index)
    pieces = []
    position = 0
    for span in sorted(taken, key=lambda span: (span.start, span.end)):
        pieces += [text[position:span.start], span.content]
        position = span.end
    pieces.append(text[position:])
    result.text = "".join(pieces)
    return result
