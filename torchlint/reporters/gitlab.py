"""The `gitlab` format: a GitLab Code Quality report, the JSON array a job's `artifacts:reports:codequality` reads.

Each issue has the fields GitLab documents as required: `description`, `check_name`,
`fingerprint` (distinct within the report: GitLab shows one issue per fingerprint),
`severity` (one of info, minor, major, critical, blocker) and `location` with `path`
relative to the project and `lines.begin`. Paths are relative to `CI_PROJECT_DIR`
when GitLab sets it, else to the folder torchlint runs in. A notebook finding names
its cell in the description and points at the notebook's first line: its rows count
within the cell.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Mapping

from torchlint.finding import Finding
from torchlint.reporters.fingerprints import fingerprints

# A file torchlint cannot read hides its findings: ranked above the others.
_SEVERITY = {"TL000": "major"}


def _path(filename: str, base: str) -> str:
    absolute = os.path.abspath(filename)
    relative = os.path.relpath(absolute, base)
    return Path(absolute if relative.startswith(os.pardir) else relative).as_posix()


def issue(finding: Finding, path: str, fingerprint: str) -> dict:
    description = f"{finding.code} {finding.message}"
    lines = {"begin": finding.location.row, "end": finding.end_location.row}
    if finding.cell is not None:
        description = f"cell {finding.cell}:{finding.location.row}:{finding.location.column}: {description}"
        lines = {"begin": 1, "end": 1}
    return {
        "description": description,
        "check_name": finding.code,
        "fingerprint": fingerprint,
        "severity": _SEVERITY.get(finding.code, "minor"),
        "location": {"path": path, "lines": lines},
    }


def render(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    base = os.environ.get("CI_PROJECT_DIR") or os.getcwd()
    paths = [_path(finding.filename, base) for finding in findings]
    issues = [issue(*item) for item in zip(findings, paths, fingerprints(findings, paths, sources))]
    return json.dumps(issues, indent=2, ensure_ascii=False) + "\n"
