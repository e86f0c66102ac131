"""libcst's parse, without re-validating every node the native parser builds.

`libcst.parse_module` runs libcst's native (Rust) parser, which builds the tree by
calling each node class; every node's `__post_init__` then runs `_validate`, which
checks the constructor's invariants (parentheses balanced, whitespace well-formed,
names not empty). A tree the parser built from source already satisfies them: the
checks are there for trees built by hand, and libcst's own source notes the cost
("avoid validating the tree when parsing a file"). They are 12-18% of the parse on
the benchmark sample (docs/performance.md), so the engine parses with them off.

The trees are the same: tests/test_parsing.py compares them with libcst's own parse
(`deep_equals`) on every fixture and example. Validation is off only inside
`parse_module` below (torchlint does not parse on other threads), and only while
`CSTNode.__post_init__` does nothing but validate, which is checked once against
the installed libcst: a libcst whose `__post_init__` does more is left alone.
The switch is a flag read by a `__post_init__` installed once, when this module is
imported, that validates unless a parse is under way: assigning `__post_init__`
around every parse instead changed a class that some 250 node classes derive from,
which makes Python drop what it had cached about their attributes, every file.
"""

from __future__ import annotations

import os
import re
import warnings
from collections import OrderedDict
from itertools import accumulate
from typing import Optional

import libcst as cst
from libcst._nodes.base import CSTNode

from torchlint import source as sources
from torchlint.engine.reparse import Layout, Parsed, reparsed

_VALIDATING_INIT = CSTNode.__dict__.get("__post_init__")


def _only_validates(post_init) -> bool:
    code = getattr(post_init, "__code__", None)
    return code is not None and code.co_names == ("_validate",)


SKIPS_VALIDATION = _only_validates(_VALIDATING_INIT)


_parsing = False


def _validate_unless_parsing(self) -> None:
    if not _parsing:
        self._validate()


if SKIPS_VALIDATION:
    CSTNode.__post_init__ = _validate_unless_parsing


def parse_module(text: str) -> cst.Module:
    """`libcst.parse_module(text)`, the same tree, built without re-checking what the parser guarantees."""
    global _parsing
    if not SKIPS_VALIDATION:
        return cst.parse_module(text)
    _parsing = True
    try:
        return cst.parse_module(text)
    finally:
        _parsing = False


_BRACKETS = re.compile(r"[()\[\]{}]")
_LONG_LINE = 2000
_SAFE_DEPTH = 100
_DEPTH_CHANGE = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}


def may_be_nested_too_deeply(text: str) -> bool:
    """A cheap look for code that may be nested deeper than libcst's native parser survives.

    libcst's parser crashes the process (not a Python exception) on a few thousand
    nested brackets or chained operators, and takes seconds well before that; such
    text is first checked by CPython's parser, which refuses it cleanly.
    """
    # (A regex for 2,000 characters without a line break backtracks at every character: splitting is linear.
    # Pieces between "\n" are never shorter than the lines they hold, and str.split is 4 times faster than
    # splitting at every kind of line break, which is left for the files that have a long piece.)
    if max(map(len, text.split("\n"))) >= _LONG_LINE and max(map(len, sources.split_lines(text))) >= _LONG_LINE:
        return True
    # The deepest nesting is the largest running sum of +1 per opening and -1 per closing bracket.
    brackets = _BRACKETS.findall(text)
    return bool(brackets) and max(accumulate(map(_DEPTH_CHANGE.__getitem__, brackets))) > _SAFE_DEPTH


def compiles(text: str) -> bool:
    """Python's compiler accepts `text`: a cheap stand-in for libcst's parse when only TL000 is at stake, and a safe
    first look at text that `may_be_nested_too_deeply`."""
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences and the like warn at compile time; the file's own run would show them.
            warnings.simplefilter("ignore")
            compile(text, "<torchlint>", "exec", dont_inherit=True)
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError: let the parser report it
        return False
    return True


class ParsedTrees:
    """The trees of the files this process parsed last, by file, so that each is parsed once per process.

    A file of a project is often both linted and read through another file's imports
    (`from model import Net`: analysis/project.py): the linter and the project index ask
    here, and the second gets the first's tree. A tree is kept for the same text only
    (compared in full: the editor lints text that is not on disk), and the trees of
    at most `budget` characters of source are kept, the least recently used going first:
    a tree takes about 25 bytes a character, so the default holds about 12 MB (on the
    benchmark sample, files import their neighbours: a budget of a tenth of the sample's
    source saves all but 2 of its 40 second parses).
    Trees are never changed by their users (libcst nodes are immutable).

    A file asked for with another text than its kept tree's (an editor's edit, a round of
    fixes) is parsed by reparsing only the top-level statements the change touched, where
    that gives the tree a full parse would (torchlint/engine/reparse.py).
    """

    def __init__(self, budget: int = 500_000):
        self.budget = budget
        self._trees: "OrderedDict[str, Parsed]" = OrderedDict()
        self._size = 0

    def parse(self, path: Optional[str], text: str) -> cst.Module:
        """`parse_module(text)` for the file at `path` (None: a text of no file), the kept tree when there is one."""
        if path is None:
            return parse_module(text)
        key = os.path.abspath(path)
        found = self._trees.get(key)
        if found is not None and found.text == text:
            self._trees.move_to_end(key)
            return found.module
        parsed = reparsed(found, text, parse_module) if found is not None else None
        if parsed is None:
            parsed = Parsed(text, parse_module(text))
        self._keep(key, parsed)
        return parsed.module

    def layout(self, path: Optional[str], module: cst.Module) -> Optional[Layout]:
        """Where the top-level statements of `module`, the kept tree of the file at `path`, lie in its text, when a
        reparse has worked it out (positions then need Python's parser on one statement, not the file)."""
        found = self._trees.get(os.path.abspath(path)) if path is not None else None
        return found.known_layout() if found is not None and found.module is module else None

    def _keep(self, key: str, parsed: Parsed) -> None:
        replaced = self._trees.pop(key, None)
        if replaced is not None:
            self._size -= len(replaced.text)
        if len(parsed.text) > self.budget:
            return
        self._trees[key] = parsed
        self._size += len(parsed.text)
        while self._size > self.budget:
            _, dropped = self._trees.popitem(last=False)
            self._size -= len(dropped.text)


# One per process: the pool's workers each keep their own.
TREES = ParsedTrees()
