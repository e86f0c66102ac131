"""The nodes around a node, for findings reported after the walk.

During the walk the engine knows the nodes around the one being visited (`ctx.stack`), and a
finding's position is generated from the innermost statement among them. A rule that reports
from `finish` has no such stack; the position pass then walks the module down to the node, once
per finding, so a file with n such findings costs n walks of itself (a thousand `.cuda()` lines
for TL205, a file of many training loops for the autograd rules). `Ancestors` walks the module
once, the first time a file needs it, and answers each node's stack from its parents.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import libcst as cst

from torchlint.engine.walk import walk


class Ancestors:
    """One per file (`ctx.shared(Ancestors)`): the parent of every node the engine's walk enters."""

    def __init__(self, ctx):
        # id of a node -> its parent (None for the module); the module keeps every node alive while the file is linted.
        self._parents: Dict[int, Optional[cst.CSTNode]] = {}
        parents = self._parents
        stack: List[cst.CSTNode] = []

        def on_visit(node: cst.CSTNode) -> bool:
            # The first place a node is met, as a walk looking for it would stop there (libcst may share a node).
            if id(node) not in parents:
                parents[id(node)] = stack[-1] if stack else None
            stack.append(node)
            return True

        walk(ctx.module, on_visit, lambda node: stack.pop())

    def stack_to(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """The nodes from the module down to `node`, outermost first; empty when `node` is not in the module."""
        if id(node) not in self._parents:
            return []
        stack = []
        current: Optional[cst.CSTNode] = node
        while current is not None:
            stack.append(current)
            current = self._parents[id(current)]
        stack.reverse()
        return stack
