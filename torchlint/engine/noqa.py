"""Suppression comments, flake8-compatible.

`# noqa` and `# noqa: TL101, TL203` silence findings reported on their line;
`# torchlint: noqa` / `# torchlint: noqa: TL101` on a line of its own silence
the whole file.
"""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, Iterable, List, Optional

from torchlint.finding import Finding
from torchlint.source import split_lines

_CODES = r"(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?"
LINE_NOQA = re.compile(r"#\s*noqa" + _CODES, re.IGNORECASE)
FILE_NOQA = re.compile(r"^\s*#\s*torchlint:\s*noqa" + _CODES + r"\s*$", re.IGNORECASE | re.MULTILINE)

# None means "every code".
Suppressions = Optional[FrozenSet[str]]


def _codes(match) -> Suppressions:
    codes = match.group("codes")
    return frozenset(re.split(r"[\s,]+", codes.strip().upper())) if codes else None


def file_suppressions(text: str) -> Optional[Suppressions]:
    """What a file-level comment silences: None if there is none, else the codes (or "all")."""
    codes = set()
    for match in FILE_NOQA.finditer(text):
        found = _codes(match)
        if found is None:
            return frozenset({"*"})
        codes |= found
    return frozenset(codes) if codes else None


def line_suppressions(lines: List[str], rows: Iterable[int]) -> Dict[int, Suppressions]:
    """For each 1-based row that has a `# noqa`, the codes it silences."""
    found = {}
    for row in rows:
        if 0 < row <= len(lines) and "noqa" in lines[row - 1].lower():
            match = LINE_NOQA.search(lines[row - 1])
            if match:
                found[row] = _codes(match)
    return found


def apply(findings: List[Finding], text: str) -> List[Finding]:
    """Drop the findings that a file-level or line-level comment silences."""
    if not findings:
        return findings
    whole_file = file_suppressions(text)
    by_row = line_suppressions(split_lines(text), {finding.location.row for finding in findings})
    kept = []
    for finding in findings:
        if whole_file is not None and ("*" in whole_file or finding.code in whole_file):
            continue
        codes = by_row.get(finding.location.row, frozenset())
        if codes is None or finding.code in codes:
            continue
        kept.append(finding)
    return kept
