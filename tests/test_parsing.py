"""The engine's parse: libcst's tree, built without libcst re-validating every node."""

import textwrap

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.engine import parsing
from torchlint.rules import all_rules


def texts():
    """Every rule's examples and every fixture that parses."""
    for rule in all_rules():
        for kind in ("example", "use_instead"):
            if getattr(rule, kind) and rule.code != "TL000":
                yield pytest.param(textwrap.dedent(getattr(rule, kind)), id=f"{rule.code}-{kind}")
    for path in sorted(FIXTURES.rglob("*.py")):
        if "TL000" not in path.read_text(encoding="utf-8"):
            yield pytest.param(path.read_text(encoding="utf-8"), id=str(path.relative_to(FIXTURES)))


@pytest.mark.parametrize("text", list(texts()))
def test_the_tree_is_libcsts_own(text):
    tree = parsing.parse_module(text)
    assert tree.deep_equals(cst.parse_module(text))
    assert tree.code == text


def test_the_installed_libcst_validates_nothing_but_what_the_parse_guarantees():
    # If a libcst release gives `__post_init__` other work, the engine parses with it on: this says so.
    assert parsing.SKIPS_VALIDATION


def test_a_post_init_that_does_more_than_validate_is_kept():
    def post_init(self):
        self._validate()
        self.cache = {}

    assert not parsing._only_validates(post_init)


@pytest.mark.parametrize("text", ["x = 1\n", "def f(:\n"])
def test_nodes_built_after_a_parse_are_validated_again(text):
    try:
        parsing.parse_module(text)
    except cst.ParserSyntaxError:
        pass
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")


def test_a_syntax_error_is_libcsts():
    with pytest.raises(cst.ParserSyntaxError):
        parsing.parse_module("def f(:\n")
