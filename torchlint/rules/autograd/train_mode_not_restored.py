from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from torchlint import semantics
from torchlint.analysis.loops import Event, Loop, LoopIndex, is_accumulating_backward
from torchlint.analysis.values import Values
from torchlint.engine.scopes import dotted_name
from torchlint.engine.walk import walk
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words


# What builds a shadow of a model the optimizer does not train: a deep copy, SWA's average, the EMA wrappers.
_SHADOW_COPIES = frozenset({
    "copy.deepcopy", "torch.optim.swa_utils.AveragedModel", "ema_pytorch.EMA", "ema_pytorch.ema_pytorch.EMA",
    "torch_ema.ExponentialMovingAverage", "timm.utils.ModelEma", "timm.utils.ModelEmaV2", "timm.utils.ModelEmaV3",
    "timm.utils.model_ema.ModelEma", "timm.utils.model_ema.ModelEmaV2", "timm.utils.model_ema.ModelEmaV3",
})
_SETS_TRAIN = frozenset({"sets-train", "may-set-train"})
_TRAINING = frozenset({"backward", "optimizer-step"})
_SWITCHES = _SETS_TRAIN | {"sets-eval"}
# A model whose parameters these give away may be trained by what receives them.
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})


class TrainModeNotRestored(Rule):
    """
    ## What it does
    Flags `model.eval()` in an epoch loop that trains (backward and an optimizer step, in
    the loop or in a function of the module it calls) when nothing in the loop switches
    the model back with `model.train()` (or `.train(True)`, or `.train(<variable>)`) before
    the next training step. An `eval()` made inside a called function (`validate()`) is
    reported at the call.

    The order counts: going on from the `eval()` through the loop body, and round to
    its top for the next epoch, a switch back to train mode must come before the next
    training step. A `validate()` that restores the mode does not cover an
    `evaluate()` called after it that does not.

    Not flagged: `model.train()` between the `eval()` and the next training step (at
    the top of the epoch body, after the evaluation, or in the training function the
    loop calls), an evaluation helper that switches back itself, and evaluation after
    the last epoch (outside the loop), `eval()` on a deep copy or an averaged model (an
    EMA or SWA shadow the optimizer does not train: `copy.deepcopy`, `AveragedModel`,
    `ema_pytorch.EMA`, `torch_ema`, timm's `ModelEma*`, and what they hold, such as
    `self.ema.ema_model`), nor a loop that picks the mode each iteration
    (`model.train() if phase == "train" else model.eval()`), nor a training function
    that switches the mode itself before its first step: a linear probe on frozen
    features calls `model.eval()` and then trains, on purpose, from the first epoch on
    (one that switches to eval mode after its steps is still reported), nor an evaluation
    on a loop's last iteration only (`if i == len(loader) - 1:`, `i + 1 == len(loader)`,
    also over `tqdm(loader)` or `list(enumerate(loader))`): that loop has no step after
    it, and the loop around it is judged on its own, so a `model.train()` at the top of
    the epoch covers it; nor `eval()` on a model the loop only runs for inference, when
    the loop runs its backward itself: every call of it under `no_grad`, given to no
    call but functions of the file that do not train (a hand-rolled EMA updated by
    `accumulate(g_ema, generator)`; not a model a wrapper it trains holds, `ddp =
    DDP(model)`).

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
        self.shadow_evals: Set[int] = set()
        # function key -> its calls with facts or a same-module callee, in source order (`_picks_own_mode`)
        self.function_events: Dict[str, List[Event]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        event = self.loops.observe(node)
        if "sets-eval" in event.facts and self._is_shadow_copy(semantics.receiver(node)):
            self.shadow_evals.add(id(node))
        if event.facts or event.callee:
            function = self.ctx.callgraph.current(self.ctx.scope_nodes, node).key
            self.function_events.setdefault(function, []).append(event)

    def _is_shadow_copy(self, model: Optional[cst.BaseExpression]) -> bool:
        """A deep copy or an averaged model (EMA, SWA), or what such a wrapper holds (`self.ema.ema_model`): the
        optimizer does not train it, so its mode is its own."""
        while model is not None:
            origins = Values.of(self.ctx).origins(model)
            if origins and all(
                type(origin.node) is cst.Call
                and origin.place.context.qualified_name(origin.node.func, origin.place.stack) in _SHADOW_COPIES
                for origin in origins
            ):
                return True
            model = model.value if type(model) is cst.Attribute else None
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        self.loops.observe(node)

    def finish(self) -> None:
        reported: Set[int] = set()
        for loop in self.loops.loops.values():
            if not self.loops.trains(loop):
                continue
            for event, _ in self.loops.sites(loop, "sets-eval"):
                if (
                    id(event.node) in reported or id(event.node) in self.shadow_evals or self._restores_train(event)
                    or self._restored_before_training(loop, event) or self._only_inferred_in(loop, event)
                ):
                    continue
                reported.add(id(event.node))
                if "sets-eval" in event.facts:
                    self.report(event.node, self._direct_message(event.node))
                else:
                    self.report(event.node, self._through_call_message(event.node))

    def _restored_before_training(self, loop: Loop, switch: Event) -> bool:
        """Going on from `switch` in the loop body, and round to its top for the next iteration, a switch back to
        train mode comes before the next training step."""
        events = sorted(loop.events, key=lambda event: event.seq)
        if any(self._restores_train(event) and event.excludes(switch) for event in events):
            return True  # `model.train() if phase == "train" else model.eval()`: each iteration picks its mode
        position = events.index(switch)
        following = events[position + 1:]
        last_iteration = id(loop.node) in switch.last_of
        if not last_iteration:
            # Round to the switch itself: a training function that switched to eval mode runs again next epoch.
            following += events[:position + 1]
        for event in following:
            if self._restores_train(event):
                return True
            if self._trains(event):
                return self._picks_own_mode(event)
        # A switch on the loop's last iteration only (`if i == len(loader) - 1:`) has no next step in this loop:
        # the loop around it, if any, is judged on its own.
        return last_iteration

    def _only_inferred_in(self, loop: Loop, switch: Event) -> bool:
        """The model switched (`g_ema.eval()`) is not the one the loop trains: the loop runs its backward itself, and
        uses that model only for inference (every call of it under `no_grad`), giving it to no call except functions
        of the file that do not train (`accumulate(g_ema, generator)`): a hand-rolled average of the trained model."""
        if "sets-eval" not in switch.facts or not any(
            is_accumulating_backward(event.node) for event in loop.events if "backward" in event.facts
        ):
            return False
        model = semantics.receiver(switch.node)
        written = dotted_name(model) if model is not None else None
        if written is None:
            return False
        inferred = True
        stack: List[cst.CSTNode] = list(loop.around)

        def names_model(expr: cst.BaseExpression) -> bool:
            return dotted_name(expr) == written

        def on_visit(node: cst.CSTNode) -> bool:
            nonlocal inferred
            stack.append(node)
            if type(node) is not cst.Call or not inferred:
                return inferred
            func = node.func
            if names_model(func) or (type(func) is cst.Attribute and func.attr.value == "forward" and names_model(func.value)):
                inferred = semantics.grad_enabled_at(stack, self.ctx) is False
            elif any(names_model(arg.value) for arg in node.args):
                callee = self.ctx.callgraph.callee_key(node, stack)
                inferred = callee is not None and not any(self.ctx.callgraph.facts_of(callee, fact) for fact in _TRAINING)
            elif type(func) is cst.Attribute and func.attr.value in _PARAMETER_METHODS and names_model(func.value):
                inferred = False
            elif dotted_name(func) is not None and semantics.grad_enabled_at(stack, self.ctx) is not False:
                # `ddp_model(x)` where `ddp_model = DDP(model)`: the wrapper runs the model in its mode
                inferred = not any(
                    type(origin.node) is cst.Call and any(names_model(arg.value) for arg in origin.node.args)
                    for origin in Values.of(self.ctx).origins(func, tuple(stack))
                )
            return inferred

        walk(loop.node.body, on_visit, lambda node: stack.pop())
        return inferred

    def _picks_own_mode(self, event: Event) -> bool:
        """The event calls a training function that switches the mode itself before its first training step (a
        linear probe that trains in eval mode on purpose): the steps run in the mode it chose, whatever came before."""
        for own in self.function_events.get(event.callee, ()) if event.callee is not None else ():
            if self._trains(own):
                return False
            if not _SWITCHES.isdisjoint(own.facts) and id(own.node) not in self.shadow_evals:
                return True
        return False

    def _restores_train(self, event: Event) -> bool:
        """The event switches to train mode, itself or in the functions it calls (`validate()` that restores it)."""
        if not _SETS_TRAIN.isdisjoint(event.facts):
            return True
        return event.callee is not None and any(
            self.ctx.callgraph.facts_of(event.callee, fact, depth=2) for fact in _SETS_TRAIN
        )

    def _trains(self, event: Event) -> bool:
        if not _TRAINING.isdisjoint(event.facts):
            return True
        return event.callee is not None and any(self.ctx.callgraph.facts_of(event.callee, fact) for fact in _TRAINING)

    def _direct_message(self, call: cst.Call) -> str:
        return self.message.replace("`eval()`", f"`{self.ctx.code(call)}`", 1)

    def _through_call_message(self, call: cst.Call) -> str:
        name = self.ctx.code(call.func)
        return (
            f"`{name}()` switches the model to eval mode and nothing switches it back before the next training step: from the "
            "second epoch on dropout and batch norm stay in eval mode, silently; call `model.train()` at the top of "
            "each epoch (or at the end of the helper)"
        )

