"""The torch vocabulary rules share: what counts as a grad-disabled region, a
DataLoader, a loss, an optimizer; literal values of arguments.

Everything here takes a `FileContext` so names are resolved through the file's
imports (`import torch as T`, `from torch.utils.data import DataLoader as DL`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, FrozenSet, Optional

import libcst as cst

from torchlint.analysis.values import Values
from torchlint.engine.scopes import parameters, scope_nodes_of

# Grad mode (what disables or sets it, and its value at a point) is analysis/grad_mode.py's; kept importable here.
from torchlint.analysis.grad_mode import (  # noqa: F401
    GRAD_DISABLING, GRAD_ENABLING, SET_GRAD_ENABLED, grad_enabled_at, grad_mode_of,
)

# The syntax helpers every rule uses, kept importable from here with the torch vocabulary.
from torchlint.analysis.syntax import (  # noqa: F401
    MISSING, has_star_kwargs, is_missing, keyword, keyword_is_true, literal, method_name, positional, receiver, terminal_name,
)

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
CLASS_INDEX_LOSS_MODULES = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss", "torch.nn.modules.loss.CrossEntropyLoss", "torch.nn.modules.loss.NLLLoss"})
CLASS_INDEX_LOSS_FUNCTIONS = frozenset({"torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss"})
CLASS_INDEX_LOSSES = CLASS_INDEX_LOSS_MODULES | CLASS_INDEX_LOSS_FUNCTIONS
FLOAT_DTYPES = frozenset({
    "torch.float", "torch.float32", "torch.double", "torch.float64", "torch.half", "torch.float16", "torch.bfloat16",
})


# ------------------------------------------------------------------ data loading


def is_dataloader_call(node: cst.CSTNode, ctx: "FileContext", stack=None) -> bool:
    return type(node) is cst.Call and ctx.qualified_name_in(node.func, DATALOADER, stack)


def workers_of(call: cst.Call, ctx: Optional["FileContext"] = None, stack=None):
    """`num_workers` of a DataLoader call: an int, None when absent (the default, 0), or `MISSING` if not known.

    With `ctx`, a name or config entry is followed to the constant it always holds (`num_workers=num_workers`
    after `num_workers = 0`), and a helper's `**kwargs` that no call of the helper fills gives nothing.
    """
    arg = keyword(call, "num_workers")
    if arg is None:
        # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)
        arg = positional(call, 5)
    if arg is None:
        if not has_star_kwargs(call) or (ctx is not None and _unpacks_only_empty_keywords(call, ctx, stack)):
            return None
        return MISSING
    value = literal(arg.value)
    if is_missing(value) and ctx is not None:
        value = Values.of(ctx).constant(arg.value, stack)
    return value


def _unpacks_only_empty_keywords(call: cst.Call, ctx: "FileContext", stack) -> bool:
    """Every `**` the call unpacks is its function's `**` parameter, which no call of the function fills."""
    values = Values.of(ctx)
    return all(
        type(arg.value) is cst.Name and values.never_given_keywords(arg.value, stack)
        for arg in call.args if arg.star == "**"
    )


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


# Deep-learning frameworks with APIs of their own: what one of them builds is not torch's, whatever its name says
# (PaddlePaddle's `paddle.optimizer.Momentum` clears its gradients with `clear_grad()`, not `zero_grad()`).
_OTHER_FRAMEWORKS = frozenset({"paddle", "tensorflow", "keras", "jax", "optax", "flax", "mindspore", "mxnet"})


def is_optimizer(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    origin = built_from(expr, ctx, stack)
    if origin is not None and origin.startswith("torch.optim."):
        return not origin.startswith("torch.optim.lr_scheduler.")
    if origin is not None and origin.partition(".")[0] in _OTHER_FRAMEWORKS:
        return False
    name = terminal_name(expr)
    return bool(name) and not _SCHEDULER_NAME.match(name.lower()) and bool(_OPTIMIZER_NAME.match(name.lower()))


def is_scheduler(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """A torch LR scheduler: built by `torch.optim.lr_scheduler`, or by a class of the file or project deriving from
    one; a value built by a project class that does not derive from one is not (vq-vae-2's `CycleScheduler` sets the
    lr for the update that follows). Only a value of unknown origin is judged by its name (`.*sched.*`)."""
    origin = built_from(expr, ctx, stack)
    if origin is not None and origin.startswith("torch.optim."):
        return origin.startswith("torch.optim.lr_scheduler.")
    derives = _built_by_project_scheduler_class(expr, ctx, stack)
    if derives is not None:
        return derives
    name = terminal_name(expr)
    return bool(name) and bool(_SCHEDULER_NAME.match(name.lower()))


_TORCH_SCHEDULERS = "torch.optim.lr_scheduler."


def _built_by_project_scheduler_class(expr: cst.BaseExpression, ctx: "FileContext", stack) -> Optional[bool]:
    """Whether the classes of the file or project that every value of `expr` is built by derive from a torch
    scheduler; None when a value is not known to be built by such a class, or a class has a base from elsewhere."""
    if type(expr) not in (cst.Name, cst.Attribute):
        return None
    values = Values.of(ctx)
    found = set()
    # The scheduler's `.step` is read: where it was None (`scheduler = None` unless asked for) nothing is stepped.
    for origin in values.origins(expr, stack, dereferenced=True):
        if type(origin.node) is not cst.Call or origin.applied or origin.opaque:
            return None
        place = origin.place
        classes = [
            built for built in Values.of(place.context).origins(origin.node.func, place.stack)
            if type(built.node) is cst.ClassDef
        ]
        if not classes:
            return None
        for built in classes:
            found.add(_derives_from_torch_scheduler(built.node, built.place, frozenset()))
    if not found or None in found:
        return None
    return True in found


def _derives_from_torch_scheduler(node: cst.ClassDef, place, seen: FrozenSet[int]) -> Optional[bool]:
    """A base of the class, any number of levels up through classes of the project, is a torch scheduler; None when a
    base is neither such a class nor a builtin (a scheduler library's class may be one)."""
    if id(node) in seen:
        return False
    stack = tuple(place.scopes)
    answer: Optional[bool] = False
    for base in node.bases:
        value = base.value
        if type(value) is cst.Name and value.value == "object":
            continue
        qualified = place.context.qualified_name(value, stack)
        if qualified is not None and qualified.startswith(_TORCH_SCHEDULERS):
            return True
        classes = [
            origin for origin in Values.of(place.context).origins(value, stack) if type(origin.node) is cst.ClassDef
        ]
        if not classes:
            answer = None
        for origin in classes:
            derives = _derives_from_torch_scheduler(origin.node, origin.place, seen | {id(node)})
            if derives:
                return True
            if derives is None:
                answer = None
    return answer


def _used_as_values(functions: FrozenSet[str], ctx: "FileContext") -> bool:
    """The text names one of `functions` somewhere other than right before a call's `(`: a function bound to a name
    or passed on (`criterion = F.cross_entropy`). Read once per file and set of names: `function_named` is asked of
    most calls, and a file that only calls its functions needs no value followed."""
    memo = ctx.file_text.memo
    key = ("function values", functions)
    found = memo.get(key)
    if found is None:
        names = frozenset(name.rpartition(".")[2] for name in functions)
        # Each match is a whole word of the text: a file that writes none of the names needs no search (most files).
        found = memo[key] = not names.isdisjoint(ctx.file_text.words) and re.search(
            r"\b(?:%s)\b(?!\s*\()" % "|".join(sorted(map(re.escape, names))), ctx.text,
        ) is not None
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
