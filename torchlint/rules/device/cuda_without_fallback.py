from typing import List, Optional

import libcst as cst

from torchlint.engine.walk import walk_visitor
from torchlint import semantics
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words
from torchlint.rules.device import _shared

AVAILABILITY_CHECKS = frozenset({
    "torch.cuda.is_available", "torch.cuda.device_count", "torch.backends.mps.is_available",
    "torch.backends.cuda.is_built", "torch.backends.mps.is_built",
})
# A file calling these was written for CUDA machines only: hard-coded CUDA is its premise.
CUDA_ONLY = frozenset({"torch.cuda.set_device"})
PROCESS_GROUP = frozenset({"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group"})
# Keyword arguments that take a device, whatever the call.
DEVICE_KEYWORDS = frozenset({"device", "map_location"})


class CudaWithoutFallback(Rule):
    """
    ## What it does
    Flags each hard-coded CUDA device (`"cuda"` or `"cuda:N"` passed as a device,
    `torch.device("cuda")`, `.cuda()`, `device = "cuda"`) in a file that never checks
    whether CUDA is there (`torch.cuda.is_available()`, `torch.cuda.device_count()`,
    `torch.backends.mps.is_available()`, `torch.accelerator.*`).

    ## Why is this bad?
    On a machine without a GPU (a laptop, a CI runner, a CPU-only build of torch)
    the script dies at the first tensor or module sent to CUDA:
    `AssertionError: Torch not compiled with CUDA enabled`, or for `.cuda(0)`
    `RuntimeError: Cannot access accelerator device when none is available` (both
    observed on torch 2.13's CPU build; `torch.device("cuda")` itself builds fine,
    the error comes when it is used).

    Not flagged: files with any availability check; devices that come from a
    variable, a function parameter (its default included) or a command-line argument
    (including `add_argument(..., default="cuda")`), `.cuda(rank)` included; code
    in a branch taken only when the program asks for CUDA (`if args.cuda:`,
    `if backend == "cuda":`, `x.cuda() if use_gpu else x`); `def cuda(...)` methods;
    files written for CUDA machines only (`torch.cuda.set_device(...)`,
    `init_process_group(backend="nccl")`).

    ## Fix safety
    No fix: where the fallback belongs (one `device` chosen at start-up and passed
    around) depends on the program's structure.
    """

    code = "TL205"
    name = "cuda-without-fallback"
    # Every site is a `.cuda()` call or a "cuda"/"cuda:N" string literal (spelled out: not escaped, not split in parts).
    triggers = words("cuda")
    message = (
        "hard-coded CUDA device and no availability check in this file: without a GPU this raises "
        "`AssertionError: Torch not compiled with CUDA enabled` (CPU build of torch; `RuntimeError: Cannot access "
        "accelerator device when none is available` for `.cuda(index)`); choose the device once, "
        '`torch.device("cuda" if torch.cuda.is_available() else "cpu")`, and move with `.to(device)`'
    )
    example = """
    import torch

    model = Net().cuda()  # expect: TL205:9
    batch = torch.zeros(8, 3, device="cuda")  # expect: TL205:34
    """
    use_instead = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    batch = torch.zeros(8, 3, device=device)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.sites: List[cst.CSTNode] = []
        self.exempt = False

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name is not None:
            self._check_module_call(node, name)
        elif semantics.method_name(node) == "cuda":
            read = _shared.conversion(node, self.ctx)
            if read is not None and not _shared.computed_cuda_device(read):
                self._add(node)
        elif semantics.method_name(node) == "to":
            device = semantics.positional(node, 0)
            if device is not None and _is_cuda_string(device.value):
                self._add(device.value)
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in DEVICE_KEYWORDS and _is_cuda_string(arg.value):
                self._add(arg.value)

    def _check_module_call(self, node: cst.Call, name: str) -> None:
        if name in AVAILABILITY_CHECKS or name.startswith("torch.accelerator.") or name in CUDA_ONLY:
            self.exempt = True
        elif name in PROCESS_GROUP:
            backend = _shared.call_argument(node, 0, "backend")
            if semantics.literal(backend, None) == "nccl":
                self.exempt = True
        elif name == "torch.device":
            device = _shared.call_argument(node, 0, "type")
            if device is not None and _is_cuda_string(device):
                self._add(node)
        elif name == "torch.set_default_device":
            # The `device=` keyword form is found with the other device keywords.
            device = semantics.positional(node, 0)
            if device is not None and _is_cuda_string(device.value):
                self._add(device.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        # `device = "cuda"`: the one place a script usually picks its device.
        if _is_cuda_string(node.value) and any(_names_a_device(self.ctx, target.target) for target in node.targets):
            self._add(node.value)

    def _add(self, site: cst.CSTNode) -> None:
        if not (_shared.implements_method(self.ctx, "cuda") or self._chosen_elsewhere()):
            self.sites.append(site)

    def _chosen_elsewhere(self) -> bool:
        """A parameter default, or a branch taken only when the code asks for CUDA (`if args.cuda:`)."""
        stack = self.ctx.stack
        for parent, child in zip(stack, stack[1:]):
            if isinstance(parent, cst.Param) and child is parent.default:
                return True
            if isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test:
                asks = _asks_for_cuda(parent.test)
                if asks is not None and asks == (child is parent.body):
                    return True
        return False

    def finish(self) -> None:
        if self.exempt:
            return
        for site in self.sites:
            self.report(site)


def _is_cuda_string(expr: cst.BaseExpression) -> bool:
    value = semantics.literal(expr, None) if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)) else None
    return isinstance(value, str) and bool(_shared.CUDA_STRING.fullmatch(value))


def _asks_for_cuda(test: cst.BaseExpression) -> Optional[bool]:
    """True for a condition that holds when CUDA is wanted (`args.cuda`, `backend == "cuda"`), False for one
    that holds when it is not (`not use_gpu`, `device.type != "cuda"`), None when it says nothing about CUDA."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _asks_for_cuda(test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        sides = {_asks_for_cuda(test.left), _asks_for_cuda(test.right)} - {None}
        return True if True in sides else (False if sides else None)
    finder = _CudaMention()
    walk_visitor(test, finder)
    if not finder.found:
        return None
    negated = (cst.NotEqual, cst.IsNot, cst.NotIn)
    return not (isinstance(test, cst.Comparison) and any(isinstance(target.operator, negated) for target in test.comparisons))


class _CudaMention(cst.CSTVisitor):
    def __init__(self):
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        lowered = node.value.lower()
        self.found = self.found or "cuda" in lowered or "gpu" in lowered

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.found = self.found or _is_cuda_string(node)


def _names_a_device(ctx, target: cst.BaseExpression) -> bool:
    # `device_type = "cuda"` feeds autocast, which only warns without a GPU.
    name = semantics.terminal_name(target)
    return bool(name) and not name.lower().endswith("_type") and _shared.names_device(target, ctx)
