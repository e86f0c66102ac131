from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from torchlint import semantics
from torchlint.analysis.training import (
    CLIP_NAMES, Moment, is_backward, nearest, optimizer_model, stepped_optimizer, trains,
)
from torchlint.engine.scopes import dotted_name
from torchlint.rules.autograd._iteration_rule import IterationRule
from torchlint.rules.triggers import words


class UpdateCancelledByOrder(IterationRule):
    """
    ## What it does
    Flags a training step whose calls come in an order that cancels the update, in one loop
    body (or in the functions of the module it calls, at the place of the call):

    - `zero_grad()` between `backward()` and `step()` of the same optimizer (reported at
      the `zero_grad()`);
    - `zero_grad(); step(); backward()`: each step runs on the gradients just cleared, and
      each backward's gradients are cleared before a step uses them (reported at the
      `zero_grad()`);
    - `clip_grad_norm_(...)` / `clip_grad_value_(...)` after `step()` when the gradients
      are cleared before the next step (reported at the clip).

    The first shape is also flagged in the body of a function outside any loop (a
    `training_step` that runs backward, clears, then steps).

    The `zero_grad()` must be of the stepped optimizer (the same name) or of the model the
    optimizer was built on (`SGD(model.parameters())`, then `model.zero_grad()`), and must
    run whenever the step runs.

    Not flagged: `zero_grad, backward, (clip), step` and `backward, step, zero_grad`;
    gradient accumulation with `zero_grad` and `step` together under an `if (i + 1) % k == 0:`;
    two optimizers (a GAN), each in its own correct order, also when one clears the other's
    gradients between a backward and its own step; a `zero_grad()` under an `if` that the
    step is not under (`if not torch.isfinite(loss): optimizer.zero_grad(); continue`).

    What it gives up: the order inside a function of another file (only its presence is
    known there), `p.grad = None` loops as the misplaced clearing (they count only as the
    clearing after a clip), and calls more than two levels down.

    ## Why is this bad?
    `zero_grad()` sets every gradient to `None`, and `step()` skips parameters whose gradient
    is `None`. Observed on torch 2.13 (5 SGD steps): `zero_grad, backward, step` moved the
    weights by 0.716; `backward, zero_grad, step` and `zero_grad, step, backward` moved them by
    exactly 0. Clipping after the step (`zero_grad, backward, step, clip`) ended with weights
    identical to a run without clipping. The model does not train, or trains unclipped, with
    no error.

    ## Fix safety
    No fix: move `zero_grad()` before `backward()` (or after `step()`), and clip between
    `backward()` and `step()`.
    """

    code = "TL110"
    name = "update-cancelled-by-order"
    uses_callgraph = True
    # A finding needs an accumulating backward and an optimizer step in the file (the order is read only within
    # it), and a `.zero_grad()` call (the first two shapes) or a clip function (the third).
    triggers = words("backward") & words("step") & (words("zero_grad") | words(*CLIP_NAMES))
    message = (
        "`zero_grad()` between `backward()` and `step()` clears the gradients the step was to use: the step "
        "changes nothing (observed: weights moved by exactly 0); clear before `backward()` or after `step()`"
    )
    example = """
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.zero_grad()  # expect: TL110:5
        optimizer.step()
    """
    use_instead = """
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    """

    _STEP_ON_CLEARED = (
        "this loop clears gradients, steps, then runs `backward()`: every `step()` runs on gradients `zero_grad()` "
        "just cleared, and each backward's gradients are cleared before a step uses them (observed: weights moved "
        "by exactly 0); call `zero_grad()`, then `backward()`, then `step()`"
    )
    _CLIP_AFTER_STEP = (
        "gradients are clipped after `step()` and cleared before the next step uses them: the clipping changes "
        "nothing (observed: weights identical to a run without clipping); clip between `backward()` and `step()`"
    )

    def __init__(self, ctx):
        super().__init__(ctx)
        self.reported: Set[int] = set()

    def finish(self) -> None:
        for _, moments in self.iterations.training_loops():
            self._judge(moments, cyclic=True)
        for function in list(self.iterations.functions):
            moments = self.iterations.body(function)
            if trains(moments):
                self._judge(moments, cyclic=False)

    def _judge(self, moments: List[Moment], cyclic: bool) -> None:
        for index, moment in enumerate(moments):
            if moment.shows("optimizer-step"):
                self._judge_step(moments, index, cyclic)
            elif moment.shows("clips-grad") and cyclic:
                self._judge_clip(moments, index)

    def _judge_step(self, moments: List[Moment], index: int, cyclic: bool) -> None:
        step = moments[index]
        found = nearest(
            moments, index, lambda other: (is_backward(other) and not other.excludes(step)) or self._clears_for(other, step),
            cyclic=cyclic,
        )
        if found is None or not moments[found].shows("clears-grad"):
            return
        zero = moments[found]
        backward = nearest(moments, found, lambda other: is_backward(other) and not other.excludes(zero), cyclic=cyclic)
        if backward is None:
            return
        in_body_order = backward < found < index
        self._report(zero, None if in_body_order else self._STEP_ON_CLEARED)

    def _judge_clip(self, moments: List[Moment], index: int) -> None:
        clip = moments[index]
        before = nearest(
            moments, index, lambda other: (is_backward(other) or other.shows("optimizer-step")) and not other.excludes(clip),
        )
        if before is None or not moments[before].shows("optimizer-step"):
            return
        after = nearest(
            moments, index,
            lambda other: ((is_backward(other) or other.shows("optimizer-step")) and not other.excludes(clip))
            or (other.shows("clears-grad") and other.runs_whenever(clip)),
            forward=True,
        )
        if after is not None and moments[after].shows("clears-grad"):
            self._report(clip, self._CLIP_AFTER_STEP)

    def _clears_for(self, zero: Moment, step: Moment) -> bool:
        """`zero` is a `.zero_grad()` of the optimizer `step` steps (or of the model it was built on) that runs
        whenever the step runs."""
        if not zero.shows("clears-grad") or type(zero.node) is not cst.Call or semantics.method_name(zero.node) != "zero_grad":
            return False
        if not zero.runs_whenever(step):
            return False
        cleared = dotted_name(semantics.receiver(zero.node))
        optimizer = stepped_optimizer(step.node) if type(step.node) is cst.Call else None
        if cleared is None or optimizer is None or zero.function != step.function:
            return False
        if dotted_name(optimizer) == cleared:
            return True
        return optimizer_model(optimizer, self.ctx, self.iterations.stack(step.node)) == cleared

    def _report(self, moment: Moment, message: Optional[str]) -> None:
        node = moment.node
        if id(node) not in self.reported:
            self.reported.add(id(node))
            self.report(node, message)
