"""Losses: a loss module of torch (`nn.MSELoss`), a call that computes a loss (`F.cross_entropy(...)`,
`criterion(out, y)`) and a value that is one, scaled or summed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, List, Optional

import libcst as cst

from torchlint import semantics

if TYPE_CHECKING:
    from torchlint.analysis.values import Origin
    from torchlint.engine.context import FileContext

# Names that say "this computes a loss": `criterion`, `loss_fn`, `ce_loss_func`.
CRITERION_NAME = re.compile(r"^(criterion|.*_criterion|criterion_.*|loss_?fn|loss_?func(tion)?|.*_loss_?fn|.*_loss_?func)$")
# Functional losses whose name does not end in `_loss`.
LOSS_FUNCTIONS = frozenset({"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"})


def is_loss_module(qualified: Optional[str]) -> bool:
    return bool(qualified) and qualified.startswith("torch.nn.") and qualified.endswith("Loss")


def is_loss_call(call: cst.CSTNode, ctx: "FileContext", stack=None) -> bool:
    """`F.cross_entropy(...)`, `F.mse_loss(...)`, `nn.MSELoss()(...)`, or `criterion(...)` where the criterion
    is built from an `nn.*Loss` or named like one."""
    if not isinstance(call, cst.Call):
        return False
    if isinstance(call.func, cst.Call):
        return is_loss_module(ctx.qualified_name(call.func.func, stack))
    name = ctx.qualified_name(call.func, stack)
    if name is not None:
        function = name.rpartition(".")[2]
        return name.startswith("torch.nn.functional.") and (function.endswith("_loss") or function in LOSS_FUNCTIONS)
    if is_loss_module(semantics.built_from(call.func, ctx, stack)):
        return True
    terminal = semantics.terminal_name(call.func)
    return bool(terminal) and bool(CRITERION_NAME.match(terminal.lower()))


def is_loss_value(expr: cst.CSTNode, ctx: "FileContext", stack=None) -> bool:
    """A loss call, possibly scaled or summed: `criterion(out, y) / accumulation_steps`."""
    return any(is_loss_call(operand, ctx, stack) for operand in arithmetic_operands(expr))


def is_loss_origin(origin: "Origin") -> bool:
    """An origin of the value model (`Values.origins`) that is a loss: a loss computed where the origin is (scaled or
    summed, `is_loss_value`), or the output of a torch loss module applied (`nn.CrossEntropyLoss()`, built and then
    called: the criterion's result)."""
    if origin.opaque:
        return False
    ctx, stack = origin.place.context, origin.place.stack
    if origin.applied:
        return type(origin.node) is cst.Call and is_loss_module(ctx.qualified_name(origin.node.func, stack))
    return is_loss_value(origin.node, ctx, stack)


def arithmetic_operands(expr: cst.CSTNode) -> List[cst.CSTNode]:
    """The values arithmetic combines in `expr` (`loss` and `n` of `-loss / n`), or `[expr]` when it is no arithmetic.
    A tensor operand's autograd graph goes into the result: `loss / n` holds the graph `loss` holds, and a loss
    scaled or summed is still a loss."""
    expr_type = type(expr)
    if expr_type is cst.BinaryOperation:
        return arithmetic_operands(expr.left) + arithmetic_operands(expr.right)
    if expr_type is cst.UnaryOperation and type(expr.operator) is not cst.Not:  # `not loss` is a Python bool
        return arithmetic_operands(expr.expression)
    return [expr]
