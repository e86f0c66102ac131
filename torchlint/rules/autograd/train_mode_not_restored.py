from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis import guards
from torchlint.analysis.loops import Event, Loop, LoopIndex, is_accumulating_backward
from torchlint.analysis.modules import MODULE_ROOTS, PARAMETER, STATELESS_LAYERS, ModuleClass, ModuleClasses
from torchlint.analysis.syntax import called_module
from torchlint.analysis.values import Values
from torchlint.engine.scopes import dotted_name
from torchlint.engine.walk import walk, walk_visitor
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
    DDP(model)`); nor `eval()` on a model that no layer makes behave differently in
    eval mode: built by a torch layer without dropout or running statistics (`nn.Linear`,
    convolutions, `nn.Embedding`, `nn.LayerNorm`, `nn.GroupNorm`, activations, pooling; a
    recurrent layer without `dropout=`, an `InstanceNorm` without
    `track_running_stats=True`), a `Sequential`/`ModuleList` of such (a `ModuleList` of a
    list comprehension too: `nn.ModuleList([Step(c) for _ in range(4)])`), or a Module class
    of the project made only of such layers, parameters and numbers, whose code never reads
    `training` (checked on torch 2.13: each gives the same output in both modes), followed
    four classes deep; also where a helper switches its `model` parameter
    (`accuracy(x, y, model)` calling `model.eval()`) and every model the file's calls pass
    it is such, as the value model follows parameters to their arguments. A layer the rule
    does not know (a library's model, a module passed in from a call the value model does
    not follow) keeps the finding. Nor a switch or a training step under an `if` whose test is known to
    skip it: a helper's `if self.is_test: self.net.eval()` when the training
    function sets `self.is_test = False` before its loop (and nothing the loop runs
    sets it again), or a shared train/eval function called in eval mode
    (`run_epoch(..., mode="eval")` whose steps run only `if mode == "train":`): that
    call is no training step, so a `model.train()` at the top of the epoch covers it.
    Also where the function passes the parameter on unchanged to the step's function
    (`loss_epoch(model, val_dl)` whose `opt=None` goes to `loss_batch(..., opt)`,
    which steps only `if opt is not None:`), when every call that reaches it agrees.
    Only literals are read (the call's arguments, the parameter's default, a flag set
    to a literal; a parameter passed on only while nothing rebinds it and nothing
    passes its function on as a callback); a test on anything else may run either arm.

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
    preview = (
        "Held-out rounds 18, 22 and 25 (docs/precision.md): 0 of 12 findings true at first sight; each was a training "
        "step the rule could not rule out: a shared epoch function called for validation (with `mode=\"eval\"`, or "
        "leaving out the optimizer its step needs), an `eval()` under a test-mode flag the training function clears."
    )
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
        # id of a call that switches the mode or trains -> (its function's key, the `if` tests that hold it): whether
        # it runs, where the tests read values known at the loop (`_runs`)
        self.held_by: Dict[int, Tuple[str, Tuple[guards.Arm, ...]]] = {}
        # id of a loop -> its function's flags (`_flags_at`), found when a test asks
        self.flags: Dict[int, Dict[str, object]] = {}
        # id of a call of the file's function -> function key -> the literals its parameters hold in that run
        self.passed: Dict[int, Dict[str, Dict[str, object]]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        event = self.loops.observe(node)
        if "sets-eval" in event.facts and (
            self._is_shadow_copy(semantics.receiver(node)) or _ModeFree(self.ctx).holds(semantics.receiver(node), self.ctx.stack)
        ):
            # A shadow's mode is its own; a model without a layer that eval mode changes trains the same in it.
            self.shadow_evals.add(id(node))
        if event.facts or event.callee:
            function = self.ctx.callgraph.current(self.ctx.scope_nodes, node).key
            self.function_events.setdefault(function, []).append(event)
            if not event.facts.isdisjoint(_TRAINING | _SWITCHES):
                self.held_by[id(node)] = (function, guards.arms(self.ctx.stack))

    def _is_shadow_copy(self, model: Optional[cst.BaseExpression]) -> bool:
        """A deep copy or an averaged model (EMA, SWA), or what such a wrapper holds (`self.ema.ema_model`): the
        optimizer does not train it, so its mode is its own."""
        while model is not None:
            origins = Values.of(self.ctx).origins(model, through_copies=False)
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
            for event, switches in self.loops.sites(loop, "sets-eval"):
                if (
                    id(event.node) in reported or id(event.node) in self.shadow_evals
                    # A helper's `model.eval()` on its parameter, where every model its callers pass is mode-free.
                    or all(id(switch) in self.shadow_evals for switch in switches) or self._restores_train(event)
                    or not any(self._runs(switch, event, loop) for switch in switches)
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
            if self._trains(event, loop):
                return self._picks_own_mode(event, loop)
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
            if names_model(called_module(node)):  # `model(x)` or `model.forward(x)`
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

    def _picks_own_mode(self, event: Event, loop: Loop) -> bool:
        """The event calls a training function that switches the mode itself before its first training step (a
        linear probe that trains in eval mode on purpose): the steps run in the mode it chose, whatever came before."""
        for own in self.function_events.get(event.callee, ()) if event.callee is not None else ():
            if self._trains(own, loop):
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

    def _trains(self, event: Event, loop: Loop) -> bool:
        """The event trains, itself or in the functions it calls, unless every training step it reaches sits under
        a test known to skip it (`run_epoch(..., mode="eval")` whose steps run `if mode == "train":`)."""
        if not _TRAINING.isdisjoint(event.facts):
            return self._runs(event.node, event, loop)
        return event.callee is not None and any(
            self._runs(node, event, loop) for fact in _TRAINING for node in self.ctx.callgraph.facts_of(event.callee, fact)
        )

    def _runs(self, node: cst.CSTNode, event: Event, loop: Loop) -> bool:
        """`node`, reached through the loop's `event`, may run: no `if` holding it in its function is known to take
        the other arm, given the flags set before the loop (in another function, those on `self` only: a plain
        name there is another variable) and, in the function `event` calls, the literals it passes, also where
        that function passes them on (a helper's `if self.is_test: self.net.eval()` while training sets
        `self.is_test = False`; `loss_epoch(model, val_dl)` whose `opt=None` reaches `loss_batch`'s
        `if opt is not None:`)."""
        function, held_by = self.held_by.get(id(node), (None, ()))
        if not held_by:
            return True
        flags = self.flags.get(id(loop.node))
        if flags is None:
            flags = self.flags[id(loop.node)] = self._flags_at(loop)
        if function == self.ctx.callgraph.current(loop.around).key:
            known = dict(flags)
        else:
            known = {name: value for name, value in flags.items() if name.startswith("self.")}
        if function is not None and event.callee is not None and type(event.node) is cst.Call:
            passed = self.passed.get(id(event.node))
            if passed is None:
                method = type(event.node.func) is cst.Attribute
                passed = self.passed[id(event.node)] = guards.forwarded_arguments(
                    self.ctx.callgraph, event.node, event.callee, method
                )
            known.update(passed.get(function, {}))
        return not guards.skipped(held_by, known)

    def _flags_at(self, loop: Loop) -> Dict[str, object]:
        """The names and attributes set to a literal before the loop, in its function (`self.is_test = False`), that
        neither the loop nor a function it calls sets again."""
        path = list(loop.around)
        start = max((index for index, node in enumerate(path) if type(node) is cst.FunctionDef), default=0)
        flags = guards.literal_flags_before(path[start:])
        if not flags:
            return flags
        callees = {event.callee for event in loop.events if event.callee is not None}
        bodies = [loop.node] + [
            function.node for callee in callees for function in self.ctx.callgraph.reachable(callee, depth=2)
            if function.node is not None
        ]
        for body in bodies:
            for name in guards.assigned_among(body, flags):
                del flags[name]
        return flags

    def _direct_message(self, call: cst.Call) -> str:
        return self.message.replace("`eval()`", f"`{self.ctx.code(call)}`", 1)

    def _through_call_message(self, call: cst.Call) -> str:
        name = self.ctx.code(call.func)
        return (
            f"`{name}()` switches the model to eval mode and nothing switches it back before the next training step: from the "
            "second epoch on dropout and batch norm stay in eval mode, silently; call `model.train()` at the top of "
            "each epoch (or at the end of the helper)"
        )


# Torch layers that compute the same in train and eval mode (on torch 2.13 their code never reads `self.training`),
# besides the stateless ones: parameters or buffers, but no dropout and no running statistics.
_MODE_FREE_LAYERS = STATELESS_LAYERS | frozenset(
    f"torch.nn.{name}" for name in (
        "Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
        "ConvTranspose3d", "Embedding", "EmbeddingBag", "LayerNorm", "GroupNorm", "RMSNorm",
    )
)
# Layers whose eval mode changes something only with an argument: InstanceNorm with `track_running_stats=True` uses
# running statistics in eval mode; a recurrent layer with `dropout=` drops between its layers in train mode only.
# name -> (the argument, its position, the value that changes nothing)
_MODE_FREE_UNLESS = {
    **{f"torch.nn.InstanceNorm{n}d": ("track_running_stats", 4, False) for n in (1, 2, 3)},
    **{f"torch.nn.{name}": ("dropout", 5, 0) for name in ("RNN", "LSTM", "GRU")},
}
_CONTAINERS = frozenset({"torch.nn.Sequential", "torch.nn.ModuleList"})
# Calls in a class that give it modules the attribute table does not show (also into a container it holds:
# `self.blocks.append(nn.Dropout())`), or change what `eval()` does.
_OPAQUE_CALLS = frozenset({"setattr", "add_module", "register_module", "append", "extend", "insert", "update", "train", "eval"})
# How deep `_ModeFree` follows classes into their layers: each class level takes two steps (the class, then a layer
# it assigns), so 8 reads a model four classes deep (normalizing_flows' Glow: Flow, Step, Actnorm and the layers).
_MODE_FREE_DEPTH = 8


class _ModeFree:
    """Whether a model computes the same in eval mode as in train mode, as far as the source shows: it is built by a
    torch layer that does (`_MODE_FREE_LAYERS`), a `Sequential`/`ModuleList` of such, or a Module class of the
    project whose layers all are and whose code never reads `training` (`self.training`, `F.dropout(...,
    training=...)`). A layer the rule does not know (a library's model, a class of another file it cannot read, a
    module passed in and called) may behave differently: not mode-free."""

    def __init__(self, ctx):
        self.ctx = ctx

    def holds(self, model: Optional[cst.BaseExpression], stack) -> bool:
        """Every value `model` may hold is built mode-free."""
        origins = Values.of(self.ctx).origins(model, stack) if model is not None else []
        return bool(origins) and all(
            type(origin.node) is cst.Call and not origin.applied and not origin.opaque
            and _ModeFree(origin.place.context).builds(origin.node, origin.place.stack, 0)
            for origin in origins
        )

    def builds(self, call: cst.Call, stack, depth: int) -> bool:
        if depth > _MODE_FREE_DEPTH or any(arg.star for arg in call.args):
            return False
        classes = ModuleClasses.of(self.ctx)
        built = classes.builds_module(call, stack)
        if built in _MODE_FREE_LAYERS:
            return True
        if built in _MODE_FREE_UNLESS:
            keyword, position, harmless = _MODE_FREE_UNLESS[built]
            given = semantics.keyword(call, keyword) or semantics.positional(call, position)
            return given is None or semantics.literal(given.value, None) == harmless
        if built in _CONTAINERS:
            # An empty container is filled later (`model.add_module("drop", nn.Dropout())`), out of the value's sight.
            layers = [arg.value for arg in call.args]
            if built == "torch.nn.ModuleList":
                if len(layers) == 1 and type(layers[0]) in (cst.ListComp, cst.GeneratorExp):
                    layers = [layers[0].elt]  # `nn.ModuleList([Step(c) for _ in range(4)])`: each item is built alike
                elif len(layers) != 1 or type(layers[0]) not in (cst.List, cst.Tuple):
                    return False
                else:
                    layers = [element.value for element in layers[0].elements]
            return bool(layers) and all(type(layer) is cst.Call and self.builds(layer, stack, depth + 1) for layer in layers)
        if built != "class":
            return False
        for origin in Values.of(self.ctx).origins(call.func, stack):
            if type(origin.node) is not cst.ClassDef:
                return False
            there = ModuleClasses.of(origin.place.context)
            module = there.module_class(origin.node, origin.place.scopes)
            if module is None or not _ModeFree(origin.place.context).class_is(module, depth + 1):
                return False
        return True

    def class_is(self, module: ModuleClass, depth: int) -> bool:
        """The class's bases are `nn.Module` or mode-free classes of the project, its code reads no `training`, and
        what it assigns to `self` is a literal, arithmetic, a parameter or tensor made by torch, a mode-free layer, or
        a parameter of its method that it never calls (a size)."""
        if depth > _MODE_FREE_DEPTH or "training" in self.ctx.code(module.node):
            return False
        bases = module.module_bases()
        roots = [
            base for base in module.node.bases
            if self.ctx.qualified_name(base.value, module.around) in MODULE_ROOTS
        ]
        if len(roots) + len(bases) != len(module.node.bases) or not all(
            _ModeFree(base.context).class_is(base, depth + 1) for base in bases
        ):
            return False
        uses = _SelfUses()
        walk_visitor(module.node.body, uses)
        if uses.opaque or any(method.name.value in ("train", "eval") for method in module.methods()):
            return False
        for name, values in module.attributes().items():
            for value in values:
                method = module.assigning_method(value)
                stack = module.stack_of(method) if method is not None else module.around + (module.node,)
                if not self._mode_free_value(value, stack, name in uses.called, depth):
                    return False
        return True

    def _mode_free_value(self, value: cst.BaseExpression, stack, called: bool, depth: int) -> bool:
        if not semantics.is_missing(semantics.literal(value)) or type(value) in (cst.BinaryOperation, cst.UnaryOperation):
            return True
        if type(value) is cst.Call:
            name = self.ctx.qualified_name(value.func, stack) or ""
            if name in PARAMETER or name.startswith("torch.") and ModuleClasses.of(self.ctx).builds_module(value, stack) is None:
                return True  # a parameter or a tensor: no mode
            return self.builds(value, stack, depth + 1)
        if type(value) is cst.Name and not called:
            origins = Values.of(self.ctx).origins(value, stack)
            return bool(origins) and all(origin.opaque and type(origin.node) is cst.Name for origin in origins)
        return False


class _SelfUses(cst.CSTVisitor):
    """What a class body does that its attribute table does not show: attributes assigned by unpacking or with an
    annotation, modules added by name (`setattr`, `add_module`), mode switches of its own, and the attribute names it
    calls (`self.block(x)`: a module, if it came from a parameter)."""

    def __init__(self):
        self.opaque = False
        self.called: Set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        name = semantics.terminal_name(node.func)
        if name in _OPAQUE_CALLS:
            self.opaque = True
        func = node.func
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
            self.called.add(func.attr.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(type(target.target) in (cst.Tuple, cst.List) for target in node.targets):
            self.opaque = True

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if type(node.target) is cst.Attribute:
            self.opaque = True
