"""Where gradients are off or may be, and code that evaluates: a same-module caller under `no_grad`, a
`set_grad_enabled` whose flag is known only at runtime, another library's context manager that sets the grad mode,
a function named like an evaluation or switching a model to eval mode.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Optional, Sequence

import libcst as cst

from torchlint import semantics
from torchlint.analysis.loops import FUNCTION_BOUNDARIES

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Function names that say "this evaluates": evaluate, run_validation, test, predict_batch, inference_loop, ...
_EVALUATION_WORDS = frozenset({
    "eval", "evaluate", "evaluation", "val", "valid", "validate", "validation", "test", "testing", "predict", "prediction",
})


# Asked of the function around every call some rules visit: a few names per file, each many times.
@lru_cache(maxsize=4096)
def names_an_evaluation(name: str) -> bool:
    words = [word for word in name.lower().split("_") if word]
    return any(word in _EVALUATION_WORDS or word.startswith("infer") for word in words)


def evaluates(function_key: str, ctx: "FileContext") -> bool:
    """The function puts a model in eval mode or is named like an evaluation."""
    function = ctx.callgraph.functions.get(function_key)
    return names_an_evaluation(function_key.rpartition(".")[2]) or (function is not None and "sets-eval" in function.facts)


def grad_disabled_by_a_caller(function_key: str, ctx: "FileContext") -> Optional[cst.Call]:
    """A same-module call of `function_key` made with gradients disabled, if there is one."""
    for site in ctx.callgraph.call_sites(function_key):
        if semantics.grad_enabled_at(site.stack, ctx) is False:
            return site.node
    return None


def under_dynamic_grad_mode(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> bool:
    """Inside `with torch.set_grad_enabled(<not a literal>)` (or such a decorator) in the same function."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) is cst.With and stack[index + 1] is node.body:
            if any(_is_dynamic_grad_mode(item.item, ctx, stack[: index + 1]) for item in node.items):
                return True
        elif type(node) in FUNCTION_BOUNDARIES:
            return isinstance(node, cst.FunctionDef) and any(
                _is_dynamic_grad_mode(decorator.decorator, ctx, stack[:index]) for decorator in node.decorators
            )
    return False


def under_grad_mode_context(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> bool:
    """Inside a `with` of a context manager from outside torch, in the same function, whose name says it
    switches to evaluation or sets the grad mode: monai's `eval_mode(model)` enters `no_grad` itself."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            return False
        if type(node) is cst.With and stack[index + 1] is node.body:
            for item in node.items:
                manager = item.item.func if isinstance(item.item, cst.Call) else item.item
                qualified = ctx.qualified_name(manager, stack[: index + 1]) or ""
                if not qualified.startswith("torch.") and _names_a_grad_mode(semantics.terminal_name(manager) or ""):
                    return True
    return False


def _names_a_grad_mode(name: str) -> bool:
    words = [word for word in name.lower().split("_") if word]
    return names_an_evaluation(name) or any(word in ("grad", "grads", "nograd") for word in words)


def _is_dynamic_grad_mode(expr: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    return (
        isinstance(expr, cst.Call)
        and ctx.qualified_name(expr.func, stack) in semantics.SET_GRAD_ENABLED
        and semantics.grad_mode_of(expr, ctx, stack) is None
    )
