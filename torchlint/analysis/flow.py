"""Which bindings of a name reach a statement: the flow half of the value model.

One scope (the module, a function, a lambda) is scanned on first use, in source
order: every statement gets an order number and the path of conditional blocks
(`if`/`else` arms, loop bodies, `try` clauses, `match` cases) that hold it, and
every binding of a name is recorded with its statement. A `with` body is not
conditional: it runs whenever the statement does.

The bindings of `x` that reach a statement are found by going back from it in
source order: each earlier binding reaches, and the walk stops at the first one
that runs whenever the statement runs (it sits in a block that also holds the
statement), since it hides everything before it. So after `if a: x = 1` /
`else: x = 2` both values reach, while `x = model(x)` / `x = x.softmax(1)` leaves
only the softmax. A statement inside a loop also sees the bindings later in the
same loop body (the previous iteration's), unless a binding that runs before it on
every iteration hides them (`a = f(); use(a); a = g()`). Code in another scope (a function
reading a module variable) may run at any time once its `def` has run: it sees the bindings
that reach the `def` and every later one (`values._seen_inside`).

The arms of an `if` never run in one pass: a binding in one does not reach a statement
in another. An `if` chain with an `else` whose every arm binds the name (directly in the arm, not
deeper in it) or ends by leaving (`raise`, `return`, `continue`, `break`) hides the
bindings before it, as one binding would: after `model = None` then
`if a: model = A()` / `elif b: model = B()` / `else: raise ValueError(a)`, only A()
and B() reach. Other control flow that leaves a block early is not followed; an
exception in a `try` body makes its bindings conditional.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple

import libcst as cst

from torchlint.engine.scopes import SCOPE_TYPES, import_bindings, parameters
from torchlint.engine.walk import STATEMENT_TYPES, statement_structure, walk

# Statements whose blocks run only sometimes, and the fields holding those blocks (`finally` always runs).
_CONDITIONAL_FIELDS = {
    cst.If: ("body", "orelse"),
    cst.For: ("body", "orelse"),
    cst.While: ("body", "orelse"),
    cst.Try: ("body", "handlers", "orelse"),
    cst.TryStar: ("body", "handlers", "orelse"),
    cst.Match: ("cases",),
}
# Exact types, tested at every node a scan enters (`isinstance` on libcst's abstract classes is slow).
_NESTED_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp})


class Binding(NamedTuple):
    """One binding of a name: `value` is the assigned expression, or None when the value is not known
    (a parameter, a loop target, `+=`, `with ... as`, `except ... as`, `del`).

    `element` is the index path for unpacking: `a, (b, c) = pair` binds `b` to `pair[1][0]`. `definition` is the
    `def`, `class` or import statement for names bound by one. (A named tuple: a scan makes one for every binding of
    its scope, and a frozen dataclass costs several times more to make.)
    """

    name: str
    value: Optional[cst.BaseExpression]
    statement: Optional[cst.CSTNode]
    order: int
    blocks: Tuple[int, ...]
    element: Tuple[int, ...] = ()
    definition: Optional[cst.CSTNode] = None


@dataclass
class Flow:
    """One scope's statements and bindings in source order."""

    node: cst.CSTNode
    # id(statement) -> (its order, the conditional blocks that hold it, outermost first)
    statements: Dict[int, Tuple[int, Tuple[int, ...]]] = field(default_factory=dict)
    bindings: Dict[str, List[Binding]] = field(default_factory=dict)
    # id(loop body) -> the highest statement order inside the loop
    loop_ends: Dict[int, int] = field(default_factory=dict)
    # name -> the `if` chains whose every arm binds it or leaves: (order of the `if`, blocks holding it, ids of its
    # arms and `elif`s)
    hiding: Dict[str, List[Tuple[int, Tuple[int, ...], FrozenSet[int]]]] = field(default_factory=dict)
    # id(the body or the `orelse` of an `if`) -> id(the `if`): a statement in one never runs with one in the other
    alternatives: Dict[int, int] = field(default_factory=dict)

    def position(self, stack) -> Optional[Tuple[int, Tuple[int, ...]]]:
        """(order, blocks) of the innermost statement of this scope in `stack` (enclosing nodes, outermost first)."""
        for node in reversed(stack):
            found = self.statements.get(id(node))
            if found is not None:
                return found
            if node is self.node:
                return None
        return None

    def reaching(self, name: str, position: Optional[Tuple[int, Tuple[int, ...]]]) -> List[Binding]:
        """The bindings of `name` that may hold at `position` (None: anywhere in the scope, so all of them)."""
        bindings = self.bindings.get(name, [])
        if position is None:
            return list(bindings)
        order, blocks = position
        # An `if` chain that ran before this statement and whenever it runs, binding the name in every arm.
        hidden_before = 0
        for chain_order, chain_blocks, inside in self.hiding.get(name, ()):
            if (
                hidden_before < chain_order < order
                and blocks[: len(chain_blocks)] == chain_blocks and inside.isdisjoint(blocks)
            ):
                hidden_before = chain_order
        found = []
        # The binding that runs whenever this statement does, before it (none: the name may be unbound here).
        latest: Tuple[int, ...] = ()
        for binding in reversed(bindings):
            if binding.order >= order:
                continue
            if binding.order < hidden_before:
                break
            if self.alternatives and self._other_arm(binding.blocks, blocks):
                continue
            found.append(binding)
            if blocks[: len(binding.blocks)] == binding.blocks:
                latest = binding.blocks
                break
        # In a loop, what the body binds after this statement holds on the next iteration, unless the body binds
        # the name again before it, every iteration (`a = ...; use(a); a = other`).
        for block in blocks:
            end = self.loop_ends.get(block)
            if end is not None and block not in latest:
                found.extend(b for b in bindings if order <= b.order <= end and b not in found)
        return found


    def _other_arm(self, blocks: Tuple[int, ...], here: Tuple[int, ...]) -> bool:
        """`blocks` (a binding's) and `here` part at the two arms of one `if` outside any loop holding both: one
        never runs after the other."""
        for depth, (block, other) in enumerate(zip(blocks, here)):
            if block != other:
                chain = self.alternatives.get(block)
                return (
                    chain is not None and chain == self.alternatives.get(other)
                    and not any(outer in self.loop_ends for outer in here[:depth])
                )
        return False


