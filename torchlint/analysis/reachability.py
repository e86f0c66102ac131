"""Code that never runs: the statements after one that always leaves their block, and the arm of an `if` on a
literal that is never taken.

A statement always leaves its block when it is a `return`, `raise`, `continue` or `break`, or an `if` chain with an
`else` whose every arm holds one at its top level (`if quick: return 0` / `else: raise ...`); an `if True:` leaves
when its body does, an `if False:` when its `else` does. Everything after such a statement in the same block never
runs, nor does anything nested in it (a loop, a `def`): `def test(self): return` followed by an evaluation loop
switches the loop off. The body of `if False:` and of `while False:` and the `else` of `if True:` never run either.

Not followed: a `try` whose body and handlers all leave, a `with` whose body leaves (its context manager may
swallow an exception), `while True:` without `break`, calls that never return (`sys.exit()`), and tests that are
constant without being a literal (`if 0:`, `if DEBUG:`). Code they cut off counts as reachable.

Rules whose findings say what happens when the code runs drop findings in unreachable code (`Rule.report`); the
question is asked only for a finding, and each block is read once per file, on the first question about it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, FrozenSet, Optional, Sequence

import libcst as cst

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Small statements after which nothing else in the block runs.
_LEAVING = frozenset({cst.Return, cst.Raise, cst.Continue, cst.Break})
# Nodes holding a sequence of statements (or of small statements, for a line or a one-line suite) in `body`.
_BLOCKS = frozenset({cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite, cst.SimpleStatementLine})


class Reachability:
    """One per file (`Reachability.of(ctx)`): for each block asked about, the statements in it that never run."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        # id(block) -> ids of its statements after the first that always leaves it
        self._dead: Dict[int, FrozenSet[int]] = {}

    @classmethod
    def of(cls, ctx: "FileContext") -> "Reachability":
        return ctx.shared(cls)

    def unreachable(self, stack: Sequence[cst.CSTNode]) -> bool:
        """The innermost node of `stack` (the nodes from the module down to it, outermost first) never runs."""
        for index in range(len(stack) - 1):
            parent, child = stack[index], stack[index + 1]
            parent_type = type(parent)
            if parent_type in _BLOCKS:
                if id(child) in self._dead_in(parent):
                    return True
            elif parent_type is cst.If or parent_type is cst.While:
                taken = _literal_test(parent.test)
                if (taken is False and child is parent.body) or (
                    taken is True and parent_type is cst.If and child is parent.orelse
                ):
                    return True
        return False

    def node_unreachable(self, node: cst.CSTNode) -> bool:
        """`node`, anywhere in the file, never runs."""
        return self.unreachable(self.ctx.stack_to(node))

    def _dead_in(self, block: cst.CSTNode) -> FrozenSet[int]:
        found = self._dead.get(id(block))
        if found is None:
            found = frozenset()
            statements = block.body
            for index, statement in enumerate(statements):
                if _always_leaves(statement):
                    found = frozenset(id(after) for after in statements[index + 1:])
                    break
            self._dead[id(block)] = found
        return found


def _always_leaves(statement: cst.CSTNode) -> bool:
    """Running `statement` always leaves the block that holds it."""
    statement_type = type(statement)
    if statement_type in _LEAVING:
        return True
    if statement_type is cst.SimpleStatementLine:
        return any(type(small) in _LEAVING for small in statement.body)
    if statement_type is cst.If:
        taken = _literal_test(statement.test)
        orelse = statement.orelse
        body_leaves = taken is not False and _block_leaves(statement.body)
        if taken is True:
            return body_leaves
        orelse_leaves = orelse is not None and (
            _always_leaves(orelse) if type(orelse) is cst.If else _block_leaves(orelse.body)
        )
        return orelse_leaves if taken is False else body_leaves and orelse_leaves
    return False


def _block_leaves(block: cst.BaseSuite) -> bool:
    return any(_always_leaves(statement) for statement in block.body)


def _literal_test(test: cst.BaseExpression) -> Optional[bool]:
    """True or False for a test written `True` or `False`, else None."""
    if type(test) is cst.Name:
        if test.value == "True":
            return True
        if test.value == "False":
            return False
    return None
