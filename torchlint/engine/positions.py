"""Where nodes are in the file, computed one top-level statement at a time.

libcst knows positions only by generating the code of the whole module with a
position-recording state: for a large file with one finding that costs a good part
of the parse. Python's own parser gives the first line of every top-level statement
for a fraction of that, so only the statement holding the reported node is
generated, starting at its line. The generated code is compared with the file's
text at that line; on any disagreement (or when Python's parser refuses the text)
the whole module is done as libcst does it, so a position is never wrong.
"""

from __future__ import annotations

import ast
import warnings
from typing import Dict, List, Optional

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from torchlint.source import split_lines


class Positions:
    def __init__(self, module: cst.Module, text: str):
        self.module = module
        self.text = text
        self._ranges: Dict[cst.CSTNode, CodeRange] = {}
        self._index = {id(statement): index for index, statement in enumerate(module.body)}
        self._done: set = set()
        self._whole = False
        self._lines: Optional[List[str]] = None
        self._first_lines: Optional[List[int]] = None

    def range_of(self, node: cst.CSTNode, statement: Optional[cst.CSTNode] = None) -> CodeRange:
        """`node`'s range; `statement` is the top-level statement that probably holds it (the one being visited)."""
        found = self._ranges.get(node)
        if found is not None:
            return found
        for candidate in (statement, node):
            index = self._index.get(id(candidate))
            if index is not None and index not in self._done and self._statement(index):
                found = self._ranges.get(node)
                if found is not None:
                    return found
        self._module()
        return self._ranges[node]

    def _statement(self, index: int) -> bool:
        """Generate statement `index` alone, at its line; False when that cannot be done exactly."""
        first_lines = self._statement_lines()
        if first_lines is None:
            return False
        statement = self.module.body[index]
        # Comments and blank lines above a statement belong to it in libcst, not in Python's tree.
        start = first_lines[index] - len(statement.leading_lines)
        provider = PositionProvider()
        state = PositionProvidingCodegenState(
            default_indent=self.module.default_indent, default_newline=self.module.default_newline, provider=provider,
        )
        state.line = start
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
        self._done.add(index)
        return True

    def _statement_lines(self) -> Optional[List[int]]:
        """The first line of each of the module's top-level statements (decorators included), or None."""
        if self._first_lines is None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # invalid escapes and the like: the linted file's business
                    tree = ast.parse(self.text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._first_lines = []
                return None
            python_statements = iter(tree.body)
            first_lines = []
            for statement in self.module.body:
                # A line `a = 1; b = 2` is one statement in libcst and two in Python's tree.
                count = len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
                heads = [next(python_statements, None) for _ in range(count)]
                if heads[0] is None:
                    self._first_lines = []
                    return None
                decorators = getattr(heads[0], "decorator_list", [])
                first_lines.append(min([heads[0].lineno] + [decorator.lineno for decorator in decorators]))
            self._first_lines = first_lines
        return self._first_lines or None

    def _module(self) -> None:
        if not self._whole:
            provider = PositionProvider()
            provider._gen_impl(self.module)
            self._ranges = provider._computed
            self._whole = True
