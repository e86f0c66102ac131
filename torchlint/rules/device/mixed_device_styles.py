from typing import List, Sequence, Tuple

import libcst as cst

from torchlint.engine.scopes import parameters
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes
from torchlint.rules.device import _shared


class MixedDeviceStyles(Rule):
    """
    ## What it does
    Flags each `.cuda(...)` call in a file that also moves tensors or modules with
    `.to(<device>)`.

    ## Why is this bad?
    A file that moves with `.to(device)` has chosen its device in one place; the
    `.cuda()` calls ignore that choice. Where `device` is the CPU (a laptop, a CI
    runner, a CPU-only build of torch), the `.to(device)` code runs and the `.cuda()`
    lines raise `AssertionError: Torch not compiled with CUDA enabled`; where it is
    another GPU or `mps`, the tensors end up on two different devices. One style,
    `.to(device)`, keeps the choice in one place.

    Not flagged: files that use only one style; `.cuda()` calls inside a
    `def cuda(...)` method (a class implementing `.cuda()` for its own tensors);
    `.cuda(index)` with a device the program computed (`.cuda(rank)`,
    `.cuda(device_index)`), which follows a choice made elsewhere, as `.to(device)`
    does, and is usually reached only once that choice is a CUDA device.

    ## Fix safety
    Safe. `x.cuda()` becomes `x.to(device)` when a variable named `device` (the
    `device-name` option) is bound before the call in an enclosing scope, otherwise
    `x.to("cuda")`, which moves to the same current CUDA device as `.cuda()`.
    `.cuda(1)` becomes `.to("cuda:1")`; `non_blocking=` and `memory_format=` are kept.

    ## Options
    - `device-name`: the variable the fix moves to (default `device`).
    """

    code = "TL201"
    name = "mixed-device-styles"
    # Only `.cuda(...)` calls are reported (the `.to(...)` they are set against is a far more common word).
    triggers = attributes("cuda")
    fix_safety = "safe"
    message = (
        "`.cuda()` in a file that also moves with `.to(...)`: it ignores the device the rest of the file "
        "chose, so without a GPU it raises `AssertionError: Torch not compiled with CUDA enabled` "
        "while the `.to(device)` code runs; use `.to(device)` here too"
    )
    example = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model().to(device)
    inputs = inputs.cuda()  # expect: TL201:10
    """
    use_instead = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model().to(device)
    inputs = inputs.to(device)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.cuda_calls: List[Tuple[_shared.Conversion, Tuple[cst.CSTNode, ...]]] = []
        self.moves_with_to = False

    def visit_Call(self, node: cst.Call) -> None:
        read = _shared.conversion(node, self.ctx)
        if read is None or not read.moves:
            return
        if node.func.attr.value == "cuda":
            if not (_shared.implements_method(self.ctx, "cuda") or _shared.computed_cuda_device(read)):
                self.cuda_calls.append((read, tuple(self.ctx.stack)))
        elif node.func.attr.value == "to":
            self.moves_with_to = True

    def finish(self) -> None:
        if not self.moves_with_to:
            return
        for read, stack in self.cuda_calls:
            self.report(read.call, fix=self._fix(read, stack))

    def _fix(self, read: _shared.Conversion, stack: Sequence[cst.CSTNode]):
        if not read.complete:
            return None
        device = read.device
        if read.device_node is None and self._device_variable_bound(read.call, stack):
            device = self.ctx.config.device_name
        content = _shared.to_call(device, *read.keywords)
        return Fix.safe(f"Replace with `.{content}`", _shared.tail_edit(self.ctx, read.call, read.call, content))

    def _device_variable_bound(self, call: cst.Call, stack: Sequence[cst.CSTNode]) -> bool:
        """The device variable is a parameter, or assigned before `call`, in the scope the call would read it from."""
        name = self.ctx.config.device_name
        scope = self.ctx.scopes.binding_scope(name, stack)
        if scope is None or name not in scope.variables:
            return False
        call_start, _ = self.ctx.location(call)
        if any(self.ctx.location(value)[1] <= call_start for value in scope.assignments.get(name, ())):
            return True
        return isinstance(scope.node, (cst.FunctionDef, cst.Lambda)) and any(
            param.name.value == name for param in parameters(scope.node.params)
        )
