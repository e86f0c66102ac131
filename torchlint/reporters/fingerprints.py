"""Fingerprints that let a code-review tool follow a finding across commits (SARIF, GitLab Code Quality).

Built from the rule, the file and the flagged line's text, not its row: the finding keeps its
fingerprint when lines above it move. The same rule on identical line text twice in a file
gets the occurrence number too, so that every fingerprint of a report is distinct.
A notebook finding's line is named by its cell and row.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Dict, List, Mapping, Sequence

from torchlint.finding import Finding
from torchlint.reporters.sources import source_key
from torchlint.source import split_lines


def _line_text(finding: Finding, lines_by_file: Dict[str, List[str]], sources: Mapping[str, str]) -> str:
    if finding.cell is not None or finding.filename not in sources:
        return f"{finding.cell}:{finding.location.row}"
    if finding.filename not in lines_by_file:
        lines_by_file[finding.filename] = split_lines(sources[source_key(finding.filename)])
    lines = lines_by_file[finding.filename]
    row = finding.location.row
    return lines[row - 1].strip() if 0 < row <= len(lines) else ""


def fingerprints(findings: Sequence[Finding], names: Sequence[str], sources: Mapping[str, str]) -> List[str]:
    """One hex digest per finding; `names[i]` is how the report names the file of `findings[i]`."""
    lines_by_file: Dict[str, List[str]] = {}
    occurrences: Counter = Counter()
    digests = []
    for finding, name in zip(findings, names):
        line_key = (finding.code, name, _line_text(finding, lines_by_file, sources))
        occurrences[line_key] += 1
        digests.append(hashlib.sha256("\0".join([*line_key, str(occurrences[line_key])]).encode()).hexdigest())
    return digests