def innermost_scope(stack) -> cst.CSTNode:
    """The module, function, lambda or class whose local names the innermost point of `stack` sees (a scope
    node at the end of `stack` is not its own scope: its name is bound around it)."""
    for node in reversed(stack[:-1]):
        if type(node) in SCOPE_TYPES:
            return node
    return stack[0]


def scan(scope: cst.CSTNode, enter_expressions: bool = True) -> Flow:
    """The flow of `scope`; `enter_expressions=False` for a file without `:=`, the one binding an expression makes:
    the scan then reads statements only."""
    flow = Flow(scope)
    _Scanner(flow).run(enter_expressions)
    return flow


class _Scanner:
    def __init__(self, flow: Flow):
        self.flow = flow
        self.order = 0
        self.statement: Optional[cst.CSTNode] = None
        # The conditional blocks holding the visited node, outermost first (their ids).
        self.blocks: List[int] = []
        # ids of the blocks the statements visited so far run only sometimes, and of loop bodies among them.
        self.conditional: set = set()
        self.loop_bodies: set = set()
        # The `if` chains with an `else` (`_chain`), and which chain and arm each of their arm blocks is.
        self.chains: List[_Chain] = []
        self.arm_of: Dict[int, Tuple[_Chain, int]] = {}
        self.elifs: set = set()

    def run(self, enter_expressions: bool) -> None:
        scope = self.flow.node
        if type(scope) is cst.FunctionDef or type(scope) is cst.Lambda:
            for param in parameters(scope.params):
                self.add(param.name.value, None, None)
        # The body, not the scope node: a def or class met on the walk is a nested scope, not entered.
        root = scope if type(scope) is cst.Module else scope.body
        descend = None if enter_expressions else statement_structure(type(root))
        walk(root, self.on_visit, self.on_leave, enter_leaves=False, descend=descend)
        for chain in self.chains:
            bound = [names for names, leaves in zip(chain.binds, chain.leaves) if not leaves]
            names = frozenset.intersection(*map(frozenset, bound)) if bound else frozenset()
            inside = frozenset(chain.arms) | frozenset(chain.elifs)
            for name in names:
                self.flow.hiding.setdefault(name, []).append((chain.order, chain.blocks, inside))

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.conditional:
            self.blocks.append(id(node))
        if type(node) in STATEMENT_TYPES:
            self.order += 1
            self.statement = node
            self.flow.statements[id(node)] = (self.order, tuple(self.blocks))
        for name in _CONDITIONAL_FIELDS.get(type(node), ()):
            value = getattr(node, name)
            for block in value if type(value) is tuple else (value,):
                if block is not None:
                    self.conditional.add(id(block))
        node_type = type(node)
        if node_type is cst.For or node_type is cst.While:
            self.loop_bodies.add(id(node.body))
        elif node_type is cst.If and id(node) not in self.elifs:
            self.chain(node)
        binder = _BINDERS.get(node_type)
        if binder is not None:
            binder(self, node)
        if node_type in _NESTED_SCOPES:
            if node_type is not cst.Lambda:
                self.add(node.name.value, None, node)
            return False
        # Comprehension targets live in their own scope (a `:=` inside one is not followed).
        return node_type not in _COMPREHENSIONS

    def on_leave(self, node: cst.CSTNode) -> None:
        if self.blocks and self.blocks[-1] == id(node):
            self.blocks.pop()
            if id(node) in self.loop_bodies:
                self.flow.loop_ends[id(node)] = self.order

    def chain(self, head: cst.If) -> None:
        """Note the chain `head` starts (its `elif`s and `else`), when it ends in an `else`."""
        arms, leaves, elifs = [], [], []
        current = head
        while True:
            arms.append(id(current.body))
            leaves.append(_leaves(current.body))
            orelse = current.orelse
            if orelse is not None:
                self.flow.alternatives[id(current.body)] = self.flow.alternatives[id(orelse)] = id(current)
            if type(orelse) is not cst.If:
                break
            self.elifs.add(id(orelse))
            elifs.append(id(orelse))
            current = orelse
        if type(orelse) is not cst.Else:
            return
        arms.append(id(orelse))
        leaves.append(_leaves(orelse.body))
        chain = _Chain(self.order, tuple(self.blocks), arms, leaves, [set() for _ in arms], elifs)
        self.chains.append(chain)
        for index, arm in enumerate(arms):
            self.arm_of[arm] = (chain, index)

    def add(self, name: str, value, definition, element: Tuple[int, ...] = ()) -> None:
        binding = Binding(name, value, self.statement, self.order, tuple(self.blocks), element, definition)
        self.flow.bindings.setdefault(name, []).append(binding)
        arm = self.arm_of.get(self.blocks[-1]) if self.blocks else None
        if arm is not None:
            arm[0].binds[arm[1]].add(name)

    def bind_target(self, target: cst.CSTNode, value, element: Tuple[int, ...] = ()) -> None:
        target_type = type(target)
        if target_type is cst.Name:
            self.add(target.value, value, None, element)
        elif target_type is cst.Tuple or target_type is cst.List:
            starred = False
            for index, item in enumerate(target.elements):
                if type(item) is cst.StarredElement:
                    starred = True
                    self.bind_target(item.value, None)
                else:
                    # After a starred target an element's index from the start is unknown.
                    self.bind_target(item.value, None if starred else value, element + (index,))
        elif target_type is cst.StarredElement:
            self.bind_target(target.value, None)


