from __future__ import annotations

from typing import Dict, Set

import libcst as cst

from torchlint import semantics
from torchlint.engine.scopes import dotted_name
from torchlint.analysis.facts import project_call_shows
from torchlint.analysis.loops import LoopIndex
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words


class StepWithoutZeroGrad(Rule):
    """
    ## What it does
    Flags the optimizer's `.step()` in the innermost loop that runs both `.backward()` and
    `<optimizer>.step()` but never clears gradients in that loop: no `.zero_grad(...)` on
    any receiver, no `p.grad = None`, no `p.grad.zero_()`. Clearing inside an `if` counts
    (gradient accumulation is legitimate), and so does clearing in a function of the same
    module called in the loop, or in a function of another project file called there
    (`from fp16_util import zero_grad`, followed into that file). Backward and step may
    also sit in a function of the module.

    Not flagged: an optimizer built in the loop body over tensors also built there
    (`x = latents.detach().clone().requires_grad_()`, then `opt = torch.optim.SGD([x])`):
    each iteration steps a new leaf whose `.grad` starts at `None`. Distributed autograd
    (`dist_autograd.backward(context_id, [loss])` in a `with dist_autograd.context()`
    block, stepped by a `DistributedOptimizer`): it keeps each context's gradients in the
    context and never writes `.grad`, so nothing accumulates; no rule counts it as a
    backward. An optimizer another deep-learning framework builds (PaddlePaddle's
    `paddle.optimizer.Momentum`, which clears its gradients with `clear_grad()`), whatever
    its name: it is no torch optimizer.

    ## Why is this bad?
    `backward()` adds into `.grad`; nothing resets it. After k steps each gradient is k
    times one step's (observed on torch 2.13: `grad == 3 * g1` after three steps), so the
    updates keep growing and training diverges or crawls, silently.

    `scheduler.step()` is not an optimizer step and is not considered.

    ## Fix safety
    No fix: where the gradients should be cleared (every step, or every k steps when
    accumulating) is the author's choice.
    """

    code = "TL102"
    name = "step-without-zero-grad"
    preview = (
        "In preview after held-out rounds 46-48 (docs/precision.md): its findings are rare on unseen code, and the "
        "last ten read at first sight, pooled back to round 13, were 4 true. The six false ones were one shape, "
        "PaddlePaddle scripts whose optimizer `clear_grad()` clears (round 46), a trap fixture now; the rule leaves "
        "preview again when two rounds in a row read it at least 9 in 10 true."
    )
    uses_callgraph = True
    # A loop is reported only when it trains, which needs an accumulating backward (`.backward()` or
    # `autograd.backward`), and it is the optimizer's `.step()` it reports.
    triggers = words("backward") & words("step")
    message = (
        "this loop runs `backward()` and `optimizer.step()` but never clears gradients: `.grad` accumulates, so "
        "after k steps each gradient is k times one step's; call `optimizer.zero_grad()` in the loop (inside an "
        "`if` when accumulating gradients)"
    )
    example = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.zero_grad()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()  # expect: TL102:5
    """
    use_instead = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loops = ctx.shared(LoopIndex)
        # id of a loop -> variables its body assigns a new tensor (any call) to, so far.
        self.fresh_tensors: Dict[int, Set[str]] = {}
        # id of a loop -> variables its body assigns an optimizer over such tensors to, so far.
        self.fresh_optimizers: Dict[int, Set[str]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        self.loops.observe(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.loops.observe(node)
        if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
            return
        name = node.targets[0].target.value
        for loop in self.loops.enclosing():
            tensors = self.fresh_tensors.setdefault(id(loop.node), set())
            optimizers = self.fresh_optimizers.setdefault(id(loop.node), set())
            tensors.discard(name)
            optimizers.discard(name)
            if self._optimizer_over(node.value, tensors):
                optimizers.add(name)
            elif isinstance(node.value, cst.Call):
                tensors.add(name)

    def _optimizer_over(self, value: cst.BaseExpression, tensors: Set[str]) -> bool:
        """`torch.optim.SGD([x, y], ...)` where every parameter is one of `tensors`."""
        if not isinstance(value, cst.Call):
            return False
        origin = self.ctx.qualified_name(value.func) or ""
        if not origin.startswith("torch.optim.") or origin.startswith("torch.optim.lr_scheduler."):
            return False
        params = semantics.positional(value, 0) or semantics.keyword(value, "params")
        if params is None or not isinstance(params.value, (cst.List, cst.Tuple)) or not params.value.elements:
            return False
        return all(dotted_name(element.value) in tensors for element in params.value.elements)

    def _cleared_in_a_project_file(self, loop) -> bool:
        """The loop, or a function of the module it calls, calls a project function that clears gradients there."""
        return any(
            project_call_shows(node, self.ctx, "clears-grad")
            for _, nodes in self.loops.sites(loop, "calls-project-function") for node in nodes
        )

    def finish(self) -> None:
        children = self.loops.children()
        reported: Set[int] = set()
        for loop in self.loops.loops.values():
            if not self.loops.trains(loop) or any(self.loops.trains(child) for child in children.get(id(loop.node), ())):
                continue
            if self.loops.sites(loop, "clears-grad") or self._cleared_in_a_project_file(loop):
                continue
            fresh = self.fresh_optimizers.get(id(loop.node), set())
            for event, steps in self.loops.sites(loop, "optimizer-step"):
                if "optimizer-step" in event.facts and dotted_name(semantics.receiver(event.node)) in fresh:
                    continue
                for step in steps:
                    if id(step) not in reported:
                        reported.add(id(step))
                        self.report(step)
