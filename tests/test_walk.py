"""The engine's walk visits libcst's nodes in libcst's own order, without rebuilding them."""

import ast
import inspect
import textwrap

import libcst as cst
import pytest

from conftest import FIXTURES
from torchlint.engine.walk import (
    LEAF_TYPES, NODE_TYPES, TOKEN_TYPES, child_fields, child_nodes, entered_types, walk, walked_fields,
)


def fields_named_in_source(node_type):
    """The fields `_visit_and_replace_children` visits, read from libcst's source: the slow, obvious way."""
    source = textwrap.dedent(inspect.getsource(node_type._visit_and_replace_children))
    calls = sorted(
        (node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)),
        key=lambda node: (node.lineno, node.col_offset),
    )
    found = []
    for call in calls:
        if call.func.id.startswith("visit_") and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant):
            if call.args[1].value not in found:
                found.append(call.args[1].value)
    return tuple(found)


CONCRETE = sorted((node_type for node_type in NODE_TYPES if not inspect.isabstract(node_type)), key=lambda t: t.__name__)


@pytest.mark.parametrize("node_type", CONCRETE, ids=lambda node_type: node_type.__name__)
def test_child_fields_are_the_fields_libcst_visits_in_its_order(node_type):
    assert child_fields(node_type) == fields_named_in_source(node_type)


class Recorder(cst.CSTVisitor):
    def __init__(self):
        self.seen = []

    def on_visit(self, node):
        self.seen.append(node)
        return True


def parsed_fixtures():
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            yield path, cst.parse_module(path.read_text(encoding="utf-8"))
        except cst.ParserSyntaxError:  # the TL000 fixtures
            continue


def test_the_walk_meets_every_node_in_libcsts_order():
    for path, module in parsed_fixtures():
        recorder = Recorder()
        module.visit(recorder)
        walked = []
        walk(module, lambda node: walked.append(node) or True, lambda node: None, wanted=TOKEN_TYPES)
        assert [type(node) for node in walked] == [type(node) for node in recorder.seen], path
        # Without tokens and leaves: the same order, less those nodes.
        lean = []
        walk(module, lambda node: lean.append(node) or True, lambda node: None, enter_leaves=False)
        skipped = TOKEN_TYPES | LEAF_TYPES
        assert [type(node) for node in lean] == [type(node) for node in recorder.seen if type(node) not in skipped], path
        # Without tokens: the fields that can hold only tokens are not even read (`walked_fields`), the rest is met.
        plain = []
        walk(module, lambda node: plain.append(node) or True, lambda node: None)
        assert [type(node) for node in plain] == [type(node) for node in recorder.seen if type(node) not in TOKEN_TYPES], path


def test_a_wanted_leaf_type_is_entered():
    module = cst.parse_module("x = f(y, 1)\n")
    names = []
    walk(module, lambda node: names.append(node.value) if type(node) is cst.Name else True, lambda node: None, wanted={cst.Name}, enter_leaves=False)
    assert names == ["x", "f", "y"]


def test_fields_that_hold_only_whitespace_and_punctuation_are_not_walked():
    entered = entered_types()
    assert walked_fields(cst.Call, entered) == ("func", "args")
    assert walked_fields(cst.Arg, entered) == ("keyword", "value")
    # A walk that wants a token type reads the fields that hold it.
    assert "comma" in walked_fields(cst.Arg, entered_types({cst.Comma}))


def test_child_nodes_are_libcsts_children_less_tokens():
    for _, module in parsed_fixtures():
        def on_visit(node):
            assert child_nodes(node) == [child for child in node.children if type(child) not in TOKEN_TYPES]
            return True

        walk(module, on_visit, lambda node: None)
