"""Reporters turn the sorted findings of a run into text; they never decide anything."""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping

from torchlint.finding import Finding
from torchlint.reporters import github, json_report, sarif, text

# name -> render(findings, sources by filename, colour) -> str
Reporter = Callable[[List[Finding], Mapping[str, str], bool], str]

REPORTERS: Dict[str, Reporter] = {
    "full": text.render_full,
    "concise": text.render_concise,
    "json": json_report.render,
    "sarif": sarif.render,
    "github": github.render,
}
