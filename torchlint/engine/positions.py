"""Where nodes are in the file, computed one statement at a time.

libcst knows positions only by generating the code of the whole module with a
position-recording state: for a large file with one finding that costs a good part
of the parse. Python's own parser gives the first line of every statement for a
fraction of that, so only the innermost statement of any body (module, class,
function, or a block of `if`, `for`, `while`, `with`, `try`) that holds the reported
node is generated, starting at its line and with its block's indentation. The
generated code is compared with the file's text at that line; on any disagreement
(or when Python's parser refuses the text) an enclosing statement, and at last the
whole module, is done as libcst does it, so a position is never wrong.
"""

from __future__ import annotations

import ast
import warnings
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from torchlint.engine.reparse import Layout, StatementParents
from torchlint.engine.walk import walk
from torchlint.source import split_lines



class Positions:
    def __init__(
        self, module: cst.Module, text: str, layout: Optional[Layout] = None, kept_parents: Optional[StatementParents] = None,
    ):
        self.module = module
        self.text = text
        self._ranges: Dict[cst.CSTNode, CodeRange] = {}
        self._done: Set[int] = set()
        self._whole = False
        self._lines: Optional[List[str]] = None
        # id of a statement in a module, class or function body -> its first line (decorators included)
        self._first_lines: Dict[int, int] = {}
        self._read_file = False
        # Where the top-level statements lie, when the parse knows (an edited file reparsed statement by statement,
        # engine/reparse.py): Python's parser then reads only the top-level statement that holds a reported node.
        self._layout = layout
        self._read_statements: Set[int] = set()
        # id of a top-level statement -> (the statement, id of each node in it -> its parent, None for the statement),
        # for positions asked after the walk (`stack_to`). Kept with the file's tree when the parse keeps one
        # (engine/parsing.TREES): an edit's reparse hands on the maps of the statements it did not touch.
        self._statement_parents: StatementParents = {} if kept_parents is None else kept_parents
        # id of a node -> index of the first top-level statement holding it, for the statements `stack_to` has read
        # so far (`_read_up_to` of them, in order): each statement is searched once per lint, not once per finding.
        self._holder: Dict[int, int] = {}
        self._read_up_to = 0

    def range_of(self, node: cst.CSTNode, stack: Sequence[cst.CSTNode] = ()) -> CodeRange:
        """`node`'s range; `stack` holds the nodes being visited (outermost first), which probably enclose it."""
        found = self._ranges.get(node)
        if found is not None:
            return found
        for enclosing in (stack, None):
            if enclosing is None:
                # Asked without the nodes around it (a report made after the walk): find them, which costs
                # a walk to the node, far less than generating the whole module.
                enclosing = self.stack_to(node)
            top = enclosing[1] if len(enclosing) > 1 else node
            for statement, indents in self._units(node, enclosing):
                if id(statement) not in self._done and self._generate(statement, indents, top):
                    found = self._ranges.get(node)
                    if found is not None:
                        return found
        self._module()
        return self._ranges[node]

    def stack_to(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """The nodes from the module down to `node`, outermost first; empty when `node` is not in the module.

        From each node's parent in its top-level statement, found by one walk of the statement the first time it is
        asked about and kept with it: a file with n findings reported after the walk would otherwise walk itself n
        times (a thousand `.cuda()` lines for TL205), and after an edit only the touched statements are walked again.
        The statements are searched in order, so a node met in two places gets the place a walk of the module meets
        first, as a walk looking for it would stop there."""
        if node is self.module:
            return [node]
        body = self.module.body
        index = self._holder.get(id(node))
        while index is None and self._read_up_to < len(body):
            for held in self._parents_in(body[self._read_up_to]):
                self._holder.setdefault(held, self._read_up_to)
            self._read_up_to += 1
            index = self._holder.get(id(node))
        if index is None:
            return []
        parents = self._parents_in(body[index])
        stack: List[cst.CSTNode] = []
        current: Optional[cst.CSTNode] = node
        while current is not None:
            stack.append(current)
            current = parents[id(current)]
        stack.append(self.module)
        stack.reverse()
        return stack

    def _parents_in(self, statement: cst.CSTNode) -> Dict[int, Optional[cst.CSTNode]]:
        kept = self._statement_parents.get(id(statement))
        if kept is not None and kept[0] is statement:
            return kept[1]
        parents: Dict[int, Optional[cst.CSTNode]] = {}
        around: List[cst.CSTNode] = []

        def on_visit(visited: cst.CSTNode) -> bool:
            if id(visited) not in parents:  # the first place a node is met (libcst may share a node)
                parents[id(visited)] = around[-1] if around else None
            around.append(visited)
            return True

        walk(statement, on_visit, lambda visited: around.pop())
        # The statement is kept with its map: its id names no other node while the map is kept.
        self._statement_parents[id(statement)] = (statement, parents)
        return parents

    def _units(self, node: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> Iterator[Tuple[cst.CSTNode, List[str]]]:
        """The statements on `stack` that stand in a module body or an indented block, innermost first, with
        the indents of their blocks; then `node` itself when it is a top-level statement (an edit's anchor, off the stack)."""
        units = []
        indents: List[str] = []
        body: Sequence[cst.CSTNode] = self.module.body
        for enclosing in stack[1:]:
            if type(enclosing) is cst.IndentedBlock:
                if body:
                    break  # a block outside any statement of the body above: not a shape this module knows
                indents.append(self.module.default_indent if enclosing.indent is None else enclosing.indent)
                body = enclosing.body
            elif body:
                if not any(enclosing is statement for statement in body):
                    break
                units.append((enclosing, list(indents)))
                body = ()  # until the statement's next indented block
        yield from reversed(units)
        if any(node is statement for statement in self.module.body):
            yield node, []

    def _generate(self, statement: cst.CSTNode, indents: List[str], top: cst.CSTNode) -> bool:
        """Generate `statement` (in the top-level statement `top`) alone, at its line; False when that cannot be
        done exactly."""
        first_lines = self._statement_lines(top)
        if id(statement) not in first_lines:
            return False
        # Comments and blank lines above a statement belong to it in libcst, not in Python's tree.
        start = first_lines[id(statement)] - len(statement.leading_lines)
        provider = PositionProvider()
        state = PositionProvidingCodegenState(
            default_indent=self.module.default_indent, default_newline=self.module.default_newline, provider=provider,
        )
        state.line = start
        state.indent_tokens = indents
        statement._codegen(state)
        if self._lines is None:
            self._lines = split_lines(self.text)
        *whole_lines, last = split_lines("".join(state.tokens))
        end = start - 1 + len(whole_lines)
        # (At the end of a file without a final newline, libcst generates the newline the module leaves out.)
        after = self._lines[end] if end < len(self._lines) else ""
        if start < 1 or self._lines[start - 1: end] != whole_lines or not after.startswith(last):
            return False
        self._ranges.update(provider._computed)
        self._done.add(id(statement))
        return True

    def _statement_lines(self, top: cst.CSTNode) -> Dict[int, int]:
        """First lines of the statements, from Python's tree of the top-level statement `top` when the layout is
        known, else of the file."""
        index = self._top_index(top) if self._layout is not None else None
        if index is not None:
            if index not in self._read_statements:
                self._read_statements.add(index)
                first_start, ends = self._layout
                start = ends[index - 1] if index else first_start
                # The line breaks before it, as `split_lines` counts them (a lone CR is one too).
                before = self.text.count("\n", 0, start) + self.text.count("\r", 0, start) - self.text.count("\r\n", 0, start)
                tree = _python_tree(self.text[start:ends[index]])
                if tree is not None:
                    self._match([top], tree.body, before)
        elif not self._read_file:
            self._read_file = True
            tree = _python_tree(self.text)
            if tree is not None:
                self._match(self.module.body, tree.body, 0)
        return self._first_lines

    def _top_index(self, top: cst.CSTNode) -> Optional[int]:
        for index, statement in enumerate(self.module.body):
            if statement is top:
                return index
        return None

    def _match(self, statements: Sequence[cst.CSTNode], python_statements: List[ast.stmt], before: int) -> None:
        """Note the first line of each of `statements` from Python's tree of the same body, whose lines come after
        `before` lines of the file; stop at a mismatch."""
        heads = iter(python_statements)
        for statement in statements:
            # A line `a = 1; b = 2` is one statement in libcst and two in Python's tree.
            count = len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
            group = [next(heads, None) for _ in range(count)]
            if group[-1] is None:
                return
            head = group[0]
            decorators = getattr(head, "decorator_list", [])
            self._first_lines[id(statement)] = before + min([head.lineno] + [decorator.lineno for decorator in decorators])
            self._match_blocks(statement, head, before)

    def _match_blocks(self, statement: cst.CSTNode, head: ast.stmt, before: int) -> None:
        """Match the indented blocks of a compound statement with the bodies of Python's statement, in order."""
        blocks = _blocks(statement)
        bodies = _python_bodies(head)
        if len(blocks) != len(bodies):
            return
        for block, body in zip(blocks, bodies):
            if isinstance(block, cst.If):  # `elif`: Python's tree holds it as the one statement of an `else`
                if len(body) == 1 and isinstance(body[0], ast.If):
                    self._match_blocks(block, body[0], before)
            elif isinstance(block, cst.IndentedBlock):
                self._match(block.body, body, before)

    def _module(self) -> None:
        if not self._whole:
            provider = PositionProvider()
            provider._gen_impl(self.module)
            self._ranges = provider._computed
            self._whole = True


def _python_tree(text: str) -> Optional[ast.Module]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like: the linted file's business
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _blocks(statement: cst.CSTNode) -> List[cst.CSTNode]:
    """A compound statement's blocks in source order: indented blocks, or the `If` of an `elif`."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef, cst.With)):
        return [statement.body]
    if isinstance(statement, (cst.If, cst.For, cst.While)):
        orelse = statement.orelse
        return [statement.body] + ([] if orelse is None else [orelse if isinstance(orelse, cst.If) else orelse.body])
    if isinstance(statement, (cst.Try, cst.TryStar)):
        blocks = [statement.body] + [handler.body for handler in statement.handlers]
        return blocks + [part.body for part in (statement.orelse, statement.finalbody) if part is not None]
    return []


def _python_bodies(head: ast.stmt) -> List[List[ast.stmt]]:
    """The same bodies in Python's tree (empty `else` and `finally` bodies left out, as libcst has no block there)."""
    if isinstance(head, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.With, ast.AsyncWith)):
        return [head.body]
    if isinstance(head, (ast.If, ast.For, ast.AsyncFor, ast.While)):
        return [head.body] + ([head.orelse] if head.orelse else [])
    if isinstance(head, ast.Try) or type(head).__name__ == "TryStar":
        bodies = [head.body] + [handler.body for handler in head.handlers]
        return bodies + [part for part in (head.orelse, head.finalbody) if part]
    return []
