"""A file's text and what the prefilter reads from it without parsing: words, attribute names, defined names,
the modules it imports.

Read once per file, each kind of evidence on first use: by the rules' triggers
(torchlint/rules/triggers.py) to decide which rules run, and by `FileContext`
(`may_name`, the call graph's defined names) while they do.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Dict, FrozenSet

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
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import\b[ \t]*(\([^)]*\)|[^\r\n;#]*)", re.MULTILINE)
_NAME = re.compile(r"\w+")
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w.]+(?:[ \t]*,[ \t]*[\w.]+)*)", re.MULTILINE)


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
        for module, imported in _FROM_IMPORT.findall(self.text):
            found.add(module)
            joiner = "" if module.endswith(".") else "."
            found.update(module + joiner + name for name in _NAME.findall(imported) if name != "as")
        for names in _IMPORT.findall(self.text):
            found.update(name.strip() for name in names.split(","))
        return frozenset(found)
