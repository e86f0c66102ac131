from typing import Dict, FrozenSet, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.conversions import conversion, stays_on_its_device
from torchlint.analysis.facts import holds_tensor
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.loops import loop_nodes
from torchlint.analysis.values import Values
from torchlint.engine.walk import OwnScopeVisitor, walk_visitor
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes

_MOVES = frozenset({"to", "cuda"})


class LoopInvariantTransfer(Rule):
    """
    ## What it does
    Flags `x.to(device)` / `x.cuda()` in the body of a loop when `x` is a tensor that
    the loop does not change: no binding of `x` in the loop (nor the loop's own
    target), no in-place write to it there (`x[i] = ...`, `x.copy_(...)`, any
    `x.<method>_(...)`, `out=x`), and a device that does not change either (a
    literal, or a name the loop does not bind, or an attribute of one: `args.device`,
    not `images.device` of the loop's batch).
    `x` is a tensor when the value model says so: built by a torch function, a
    tensor method of a tensor, or a parameter its function uses as a tensor.

    Not flagged: `x = x.to(device)` (after the first iteration `x` is on the device
    and `.to()` returns it without a copy), a move to the device the tensor was made
    on (`x.to(x.device)`, `w.to(device)` after `w = torch.ones(n, device=device)`), moves to the CPU, a batch of the loop
    (`images.to(device)` of `for images, labels in loader`), tensors written in the
    loop (a staging buffer refilled each step), modules, and loops in test files.

    Not in the default selection: it is a performance hint, and a copy of a small
    tensor per iteration may cost little next to the step.

    ## Why is this bad?
    The tensor is the same on every iteration, so every iteration after the first
    copies the same bytes from host to device again (observed on torch 2.13 CPU
    with the `meta` device standing in: one `aten._to_copy` per iteration, one in
    all when moved before the loop). On a GPU each copy is a host-to-device transfer
    in the hot loop, and a blocking one from pageable memory; how much it costs
    depends on the tensor's size and the link, and can only be measured there.

    ## Fix safety
    No fix: move the tensor once, before the loop (`mask = mask.to(device)`), and use
    the moved tensor inside it.
    """

    code = "TL310"
    name = "loop-invariant-transfer"
    opt_in = True
    triggers = attributes(*_MOVES)
    message = (
        "`{call}` copies the same tensor to the device on every iteration: `{name}` does not change in the loop; "
        "move it once, before the loop"
    )
    example = """
    import torch

    class_weights = torch.tensor([1.0, 5.0])
    for images, labels in loader:
        images = images.to(device)
        weights = class_weights.to(device)  # expect: TL310:15
        loss = torch.nn.functional.cross_entropy(model(images), labels.to(device), weight=weights)
    """
    use_instead = """
    import torch

    class_weights = torch.tensor([1.0, 5.0]).to(device)
    for images, labels in loader:
        images = images.to(device)
        loss = torch.nn.functional.cross_entropy(model(images), labels.to(device), weight=class_weights)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # (id of loop, name) -> whether the loop writes into the tensor the name holds.
        self.written: Dict[Tuple[int, str], bool] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if semantics.method_name(node) not in _MOVES or type(node.func.value) is not cst.Name:
            return
        ctx = self.ctx
        loops = loop_nodes(ctx.stack)
        if not loops or ctx.file_kind is FileKind.TEST:
            return
        read = conversion(node, ctx)
        if read is None or not read.moves or read.to_host or stays_on_its_device(read, ctx):
            return  # (a tensor already on that device is returned as it is: no copy)
        loop, receiver = loops[0], node.func.value
        if not self._unchanged(receiver, loop) or not self._device_unchanged(read.device_node, loop):
            return
        if self._writes_into(loop, receiver.value) or not holds_tensor(receiver, ctx):
            return
        self.report(node, self.message.format(call=ctx.code(node), name=receiver.value))

    def _unchanged(self, name: cst.Name, loop: cst.CSTNode) -> bool:
        """No binding of `name` that may hold here is made in the loop (its body, or its target)."""
        values = Values.of(self.ctx)
        found = values.bindings(name, values.place(self.ctx.stack))
        if found is None:
            return True  # imported, or bound nowhere in the file: nothing in the loop rebinds it
        _, bindings = found
        return bool(bindings) and all(
            binding.statement is not loop and id(loop.body) not in binding.blocks for binding in bindings
        )

    def _device_unchanged(self, device, loop: cst.CSTNode) -> bool:
        if device is None or not semantics.is_missing(semantics.literal(device)):
            return True
        while type(device) is cst.Attribute:  # `args.device`, `self.device`; not `images.device` of a batch
            device = device.value
        if type(device) is cst.Call:
            return self.ctx.qualified_name(device.func) == "torch.device" and all(
                not semantics.is_missing(semantics.literal(arg.value)) for arg in device.args
            )
        return type(device) is cst.Name and self._unchanged(device, loop)

    def _writes_into(self, loop: cst.CSTNode, name: str) -> bool:
        key = (id(loop), name)
        found = self.written.get(key)
        if found is None:
            writes = _Writes(frozenset({name}))
            walk_visitor(loop.body, writes)
            found = self.written[key] = writes.found
        return found


class _Writes(OwnScopeVisitor):
    """Whether the visited code writes into the tensors `names` hold: item assignment, an in-place method, `out=`."""

    def __init__(self, names: FrozenSet[str]):
        self.names = names
        self.found = False

    def _names(self, expr) -> bool:
        return type(expr) is cst.Name and expr.value in self.names

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if type(node.target) is cst.Subscript and self._names(node.target.value):
            self.found = True

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if type(node.target) is cst.Subscript and self._names(node.target.value):
            self.found = True

    def visit_Call(self, node: cst.Call) -> None:
        method = semantics.method_name(node)
        if method is not None and method.endswith("_") and not method.startswith("_") and self._names(node.func.value):
            self.found = True
        out = semantics.keyword(node, "out")
        if out is not None and self._names(out.value):
            self.found = True
