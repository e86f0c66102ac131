from __future__ import annotations

import libcst as cst

from torchlint.analysis.loops import loop_nodes
from torchlint.analysis.losses import LOSS_FUNCTIONS, is_loss_module
from torchlint.analysis.values import Origin, Values
from torchlint.engine.scopes import dotted_name
from torchlint.rules.base import Rule
from torchlint.rules.triggers import fragments


class CriterionOverwritten(Rule):
    """
    ## What it does
    Flags, inside a loop, an assignment that rebinds the name of a loss module to that
    module's own result: `loss = nn.CrossEntropyLoss()` before the loop, then
    `loss = loss(out, y)` in it (also `self.loss = self.loss(out, y)`).

    A functional loss kept as a value is the same mistake: `loss = F.cross_entropy` before the
    loop, then `loss = loss(out, y)` in it.

    Not flagged: different names (`criterion = nn.CrossEntropyLoss()`,
    `loss = criterion(out, y)`); a rebinding outside any loop (nothing calls the name again);
    functional losses called directly (`loss = F.cross_entropy(out, y)`); a loop body that builds the loss
    module again before the call on every iteration.

    What it gives up: a criterion received as a parameter (`def train(model, loss, loader)`),
    whose origin is the caller's.

    ## Why is this bad?
    After the first iteration the name holds the loss tensor, not the module, so the next
    call fails: observed on torch 2.13, iteration 0 runs and iteration 1 raises
    `TypeError: 'Tensor' object is not callable`. A crash rather than a silent error, but
    one that appears only once the loop runs a second time, after a first epoch or batch of
    a long job.

    ## Fix safety
    No fix: rename one of the two (`criterion = nn.CrossEntropyLoss()`).
    """

    code = "TL113"
    name = "criterion-overwritten"
    # The loss module's class (`nn.*Loss`) is written in the file.
    triggers = fragments("loss")
    message = (
        "this rebinds the loss module to its own result: the next iteration calls a tensor and raises "
        "`TypeError: 'Tensor' object is not callable` (observed on the second iteration); keep the module under "
        "another name (`criterion = ...`)"
    )
    example = """
    import torch.nn as nn

    loss = nn.CrossEntropyLoss()
    for x, y in loader:
        loss = loss(model(x), y)  # expect: TL113:5
        loss.backward()
    """
    use_instead = """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
    """

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if len(node.targets) != 1 or type(value) is not cst.Call or type(value.func) not in (cst.Name, cst.Attribute):
            return
        # The names first: most assignments of a call assign another name than the callee's.
        target = node.targets[0].target
        if dotted_name(target) != dotted_name(value.func) or not target.deep_equals(value.func):
            return
        loops = loop_nodes(self.ctx.stack)
        if not loops or self._built_each_iteration(value.func, loops[0]):
            return
        values = Values.of(self.ctx)
        if any(_is_loss_value(origin) for origin in values.origins(value.func)):
            self.report(node.targets[0].target)

    def _built_each_iteration(self, name: cst.BaseExpression, loop: cst.CSTNode) -> bool:
        """The loop body binds the name again before this statement, on every iteration."""
        if type(name) is not cst.Name:
            return False
        values = Values.of(self.ctx)
        place = values.place(self.ctx.stack)
        scope = self.ctx.scopes.binding_scope(name.value, place.scopes)
        if scope is None or scope.node is not place.scopes[-1]:
            return False
        flow = values.flow(scope.node)
        position = flow.position(place.stack)
        if position is None:
            return False
        order, blocks = position
        return any(
            binding.order < order and id(loop.body) in binding.blocks and blocks[: len(binding.blocks)] == binding.blocks
            for binding in flow.bindings.get(name.value, ())
        )


def _is_loss_value(origin: Origin) -> bool:
    """The origin is a loss module built (`nn.CrossEntropyLoss()`) or a torch loss function as a value
    (`criterion = F.cross_entropy`): calling either gives a tensor, which the next iteration cannot call."""
    node = origin.node
    if origin.applied or origin.opaque:
        return False
    qualified = origin.place.context.qualified_name
    if type(node) is cst.Call:
        return is_loss_module(qualified(node.func, origin.place.stack))
    if type(node) in (cst.Name, cst.Attribute):
        function = qualified(node, origin.place.stack) or ""
        last = function.rpartition(".")[2]
        return function.startswith("torch.nn.functional.") and (last.endswith("_loss") or last in LOSS_FUNCTIONS)
    return False
