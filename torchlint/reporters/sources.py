"""Where a reporter finds the text a finding's rows and columns count in.

`sources` maps a file's name to its text, and, for a notebook, `source_key(name, cell)`
to each code cell's source as written: a notebook finding's rows count within its cell.
"""

from __future__ import annotations

from typing import Optional


def source_key(filename: str, cell: Optional[int] = None) -> str:
    """The key of a file's text, or of one notebook cell's, in a reporter's `sources` (NUL is in no file name)."""
    return filename if cell is None else f"{filename}\0cell {cell}"
