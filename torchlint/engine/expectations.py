"""Inline expectations: `# expect: TL101:9, TL202:5` at the end of a line.

Fixtures, rule examples and docs state the findings they must produce on the
line that produces them (code and 1-based column), pyflakes/bugbear style, so a
test compares exact sets and cannot pass by accident.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Tuple

# Searched for, so it starts at the `#`: blanks in front of it would be read again from each blank of a run.
EXPECT_COMMENT = re.compile(r"#\s*expect:\s*(?P<items>TL\d{3}:\d+(?:\s*,\s*TL\d{3}:\d+)*)\s*$")

Expectation = Tuple[int, int, str]  # row, column, code


def expected_findings(text: str) -> List[Expectation]:
    """Every `(row, column, code)` the text declares."""
    found = []
    for row, line in enumerate(text.splitlines(), start=1):
        match = EXPECT_COMMENT.search(line)
        if not match:
            continue
        for item in match.group("items").split(","):
            code, _, column = item.strip().partition(":")
            found.append((row, int(column), code))
    return sorted(found)


def actual_findings(findings: Iterable, codes=None) -> List[Expectation]:
    return sorted(
        (f.location.row, f.location.column, f.code)
        for f in findings
        if codes is None or f.code in codes
    )
