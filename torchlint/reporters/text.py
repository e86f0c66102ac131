"""The `full`, `concise` and `grouped` text formats.

`full` quotes the flagged line under each finding (a notebook finding's line from its
cell) and shows a fix as the lines it changes, numbered before and after, as ruff does.
`grouped`, as ruff's, names each file once and lists its findings under it.
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Mapping

from torchlint.finding import Edit, Finding, Fix, Location
from torchlint.reporters.sources import source_key
from torchlint.source import split_lines

_BOLD, _UNDERLINE, _RED, _GREEN, _CYAN, _RESET = "\x1b[1m", "\x1b[4m", "\x1b[31m", "\x1b[32m", "\x1b[36m", "\x1b[0m"
# After the code: `[*]` a safe fix (`--fix` applies it), `[~]` an unsafe one (`--unsafe-fixes` too).
FIX_MARKERS = {"safe": " [*]", "unsafe": " [~]"}


def _row(finding: Finding) -> str:
    return f"cell {finding.cell}:{finding.location.row}" if finding.cell is not None else str(finding.location.row)


def _described(finding: Finding, colour: bool) -> str:
    """`CODE [*] message`: the code, the fix marker and the message."""
    marker = FIX_MARKERS.get(finding.fix.applicability, "") if finding.fix is not None else ""
    code = f"{_RED}{_BOLD}{finding.code}{_RESET}" if colour else finding.code
    return f"{code}{marker} {finding.message}"


def header(finding: Finding, colour: bool = False) -> str:
    place = f"{finding.filename}:{_row(finding)}:{finding.location.column}:"
    return f"{_BOLD}{place}{_RESET} " + _described(finding, colour) if colour else f"{place} " + _described(finding, colour)


def render_grouped(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    """Each file's name, then one `row:column CODE message` line a finding, rows and columns aligned, and a blank line."""
    blocks = []
    for filename, in_file in itertools.groupby(findings, key=lambda finding: finding.filename):
        in_file = list(in_file)
        row_width = max(len(_row(finding)) for finding in in_file)
        column_width = max(len(str(finding.location.column)) for finding in in_file)
        name = f"{_BOLD}{_UNDERLINE}{filename}{_RESET}" if colour else filename
        lines = [f"{name}:"] + [
            f"  {_row(finding):>{row_width}}:{finding.location.column:<{column_width}} {_described(finding, colour)}"
            for finding in in_file
        ]
        blocks.append("\n".join(lines) + "\n\n")
    return "".join(blocks)


def render_concise(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    return "".join(header(finding, colour) + "\n" for finding in findings)


def render_full(findings: List[Finding], sources: Mapping[str, str], colour: bool) -> str:
    blocks = []
    lines_by_key: Dict[str, List[str]] = {}
    for finding in findings:
        block = [header(finding, colour)]
        key = source_key(finding.filename, finding.cell)
        if key in sources and key not in lines_by_key:
            lines_by_key[key] = split_lines(sources[key])
        lines = lines_by_key.get(key)
        if lines is not None:
            block += _snippet(finding, lines, colour)
        if finding.fix is not None:
            note = f"= fix ({finding.fix.applicability}): {finding.fix.message}"
            block.append("  " + (f"{_CYAN}{note}{_RESET}" if colour else note))
            if lines is not None:
                block += _fix_diff(finding.fix, lines, colour)
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


def _fix_diff(fix: Fix, lines: List[str], colour: bool) -> List[str]:
    """The lines the fix changes: `old-row new-row |-old` and `|+new`, as ruff prints a fix."""
    # Imported here, as difflib is: most runs show no fix. Only `edits` is needed: `torchlint.fixes` loads the rest of
    # the fixing machinery (and libcst) on demand.
    import difflib

    from torchlint.fixes.edits import apply_fixes

    rows = [edit.location.row for edit in fix.edits] + [edit.end_location.row for edit in fix.edits]
    first, last = min(rows, default=0), max(rows, default=0)
    if first < 1 or last > len(lines):
        return []
    before = lines[first - 1:last]
    # The fix applied to the rows it touches alone, renumbered from 1: the rest of the file cannot change them.
    shifted = Fix(fix.applicability, fix.message, tuple(
        Edit(edit.content, Location(edit.location.row - first + 1, edit.location.column),
             Location(edit.end_location.row - first + 1, edit.end_location.column))
        for edit in fix.edits
    ))
    applied = apply_fixes("\n".join(before), [shifted])
    if not applied.applied:
        return []
    after = split_lines(applied.text)
    width = len(str(first + max(len(before), len(after))))
    out = []
    for tag, old_start, old_end, new_start, new_end in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for index in range(old_start, old_end):
            out.append(_diff_line(f"{first + index:>{width}} {'':>{width}} |-", before[index], _RED, colour))
        for index in range(new_start, new_end):
            out.append(_diff_line(f"{'':>{width}} {first + index:>{width}} |+", after[index], _GREEN, colour))
    return out


def _diff_line(gutter: str, line: str, tint: str, colour: bool) -> str:
    text = f"    {gutter}{line.expandtabs(1)}"
    return f"{tint}{text}{_RESET}" if colour else text
