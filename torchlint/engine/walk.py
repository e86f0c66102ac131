"""Walk a libcst tree in libcst's own visiting order, without rebuilding it.

`node.visit(visitor)` rebuilds every node it passes (libcst's traversal is shared
with transformers), which costs about as much as parsing the file. This walk reads
the children straight from each node's fields, in the order libcst visits them: the
order its `_visit_and_replace_children` names them, read once per node type.
Whitespace, comments and punctuation are not entered unless a handler asks for their
type, nor leaves such as names unless the caller needs them.
"""

from __future__ import annotations

import dataclasses
import typing
from functools import lru_cache
from typing import Callable, Collection, Dict, FrozenSet, List, Optional, Tuple

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
# Statements, simple (`x = 1`, `return`) and compound (`if`, `def`): exact types for `type(node) in STATEMENT_TYPES`.
STATEMENT_TYPES = frozenset(
    node_type for node_type in NODE_TYPES
    if cst.BaseSmallStatement in node_type.__mro__ or cst.BaseCompoundStatement in node_type.__mro__
)
# Statements and the blocks that hold them. Only `:=` binds a name inside an expression, so a scan for bindings in
# a file without one need not enter expressions, which are most of a tree (`statement_structure`).
_STATEMENT_STRUCTURE = frozenset({
    cst.IndentedBlock, cst.SimpleStatementSuite, cst.SimpleStatementLine, cst.If, cst.Else, cst.For, cst.While,
    cst.Try, cst.TryStar, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.With, cst.Match, cst.MatchCase,
})
# Expression leaves: a third of a tree is `Name`s, and most rules look at them only from their parents.
LEAF_TYPES = frozenset({cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.FormattedStringText, cst.Ellipsis})


@lru_cache(maxsize=None)
def child_fields(node_type: type) -> Tuple[str, ...]:
    """The fields of `node_type` that hold children, in the order libcst visits them.

    `_visit_and_replace_children` names each field as a string constant
    (`visit_required(self, "value", self.value, visitor)`), and Python keeps a code
    object's constants in the order they first occur in the source; reading them is a
    thousand times cheaper than parsing libcst's source (tests/test_walk.py checks that
    both agree for every node type of the installed libcst).
    """
    field_names = {field.name for field in dataclasses.fields(node_type)}
    found = []
    for constant in node_type._visit_and_replace_children.__code__.co_consts:
        if type(constant) is str and constant in field_names and constant not in found:
            found.append(constant)
    return tuple(found)


@lru_cache(maxsize=None)
def _admitted(node_type: type) -> Dict[str, Optional[FrozenSet[type]]]:
    """For each child field of `node_type`: the node types its annotation admits (None: not known, any)."""
    annotations = {field.name: field.type for field in dataclasses.fields(node_type)}
    admitted: Dict[str, Optional[FrozenSet[type]]] = {}
    for name in child_fields(node_type):
        classes = _annotated_classes(annotations[name]) if name in annotations else None
        admitted[name] = None if classes is None else frozenset().union(*(_concrete(base) for base in classes))
    return admitted


def _annotated_classes(annotation) -> Optional[FrozenSet[type]]:
    """The CSTNode classes (abstract ones included) an annotation names, through Union, Optional and Sequence."""
    if typing.get_origin(annotation) is not None:
        found = set()
        for argument in typing.get_args(annotation):
            classes = _annotated_classes(argument)
            if classes is None:
                return None
            found |= classes
        return frozenset(found)
    if isinstance(annotation, type):
        return frozenset({annotation}) if issubclass(annotation, cst.CSTNode) else frozenset()
    return None  # a string or type variable left unresolved: anything


@lru_cache(maxsize=None)
def _concrete(base: type) -> FrozenSet[type]:
    """The node types that are `base` or derive from it."""
    return frozenset(node_type for node_type in NODE_TYPES if base in node_type.__mro__)


@lru_cache(maxsize=1024)
def walked_fields(node_type: type, entered: FrozenSet[type]) -> Tuple[str, ...]:
    """The child fields (`child_fields`) of `node_type` that can hold a node of an `entered` type or a leaf, by
    libcst's annotations: a third of all fields hold only whitespace and punctuation, which a walk would read and
    skip at every node (tests/test_walk.py checks that walks visit the same nodes either way)."""
    reachable = entered | LEAF_TYPES
    admitted = _admitted(node_type)
    return tuple(
        name for name in child_fields(node_type)
        if admitted[name] is None or not admitted[name].isdisjoint(reachable)
    )


def entered_types(wanted: Collection[type] = (), enter_leaves: bool = True) -> FrozenSet[type]:
    """The node types a walk enters: not tokens and trivia, nor leaves unless `enter_leaves`, except those `wanted`."""
    return _entered_types(frozenset(wanted), enter_leaves)


@lru_cache(maxsize=256)
def _entered_types(wanted: FrozenSet[type], enter_leaves: bool) -> FrozenSet[type]:
    return _one_object(NODE_TYPES - (TOKEN_TYPES if enter_leaves else TOKEN_TYPES | LEAF_TYPES).difference(wanted))


# Each distinct set of entered types, as one object: `walked_fields` is asked with one at every node type of every
# walk, and its cache finds a key by comparing the sets, which is instant for one object and a look at each of some
# two hundred types for two equal ones (as different `wanted` give: 0.19 G instructions on the benchmark sample).
_ENTERED: Dict[FrozenSet[type], FrozenSet[type]] = {}


