"""Conversions of tensors: what a `.cuda()`, `.cpu()`, `.to(...)`, `.type(...)`, `.type_as(...)` or `.float()`-style
call moves or casts to (`conversion`), whether a move leaves its tensor where it is, and the calls that make a
tensor of other data (`torch.from_numpy`, `torch.tensor`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Optional, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.devices import cuda_device_code, names_device
from torchlint.analysis.dtypes import CAST_METHODS, dtype_of, named_type, names_dtype, tensor_type_of
from torchlint.analysis.torch_name import torch_attribute
from torchlint.analysis.values import Values
from torchlint.engine.scopes import dotted_name

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# The methods `conversion` reads: a rule acting on conversions only needs calls of these (`Rule.call_parts`).
CONVERSION_METHODS = frozenset(CAST_METHODS) | {"cuda", "cpu", "to", "type", "type_as"}
# What makes a tensor of a numpy array (or other data).
TORCH_FROM_ARRAY = frozenset({"torch.from_numpy", "torch.tensor", "torch.as_tensor"})
_TO_KEYWORDS = ("device", "dtype", "non_blocking", "copy", "memory_format")


@dataclass
class Conversion:
    """One `.cuda()` / `.cpu()` / `.to(...)` / `.type(...)` / `.type_as(...)` / `.float()`-style call, read."""

    call: cst.Call
    # Code naming the target device (`"cuda"` for `.cuda()`), when the call moves.
    device: Optional[str] = None
    device_node: Optional[cst.BaseExpression] = None
    # The canonical dtype when known ("float32"), and the expression naming it when written out.
    dtype: Optional[str] = None
    dtype_node: Optional[cst.BaseExpression] = None
    # Other arguments as `name=value` code (non_blocking, copy, memory_format), in order.
    keywords: Tuple[str, ...] = ()
    # Every argument was understood, so a fix may rewrite the call.
    complete: bool = True

    @property
    def moves(self) -> bool:
        return self.device is not None

    @property
    def casts(self) -> bool:
        return self.dtype is not None or self.dtype_node is not None

    @property
    def to_host(self) -> bool:
        """`.cpu()`, `.to("cpu")`: the call moves to the CPU, as written."""
        return self.device == '"cpu"' or semantics.literal(self.device_node, None) == "cpu"

    def dtype_code(self, ctx: "FileContext", stack=None) -> Optional[str]:
        """Code naming the dtype (`torch.float32`, or the user's own expression); None without a name for torch."""
        if self.dtype_node is not None:
            return ctx.code(self.dtype_node)
        return torch_attribute(ctx, self.dtype, stack)


def conversion(call: cst.Call, ctx: "FileContext", stack=None) -> Optional[Conversion]:
    """Read `call` as a device move and/or dtype cast on a value; None when it is neither (or when what it casts
    to is not in the source: `.type_as(other_tensor)`)."""
    method = semantics.method_name(call)
    if method not in CONVERSION_METHODS or ctx.qualified_name(call.func, stack) is not None:
        return None  # not a method called on a value (`torch.cuda.x()`, `np.float(...)`)
    if any(arg.star for arg in call.args):
        return None
    positional = [arg.value for arg in call.args if arg.keyword is None]
    keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    if method in CAST_METHODS:
        if positional or set(keywords) - {"memory_format"}:
            return None
        return Conversion(call, dtype=CAST_METHODS[method], keywords=_keyword_code(ctx, keywords))
    if method == "cpu":
        if positional or set(keywords) - {"memory_format"}:
            return None
        return Conversion(call, device='"cpu"', keywords=_keyword_code(ctx, keywords))
    if method == "cuda":
        return _read_cuda(call, ctx, positional, keywords)
    if method == "type":
        return _read_type(call, ctx, stack, positional, keywords)
    if method == "type_as":
        return _read_type_as(call, ctx, stack, positional, keywords)
    return _read_to(call, ctx, stack, positional, keywords)


def _keyword_code(ctx: "FileContext", keywords: Dict[str, cst.BaseExpression]) -> Tuple[str, ...]:
    return tuple(f"{name}={ctx.code(value)}" for name, value in keywords.items())


def _read_cuda(call, ctx, positional, keywords) -> Optional[Conversion]:
    # Tensor.cuda(device=None, non_blocking=False, memory_format=...)
    if len(positional) > 2 or set(keywords) - {"device", "non_blocking", "memory_format"}:
        return None
    if positional and "device" in keywords or len(positional) == 2 and "non_blocking" in keywords:
        return None
    device = positional[0] if positional else keywords.pop("device", None)
    extra = {}
    if len(positional) == 2:
        extra["non_blocking"] = positional[1]
    extra.update(keywords)
    return Conversion(call, device=cuda_device_code(device, ctx), device_node=device, keywords=_keyword_code(ctx, extra))


def _read_type(call, ctx, stack, positional, keywords) -> Optional[Conversion]:
    # `.type()` with no argument returns a string; `.type(dtype, non_blocking)` converts.
    target = positional[0] if positional else keywords.get("dtype")
    if target is None or len(positional) > 1 or set(keywords) - {"dtype"}:
        return None
    named = named_type(target, ctx, stack)
    if named is None:
        return None
    if not named.legacy:
        return Conversion(call, dtype=named.dtype, dtype_node=target)
    # The fix names the dtype itself: `torch.FloatTensor` is not a dtype `.to()` accepts. A name that holds a CUDA
    # type or another, as a flag decides, casts to a known dtype on a device not known: no fix rewrites that.
    device = '"cuda"' if named.cuda else None
    return Conversion(call, dtype=named.dtype, device=device, complete=named.cuda is not None)


def _read_type_as(call, ctx, stack, positional, keywords) -> Optional[Conversion]:
    # `.type_as(other)` casts to the type of `other`: read only when `other` is built by a legacy tensor type
    # (`x.type_as(torch.FloatTensor())`, a float32 cast; `torch.cuda.FloatTensor()` also moves to the GPU).
    if len(positional) != 1 or keywords or type(positional[0]) is not cst.Call:
        return None
    dtype, cuda = tensor_type_of(positional[0].func, ctx, stack)
    if dtype is None:
        return None
    return Conversion(call, dtype=dtype, device='"cuda"' if cuda else None)


def _read_to(call, ctx, stack, positional, keywords) -> Optional[Conversion]:
    # Tensor.to(device, dtype, non_blocking, copy) | to(dtype, non_blocking, copy) | to(other) | to(memory_format=)
    complete = not set(keywords) - set(_TO_KEYWORDS)
    device = keywords.pop("device", None)
    dtype_node = keywords.pop("dtype", None)
    extra: Dict[str, cst.BaseExpression] = {}
    if positional:
        first = positional[0]
        if names_dtype(first, ctx, stack):
            slots = ("dtype", "non_blocking", "copy")
        elif names_device(first, ctx, stack):
            slots = ("device", "dtype", "non_blocking", "copy")
        else:
            return None  # `.to(other_tensor)` or a value we cannot read
        if len(positional) > len(slots):
            return None
        for slot, value in zip(slots, positional):
            if slot == "device":
                if device is not None:
                    return None
                device = value
            elif slot == "dtype":
                if dtype_node is not None:
                    return None
                dtype_node = value
            else:
                extra[slot] = value
    for name in ("non_blocking", "copy", "memory_format"):
        if name in keywords:
            if name in extra:
                return None
            extra[name] = keywords.pop(name)
    extra.update(keywords)
    if device is None and dtype_node is None:
        return None
    return Conversion(
        call,
        device=ctx.code(device) if device is not None else None,
        device_node=device,
        dtype=dtype_of(dtype_node, ctx, stack),
        dtype_node=dtype_node,
        keywords=_keyword_code(ctx, extra),
        complete=complete,
    )


def stays_on_its_device(move: Conversion, ctx: "FileContext", stack=None) -> bool:
    """`move` names the device its tensor is on already, so `.to()` returns the tensor as it is: no copy, no
    conversion. `x.to(x.device)` (also after casts and other tensor methods, which keep the device:
    `x.gt(0.5).half().to(x.device)`), or
    `t.to(device)` where every value `t` may hold was made by a torch factory given that same `device=` (`t =
    torch.zeros(n, device=device)`)."""
    target = move.device_node
    base = semantics.receiver(move.call)
    while type(base) is cst.Call:
        read = conversion(base, ctx, stack)
        if read is not None and read.moves or read is None and not _keeps_the_device(base):
            return False
        base = semantics.receiver(base)
    if target is None or base is None:
        return False
    if type(target) is cst.Attribute and target.attr.value == "device":
        return dotted_name(target.value) is not None and dotted_name(target.value) == dotted_name(base)
    written = ctx.code(target)
    if type(base) is cst.Call:
        return _made_on(base, written, ctx, stack)
    if type(base) is not cst.Name:
        return False
    # Its assignments as written: the value model follows `.to(...)` to its receiver, which would take
    # `torch.zeros(n, device=device).cpu()` for a tensor on `device`.
    values = Values.of(ctx)
    found = values.bindings(base, values.place(ctx.stack if stack is None else stack))
    bindings = found[1] if found is not None else []
    return bool(bindings) and all(
        type(binding.value) is cst.Call and not binding.element and _made_on(binding.value, written, ctx, stack)
        for binding in bindings
    )


def _keeps_the_device(call: cst.Call) -> bool:
    """A tensor method that is not a move gives a tensor on its receiver's device (`t.gt(0.5)`, `t.abs().clone()`),
    unless it is told another (`device=`). Only methods tensors are known by count: `replay.sample(32)` is not."""
    return (
        type(call.func) is cst.Attribute and call.func.attr.value in _DEVICE_KEEPING_METHODS
        and semantics.keyword(call, "device") is None
    )


# Tensor methods whose result lives where their receiver does: reshaping, comparing, elementwise arithmetic.
_DEVICE_KEEPING_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "unsqueeze", "squeeze", "permute", "transpose", "t", "contiguous",
    "flatten", "expand", "expand_as", "repeat", "detach", "clone", "gt", "ge", "lt", "le", "eq", "ne", "abs", "neg",
    "sign", "sqrt", "exp", "log", "sigmoid", "tanh", "relu", "clamp", "round", "floor", "ceil", "sum", "mean", "max",
    "min", "argmax", "argmin", "softmax", "log_softmax", "mul", "add", "sub", "div", "pow", "masked_fill",
})


