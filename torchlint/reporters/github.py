"""The `github` format: GitHub Actions workflow commands, which the runner turns into annotations.

`::warning file=F,line=L,col=C,endLine=EL,endColumn=EC,title=TL101::message`.
The message escapes `%`, CR and LF; property values also escape `:` and `,`,
which would otherwise end the value. A notebook finding names its cell in the
message and annotates the file as a whole: its rows count within the cell, not
within the notebook's JSON.
"""

from __future__ import annotations

from typing import List, Mapping

from torchlint.finding import Finding


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(finding: Finding) -> str:
    properties = {"file": finding.filename}
    message = finding.message
    if finding.cell is None:
        properties.update(
            line=finding.location.row,
            col=finding.location.column,
            endLine=finding.end_location.row,
            endColumn=finding.end_location.column,
        )
    else:
        message = f"cell {finding.cell}:{finding.location.row}:{finding.location.column}: {message}"
    properties["title"] = finding.code
    listed = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties.items())
    return f"::warning {listed}::{_escape_data(message)}"


def render(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    return "".join(command(finding) + "\n" for finding in findings)
