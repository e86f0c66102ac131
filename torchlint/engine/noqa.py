"""Suppression comments, flake8-compatible; the codes in them that suppress nothing; adding them.

`# noqa` and `# noqa: TL101, TL203` silence findings reported on their line;
`# torchlint: noqa` / `# torchlint: noqa: TL101` on a line of its own silence
the whole file.

A torchlint code in a line's `# noqa: ...` whose rule ran on the file and reported
nothing there is itself a finding (TL001, as ruff's RUF100), with a fix that takes the
code out (and the comment, when nothing is left). Codes of other tools (`E501`), codes
of rules not selected for the file, a bare `# noqa` and the file-level comments are
left alone: torchlint cannot know they are unused.

`add_noqa` writes the comments for `--add-noqa`.
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from torchlint.finding import Edit, Finding, Fix, Location
from torchlint.source import split_lines

_CODE = r"[A-Z]+[0-9]+"
_CODES = r"(?::\s*(?P<codes>" + _CODE + r"(?:[\s,]+" + _CODE + r")*))?"
LINE_NOQA = re.compile(r"#\s*noqa" + _CODES, re.IGNORECASE)
# On a line of its own, read within that line: `\s` reaches across line breaks, and a `^\s*` tried at each line of
# a run of blank lines would read the rest of the run each time (quadratic in the run).
_BLANK = r"[ \t\f]*"
FILE_NOQA = re.compile(
    r"(?<![^\r\n])" + _BLANK + "#" + _BLANK + "torchlint:" + _BLANK + "noqa"
    + r"(?::" + _BLANK + "(?P<codes>" + _CODE + r"(?:[ \t\f,]+" + _CODE + r")*))?" + _BLANK + r"(?=[\r\n]|\Z)",
    re.IGNORECASE,
)
_SEPARATOR = re.compile(r"[\s,]+")
_PREFIX = "TL"
# The unused-noqa rule (torchlint/rules/syntax/unused_noqa.py); the engine finds what it reports.
UNUSED_NOQA = ("TL001", "unused-noqa")

# None means "every code".
Suppressions = Optional[FrozenSet[str]]


def _codes(match) -> Suppressions:
    codes = match.group("codes")
    return frozenset(_SEPARATOR.split(codes.strip().upper())) if codes else None


def file_suppressions(text: str) -> Optional[Suppressions]:
    """What a file-level comment silences: None if there is none, else the codes (or "all")."""
    codes = set()
    for match in FILE_NOQA.finditer(text):
        found = _codes(match)
        if found is None:
            return frozenset({"*"})
        codes |= found
    return frozenset(codes) if codes else None


def line_suppressions(lines: List[str], rows: Iterable[int]) -> Dict[int, Suppressions]:
    """For each 1-based row that has a `# noqa`, the codes it silences."""
    found = {}
    for row in rows:
        if 0 < row <= len(lines) and "noqa" in lines[row - 1].lower():
            match = LINE_NOQA.search(lines[row - 1])
            if match:
                found[row] = _codes(match)
    return found


def apply(
    findings: List[Finding], text: str, filename: str = "", codes: FrozenSet[str] = frozenset(), ignore_noqa: bool = False,
) -> List[Finding]:
    """Drop the findings that a file-level or line-level comment silences; add TL001 for codes that silence nothing.

    `codes` are the rules that ran on the file; `ignore_noqa` (`--ignore-noqa`) keeps every finding.
    """
    if ignore_noqa:
        return findings
    unused_selected = UNUSED_NOQA[0] in codes and _lists_torchlint_codes(text)
    if not findings and not unused_selected:
        return findings
    whole_file = file_suppressions(text)
    lines = split_lines(text)
    by_row = line_suppressions(lines, {finding.location.row for finding in findings})
    used: Dict[int, Set[str]] = {}
    kept = []
    for finding in findings:
        if _silences(whole_file, finding.code):
            continue
        suppressed = by_row.get(finding.location.row, frozenset())
        if suppressed is None or finding.code in suppressed:
            used.setdefault(finding.location.row, set()).add(finding.code)
            continue
        kept.append(finding)
    if unused_selected:
        unused = _unused(text, lines, filename, used, codes)
        kept += [finding for finding in unused if not _silences(whole_file, finding.code)]
    return kept


def _lists_torchlint_codes(text: str) -> bool:
    """Some `# noqa: ...` of the text lists a torchlint code: only then can one be unused (TL001). Read from the text
    as a whole, before the tokenizer that tells comments from strings, which costs more than a tenth of a parse and
    is wasted on the `# noqa: E501` of most files."""
    return any(code.startswith(_PREFIX) for match in LINE_NOQA.finditer(text) for code in _listed(match))


def _silences(whole_file: Optional[Suppressions], code: str) -> bool:
    return whole_file is not None and ("*" in whole_file or code in whole_file)


def _comments(text: str) -> Iterator[Tuple[int, int, str]]:
    """(row, column from 0, text) of each comment: a `# noqa` inside a string is no comment."""
    try:
        for token in _tokens(text):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.start[1], token.string
    except (tokenize.TokenError, SyntaxError):  # the text parsed: what tokenize refuses at its end can hold no comment
        return


def _unused(text: str, lines: List[str], filename: str, used: Dict[int, Set[str]], codes: FrozenSet[str]) -> List[Finding]:
    from torchlint.catalogue import RULES

    known = {rule.code for rule in RULES}
    found = []
    for row, column, comment in _comments(text):
        match = LINE_NOQA.search(comment)
        listed = _listed(match)
        if not listed or UNUSED_NOQA[0] in listed:  # a bare `# noqa`, or one that keeps its own unused codes
            continue
        unused = [
            code for code in listed
            if code.startswith(_PREFIX) and code not in used.get(row, ()) and (code in codes or code not in known)
        ]
        if unused:
            start = Location(row, column + match.start() + 1)
            end = Location(row, column + match.end() + 1)
            unknown = [code for code in unused if code not in known]
            message = _message(unused, unknown)
            fix = Fix.safe(f"remove {', '.join(unused)} from the `noqa` comment", _without(lines[row - 1], row, column, match, unused))
            found.append(Finding(UNUSED_NOQA[0], UNUSED_NOQA[1], message, filename, start, end, fix))
    return found


def _listed(match) -> List[str]:
    """The codes of a `# noqa: ...` match, upper-cased, in the order written; [] for a bare `# noqa`."""
    if match is None or not match.group("codes"):
        return []
    return _SEPARATOR.split(match.group("codes").strip().upper())


def _message(unused: Sequence[str], unknown: Sequence[str]) -> str:
    names = ", ".join(f"`{code}`" for code in unused)
    what = "suppresses nothing on this line" if len(unused) == 1 else "suppress nothing on this line"
    why = f" ({', '.join(unknown)}: no such torchlint rule)" if unknown else ""
    return f"unused `noqa` code {names}: {what}{why}; remove it"


def _without(line: str, row: int, column: int, match, unused: Sequence[str]) -> Edit:
    """The edit that takes `unused` out of the comment: the whole directive (and the space before it) if nothing is left."""
    start, end = column + match.start(), column + match.end()
    kept = [code for code in _listed(match) if code not in unused]
    if kept:
        return Edit("# noqa: " + ", ".join(kept), Location(row, start + 1), Location(row, end + 1))
    rest = line[end:]
    if rest.strip() and not rest.lstrip().startswith("#"):
        # `# noqa: TL101 because ...`: the comment goes on as prose.
        return Edit("#", Location(row, start + 1), Location(row, end + 1))
    before = len(line[:start].rstrip())
    # The directive, the space before it and, before another comment, the space after it.
    after = end + (len(rest) - len(rest.lstrip()) if rest.strip() else 0)
    cut_from = before if not rest.strip() else start
    return Edit("", Location(row, cut_from + 1), Location(row, after + 1))


# ---------------------------------------------------------------- --add-noqa


def add_noqa(text: str, findings: Sequence[Finding]) -> Tuple[str, int]:
    """`text` with `# noqa: CODE` on every line that has a finding, keeping the codes already there; and how many
    lines changed. A finding on a line that ends inside a string (a docstring, a multi-line string) gets none: a
    comment cannot go there."""
    wanted: Dict[int, List[str]] = {}
    for finding in findings:
        if finding.cell is None:
            wanted.setdefault(finding.location.row, [])
            if finding.code not in wanted[finding.location.row]:
                wanted[finding.location.row].append(finding.code)
    if not wanted:
        return text, 0
    ends_in_string = _rows_ending_in_strings(text)
    pieces = re.split(r"(\r\n|\r|\n)", text)
    changed = 0
    for row, codes in wanted.items():
        index = 2 * (row - 1)
        if index >= len(pieces) or row in ends_in_string:
            continue
        line = pieces[index]
        new = _with_codes(line, codes)
        if new != line:
            pieces[index] = new
            changed += 1
    return "".join(pieces), changed


def _with_codes(line: str, codes: Sequence[str]) -> str:
    match = LINE_NOQA.search(line)
    if match is None:
        return line.rstrip() + "  # noqa: " + ", ".join(codes) + line[len(line.rstrip()):]
    if not match.group("codes"):  # a bare `# noqa` already silences everything
        return line
    listed = _listed(match)
    merged = listed + [code for code in codes if code not in listed]
    return line[:match.start()] + "# noqa: " + ", ".join(merged) + line[match.end():]


# Python 3.12 tokenizes an f-string as its parts, between these two.
_FSTRING_START, _FSTRING_END = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)


def _rows_ending_in_strings(text: str) -> FrozenSet[int]:
    rows: Set[int] = set()
    opened: List[int] = []
    try:
        for token in _tokens(text):
            if token.type == tokenize.STRING:
                rows.update(range(token.start[0], token.end[0]))
            elif token.type == _FSTRING_START:
                opened.append(token.start[0])
            elif token.type == _FSTRING_END and opened:
                rows.update(range(opened.pop(), token.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return frozenset(rows)


def _tokens(text: str) -> Iterator[tokenize.TokenInfo]:
    # Universal newlines: rows then break where `split_lines` breaks them (a lone CR too).
    return tokenize.generate_tokens(io.StringIO(text, newline=None).readline)
