"""A file's text and what the prefilter reads from it without parsing: words, attribute names, defined names,
the modules it imports.

Read once per file, each kind of evidence on first use: by the rules' triggers
(torchlint/rules/triggers.py) to decide which rules run, and by `FileContext`
(`may_name`, the call graph's defined names) while they do.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Dict, FrozenSet, Iterator, Optional

_WORD = re.compile(r"\w+")
# For ASCII text, where `\w` is `[A-Za-z0-9_]`: every other character becomes a space, and `str.split` then gives
# the words twice as fast as the regex.
_ASCII_SEPARATORS = str.maketrans({chr(code): " " for code in range(128) if not (chr(code).isalnum() or chr(code) == "_")})
# A dot, then whitespace or line continuations, then the name, or the `#` of a comment (inside brackets a name may
# follow on a later line: `_after_comments`). Every pattern here matches in time linear in the text: no part of
# one can match the same characters in two ways (a comment as `#[^\r\n]*` repeated could split a banner line of
# `#`s in exponentially many ways), and no repetition crosses into what the next attempt scans again.
_ATTRIBUTE = re.compile(r"\.[ \t\f\r\n\\]*(\w+)")
# The same dot, then the `#` of a comment: the name is the first one after the comments (`_after_comments`).
_ATTRIBUTE_COMMENT = re.compile(r"\.[ \t\f\r\n\\]*#")
_BLANKS = re.compile(r"[ \t\f\r\n\\]*")
_REST_OF_LINE = re.compile(r"[^\r\n]*")
_NAME = re.compile(r"\w+")
# `def`, then blanks or line continuations, then the name. Also after the end of a longer word (`undef x`): a
# superset, and without a `\b` in front the regex engine looks for the literal `def`, which is 20 times faster.
_DEFINED = re.compile(r"def(?:[ \t\f]|\\(?:\r\n|\r|\n))+(\w+)")
# `from pkg.mod import a, b` (with what it imports: `from . import data` imports the module `.data`) and
# `import pkg.mod, other` at the start of a line (a superset: also inside strings, and aliases count as names).
# The start of the line is checked first (`_statements`): a regex anchored at line starts is tried at every
# position, one that begins with its keyword jumps from one occurrence of it to the next.
# The statement is matched only where its keyword starts a line, so each line's text is read by one match; a
# parenthesized list ends at its `)`, or at the next `(` when it is not closed (no import list holds one).
_FROM_IMPORT = re.compile(r"from[ \t]+([\w.]*)[ \t]+import\b[ \t]*(\([^()]*\)?|[^\r\n;#]*)")
_IMPORT = re.compile(r"import[ \t]+([\w.]+(?:[ \t]*,[ \t]*[\w.]+)*)")


class FileText:
    """A file's text and the evidence triggers read from it, each found on first use."""

    def __init__(self, text: str, filename: str = ""):
        self.text = text
        # Where the file is: the modules it imports are looked for next to it (`imported_modules`).
        self.filename = filename
        # Answers other layers derive from this evidence, kept for the file (a trigger's look at the project around it).
        self.memo: Dict[object, object] = {}

    @cached_property
    def words(self) -> FrozenSet[str]:
        if self.text.isascii():
            return frozenset(self.text.translate(_ASCII_SEPARATORS).split())
        return frozenset(_WORD.findall(self.text))

    @cached_property
    def attributes(self) -> FrozenSet[str]:
        text = self.text
        # The names right after a dot, gathered by the regex engine alone (a Python step at each of the thousands of
        # dots of a file cost more than the search); a dot before a comment is rare, and looked at apart.
        found = set(_ATTRIBUTE.findall(text))
        if "#" in text:
            # `#` position -> the name after the comments from it on (None: none), for each comment `_after_comments`
            # read: the comments of a block are read once, however many of their lines end in a dot.
            after_comments: Dict[int, Optional[str]] = {}
            for match in _ATTRIBUTE_COMMENT.finditer(text):
                name = _after_comments(text, match.end() - 1, after_comments)
                if name:
                    found.add(name)
        return frozenset(found)

    @cached_property
    def lowered(self) -> str:
        return self.text.lower()

    @cached_property
    def defined(self) -> FrozenSet[str]:
        return frozenset(_DEFINED.findall(self.text))

    @cached_property
    def has_star_import(self) -> bool:
        """A `from X import *` starts a line: names the file uses may be bound in another file, out of the text's sight."""
        return "*" in self.text and any(match.group(2).strip() == "*" for match in _statements(_FROM_IMPORT, "from", self.text))

    @cached_property
    def imported_modules(self) -> FrozenSet[str]:
        """The dotted module paths its import statements name (`.data` for `from .data import x`)."""
        found = set()
        for match in _statements(_FROM_IMPORT, "from", self.text):
            module, imported = match.groups()
            found.add(module)
            joiner = "" if module.endswith(".") else "."
            found.update(module + joiner + name for name in _WORD.findall(imported) if name != "as")
        for match in _statements(_IMPORT, "import", self.text):
            found.update(name.strip() for name in match.group(1).split(","))
        return frozenset(found)


def _after_comments(text: str, position: int, known: Dict[int, Optional[str]]) -> Optional[str]:
    """The name after the comment at `position` and the blank lines, continuations and comments that follow it."""
    read = []
    name = None
    while position not in known:
        read.append(position)
        position = _BLANKS.match(text, _REST_OF_LINE.match(text, position).end()).end()
        if text.startswith("#", position):
            continue
        found = _NAME.match(text, position)
        name = found.group() if found else None
        break
    else:
        name = known[position]
    for comment in read:
        known[comment] = name
    return name


def _statements(pattern: "re.Pattern[str]", keyword: str, text: str) -> Iterator["re.Match[str]"]:
    """The matches of `pattern` (which starts with `keyword`) that start a line (after blanks only)."""
    position = 0
    while True:
        start = text.find(keyword, position)
        if start < 0:
            return
        position = start + 1
        if not _starts_line(text, start):
            continue  # inside a line: the keyword may start a statement further on
        match = pattern.match(text, start)
        if match is not None:
            yield match
            position = match.end()


def _starts_line(text: str, position: int) -> bool:
    """Only blanks stand between the line's start and `position` (read backwards over the blanks alone: looking
    for the line break itself would read back to the file's start when it has no `\r`)."""
    while position > 0 and text[position - 1] in " \t":
        position -= 1
    return position == 0 or text[position - 1] in "\r\n"
