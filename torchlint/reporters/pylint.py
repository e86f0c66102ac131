"""The `pylint` format: pylint's `parseable` lines, `path:row: [CODE(name), ] message`, which CI parsers of pylint read.

A notebook finding is placed on the notebook's first line, its message naming the cell:
its rows count within the cell, not within the notebook's JSON.
"""

from __future__ import annotations

from typing import List, Mapping

from torchlint.finding import Finding


def line(finding: Finding) -> str:
    row, message = finding.location.row, finding.message
    if finding.cell is not None:
        row, message = 1, f"cell {finding.cell}:{finding.location.row}:{finding.location.column}: {message}"
    return f"{finding.filename}:{row}: [{finding.code}({finding.name}), ] {message}"


def render(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    return "".join(line(finding) + "\n" for finding in findings)
