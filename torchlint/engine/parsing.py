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
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import libcst as cst
from libcst._nodes.base import CSTNode

_VALIDATING_INIT = CSTNode.__dict__.get("__post_init__")


def _only_validates(post_init) -> bool:
    code = getattr(post_init, "__code__", None)
    return code is not None and code.co_names == ("_validate",)


SKIPS_VALIDATION = _only_validates(_VALIDATING_INIT)


def _skip_validation(self) -> None:
    pass


@contextmanager
def _validation_skipped() -> Iterator[None]:
    CSTNode.__post_init__ = _skip_validation
    try:
        yield
    finally:
        CSTNode.__post_init__ = _VALIDATING_INIT


def parse_module(text: str) -> cst.Module:
    """`libcst.parse_module(text)`, the same tree, built without re-checking what the parser guarantees."""
    if not SKIPS_VALIDATION:
        return cst.parse_module(text)
    with _validation_skipped():
        return cst.parse_module(text)
