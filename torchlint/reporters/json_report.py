from __future__ import annotations

import json
from typing import List, Mapping

from torchlint.finding import Finding


def render(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    return json.dumps([finding.as_json() for finding in findings], indent=2, ensure_ascii=False) + "\n"
