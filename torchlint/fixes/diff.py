"""The unified diff `--diff` prints: what `--fix` would change, nothing written.

A notebook's diff is one per code cell that changes, headed `--- name.ipynb:cell N`, as ruff
prints it: a hunk of the notebook's JSON would show escaped strings, not code.
"""

from __future__ import annotations

import difflib
import os
import re
from typing import List

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _lines(text: str) -> List[str]:
    """Lines with their own endings (str.splitlines would also break on form feeds)."""
    return _LINE.findall(text)


def display_name(filename: str) -> str:
    """The name relative to the current folder when the file is under it, as given otherwise."""
    if filename == "-" or not os.path.isabs(filename):
        return filename
    relative = os.path.relpath(filename)
    return filename if relative.startswith("..") else relative


def unified_diff(before: str, after: str, filename: str) -> str:
    name = display_name(filename)
    if filename.endswith(".ipynb"):
        from torchlint.notebook import cell_sources

        cells_before, cells_after = cell_sources(before), cell_sources(after)
        if cells_before and cells_before.keys() == cells_after.keys():
            return "".join(
                _diff(cells_before[number], cells_after[number], f"{name}:cell {number}") for number in sorted(cells_before)
            )
    return _diff(before, after, name)


def _diff(before: str, after: str, name: str) -> str:
    out = []
    for line in difflib.unified_diff(_lines(before), _lines(after), fromfile=name, tofile=name):
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)
