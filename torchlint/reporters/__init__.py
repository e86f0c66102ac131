"""Reporters turn the sorted findings of a run into text; they never decide anything.

Each gets the findings, the texts they quote (`reporters/sources.py`) and whether to colour.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping

from torchlint.finding import Finding
from torchlint.reporters.sources import source_key

__all__ = ["REPORTERS", "Reporter", "source_key"]

# name -> render(findings, sources by filename, colour) -> str
Reporter = Callable[[List[Finding], Mapping[str, str], bool], str]


def _reporters() -> Dict[str, Reporter]:
    from torchlint.reporters import github, gitlab, json_lines, json_report, junit, pylint, sarif, text

    return {
        "full": text.render_full,
        "concise": text.render_concise,
        "grouped": text.render_grouped,
        "json": json_report.render,
        "json-lines": json_lines.render,
        "sarif": sarif.render,
        "github": github.render,
        "gitlab": gitlab.render,
        "junit": junit.render,
        "pylint": pylint.render,
    }


REPORTERS: Dict[str, Reporter] = _reporters()
