"""Call-graph facts the autograd rules need beyond the engine's own.

Registered on import (the rules package imports every module under it), and run
by the engine during its single walk whatever rules are selected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import BACKWARD_FUNCTIONS, is_backward_call
from torchlint.analysis.training import CLIP_NAMES, is_clip_call
from torchlint.engine.context import last_parts
from torchlint.engine.facts import recognizes

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

_FUNCTION_BOUNDARIES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


@recognizes(cst.Call, frozenset({"step"}))
def optimizer_step_through_scaler(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """`scaler.step(optimizer)`: AMP's GradScaler steps the optimizer it is given."""
    if semantics.method_name(call) != "step" or semantics.is_optimizer(semantics.receiver(call), ctx):
        return None
    first = semantics.positional(call, 0) or semantics.keyword(call, "optimizer")
    return "optimizer-step" if first is not None and semantics.is_optimizer(first.value, ctx) else None


@recognizes(cst.Call, frozenset({"train"}))
def may_set_train(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """`model.train(is_training)`: a mode the code does not show, which may well be training."""
    if semantics.method_name(call) != "train":
        return None
    mode = semantics.positional(call, 0) or semantics.keyword(call, "mode")
    if mode is not None and semantics.literal(mode.value, None) not in (True, False):
        return "may-set-train"
    return None


@recognizes(cst.Call, last_parts(BACKWARD_FUNCTIONS) | {"backward"})
def backward_in_caller_grad_mode(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """A backward call that runs whenever its function runs, in whatever grad mode the caller set.

    No region or decorator of the function decides the mode at the call, and no
    `if` guards it (`if train: loss.backward()` is how one function serves both
    training and a no-grad evaluation).
    """
    if not is_backward_call(call, ctx) or semantics.grad_enabled_at(ctx.stack, ctx) is not None:
        return None
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, (cst.If, cst.IfExp)):
            return None
        if isinstance(node, _FUNCTION_BOUNDARIES):
            break
    return "backward-in-caller-grad-mode"


@recognizes(cst.Call, CLIP_NAMES)
def clips_grad(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """`torch.nn.utils.clip_grad_norm_(...)`, `clip_grad_value_(...)`: rewrites the gradients in `.grad`."""
    return "clips-grad" if is_clip_call(call, ctx) else None


@recognizes(cst.Call, frozenset({"unscale_"}))
def unscales_grad(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """`scaler.unscale_(optimizer)`: AMP's gradients divided back by the loss scale, in `.grad`."""
    return "unscales-grad" if semantics.method_name(call) == "unscale_" and call.args else None
