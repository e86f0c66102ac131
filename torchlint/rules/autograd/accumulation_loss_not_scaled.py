from __future__ import annotations

from typing import Dict, List, Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis.training import Moment, is_backward, optimizer_class, stepped_optimizer
from torchlint.analysis.values import Values
from torchlint.engine.walk import child_nodes
from torchlint.rules.autograd._iteration_rule import IterationRule
from torchlint.rules.triggers import words

class AccumulationLossNotScaled(IterationRule):
    """
    ## What it does
    Flags the `backward()` of a gradient-accumulation loop, one that runs `backward()` on
    every iteration but `step()` and `zero_grad()` only under an `if` on a modulo
    (`if (i + 1) % k == 0:`), when the loss is not divided by the accumulation count and the
    update is sensitive to the gradient's size: the optimizer is `torch.optim.SGD`, or the
    gradients are clipped in the loop.

    Not flagged: `(loss / k).backward()`, `loss = loss / accumulation_steps` (or any other
    division or multiplication of the loss, `loss /= k` included) before the backward;
    losses with `reduction="sum"` (designs that scale the learning rate instead); Adam,
    AdamW and other optimizers, or an optimizer built elsewhere, without clipping; loops
    without accumulation.

    What it gives up (so that it stays quiet where it cannot tell): losses whose origin the
    value model cannot follow (a loss unpacked from a tuple a library returns), a backward
    in a function the loop calls, and Adam-like optimizers, which normalise the gradient's
    scale away (only their epsilon and any clipping see it).

    ## Why is this bad?
    Each `backward()` adds its gradient into `.grad`: after k of them the gradient is the sum
    of k batch gradients, k times the mean gradient of the k batches (observed on torch
    2.13: after k backwards the gradient is exactly k times one batch's). SGD's step is
    then k times larger than the large-batch step the accumulation stands for, and a clip
    threshold is compared against a norm k times larger.

    ## Fix safety
    No fix: divide the loss by the accumulation count before `backward()`, or scale the
    learning rate down by it on purpose.
    """

    code = "TL116"
    name = "accumulation-loss-not-scaled"
    uses_callgraph = True
    # A finding needs a backward and an optimizer step in the file, and a modulo in an `if`.
    triggers = words("backward") & words("step")
    message = (
        "gradients accumulate over `{k}` backwards before each step, but the loss is not divided by `{k}`: the "
        "accumulated gradient is the sum, `{k}` times the mean gradient of those batches (observed: exactly k times "
        "one batch's), so {why}; divide the loss by `{k}` before `backward()`"
    )
    example = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()  # expect: TL116:5
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    use_instead = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # id of an `if` whose test holds a modulo -> the modulo's right operand (the accumulation count)
        self.modulo_ifs: Dict[int, cst.BaseExpression] = {}

    def visit_If(self, node: cst.If) -> None:
        count = _modulus(node.test)
        if count is not None:
            self.modulo_ifs[id(node)] = count

    def finish(self) -> None:
        if not self.modulo_ifs:
            return
        for _, moments in self.iterations.training_loops():
            self._judge(moments)

    def _judge(self, moments: List[Moment]) -> None:
        backwards = [moment for moment in moments if is_backward(moment) and moment.site.node is moment.node]
        steps = [moment for moment in moments if moment.shows("optimizer-step")]
        clears = [moment for moment in moments if moment.shows("clears-grad")]
        if not backwards or not clears:
            return
        for backward in backwards:
            count = self._accumulation_count(backward, steps, clears)
            if count is None:
                continue
            why = self._why_it_matters(moments, steps)
            if why is None or not self._unscaled(backward.node):
                continue
            k = self.ctx.code(count)
            self.report(backward.node, self.message.format(k=k, why=why))

    def _accumulation_count(self, backward: Moment, steps: List[Moment], clears: List[Moment]) -> Optional[cst.BaseExpression]:
        """The count `k` when every step and every clearing sits under an `if ... % k ...` that the backward is not
        under."""
        counts = []
        for moment in steps + clears:
            found = [self.modulo_ifs[node] for node, _ in moment.arms if node in self.modulo_ifs and not any(
                node == other for other, _ in backward.arms
            )]
            if not found:
                return None
            counts.append(found[0])
        return counts[0] if counts else None

    def _why_it_matters(self, moments: List[Moment], steps: List[Moment]) -> Optional[str]:
        if any(moment.shows("clips-grad") for moment in moments):
            return "the clip threshold is compared against a norm that many times larger"
        for step in steps:
            optimizer = stepped_optimizer(step.node)
            stack = self.iterations.stack(step.node)
            origins = Values.of(self.ctx).origins(optimizer, stack) if optimizer is not None else []
            if origins and all(
                optimizer_class(origin.node, origin.place.context, origin.place.stack) == "torch.optim.SGD" for origin in origins
            ):
                return "each SGD step is that many times larger than the step of the batch it stands for"
        return None

    def _unscaled(self, backward: cst.Call) -> bool:
        """Every value the backpropagated loss may hold is a loss call (or a model output's `.loss`) with no division
        or multiplication on the way, and not a `reduction="sum"` loss."""
        loss = semantics.receiver(backward)
        if loss is None or backward.args:
            return False
        if type(loss) is cst.Call and semantics.method_name(loss) == "scale" and len(loss.args) == 1:
            loss = loss.args[0].value  # scaler.scale(loss).backward()
        stack = self.iterations.stack(backward)
        origins = Values.of(self.ctx).origins(loss, stack)
        if not origins:
            return False
        for origin in origins:
            node = origin.node
            if origin.opaque or type(node) not in (cst.Call, cst.Attribute):
                return False  # unknown, or arithmetic on the way (`criterion(out, y) / k`, `a + b`)
            # An applied origin is the output of the module `node` builds (`nn.CrossEntropyLoss(...)`).
            if type(node) is cst.Call and (_reduction(node) == "sum" or (not origin.applied and _summed(node, origin))):
                return False
        return True


def _summed(call: cst.Call, origin) -> bool:
    """`reduction="sum"` on the criterion the loss call calls."""
    context = origin.place.context
    return any(
        type(built.node) is cst.Call and _reduction(built.node) == "sum"
        for built in Values.of(context).origins(call.func, origin.place.stack)
    )


def _reduction(call: cst.Call):
    reduction = semantics.keyword(call, "reduction")
    return semantics.literal(reduction.value) if reduction is not None else None


def _modulus(test: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The right operand of the first `%` in an `if` test (`(i + 1) % k == 0`, `step % accum != 0 or last`)."""
    pending = [test]
    while pending:
        node = pending.pop()
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.Modulo:
            return node.right
        if type(node) not in (cst.Call, cst.Lambda):
            pending.extend(child_nodes(node))
    return None
