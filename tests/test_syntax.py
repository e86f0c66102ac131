"""`syntax.literal` reads the common literals from the node: it must answer what Python's own reading of the code does."""

import ast

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.analysis import syntax
from torchlint.engine.walk import walk

TRICKY = [
    "1", "-1", "+1", "(1)", "-(1)", "1_000", "0x1F", "0o17", "0b101", "1.5", ".5", "1e3", "1_0.5", "1j", "1+2j",
    "'a'", '"a"', "'''a'''", '"""a\nb"""', "'\\n'", "r'\\d'", "b'a'", "u'a'", "'a' 'b'", "f'a'", '"a\'b"',
    "(1, 2)", "(1,)", "()", "[1, 'a', None]", "[]", "[*a]", "(1, (2, 3))", "(1, x)", "{1}", "{1: 2}", "set()",
    "set(x)", "None", "True", "False", "x", "...", "not True", "~1", "1-2", "x.y", "f(x)", "x[0]", "lambda: 1",
]


def python_reading(node: cst.CSTNode):
    """What `ast.literal_eval` makes of the node's code, as `literal` answered before it read nodes itself."""
    try:
        return ast.literal_eval(cst.Module([]).code_for_node(node))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return syntax.MISSING


def same(a, b) -> bool:
    return type(a) is type(b) and (a == b or (a is syntax.MISSING and b is syntax.MISSING))


@pytest.mark.parametrize("code", TRICKY)
def test_literal_reads_what_python_reads(code):
    node = cst.parse_expression(code)
    assert same(syntax.literal(node), python_reading(node))


def test_a_string_with_a_carriage_return_reads_as_python_reads_it():
    node = cst.parse_module('x = """a\r\nb"""\r\n').body[0].body[0].value
    assert syntax.literal(node) == python_reading(node) == "a\nb"


def expressions(path):
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    found = []

    def on_visit(node):
        if isinstance(node, cst.BaseExpression):
            found.append(node)
        return True

    walk(module, on_visit, lambda node: None)
    return found


@pytest.mark.parametrize(
    "path", [path for path in sorted(FIXTURES.rglob("*.py")) if "TL000" not in path.read_text(encoding="utf-8")],
    ids=lambda path: str(path.relative_to(FIXTURES)),
)
def test_literal_agrees_with_python_on_every_fixture_expression(path):
    for node in expressions(path):
        assert same(syntax.literal(node), python_reading(node)), cst.Module([]).code_for_node(node)
