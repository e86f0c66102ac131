"""The `json-lines` format: one JSON object per finding and line, as in the `json` format, for streaming tools."""

from __future__ import annotations

import json
from typing import List, Mapping

from torchlint.finding import Finding


def render(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    return "".join(json.dumps(finding.as_json(), ensure_ascii=False) + "\n" for finding in findings)
