"""Method chains of conversions (`x.float().cuda()`), as the device rules read and rewrite them: the call a value is
the receiver of, the edit that replaces a chain's tail, and the `.to(...)` call that replaces it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import libcst as cst

from torchlint.finding import Edit

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


def chain_parent(stack: Sequence[cst.CSTNode], index: int) -> Optional[cst.Call]:
    """The call `stack[index]` is the receiver of (`x.float()` -> the call `x.float().cuda()`), if any."""
    if index >= 2:
        attribute, call = stack[index - 1], stack[index - 2]
        if isinstance(attribute, cst.Attribute) and attribute.value is stack[index]:
            if isinstance(call, cst.Call) and call.func is attribute:
                return call
    return None


def tail_edit(ctx: "FileContext", first: cst.Call, last: cst.Call, content: str) -> Edit:
    """Replace a chain's tail from the method name of `first` through the end of `last` (`float().cuda()`)."""
    if first is not last and first.lpar:
        # `(x.cuda()).float()`: the tail would cross the inner call's parentheses; rewrite the whole chain.
        return ctx.replace(last, f"{ctx.code(first.func.value)}.{content}")
    start, _ = ctx.location(first.func.attr)
    _, end = ctx.location(last)
    return Edit(content, start, end)


def to_call(*arguments: Optional[str]) -> str:
    return "to(" + ", ".join(argument for argument in arguments if argument) + ")"
