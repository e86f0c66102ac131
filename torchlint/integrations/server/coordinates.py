"""Positions between the engine and the client, and text changes as LSP text edits.

The engine counts rows and columns from 1, columns in characters (code points) of
the text with its own line endings. LSP counts lines and characters from 0, breaks
lines only at `\\r\\n`, `\\r` and `\\n` (not at the form feeds and separators
`str.splitlines` also breaks at), and counts characters in the code units the
client and server agreed on: UTF-16 unless the client offers another, so a
character outside the Basic Multilingual Plane (an emoji) counts 2.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Callable, List

from lsprotocol import types

from torchlint.finding import Location
from torchlint.source import split_lines

# How many code units a string takes in the agreed encoding (pygls's PositionCodec.client_num_units).
Units = Callable[[str], int]

_LINE_BREAK_KEPT = re.compile(r"(\r\n|\r|\n)")


def lines_with_endings(text: str) -> List[str]:
    """The lines LSP counts, each with its own line break (the last one may have none)."""
    pieces = _LINE_BREAK_KEPT.split(text)
    lines = [line + ending for line, ending in zip(pieces[0::2], pieces[1::2])]
    return lines + [pieces[-1]] if pieces[-1] else lines


class Lines:
    """One text, addressed both ways: the engine's locations and the client's positions."""

    def __init__(self, text: str, units: Units):
        self.text = text
        self.lines = split_lines(text)
        self.units = units

    def position(self, location: Location) -> types.Position:
        row = min(max(location.row, 1), len(self.lines))
        line = self.lines[row - 1]
        column = min(max(location.column, 1), len(line) + 1)
        return types.Position(line=row - 1, character=self.units(line[:column - 1]))

    def range(self, start: Location, end: Location) -> types.Range:
        return types.Range(start=self.position(start), end=self.position(end))

    def location(self, position: types.Position) -> Location:
        """The engine's location of a client position; clamped to the text, and a position inside a
        character (half of a UTF-16 pair) stands for the character after it."""
        if position.line >= len(self.lines):
            return Location(len(self.lines), len(self.lines[-1]) + 1)
        row = max(position.line, 0)
        line = self.lines[row]
        counted = 0
        for index, char in enumerate(line):
            if counted >= position.character:
                return Location(row + 1, index + 1)
            counted += self.units(char)
        return Location(row + 1, len(line) + 1)

    def line_start(self, index: int) -> types.Position:
        """Where line `index` (from 0) starts; the end of the text for the line after the last."""
        if index < len(self.lines):
            return types.Position(line=index, character=0)
        return types.Position(line=len(self.lines) - 1, character=self.units(self.lines[-1]))

    def edits_to(self, new_text: str) -> List[types.TextEdit]:
        """Text edits that turn this text into `new_text`, one per block of changed lines.

        Whole lines, so that an editor keeps its cursor, folds and marks on the lines a fix leaves alone.
        """
        old, new = lines_with_endings(self.text), lines_with_endings(new_text)
        # The common head and tail go first: a fix changes a few lines, and SequenceMatcher is slow on many.
        head = 0
        while head < min(len(old), len(new)) and old[head] == new[head]:
            head += 1
        tail = 0
        while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
            tail += 1
        matcher = SequenceMatcher(None, old[head:len(old) - tail], new[head:len(new) - tail], autojunk=False)
        edits = []
        for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
            if tag == "equal":
                continue
            changed = types.Range(start=self.line_start(head + old_start), end=self.line_start(head + old_end))
            edits.append(types.TextEdit(range=changed, new_text="".join(new[head + new_start:head + new_end])))
        return edits
