"""Walk a libcst tree in libcst's own visiting order, without rebuilding it.

`node.visit(visitor)` rebuilds every node it passes (libcst's traversal is shared
with transformers), which costs about as much as parsing the file. This walk reads
the children straight from each node's fields, in the order libcst visits them: the
order its `_visit_and_replace_children` names them, read once per node type from
libcst's source. Whitespace, comments and punctuation are not entered unless a
handler asks for their type.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import lru_cache
from typing import Callable, Collection, Dict, Tuple

import libcst as cst

# libcst's node classes are abstract base classes, so `isinstance` on them is slow; exact types are not.
# (So is `issubclass`: the sets are built from each class's MRO, which costs a tenth of the import.)
_CLASSES = [value for value in vars(cst).values() if isinstance(value, type)]
NODE_TYPES = frozenset(node_type for node_type in _CLASSES if cst.CSTNode in node_type.__mro__)
# Tokens and trivia: no rule looks inside them, and a third of a tree is made of them.
_TOKEN_BASES = frozenset({
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Comment, cst.Newline,
    cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.LeftParen, cst.RightParen,
    cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace,
    cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp, cst.Asynchronous,
})
TOKEN_TYPES = frozenset(node_type for node_type in NODE_TYPES if not _TOKEN_BASES.isdisjoint(node_type.__mro__))


@lru_cache(maxsize=None)
def child_fields(node_type: type) -> Tuple[str, ...]:
    """The fields of `node_type` that hold children, in the order libcst visits them."""
    source = textwrap.dedent(inspect.getsource(node_type._visit_and_replace_children))
    found = []
    for call in sorted(
        (node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)),
        key=lambda node: (node.lineno, node.col_offset),
    ):
        # visit_required(self, "field", self.field, visitor), visit_sequence(...), ...
        if isinstance(call.func, ast.Name) and call.func.id.startswith("visit_") and len(call.args) >= 2:
            name = call.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value not in found:
                found.append(name.value)
    return tuple(found)


def walk(
    root: cst.CSTNode,
    on_visit: Callable[[cst.CSTNode], bool],
    on_leave: Callable[[cst.CSTNode], None],
    wanted_tokens: Collection[type] = (),
) -> None:
    """Call `on_visit` before a node's children and `on_leave` after them; False from `on_visit` skips the children."""
    entered = NODE_TYPES - TOKEN_TYPES.difference(wanted_tokens)
    fields: Dict[type, Tuple[str, ...]] = {}

    def visit(node: cst.CSTNode) -> None:
        if on_visit(node):
            node_type = type(node)
            names = fields.get(node_type)
            if names is None:
                names = fields[node_type] = child_fields(node_type)
            for name in names:
                value = getattr(node, name)
                value_type = type(value)
                if value_type in entered:
                    visit(value)
                elif value_type is tuple or value_type is list:
                    for child in value:
                        if type(child) in entered:
                            visit(child)
        on_leave(node)

    visit(root)


class Dispatch:
    """`on_visit`/`on_leave` for a libcst-style visitor object (`visit_Call`, `leave_For`), looked up once per type."""

    def __init__(self, visitor):
        self.visitor = visitor
        self._visits: Dict[type, Callable] = {}
        self._leaves: Dict[type, Callable] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        method = self._visits.get(type(node))
        if method is None:
            method = self._visits[type(node)] = getattr(self.visitor, f"visit_{type(node).__name__}", None) or _descend
        return method(node) is not False

    def on_leave(self, node: cst.CSTNode) -> None:
        method = self._leaves.get(type(node))
        if method is None:
            method = self._leaves[type(node)] = getattr(self.visitor, f"leave_{type(node).__name__}", None) or _ignore
        method(node)


def _descend(node: cst.CSTNode) -> bool:
    return True


def _ignore(node: cst.CSTNode) -> None:
    pass


def walk_visitor(root: cst.CSTNode, visitor) -> None:
    """`root.visit(visitor)` for a read-only visitor, without rebuilding the tree."""
    dispatch = Dispatch(visitor)
    wanted = [node_type for node_type in TOKEN_TYPES if hasattr(visitor, f"visit_{node_type.__name__}") or hasattr(visitor, f"leave_{node_type.__name__}")]
    walk(root, dispatch.on_visit, dispatch.on_leave, wanted)
