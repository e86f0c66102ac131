"""A file's text and what the prefilter reads from it without parsing: words, attribute names, defined names,
the modules it imports.

Read once per file, each kind of evidence on first use: by the rules' triggers
(torchlint/rules/triggers.py) to decide which rules run, and by `FileContext`
(`may_name`, the call graph's defined names) while they do.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Dict, FrozenSet, Iterator

_WORD = re.compile(r"\w+")
# For ASCII text, where `\w` is `[A-Za-z0-9_]`: every other character becomes a space, and `str.split` then gives
# the words twice as fast as the regex.
_ASCII_SEPARATORS = str.maketrans({chr(code): " " for code in range(128) if not (chr(code).isalnum() or chr(code) == "_")})
# A dot, then whitespace, line continuations or comments (inside brackets), then the name.
_ATTRIBUTE = re.compile(r"\.(?:[ \t\f\r\n\\]|#[^\r\n]*)*(\w+)")
# `def`, then blanks or line continuations, then the name. Also after the end of a longer word (`undef x`): a
# superset, and without a `\b` in front the regex engine looks for the literal `def`, which is 20 times faster.
_DEFINED = re.compile(r"def(?:[ \t\f]|\\(?:\r\n|\r|\n))+(\w+)")
# `from pkg.mod import a, b` (with what it imports: `from . import data` imports the module `.data`) and
# `import pkg.mod, other` at the start of a line (a superset: also inside strings, and aliases count as names).
# The start of the line is checked after a match (`_statements`): a regex anchored at line starts is tried at
# every position, one that begins with its keyword jumps from one occurrence of it to the next.
_FROM_IMPORT = re.compile(r"from[ \t]+(\.*[\w.]*)[ \t]+import\b[ \t]*(\([^)]*\)|[^\r\n;#]*)")
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
        return frozenset(_ATTRIBUTE.findall(self.text))

    @cached_property
    def lowered(self) -> str:
        return self.text.lower()

    @cached_property
    def defined(self) -> FrozenSet[str]:
        return frozenset(_DEFINED.findall(self.text))

    @cached_property
    def imported_modules(self) -> FrozenSet[str]:
        """The dotted module paths its import statements name (`.data` for `from .data import x`)."""
        found = set()
        for match in _statements(_FROM_IMPORT, self.text):
            module, imported = match.groups()
            found.add(module)
            joiner = "" if module.endswith(".") else "."
            found.update(module + joiner + name for name in _WORD.findall(imported) if name != "as")
        for match in _statements(_IMPORT, self.text):
            found.update(name.strip() for name in match.group(1).split(","))
        return frozenset(found)


def _statements(pattern: "re.Pattern[str]", text: str) -> Iterator["re.Match[str]"]:
    """The matches of `pattern` that start a line (after blanks only)."""
    position = 0
    while True:
        match = pattern.search(text, position)
        if match is None:
            return
        start = match.start()
        line_start = max(text.rfind("\n", 0, start), text.rfind("\r", 0, start)) + 1
        if text[line_start:start].strip(" \t"):
            position = start + 1  # inside a line: the keyword may start a statement further on
            continue
        yield match
        position = match.end()
