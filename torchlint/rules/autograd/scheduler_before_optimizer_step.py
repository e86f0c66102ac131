from __future__ import annotations

from typing import List, Sequence, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.loops import Event, Loop, LoopIndex
from torchlint.analysis.training import Iterations
from torchlint.engine.callgraph import MODULE
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes, fragments

_PLATEAU = frozenset({"torch.optim.lr_scheduler.ReduceLROnPlateau"})
# Before 1.1 a scheduler stepped first was the documented order (its constructor did not set the first rate).
STEP_AFTER_OPTIMIZER_SINCE = (1, 1)


class SchedulerBeforeOptimizerStep(Rule):
    """
    ## What it does
    Flags `<scheduler>.step()` called before `<optimizer>.step()` in the same loop body:
    the first optimizer step of the loop (in the body, a nested loop, or a function of
    the module called there) comes after the scheduler's step. Also a scheduler stepped
    outside any loop of a function of the module that a loop calls, when the first
    optimizer step of that loop's iteration comes after it: before the call, none; in the
    function, none before the scheduler's step and one after it, or one after the call
    (`def train(epoch): scheduler.step()`, then the batch loop with `optimizer.step()`,
    with `for epoch in ...: train(epoch)`).

    A scheduler is a value built by `torch.optim.lr_scheduler` or by a class of the
    project deriving from one (`_LRScheduler`, `LRScheduler`); a value whose origin is
    not known is one when named like one (`.*sched.*`, any case).

    Not flagged: an object of a project class that does not derive from a torch
    scheduler (its `step()` may set the rate the next update uses, and torch does not
    warn), a scheduler stepped with an argument (`ReduceLROnPlateau` stepped with a
    validation metric), a scheduler stepped once per epoch after the inner training
    loop, and code for torch below 1.1 (`torch-version`, or the project's own torch
    requirement: see the configuration page), where stepping the scheduler first was the
    documented order and skipped nothing.

    ## Why is this bad?
    Since PyTorch 1.1 the scheduler is meant to step after the optimizer. Stepped first,
    it moves the learning rate before any update uses it, so the first value of the
    schedule is skipped (a warm-up starts one step in, a step decay happens one epoch
    early); torch warns once at runtime: `Detected call of lr_scheduler.step() before
    optimizer.step()`.

    ## Fix safety
    No fix: move `scheduler.step()` after `optimizer.step()`.
    """

    code = "TL109"
    name = "scheduler-before-optimizer-step"
    preview = (
        "In preview after held-out rounds 30-33 (docs/precision.md): 9 of 11 findings true at first sight. The false "
        "ones were a project's own scheduler class (its `step()` sets the rate for the next update, so calling it "
        "first is right), taken for torch's by its variable's name; the rule leaves preview again when two rounds in "
        "a row read it at least 9 in 10 true."
    )
    uses_callgraph = True
    # Only a `.step()` call of a scheduler is reported: built from `torch.optim.lr_scheduler` (or a project class
    # deriving from it), or of unknown origin and named like one (`.*sched.*`, any case).
    triggers = attributes("step") & fragments("sched")
    message = (
        "`scheduler.step()` runs before `optimizer.step()` in this loop: the learning rate changes before the first "
        "update uses it, so the first value of the schedule is skipped (torch warns `Detected call of "
        "lr_scheduler.step() before optimizer.step()`); call it after `optimizer.step()`"
    )
    # For a step in a function a loop calls: the loop is the caller's.
    message_in_called_function = (
        "`scheduler.step()` runs before `optimizer.step()` in each iteration of the loop that calls this function: the "
        "learning rate changes before the first update uses it, so the first value of the schedule is skipped (torch "
        "warns `Detected call of lr_scheduler.step() before optimizer.step()`); call it after `optimizer.step()`"
    )
    example = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
    for epoch in range(100):
        scheduler.step()  # expect: TL109:5
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
    """
    use_instead = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
    for epoch in range(100):
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        scheduler.step()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loops = ctx.shared(LoopIndex)
        self.iterations = ctx.shared(Iterations)
        self.scheduler_steps: List[Tuple[cst.Call, int, Loop]] = []
        # Scheduler steps outside any loop of their function: the node, its order in the walk, the function's key.
        self.function_steps: List[Tuple[cst.Call, int, str]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        self.iterations.observe(node)

    def visit_Call(self, node: cst.Call) -> None:
        event = self.iterations.observe(node)
        if semantics.method_name(node) != "step" or node.args or self.ctx.config.torch_version < STEP_AFTER_OPTIMIZER_SINCE:
            return
        scheduler = semantics.receiver(node)
        if not semantics.is_scheduler(scheduler, self.ctx) or semantics.built_from_in(scheduler, _PLATEAU, self.ctx):
            return
        loops = self.loops.enclosing()
        if loops:
            self.scheduler_steps.append((node, event.seq, loops[0]))
            return
        function = self.ctx.callgraph.current(self.ctx.scope_nodes, node).key
        if function != MODULE:
            self.function_steps.append((node, event.seq, function))

    def finish(self) -> None:
        for node, seq, loop in self.scheduler_steps:
            optimizer_steps = [event.seq for event, _ in self.loops.sites(loop, "optimizer-step")]
            if optimizer_steps and min(optimizer_steps) > seq:
                self.report(node)
        for node, seq, function in self.function_steps:
            if any(self._first_step_after(seq, function, loop, call) for loop, call in self.loops.calls_of(function)):
                self.report(node, self.message_in_called_function)

    def _first_step_after(self, seq: int, function: str, loop: Loop, call: Event) -> bool:
        """In an iteration of `loop`, which calls `function` at `call`, the scheduler step at `seq` in the function
        comes before every optimizer step, and one follows it: in the function after it, or in the loop after the
        call."""
        own = [event for event in self.iterations.events(function) if event.callee != function]
        outer = [event for event in loop.events if event.node is not call.node]
        before = [event for event in own if event.seq < seq] + [event for event in outer if event.seq < call.seq]
        after = [event for event in own if event.seq > seq] + [event for event in outer if event.seq > call.seq]
        return not self._steps_optimizer(before) and self._steps_optimizer(after)

    def _steps_optimizer(self, events: Sequence[Event]) -> bool:
        """One of `events` steps an optimizer, itself or in a same-module function it calls (one call below)."""
        return any(
            "optimizer-step" in event.facts
            or (event.callee is not None and self.ctx.callgraph.facts_of(event.callee, "optimizer-step"))
            for event in events
        )
