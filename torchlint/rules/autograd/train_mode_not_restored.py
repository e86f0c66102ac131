from __future__ import annotations

from typing import Set

import libcst as cst

from torchlint.rules.autograd._shared import LoopIndex
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words


class TrainModeNotRestored(Rule):
    """
    ## What it does
    Flags `model.eval()` in an epoch loop that trains (backward and an optimizer step, in
    the loop or in a function of the module it calls) when nothing in the loop switches
    the model back with `model.train()` (or `.train(True)`, or `.train(<variable>)`) before
    the next training step. An `eval()` made inside a called function (`validate()`) is
    reported at the call.

    Not flagged: `model.train()` anywhere in the epoch body or in the training function it
    calls, and evaluation after the last epoch (outside the loop).

    ## Why is this bad?
    `eval()` is a switch, not a scope. From the second epoch on, training runs with
    dropout off and batch norm using (and no longer updating) its running statistics:
    no error, no warning, just a model that trains differently from the first epoch
    and usually generalises worse.

    ## Fix safety
    No fix: call `model.train()` at the top of each epoch (or of the training function),
    or have the evaluation helper restore the mode it found.
    """

    code = "TL107"
    name = "train-mode-not-restored"
    uses_callgraph = True
    # A loop is reported only when it trains, which needs an accumulating backward (`.backward()` or
    # `autograd.backward`), after a mode switch, `.eval()` or `.train(False)`.
    triggers = words("backward") & words("eval", "train")
    message = (
        "`eval()` in the epoch loop is never undone: no `model.train()` runs before the next training step, so "
        "from the second epoch on dropout and batch norm stay in eval mode, silently; call `model.train()` at the "
        "top of each epoch"
    )
    example = """
    model.train()
    for epoch in range(10):
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        model.eval()  # expect: TL107:5
        validate(model)
    """
    use_instead = """
    for epoch in range(10):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        model.eval()
        validate(model)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loops = ctx.shared(LoopIndex)

    def visit_Call(self, node: cst.Call) -> None:
        self.loops.observe(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.loops.observe(node)

    def finish(self) -> None:
        reported: Set[int] = set()
        for loop in self.loops.loops.values():
            if not self.loops.trains(loop):
                continue
            evals = self.loops.sites(loop, "sets-eval")
            if not evals:
                continue
            if self.loops.sites(loop, "sets-train", depth=2) or self.loops.sites(loop, "may-set-train", depth=2):
                continue
            for event, _ in evals:
                if id(event.node) in reported:
                    continue
                reported.add(id(event.node))
                if "sets-eval" in event.facts:
                    self.report(event.node, self._direct_message(event.node))
                else:
                    self.report(event.node, self._through_call_message(event.node))

    def _direct_message(self, call: cst.Call) -> str:
        return self.message.replace("`eval()`", f"`{self.ctx.code(call)}`", 1)

    def _through_call_message(self, call: cst.Call) -> str:
        name = self.ctx.code(call.func)
        return (
            f"`{name}()` switches the model to eval mode and nothing in this epoch loop switches it back: from the "
            "second epoch on dropout and batch norm stay in eval mode, silently; call `model.train()` at the top of "
            "each epoch (or at the end of the helper)"
        )
