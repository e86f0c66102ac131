"""The `github` format: GitHub Actions workflow commands, which the runner turns into annotations.

`::warning file=F,line=L,col=C,endLine=EL,endColumn=EC,title=TL101::message`.
The message escapes `%`, CR and LF; property values also escape `:` and `,`,
which would otherwise end the value. A notebook finding names its cell (and its row
and column there) in the message, and annotates the line of the notebook's JSON that
holds that cell line (`reporters/sources.InFile`); only when that line cannot be
found does it annotate the file as a whole.
"""

from __future__ import annotations

from typing import List, Mapping

from torchlint.finding import Finding
from torchlint.reporters.sources import InFile


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(finding: Finding, in_file: InFile) -> str:
    properties: dict = {"file": finding.filename}
    message = finding.message
    span = in_file.span(finding)
    if span is not None:
        start, end = span
        properties.update(line=start.row, col=start.column, endLine=end.row, endColumn=end.column)
    if finding.cell is not None:
        message = f"cell {finding.cell}:{finding.location.row}:{finding.location.column}: {message}"
    properties["title"] = finding.code
    listed = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties.items())
    return f"::warning {listed}::{_escape_data(message)}"


def render(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    in_file = InFile(sources)
    return "".join(command(finding, in_file) + "\n" for finding in findings)
