"""Torch dtypes as code names them: `torch.float32` and its aliases (`torch.float`), the casting methods
(`x.float()`), the legacy tensor types (`torch.cuda.FloatTensor`), names that by their spelling hold a dtype, and
the dtype a torch factory call makes (`made_dtype`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import holds_tensor
from torchlint.analysis.syntax import call_argument

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Canonical dtype names, and the aliases torch also exports for them.
DTYPES = frozenset({
    "float32", "float64", "float16", "bfloat16", "complex64", "complex128",
    "int64", "int32", "int16", "int8", "uint8", "bool",
})
FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16"})
DTYPE_ALIASES = {
    "float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
    "short": "int16", "cfloat": "complex64", "cdouble": "complex128",
}
# `x.float()` and friends: the dtype each method casts to.
CAST_METHODS = {
    "float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
    "long": "int64", "int": "int32", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool",
}
# Legacy tensor types accepted by `.type(...)`; `torch.cuda.<Type>` also moves to the GPU.
TENSOR_TYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
    "LongTensor": "int64", "IntTensor": "int32", "ShortTensor": "int16", "CharTensor": "int8",
    "ByteTensor": "uint8", "BoolTensor": "bool",
}

# Factories whose result has the default dtype, float32, when not given `dtype=`.
DEFAULT_FLOAT_FACTORIES = frozenset(
    f"torch.{name}" for name in ("zeros", "ones", "empty", "rand", "randn", "eye", "linspace", "logspace")
)
INT64_FACTORIES = frozenset({"torch.randint", "torch.randperm"})


def dtype_of(expr: Optional[cst.CSTNode], ctx: "FileContext", stack=None) -> Optional[str]:
    """The canonical dtype a `torch.float`/`torch.float32`-style expression names, else None."""
    if expr is None:
        return None
    name = ctx.qualified_name(expr, stack)
    if not name or not name.startswith("torch."):
        return None
    short = name[len("torch."):]
    short = DTYPE_ALIASES.get(short, short)
    return short if short in DTYPES else None


def tensor_type_of(expr: cst.CSTNode, ctx: "FileContext", stack=None) -> Tuple[Optional[str], bool]:
    """(dtype, moves to CUDA) for `torch.FloatTensor` / `torch.cuda.FloatTensor`; (None, False) otherwise."""
    name = ctx.qualified_name(expr, stack) or ""
    for prefix, cuda in (("torch.cuda.", True), ("torch.", False)):
        if name.startswith(prefix) and name[len(prefix):] in TENSOR_TYPES:
            return TENSOR_TYPES[name[len(prefix):]], cuda
    return None, False


def names_dtype(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """A torch dtype, or a variable/attribute that by its name holds one (`dtype`, `x.dtype`, `amp_dtype`)."""
    if dtype_of(expr, ctx, stack):
        return True
    name = semantics.terminal_name(expr)
    return bool(name) and (name == "dtype" or name.endswith("_dtype"))


def made_dtype(call: cst.Call, ctx: "FileContext", stack=None) -> Optional[str]:
    """The dtype a torch factory call makes, as the source shows: its `dtype=`; the default dtype, float32, of
    `torch.zeros(n)`-style factories and of the legacy constructor `torch.Tensor(data)`; int64 of `torch.randint`
    and `torch.randperm`; the type of a legacy typed constructor (`torch.FloatTensor(data)`,
    `torch.cuda.LongTensor(n)`: it converts its data, or raises for a tensor of another dtype). Observed on torch
    2.13: `torch.Tensor(t)` of a tensor returns `t` in its own dtype, so that one is read only when its data is not
    known to be a tensor."""
    name = ctx.qualified_name(call.func, stack)
    if name is None or not name.startswith("torch."):
        return None
    given = semantics.keyword(call, "dtype")
    if given is not None:
        return dtype_of(given.value, ctx, stack)
    if name in DEFAULT_FLOAT_FACTORIES:
        return "float32"
    if name in INT64_FACTORIES:
        return "int64"
    if name == "torch.Tensor":
        data = call_argument(call, 0, "data")
        alone = data is not None and len(call.args) == 1
        return None if alone and holds_tensor(data, ctx, stack) else "float32"
    return tensor_type_of(call.func, ctx, stack)[0]
