"""Where a reporter finds the text a finding's rows and columns count in.

`sources` maps a file's name to its text, and, for a notebook, `source_key(name, cell)`
to each code cell's source as written: a notebook finding's rows count within its cell.
A notebook's own text (its JSON) is there under its name too, for the formats that must
point into the file itself (`InFile`).
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from torchlint.finding import Finding, Location


def source_key(filename: str, cell: Optional[int] = None) -> str:
    """The key of a file's text, or of one notebook cell's, in a reporter's `sources` (NUL is in no file name)."""
    return filename if cell is None else f"{filename}\0cell {cell}"


class InFile:
    """Each finding's start and end in its file's own text: a notebook finding's, counted in its cell, become rows and
    columns of the notebook's JSON (`notebook.FilePositions`), where SARIF regions and GitHub annotations point."""

    def __init__(self, sources: Mapping[str, str]):
        self.sources = sources
        self._notebooks: Dict[str, object] = {}

    def span(self, finding: Finding) -> Optional[Tuple[Location, Location]]:
        """None for a notebook finding whose notebook text or cell is not to be found."""
        if finding.cell is None:
            return finding.location, finding.end_location
        if finding.filename not in self._notebooks:
            from torchlint.notebook import FilePositions

            text = self.sources.get(source_key(finding.filename))
            self._notebooks[finding.filename] = FilePositions(text) if text is not None else None
        positions = self._notebooks[finding.filename]
        if positions is None:
            return None
        start, end = positions.locate(finding.cell, finding.location), positions.locate(finding.cell, finding.end_location)
        return (start, end) if start is not None and end is not None else None
