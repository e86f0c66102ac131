from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from torchlint import semantics
from torchlint.analysis.training import (
    CLIP_NAMES, Moment, is_backward, nearest, scaler_disabled, scaler_of_backward, stepped_optimizer,
)
from torchlint.finding import Fix
from torchlint.rules.autograd._iteration_rule import IterationRule
from torchlint.rules.triggers import words


class ClipBeforeUnscale(IterationRule):
    """
    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_(...)` / `clip_grad_value_(...)` that runs after a
    scaled backward (`scaler.scale(loss).backward()`, with a `torch.amp.GradScaler` or
    `torch.cuda.amp.GradScaler`) and before the optimizer step, with no
    `scaler.unscale_(optimizer)` in between: in one loop body, or in one function body (a
    `train_step`), the functions of the module called there included.

    Not flagged: `scaler.unscale_(optimizer)` before the clip (also in a called function of
    the module); no clipping; clipping without a scaler (`loss.backward()`); bf16 autocast
    without a scaler; a scaler built with `enabled=False` (its `scale()` returns the loss
    unchanged); Accelerate's `accelerator.clip_grad_norm_`, which unscales itself.

    What it gives up: a scaler whose `scale()` result reaches the backward through a
    function of another file, and orders spread over functions of other files.

    ## Why is this bad?
    `GradScaler.scale(loss)` multiplies the loss by the scale (65,536 by default), so every
    gradient in `.grad` is that many times too large until `unscale_` (or `scaler.step`,
    after the clip) divides it back. Clipping in between measures the scaled norm and
    shrinks the gradients by it. Observed on torch 2.13 (an `nn.Linear(16, 1)` with SGD,
    `GradScaler("cpu", init_scale=2**16)`, `clip_grad_norm_(..., 1.0)`): without `unscale_`
    the clip sees a norm of 124,049.1 and the update has norm 1.52e-06; with `unscale_` it
    sees 1.893 and the update is 0.0994, about 65,000 times larger. Nothing warns; training
    just crawls.

    ## Fix safety
    Unsafe: the fix inserts `scaler.unscale_(optimizer)` before the clip (the scaler of the
    backward, the optimizer of the following `scaler.step`). That changes every update,
    which is the point, but a learning rate tuned while the clip was wrong may need tuning
    again. Offered only when both names are known in the clip's own function.
    """

    code = "TL111"
    name = "clip-before-unscale"
    fix_safety = "unsafe"
    uses_callgraph = True
    # A finding needs a scaled backward (`X.scale(...)` then `.backward()`) and a clip function in the file.
    triggers = words("scale") & words("backward") & words(*CLIP_NAMES)
    message = (
        "gradients are clipped before `scaler.unscale_(optimizer)`: they still carry the loss scale, so the clip "
        "sees a norm 2**16 times too large with the default scale (observed: 124,049.1 instead of 1.893) "
        "and shrinks the update by that factor, silently; call `scaler.unscale_(optimizer)` before clipping"
    )
    example = """
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # expect: TL111:5
        scaler.step(optimizer)
        scaler.update()
    """
    use_instead = """
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.reported: Set[int] = set()

    def finish(self) -> None:
        for moments in self.iterations.sequences():
            self._judge(moments)

    def _judge(self, moments: List[Moment]) -> None:
        for index, clip in enumerate(moments):
            if not clip.shows("clips-grad") or id(clip.node) in self.reported:
                continue
            before = nearest(
                moments, index, lambda other: (is_backward(other) or other.shows("unscales-grad")) and not other.excludes(clip),
                cyclic=False,
            )
            if before is None or not is_backward(moments[before]):
                continue
            backward = moments[before]
            scale = scaler_of_backward(backward.node, self.ctx, self.iterations.stack(backward.node))
            if scale is None or scaler_disabled(semantics.receiver(scale), self.ctx, self.iterations.stack(backward.node)):
                continue
            after = nearest(
                moments, index, lambda other: (is_backward(other) or other.shows("optimizer-step")) and not other.excludes(clip),
                forward=True, cyclic=False,
            )
            if after is None or not moments[after].shows("optimizer-step"):
                continue
            self.reported.add(id(clip.node))
            self.report(clip.node, fix=self._fix(clip, backward, moments[after], scale))

    def _fix(self, clip: Moment, backward: Moment, step: Moment, scale: cst.Call) -> Optional[Fix]:
        """`scaler.unscale_(optimizer)` on its own line before the clip's statement."""
        statement = self._statement_of(clip.node)
        optimizer = stepped_optimizer(step.node) if semantics.method_name(step.node) == "step" else None
        if statement is None or optimizer is None or not semantics.positional(step.node, 0):
            return None
        if not (clip.function == backward.function == step.function):
            return None
        scaler, optimizer_code = self.ctx.code(semantics.receiver(scale)), self.ctx.code(optimizer)
        start, _ = self.ctx.location(statement)
        line = self.ctx.text.splitlines()[start.row - 1]
        indent = line[: start.column - 1]
        if indent.strip():
            return None
        text = f"{scaler}.unscale_({optimizer_code})\n{indent}"
        return Fix.unsafe(f"Insert `{scaler}.unscale_({optimizer_code})` before clipping", self.ctx.insert_before(statement, text))

    def _statement_of(self, node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
        """The statement line whose only statement holds `node` (`clip(...)` or `norm = clip(...)`)."""
        stack = self.iterations.stack(node)
        for parent in reversed(stack):
            if type(parent) is cst.SimpleStatementLine:
                return parent if len(parent.body) == 1 else None
        return None