def _made_on(call: cst.Call, device_code: str, ctx: "FileContext", stack) -> bool:
    """`call` is a torch function given `device=<device_code>`."""
    given = semantics.keyword(call, "device")
    return (
        given is not None and ctx.code(given.value) == device_code
        and (ctx.qualified_name(call.func, stack) or "").startswith("torch.")
    )


def implements_method(ctx: "FileContext", name: str) -> bool:
    """Inside `def <name>(self, ...)`: a class implementing `.cuda()`/`.double()` by delegating to its tensors,
    which forwards its caller's choice rather than making one."""
    function = ctx.enclosing(cst.FunctionDef)
    return function is not None and function.name.value == name


def computed_cuda_device(read: Conversion) -> bool:
    """`.cuda(index)` with a device the program computed (not a literal): it follows a choice made elsewhere,
    like `.to(device)` does, and is reached only where that choice is a CUDA device."""
    node = read.device_node
    return node is not None and semantics.is_missing(semantics.literal(node))


def peel_moves(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> cst.BaseExpression:
    """`x` for `x.to(device).cuda()`: strip device moves (that do not cast) off the end of a chain."""
    while isinstance(expr, cst.Call):
        read = conversion(expr, ctx, stack)
        if read is None or not read.moves or read.casts:
            break
        expr = expr.func.value
    return expr
