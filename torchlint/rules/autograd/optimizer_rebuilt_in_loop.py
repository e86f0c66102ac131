from __future__ import annotations

from typing import FrozenSet, List, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import project_call_shows
from torchlint.analysis.loops import LOOPS, Loop
from torchlint.analysis.syntax import names_in
from torchlint.analysis.training import optimizer_class, stepped_optimizer
from torchlint.engine.scopes import dotted_name
from torchlint.engine.walk import OwnScopeVisitor, child_nodes, walk_visitor
from torchlint.rules.autograd._iteration_rule import IterationRule
from torchlint.rules.triggers import project_imports, words

# Calls that put a model back to a known state: a loop doing one of them starts each run afresh.
_RESETS = frozenset({"load_state_dict", "reset_parameters", "apply", "init_weights", "_init_weights"})
# Calls that move or convert a model in place: done with what the iteration chose, the model is new to an optimizer.
_MOVES = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16"})
_CONDITIONAL = frozenset({cst.If, cst.Try, cst.TryStar, cst.Match})


class OptimizerRebuiltInLoop(IterationRule):
    """
    ## What it does
    Flags an optimizer constructed (`optimizer = torch.optim.Adam(model.parameters(), ...)`)
    on every iteration of a loop that also steps it: in the loop body (per batch), in a
    nested loop (per epoch), or in a function the loop calls with the optimizer as an
    argument (a same-module function, or a function of another project file, followed there).

    Not flagged: an optimizer built once before the loop; loops that also rebuild or reset
    the model whose parameters the optimizer gets (cross-validation folds, hyper-parameter
    trials: `model = Net()`, `model.load_state_dict(initial)`, `model.apply(init)` in the
    loop), or move it to a device or dtype the iteration chooses (`for device in ["cpu",
    "cuda"]: model.to(device)`: the old optimizer's state would sit on the previous
    device); optimizers over tensors made in the loop (a new latent per sample); a
    construction under an `if` in the loop (rebuilt once, after unfreezing a backbone);
    `param_groups` learning-rate changes; a plain `SGD` without momentum rebuilt when no
    scheduler is built on it (it keeps no state, so a new one steps the same); a loop
    that never computes a gradient (no backward in it, in a function it calls, or in a
    closure given to `step`): its steps change no parameter, as in a loop that records a
    learning-rate schedule per setting with a fresh optimizer and scheduler each time.

    What it gives up: a function that builds its own optimizer and is called once per epoch
    (the loop is then in its caller), and optimizers built by helper functions
    (`build_optimizer(cfg)`).

    ## Why is this bad?
    A new optimizer starts with empty state: SGD's momentum buffers, Adam's moment estimates
    and step counts restart from zero at every iteration, and a learning-rate scheduler
    built on an earlier optimizer keeps stepping that one, so the schedule silently stops
    applying. Observed on torch 2.13: SGD with momentum 0.9 rebuilt every step ended at MSE
    5.07 against 0.0009 when built once; with Adam and StepLR rebuilt per epoch, the
    optimizer always ran at the initial lr 0.01 while the schedule had reached 1e-06.

    ## Fix safety
    No fix: build the optimizer (and its scheduler) once, before the loop.
    """

    code = "TL112"
    name = "optimizer-rebuilt-in-loop"
    uses_callgraph = True
    # An optimizer class's qualified name holds `optim` (`torch.optim`, `bitsandbytes.optim`), `optimizers`
    # (`apex.optimizers`) or `transformers`, written in the import or the chain; the step is in the file or in a
    # project file it imports.
    triggers = words("optim", "optimizers", "transformers") & (words("step") | project_imports())
    message = (
        "the optimizer is built again on every iteration of the loop that steps it: its state (momentum buffers, "
        "Adam's moments, step counts) restarts from zero each time, and a scheduler built on an earlier optimizer "
        "keeps stepping that one (observed: the rebuilt optimizer stays at lr 0.01 while the schedule reached "
        "1e-05); build it once before the loop"
    )
    example = """
    import torch

    for epoch in range(10):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # expect: TL112:17
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
    """
    use_instead = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(10):
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # (the construction, the name it is bound to, the innermost loop holding it)
        self.built: List[Tuple[cst.Call, str, Loop]] = []
        # Names of the optimizers a learning-rate scheduler is built on.
        self.scheduled: Set[str] = set()
        # Constructions of optimizers that keep no state between steps (plain SGD).
        self.stateless: Set[int] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        super().visit_Assign(node)
        self._note_scheduler(node.value)
        if len(node.targets) != 1 or optimizer_class(node.value, self.ctx) is None:
            return
        if _stateless(node.value, self.ctx):
            self.stateless.add(id(node.value))
        name = dotted_name(node.targets[0].target)
        loops = self.iterations.loops.enclosing()
        if name is None or not loops or self._conditional_in(loops[0].node):
            return
        self.built.append((node.value, name, loops[0]))

    def _note_scheduler(self, value: cst.BaseExpression) -> None:
        first = semantics.positional(value, 0) if type(value) is cst.Call else None
        name = dotted_name(first.value) if first is not None else None
        if name is not None and (self.ctx.qualified_name(value.func) or "").startswith("torch.optim.lr_scheduler."):
            self.scheduled.add(name)

    def _conditional_in(self, loop: cst.CSTNode) -> bool:
        """An `if`/`try`/`match` between `loop`'s body and the visited statement."""
        stack = self.ctx.stack
        inside = stack[stack.index(loop) + 1:]
        return any(type(node) in _CONDITIONAL for node in inside)

    def finish(self) -> None:
        for construction, name, loop in self.built:
            if id(construction) in self.stateless and name not in self.scheduled:
                continue  # a new plain SGD loses nothing: it has no state, and no schedule drives it
            if self._steps(loop, name) and self._computes_gradients(loop) and not self._fresh_each_time(construction, loop):
                self.report(construction)

    def _computes_gradients(self, loop: Loop) -> bool:
        """The loop runs a backward: in its body, in a same-module function it calls, in a project function, or in
        the closure an optimizer step is given (LBFGS). Without one no parameter gets a gradient, the steps change
        nothing, and a new optimizer loses nothing (a loop recording a learning-rate schedule per setting)."""
        if self.iterations.loops.sites(loop, "backward", depth=2):
            return True
        for event in loop.events:
            if type(event.node) is not cst.Call:
                continue
            if "optimizer-step" in event.facts and event.node.args:
                return True
            if "calls-project-function" in event.facts and project_call_shows(event.node, self.ctx, "backward"):
                return True
        return False

    def _steps(self, loop: Loop, name: str) -> bool:
        """The loop steps the optimizer bound to `name`: itself, or through a function it passes it to."""
        for moment in self.iterations.iteration(loop):
            if moment.shows("optimizer-step") and dotted_name(stepped_optimizer(moment.node)) == name:
                return True
        for event in loop.events:
            if type(event.node) is not cst.Call or not any(name in names_in(arg.value) for arg in event.node.args):
                continue
            if event.callee is not None and self.ctx.callgraph.facts_of(event.callee, "optimizer-step", depth=2):
                return True
            if "calls-project-function" in event.facts and project_call_shows(event.node, self.ctx, "optimizer-step"):
                return True
        return False

    def _fresh_each_time(self, construction: cst.Call, loop: Loop) -> bool:
        """The parameters are not a model's that outlives the iteration: the loop rebuilds or resets the model, or
        the optimizer gets tensors (or parameters of something) the loop makes."""
        body = _LoopBody()
        if type(loop.node) is cst.For:
            body.visit_For(loop.node)
        walk_visitor(loop.node.body, body)
        params = semantics.positional(construction, 0) or semantics.keyword(construction, "params")
        if params is None:
            return True
        models = _parameter_owners(params.value, body, 3)
        if not models:
            return True
        # A model moved to a device (or dtype) the iteration chose (`for device in ["cpu", "cuda"]: model.to(device)`):
        # the old optimizer's state sits on the previous device, and a new optimizer is what the move needs.
        moved = {owner for owner, names in body.moves if not names.isdisjoint(body.assigned)}
        return any(
            model in body.assigned or model.split(".")[0] in body.assigned or model in body.reset
            or any(model == owner or model.startswith(owner + ".") for owner in moved)  # moving `model` moves `model.fc`
            for model in models
        )