class _Chain(NamedTuple):
    """An `if`/`elif`/`else` chain: the `if`'s order and the blocks holding it, each arm's block, whether it ends
    by leaving, and the names bound directly in it."""

    order: int
    blocks: Tuple[int, ...]
    arms: List[int]
    leaves: List[bool]
    binds: List[set]
    # ids of the `elif` statements: their tests run inside the chain too.
    elifs: List[int]


_LEAVING = (cst.Raise, cst.Return, cst.Continue, cst.Break)


def _leaves(block: cst.BaseSuite) -> bool:
    """The block's last statement leaves it (`raise`, `return`, `continue`, `break`)."""
    statements = block.body
    if not statements:
        return False
    last = statements[-1]
    if type(last) is cst.SimpleStatementLine:
        last = last.body[-1] if last.body else None
    return isinstance(last, _LEAVING)


def _assign(scanner: _Scanner, node: cst.Assign) -> None:
    for target in node.targets:
        scanner.bind_target(target.target, node.value)


def _ann_assign(scanner: _Scanner, node: cst.AnnAssign) -> None:
    if node.value is not None:
        scanner.bind_target(node.target, node.value)


def _unknown_target(field_name: str):
    def bind(scanner: _Scanner, node) -> None:
        target = getattr(node, field_name)
        if target is not None:
            scanner.bind_target(target, None)

    return bind


def _with_item(scanner: _Scanner, node: cst.WithItem) -> None:
    if node.asname is not None:
        scanner.bind_target(node.asname.name, None)


def _except(scanner: _Scanner, node) -> None:
    if node.name is not None:
        scanner.bind_target(node.name.name, None)


def _named_expr(scanner: _Scanner, node: cst.NamedExpr) -> None:
    scanner.bind_target(node.target, node.value)


def _import(scanner: _Scanner, node) -> None:
    for local, _ in import_bindings(node):
        scanner.add(local, None, node)


def _delete(scanner: _Scanner, node: cst.Del) -> None:
    scanner.bind_target(node.target, None)


_BINDERS = {
    cst.Assign: _assign,
    cst.AnnAssign: _ann_assign,
    cst.AugAssign: _unknown_target("target"),
    cst.For: _unknown_target("target"),
    cst.WithItem: _with_item,
    cst.ExceptHandler: _except,
    cst.ExceptStarHandler: _except,
    cst.NamedExpr: _named_expr,
    cst.Import: _import,
    cst.ImportFrom: _import,
    cst.Del: _delete,
}
