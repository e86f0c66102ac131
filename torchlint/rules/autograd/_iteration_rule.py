"""The base of the autograd rules about what one training iteration does, in order (`IterationRule`)."""

from __future__ import annotations

import libcst as cst

from torchlint.analysis.training import Iterations
from torchlint.rules.base import Rule
from torchlint.rules.autograd import _facts  # noqa: F401  (registers the facts the loops record)


class IterationRule(Rule):
    """A rule about what one training iteration does, in order: it feeds the file's shared `Iterations` index
    from the engine's walk (each call and assignment is a moment of an iteration) and judges in `finish`."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.iterations = ctx.shared(Iterations)

    def visit_Call(self, node: cst.Call) -> None:
        self.iterations.observe(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.iterations.observe(node)