def _stateless(construction: cst.Call, ctx) -> bool:
    """`torch.optim.SGD(...)` without momentum: each step reads nothing of the steps before it."""
    if optimizer_class(construction, ctx) != "torch.optim.SGD":
        return False
    momentum = semantics.keyword(construction, "momentum") or semantics.positional(construction, 2)
    return momentum is None or semantics.literal(momentum.value) == 0


class _LoopBody(OwnScopeVisitor):
    """What a loop body (re)binds, by dotted name, and which receivers it resets."""

    def __init__(self):
        self.assigned: Set[str] = set()
        self.values: dict = {}
        self.reset: Set[str] = set()
        # (receiver, the names its arguments read) of each `.to(...)`/`.cuda(...)`-style move
        self.moves: List[Tuple[str, FrozenSet[str]]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, None)

    def _bind(self, target: cst.BaseExpression, value) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, None)
            return
        name = dotted_name(target)
        if name is not None:
            self.assigned.add(name)
            self.values.setdefault(name, []).append(value)

    def visit_Call(self, node: cst.Call) -> None:
        method = semantics.method_name(node)
        if method in _RESETS or method in _MOVES:
            owner = dotted_name(semantics.receiver(node))
            if owner is None:
                return
            if method in _RESETS:
                self.reset.add(owner)
            else:
                # the names the arguments read, whole and by their heads (`args.device`, `args`)
                read = (name for arg in node.args for name in names_in(arg.value))
                self.moves.append((owner, frozenset(part for name in read for part in (name, name.split(".")[0]))))


def _parameter_owners(expr: cst.BaseExpression, body: _LoopBody, depth: int) -> Set[str]:
    """The models whose `.parameters()` (or `.named_parameters()`) `expr` reads, through names the loop body assigns."""
    found: Set[str] = set()
    pending = [expr]
    while pending:
        node = pending.pop()
        if type(node) is cst.Call and semantics.method_name(node) in ("parameters", "named_parameters"):
            owner = dotted_name(semantics.receiver(node))
            if owner is not None:
                found.add(owner)
                continue
        name = dotted_name(node) if type(node) in (cst.Name, cst.Attribute) else None
        if name is not None and name in body.values and depth > 0:
            for value in body.values[name]:
                if value is None:
                    found.add(name)  # made in the loop by something not followed: fresh
                else:
                    found |= _parameter_owners(value, body, depth - 1)
            continue
        if type(node) not in LOOPS:
            pending.extend(child_nodes(node))
    return found
