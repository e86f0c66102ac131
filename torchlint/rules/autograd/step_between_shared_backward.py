from __future__ import annotations

from typing import Iterator, List, Optional, Set

import libcst as cst

from torchlint import semantics
from torchlint.analysis.training import Moment, is_backward, optimizer_model, stepped_optimizer
from torchlint.analysis.values import Values
from torchlint.engine.scopes import dotted_name
from torchlint.engine.walk import child_nodes
from torchlint.rules.autograd._iteration_rule import IterationRule
from torchlint.rules.triggers import words

# Methods and attributes that cut the graph: what is read through them is not backpropagated.
_CUTS = frozenset({"detach", "item", "tolist", "numpy", "data"})
_MAX_DEPTH = 8


class StepBetweenSharedBackward(IterationRule):
    """
    ## What it does
    Flags the second `backward()` in a training step that runs `a.backward(retain_graph=True)`,
    then `optimizer.step()`, then `b.backward()` where `b` is computed from a forward of the
    stepped model made before the step (GAN-style loops that reuse one forward for both
    losses): in one loop body or one function body, the functions of the module it calls
    spliced in.

    The stepped model is the one the optimizer was built on (`opt_d = Adam(netD.parameters())`,
    a forward `netD(...)`); `b` is followed back through the assignments of its function,
    not through `.detach()`, `.item()` or `.data`.

    Not flagged: `step()` after both backwards; separate forwards for each backward
    (`fake.detach()` for the discriminator, a new `netD(fake)` for the generator after the
    step); a second loss that reaches only other models' forwards made before the step (the
    generator's `fake`, when only the discriminator was stepped).

    What it gives up: optimizers whose model is not known in the file (built by a helper, or
    over a list of tensors), and graphs shared through attributes (`self.out`).

    ## Why is this bad?
    `step()` updates the parameters in place, and the retained graph still holds the saved
    values it needs from before the update, checked by version counters. The second backward
    through that graph fails: `RuntimeError: one of the variables needed for gradient
    computation has been modified by an inplace operation` (observed on torch 2.13). Where it
    does not fail (no saved parameter on the path), the gradients mix weights from before and
    after the step.

    ## Fix safety
    No fix: run both backwards before the step, or recompute the forward after the step.
    """

    code = "TL115"
    name = "step-between-shared-backward"
    uses_callgraph = True
    # Only a backward after one with `retain_graph=True` is flagged.
    triggers = words("retain_graph") & words("step")
    message = (
        "this `backward()` runs through a graph kept by `backward(retain_graph=True)` before `step()`, and the step "
        "has updated in place the weights that graph saved: it raises `RuntimeError: one of the variables needed for "
        "gradient computation has been modified by an inplace operation`; step after both backwards, or run a new "
        "forward after the step"
    )
    example = """
    import torch

    opt_d = torch.optim.Adam(netD.parameters())
    for real in loader:
        optimizer.zero_grad()
        out = netD(generator(noise()))
        loss_d = criterion(out, fake_labels)
        loss_d.backward(retain_graph=True)
        opt_d.step()
        loss_g = criterion(out, real_labels)
        loss_g.backward()  # expect: TL115:5
        opt_g.step()
    """
    use_instead = """
    import torch

    opt_d = torch.optim.Adam(netD.parameters())
    for real in loader:
        optimizer.zero_grad()
        fake = generator(noise())
        loss_d = criterion(netD(fake.detach()), fake_labels)
        loss_d.backward()
        opt_d.step()
        loss_g = criterion(netD(fake), real_labels)
        loss_g.backward()
        opt_g.step()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.reported: Set[int] = set()

    def finish(self) -> None:
        for moments in self.iterations.sequences():
            self._judge(moments)

    def _judge(self, moments: List[Moment]) -> None:
        for first_index, first in enumerate(moments):
            if not is_backward(first) or not _retains_graph(first.node):
                continue
            for step_index in range(first_index + 1, len(moments)):
                step = moments[step_index]
                if step.shows("optimizer-step") and step.function == first.function and not step.excludes(first):
                    self._judge_after_step(moments, step_index, first)
                    break

    def _judge_after_step(self, moments: List[Moment], step_index: int, first: Moment) -> None:
        step = moments[step_index]
        optimizer = stepped_optimizer(step.node)
        model = optimizer_model(optimizer, self.ctx, self.iterations.stack(step.node)) if optimizer is not None else None
        if model is None:
            return
        for second in moments[step_index + 1:]:
            if not is_backward(second) or second.excludes(step) or second.function != step.function:
                continue
            loss = _backpropagated(second.node)
            if loss is not None and id(second.node) not in self.reported and self._reads_forward_before(
                loss, second.node, step.node, model,
            ):
                self.reported.add(id(second.node))
                self.report(second.node)
            return

    def _reads_forward_before(self, loss: cst.BaseExpression, backward: cst.Call, step: cst.Call, model: str) -> bool:
        """`loss` depends, through the assignments of its function, on a call of `model` made before `step`."""
        values = Values.of(self.ctx)
        backward_place = values.place(self.iterations.stack(backward))
        scope = backward_place.scopes[-1]
        flow = values.flow(scope)
        step_position = flow.position(values.place(self.iterations.stack(step)).stack)
        position = flow.position(backward_place.stack)
        if step_position is None or position is None:
            return False
        pending = [(loss, position, 0)]
        seen: Set[int] = set()
        while pending:
            expr, at, depth = pending.pop()
            for name in _graph_names(expr):
                for binding in flow.reaching(name, at):
                    if binding.value is None or binding.order >= at[0] or id(binding.statement) in seen:
                        continue
                    seen.add(id(binding.statement))
                    if binding.order < step_position[0] and _calls(binding.value, model):
                        return True
                    if depth < _MAX_DEPTH:
                        pending.append((binding.value, (binding.order, binding.blocks), depth + 1))
        return False


def _retains_graph(call: cst.CSTNode) -> bool:
    return type(call) is cst.Call and semantics.keyword_is_true(call, "retain_graph")


def _backpropagated(call: cst.Call) -> Optional[cst.BaseExpression]:
    """`loss` for `loss.backward()` and `torch.autograd.backward(loss)`."""
    if (dotted_name(call.func) or "").endswith("autograd.backward"):
        first = semantics.positional(call, 0) or semantics.keyword(call, "tensors")
        return first.value if first is not None else None
    return semantics.receiver(call)


def _graph_names(expr: cst.CSTNode) -> Iterator[str]:
    """The variables an expression reads that its autograd graph can reach (not through `.detach()`, `.data`)."""
    pending = [expr]
    while pending:
        node = pending.pop()
        if type(node) is cst.Name:
            yield node.value
        elif type(node) is cst.Attribute:
            if node.attr.value not in _CUTS:
                pending.append(node.value)
        elif type(node) is cst.Call:
            if semantics.method_name(node) in _CUTS:
                continue
            pending.extend(arg.value for arg in node.args)
            pending.append(node.func)
        elif type(node) not in (cst.Lambda, cst.FunctionDef):
            pending.extend(child_nodes(node))


def _calls(expr: cst.CSTNode, model: str) -> bool:
    """`expr` calls `model(...)` or `model.forward(...)`."""
    pending = [expr]
    while pending:
        node = pending.pop()
        if type(node) is cst.Call:
            callee = dotted_name(node.func)
            if callee == model or callee == f"{model}.forward":
                return True
            if semantics.method_name(node) in _CUTS:
                continue
        pending.extend(child_nodes(node))
    return False