def _one_object(types: FrozenSet[type]) -> FrozenSet[type]:
    return _ENTERED.setdefault(types, types)


@lru_cache(maxsize=None)
def statement_structure(root_type: type, enter_definitions: bool = False) -> FrozenSet[type]:
    """The node types whose children a walk over statements only descends into (`descend=`), from a root of
    `root_type`; with `enter_definitions`, also the bodies of functions and classes."""
    definitions = {cst.FunctionDef, cst.ClassDef} if enter_definitions else set()
    return _STATEMENT_STRUCTURE | definitions | {root_type}


def child_nodes(node: cst.CSTNode) -> List[cst.CSTNode]:
    """`node.children` less whitespace, punctuation and operators, read from the node's fields: libcst's `children`
    visits the node to collect them, which costs many times more."""
    entered = entered_types()
    found: List[cst.CSTNode] = []
    for name in walked_fields(type(node), entered):
        value = getattr(node, name)
        if type(value) is tuple or type(value) is list:
            found.extend(child for child in value if type(child) in entered)
        elif type(value) in entered:
            found.append(value)
    return found


def walk(
    root: cst.CSTNode,
    on_visit: Callable[[cst.CSTNode], bool],
    on_leave: Callable[[cst.CSTNode], None],
    wanted: Collection[type] = (),
    enter_leaves: bool = True,
    descend: Optional[FrozenSet[type]] = None,
) -> None:
    """Call `on_visit` before a node's children and `on_leave` after them; False from `on_visit` skips the children.

    Tokens and trivia are not entered, nor leaves (`LEAF_TYPES`) unless `enter_leaves`, except the types in `wanted`;
    with `descend`, only the children of nodes of those types are entered.
    """
    _walk(root, {}, {}, entered_types(wanted, enter_leaves), descend, on_visit, on_leave)


def walk_visitor(root: cst.CSTNode, visitor, descend: Optional[FrozenSet[type]] = None) -> None:
    """`root.visit(visitor)` for a read-only visitor, without rebuilding the tree.

    Only the visitor's own `visit_X`/`leave_X` methods are called (a node without one costs
    no call); with `descend`, only the children of nodes of those types are entered.
    """
    visits = {}
    leaves = {}
    for node_type, visit_name, leave_name in _visitor_methods(type(visitor)):
        if visit_name:
            visits[node_type] = getattr(visitor, visit_name)
        if leave_name:
            leaves[node_type] = getattr(visitor, leave_name)
    _walk(root, visits, leaves, _entered_by(type(visitor), descend), descend)


@lru_cache(maxsize=None)
def _entered_by(visitor_class: type, descend: Optional[FrozenSet[type]]) -> FrozenSet[type]:
    handled = frozenset(node_type for node_type, _, _ in _visitor_methods(visitor_class))
    entered = entered_types(handled)
    # With `descend`, a child that is neither descended into nor handled would be entered for nothing.
    return entered if descend is None else _one_object(entered & (descend | handled))


@lru_cache(maxsize=None)
def _visitor_methods(visitor_class: type) -> Tuple[Tuple[type, Optional[str], Optional[str]], ...]:
    """The node types `visitor_class` handles, with its method names; libcst's do-nothing defaults left out."""

    def own(name: str) -> Optional[str]:
        method = getattr(visitor_class, name, None)
        return name if method is not None and method is not getattr(cst.CSTVisitor, name, None) else None

    found = []
    for node_type in NODE_TYPES:
        visit_name, leave_name = own(f"visit_{node_type.__name__}"), own(f"leave_{node_type.__name__}")
        if visit_name or leave_name:
            found.append((node_type, visit_name, leave_name))
    return tuple(found)


def _walk(
    root: cst.CSTNode,
    visits: Dict[type, Callable],
    leaves: Dict[type, Callable],
    entered: FrozenSet[type],
    descend: Optional[Collection[type]],
    every_visit: Optional[Callable] = None,
    every_leave: Optional[Callable] = None,
) -> None:
    """The one field walk: `visits`/`leaves` by node type, or `every_visit`/`every_leave` for the other types.

    A work list rather than a recursive function, as the engine's walk (`runner._Walker.walk` says why): nodes to
    enter and, below the children of each node entered, the pair that leaves it; children go on last first."""
    fields: Dict[type, Tuple[str, ...]] = {}
    pending: list = [root]
    push, take = pending.append, pending.pop
    while pending:
        node = take()
        node_type = type(node)
        if node_type is tuple:
            node, on_leave = node
            on_leave(node)
            continue
        on_visit = visits.get(node_type, every_visit)
        on_leave = leaves.get(node_type, every_leave)
        if on_leave is not None:
            push((node, on_leave))
        if (on_visit is None or on_visit(node) is not False) and (descend is None or node_type in descend):
            names = fields.get(node_type)
            if names is None:
                names = fields[node_type] = walked_fields(node_type, entered)[::-1]
            for name in names:
                value = getattr(node, name)
                value_type = type(value)
                if value_type in entered:
                    push(value)
                elif value_type is tuple or value_type is list:
                    for child in reversed(value):
                        if type(child) in entered:
                            push(child)


class OwnScopeVisitor(cst.CSTVisitor):
    """A read-only visitor of one scope's own code: functions, lambdas and classes defined in it are not entered."""

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False
