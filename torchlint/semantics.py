"""The torch vocabulary rules share: what counts as a grad-disabled region, a
DataLoader, a loss, an optimizer; literal values of arguments.

Everything here takes a `FileContext` so names are resolved through the file's
imports (`import torch as T`, `from torch.utils.data import DataLoader as DL`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, FrozenSet, Optional, Sequence

import libcst as cst

from torchlint.analysis.values import Values
from torchlint.engine.scopes import parameters, scope_nodes_of
from torchlint.engine.walk import walk

# The syntax helpers every rule uses, kept importable from here with the torch vocabulary.
from torchlint.analysis.syntax import (  # noqa: F401
    MISSING, has_star_kwargs, is_missing, keyword, keyword_is_true, literal, method_name, positional, receiver, terminal_name,
)

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


GRAD_DISABLING = frozenset({
    "torch.no_grad", "torch.inference_mode",
    "torch.autograd.no_grad", "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
})
GRAD_ENABLING = frozenset({"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"})
SET_GRAD_ENABLED = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"})
DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
CLASS_INDEX_LOSS_MODULES = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss", "torch.nn.modules.loss.CrossEntropyLoss", "torch.nn.modules.loss.NLLLoss"})
CLASS_INDEX_LOSS_FUNCTIONS = frozenset({"torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss"})
CLASS_INDEX_LOSSES = CLASS_INDEX_LOSS_MODULES | CLASS_INDEX_LOSS_FUNCTIONS
FLOAT_DTYPES = frozenset({
    "torch.float", "torch.float32", "torch.double", "torch.float64", "torch.half", "torch.float16", "torch.bfloat16",
})


# ------------------------------------------------------------------ grad mode


def grad_mode_of(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> Optional[bool]:
    """False for a grad-disabling context/decorator expression, True for a grad-enabling one, else None."""
    target = expr.func if isinstance(expr, cst.Call) else expr
    name = ctx.qualified_name(target, stack)
    if name in GRAD_DISABLING:
        if name.endswith("inference_mode") and isinstance(expr, cst.Call):
            mode = positional(expr, 0) or keyword(expr, "mode")
            if mode is not None and literal(mode.value) is False:
                return None
        return False
    if name in GRAD_ENABLING:
        return True
    if name in SET_GRAD_ENABLED and isinstance(expr, cst.Call):
        mode = positional(expr, 0) or keyword(expr, "mode")
        value = literal(mode.value) if mode is not None else MISSING
        if value is True or value is False:
            return value
    return None


def _is_dynamic_grad_mode(expr: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    """`set_grad_enabled(flag)` with a flag only known at runtime: the mode below it is unknown."""
    return isinstance(expr, cst.Call) and ctx.qualified_name_in(expr.func, SET_GRAD_ENABLED, stack)


def _project_decorator_grad_mode(expr: cst.BaseExpression, ctx: "FileContext", stack) -> Optional[bool]:
    """False for a decorator the project defines (in the file or a project file) around torch's grad-disabling ones
    (yolov5's `@smart_inference_mode()`: `torch.inference_mode()(fn)`, or `torch.no_grad()` on older torch), when
    nothing in it names a grad-enabling one or `set_grad_enabled`; else None."""
    target = expr.func if type(expr) is cst.Call else expr
    if type(target) not in (cst.Name, cst.Attribute):
        return None
    for origin in Values.of(ctx).origins(target, stack):
        if type(origin.node) is cst.FunctionDef and not origin.opaque:
            return origin.place.context.shared(_GradDecorators).mode(origin.node, origin.place.stack)
    return None


class _GradDecorators:
    """Per file (`ctx.shared`): the grad mode each of its functions applies as a decorator, read once."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self._modes = {}

    def mode(self, function: cst.FunctionDef, around: Sequence[cst.CSTNode]) -> Optional[bool]:
        if id(function) not in self._modes:
            stack = tuple(around) + (function,)
            named = []

            def on_visit(node: cst.CSTNode) -> bool:
                if type(node) is cst.Name or type(node) is cst.Attribute:
                    named.append(node)
                return True

            walk(function.body, on_visit, lambda node: None)
            disabling = any(self.ctx.qualified_name_in(node, GRAD_DISABLING, stack) for node in named)
            enabling = any(self.ctx.qualified_name_in(node, GRAD_ENABLING | SET_GRAD_ENABLED, stack) for node in named)
            self._modes[id(function)] = False if disabling and not enabling else None
        return self._modes[id(function)]


def grad_enabled_at(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> Optional[bool]:
    """Grad mode at the innermost point of `stack` as far as the code shows: False, True, or None if unknown.

    The innermost `with` region or decorated function decides; a function body is
    not inside the regions around its definition, so the search stops there.
    """
    for index in range(len(stack) - 1, -1, -1):
        node = stack[index]
        node_type = type(node)
        if node_type is cst.With and index + 1 < len(stack) and stack[index + 1] is node.body:
            for item in reversed(node.items):
                mode = grad_mode_of(item.item, ctx, stack[: index + 1])
                if mode is not None:
                    return mode
                if _is_dynamic_grad_mode(item.item, ctx, stack[: index + 1]):
                    return None
        elif node_type is cst.FunctionDef or node_type is cst.Lambda or node_type is cst.ClassDef:
            if node_type is cst.FunctionDef and index + 1 < len(stack) and stack[index + 1] is node.body:
                for decorator in node.decorators:
                    mode = grad_mode_of(decorator.decorator, ctx, stack[:index])
                    if mode is None:
                        mode = _project_decorator_grad_mode(decorator.decorator, ctx, stack[:index])
                    if mode is not None:
                        return mode
            return None
    return None


# ------------------------------------------------------------------ data loading


def is_dataloader_call(node: cst.CSTNode, ctx: "FileContext", stack=None) -> bool:
    return type(node) is cst.Call and ctx.qualified_name_in(node.func, DATALOADER, stack)


def workers_of(call: cst.Call, ctx: Optional["FileContext"] = None, stack=None):
    """`num_workers` of a DataLoader call: an int, None when absent (the default, 0), or `MISSING` if not known.

    With `ctx`, a name or config entry is followed to the constant it always holds (`num_workers=num_workers`
    after `num_workers = 0`).
    """
    arg = keyword(call, "num_workers")
    if arg is None:
        # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)
        arg = positional(call, 5)
    if arg is None:
        return None if not has_star_kwargs(call) else MISSING
    value = literal(arg.value)
    if is_missing(value) and ctx is not None:
        value = Values.of(ctx).constant(arg.value, stack)
    return value


def persistent_workers_requested(call: cst.Call) -> bool:
    """`persistent_workers=True` written literally in a DataLoader call."""
    return keyword_is_true(call, "persistent_workers")


def may_start_workers(call: cst.Call, ctx: Optional["FileContext"] = None, stack=None) -> bool:
    """A DataLoader call whose `num_workers` is not known to be 0 or absent."""
    workers = workers_of(call, ctx, stack)
    return workers is not None and workers != 0


# ------------------------------------------------------------------ optimizers and losses

_OPTIMIZER_NAME = re.compile(r"^(optimizer|optim|opt|.*_optimizer|.*_optim|.*_opt|optimizer_.*|.*optimizer)$")
_SCHEDULER_NAME = re.compile(r".*sched.*")


def built_from(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> Optional[str]:
    """Qualified name of the constructor a variable (or `self.attr`) was assigned from, if known: the last one, or,
    for a variable its scope rebinds to other constructors, the one whose binding reaches this point."""
    assigned = ctx.assigned_values(expr, stack)
    built = [
        name for name in (
            ctx.qualified_name(value.func, stack) for value in assigned if isinstance(value, cst.Call)
        ) if name
    ]
    if len(set(built)) > 1 and isinstance(expr, cst.Name):
        # A notebook trying one loss after another (`loss_fn = nn.NLLLoss()`, cells later `nn.CrossEntropyLoss()`).
        return _reaching_constructor(expr, ctx, stack)
    if built:
        return built[-1]
    # A parameter (bound at its function's calls), `self.x` set from a constructor's parameter: asked of most calls'
    # callees, so the value model is asked only for those.
    if (type(expr) is cst.Name and not assigned and _is_parameter(expr, ctx, stack)) or (
        type(expr) is cst.Attribute and assigned and all(type(value) is cst.Name for value in assigned)
    ):
        return _every_origin_built_by(expr, ctx, stack)
    return None


def _is_parameter(name: cst.Name, ctx: "FileContext", stack) -> bool:
    scope = ctx.scopes.binding_scope(name.value, ctx.scope_nodes if stack is None else scope_nodes_of(stack))
    return scope is not None and type(scope.node) is cst.FunctionDef and any(
        param.name.value == name.value for param in parameters(scope.node.params)
    )


def _every_origin_built_by(expr: cst.BaseExpression, ctx: "FileContext", stack) -> Optional[str]:
    """The one constructor every value `expr` may hold at this point was built by, else None."""
    found = set()
    for origin in Values.of(ctx).origins(expr, stack):
        if type(origin.node) is not cst.Call or origin.applied or origin.opaque:
            return None
        found.add(origin.place.context.qualified_name(origin.node.func, origin.place.stack))
    found.discard(None)
    return found.pop() if len(found) == 1 else None


def function_named(func: cst.BaseExpression, among: FrozenSet[str], ctx: "FileContext", stack=None) -> Optional[str]:
    """The qualified name of the function `func` (a call's callee) is, when it is one of `among`: written out
    (`F.cross_entropy`), or the one function every value of a variable, parameter or `self.x` is (`criterion =
    F.cross_entropy`); else None, or the name it is written as."""
    name = ctx.qualified_name(func, stack)
    if name is not None or type(func) not in (cst.Name, cst.Attribute) or not _used_as_values(among, ctx):
        return name
    found = set()
    for origin in Values.of(ctx).origins(func, stack):
        if type(origin.node) not in (cst.Name, cst.Attribute) or origin.opaque or origin.node is func:
            return None
        found.add(origin.place.context.qualified_name(origin.node, origin.place.stack))
    return found.pop() if len(found) == 1 else None


def _reaching_constructor(name: cst.Name, ctx: "FileContext", stack) -> Optional[str]:
    """The one constructor the bindings of `name` that reach this point call, else None."""
    found = {
        origin.place.context.qualified_name(origin.node.func, origin.place.stack)
        for origin in Values.of(ctx).origins(name, stack)
        if type(origin.node) is cst.Call and not origin.applied
    }
    found.discard(None)
    return found.pop() if len(found) == 1 else None


def built_from_in(expr: cst.BaseExpression, names: FrozenSet[str], ctx: "FileContext", stack=None) -> bool:
    """`built_from(expr, ctx) in names`, without looking up assignments in a file that cannot name any of them."""
    return ctx.may_name(names) and built_from(expr, ctx, stack) in names


def is_optimizer(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    origin = built_from(expr, ctx, stack)
    if origin is not None and origin.startswith("torch.optim."):
        return not origin.startswith("torch.optim.lr_scheduler.")
    name = terminal_name(expr)
    return bool(name) and not _SCHEDULER_NAME.match(name.lower()) and bool(_OPTIMIZER_NAME.match(name.lower()))


def is_scheduler(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    origin = built_from(expr, ctx, stack)
    if origin is not None and origin.startswith("torch.optim."):
        return origin.startswith("torch.optim.lr_scheduler.")
    name = terminal_name(expr)
    return bool(name) and bool(_SCHEDULER_NAME.match(name.lower()))


def _used_as_values(functions: FrozenSet[str], ctx: "FileContext") -> bool:
    """The text names one of `functions` somewhere other than right before a call's `(`: a function bound to a name
    or passed on (`criterion = F.cross_entropy`). Read once per file and set of names: `function_named` is asked of
    most calls, and a file that only calls its functions needs no value followed."""
    memo = ctx.file_text.memo
    key = ("function values", functions)
    found = memo.get(key)
    if found is None:
        pattern = re.compile(r"\b(?:%s)\b(?!\s*\()" % "|".join(sorted(re.escape(name.rpartition(".")[2]) for name in functions)))
        found = memo[key] = pattern.search(ctx.text) is not None
    return found


def is_class_index_loss(call: cst.Call, ctx: "FileContext", stack=None) -> bool:
    """A call of `F.cross_entropy`/`F.nll_loss`, or of a criterion built from CrossEntropyLoss/NLLLoss."""
    if not ctx.may_name(CLASS_INDEX_LOSSES):
        return False
    if ctx.qualified_name_in(call.func, CLASS_INDEX_LOSS_FUNCTIONS, stack):
        return True
    if type(call.func) is cst.Call:  # nn.CrossEntropyLoss()(logits, target)
        return ctx.qualified_name_in(call.func.func, CLASS_INDEX_LOSS_MODULES, stack)
    return built_from_in(call.func, CLASS_INDEX_LOSS_MODULES, ctx, stack) or (
        function_named(call.func, CLASS_INDEX_LOSS_FUNCTIONS, ctx, stack) in CLASS_INDEX_LOSS_FUNCTIONS
    )
