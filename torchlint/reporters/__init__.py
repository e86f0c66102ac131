"""Reporters turn the sorted findings of a run into text; they never decide anything.

`sources` maps a file's name to its text, and, for a notebook, `source_key(name, cell)`
to each code cell's source as written: a notebook finding's rows count within its cell.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional

from torchlint.finding import Finding

# name -> render(findings, sources by filename, colour) -> str
Reporter = Callable[[List[Finding], Mapping[str, str], bool], str]


def source_key(filename: str, cell: Optional[int] = None) -> str:
    """The key of a file's text, or of one notebook cell's, in a reporter's `sources` (NUL is in no file name)."""
    return filename if cell is None else f"{filename}\0cell {cell}"


def source_of(finding: Finding, sources: Mapping[str, str]) -> Optional[str]:
    """The text a finding's rows and columns count in: its file's, or its notebook cell's."""
    return sources.get(source_key(finding.filename, finding.cell))


def _reporters() -> Dict[str, Reporter]:
    from torchlint.reporters import github, gitlab, json_lines, json_report, junit, pylint, sarif, text

    return {
        "full": text.render_full,
        "concise": text.render_concise,
        "json": json_report.render,
        "json-lines": json_lines.render,
        "sarif": sarif.render,
        "github": github.render,
        "gitlab": gitlab.render,
        "junit": junit.render,
        "pylint": pylint.render,
    }


REPORTERS: Dict[str, Reporter] = _reporters()
