"""The `full` and `concise` text formats."""

from __future__ import annotations

from typing import List, Mapping

from torchlint.finding import Finding
from torchlint.source import split_lines

_BOLD, _RED, _CYAN, _DIM, _RESET = "\x1b[1m", "\x1b[31m", "\x1b[36m", "\x1b[2m", "\x1b[0m"
# After the code: `[*]` a safe fix (`--fix` applies it), `[~]` an unsafe one (`--unsafe-fixes` too).
FIX_MARKERS = {"safe": " [*]", "unsafe": " [~]"}


def header(finding: Finding, colour: bool = False) -> str:
    row = f"cell {finding.cell}:{finding.location.row}" if finding.cell is not None else str(finding.location.row)
    place = f"{finding.filename}:{row}:{finding.location.column}:"
    marker = FIX_MARKERS.get(finding.fix.applicability, "") if finding.fix is not None else ""
    if colour:
        return f"{_BOLD}{place}{_RESET} {_RED}{_BOLD}{finding.code}{_RESET}{marker} {finding.message}"
    return f"{place} {finding.code}{marker} {finding.message}"


def render_concise(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    return "".join(header(finding, colour) + "\n" for finding in findings)


def render_full(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    blocks = []
    lines_by_file = {}
    for finding in findings:
        block = [header(finding, colour)]
        text = sources.get(finding.filename)
        if text is not None and finding.cell is None:
            lines = lines_by_file.get(finding.filename)
            if lines is None:
                lines = lines_by_file[finding.filename] = split_lines(text)
            block += _snippet(finding, lines, colour)
        if finding.fix is not None:
            note = f"= fix ({finding.fix.applicability}): {finding.fix.message}"
            block.append("  " + (f"{_CYAN}{note}{_RESET}" if colour else note))
        blocks.append("\n".join(block) + "\n")
    return "\n".join(blocks)


def _snippet(finding: Finding, lines: List[str], colour: bool) -> List[str]:
    row = finding.location.row
    if not 0 < row <= len(lines):
        return []
    line = lines[row - 1].expandtabs(1)
    start = finding.location.column - 1
    end = finding.end_location.column - 1 if finding.end_location.row == row else len(line)
    width = max(1, end - start)
    gutter = " " * len(str(row))
    caret = " " * start + "^" * width
    if colour:
        caret = f"{_RED}{caret}{_RESET}"
    return [f"{gutter} |", f"{row} | {line}", f"{gutter} | {caret}"]
