"""What a function does, as the rules' call-graph questions need it: backward, clearing gradients, optimizer
steps, mode switches, starting worker processes.

The torch half of the engine's fact recognizers (`torchlint/engine/facts.py` holds the registry); the
families add their own in `rules/<family>/_facts.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis.project import PROJECT
from torchlint.analysis.summaries import function_facts, imported_function
from torchlint.analysis.values import Values
from torchlint.engine.facts import recognizes
from torchlint.engine.scopes import dotted_name

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

BACKWARD_FUNCTIONS = frozenset({"torch.autograd.backward", "torch.autograd.grad"})
MULTIPROCESSING_SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})
PROCESS_CLASSES = frozenset({"torch.multiprocessing.Process", "multiprocessing.Process"})


def is_backward_call(call: cst.Call, ctx: "FileContext", stack=None) -> bool:
    return semantics.method_name(call) == "backward" or ctx.qualified_name_in(call.func, BACKWARD_FUNCTIONS, stack)


@recognizes(cst.Call)
def backward(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    return "backward" if is_backward_call(call, ctx) else None


@recognizes(cst.Call)
def clears_grad_by_call(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    name = semantics.method_name(call)
    if name == "zero_grad":
        return "clears-grad"
    grad = semantics.receiver(call)
    if name in ("zero_", "detach_") and isinstance(grad, cst.Attribute) and grad.attr.value == "grad":
        return "clears-grad"
    return None


class _ProjectCalls(dict):
    """id(call) -> the import path of the project function it calls, for `project_call_shows`."""

    def __init__(self, ctx: "FileContext"):
        super().__init__()
        # Read once per file from its import statements: most files import no project file at all.
        self.possible = PROJECT.imported_by(ctx.filename, ctx.file_text.imported_modules)
        # import path -> whether it names a project file, for the names this file calls
        self.known: Dict[str, bool] = {}

    def holds(self, ctx: "FileContext", path: str) -> bool:
        found = self.known.get(path)
        if found is None:
            found = self.known[path] = PROJECT.holds(ctx.filename, path)
        return found


@recognizes(cst.Call)
def calls_project_function(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """A call of a function imported from a project file (`zero_grad(params)` after `from fp16_util import
    zero_grad`). What it does there is read only when a rule asks (`project_call_shows`): that parses the file."""
    head = call.func
    while type(head) is cst.Attribute:
        head = head.value
    # Most calls are of locals, methods and builtins: only a name some import binds can lead to a project file.
    if type(head) is not cst.Name or not ctx.scopes.is_imported_anywhere(head.value):
        return None
    calls = ctx.shared(_ProjectCalls)
    path = ctx.scopes.resolve(head.value, ctx.scope_nodes) if calls.possible else None
    # The name must come from a project file (`torch.zeros` never does), and then the whole call path must name one.
    if path is None or not calls.holds(ctx, path):
        return None
    dotted = dotted_name(call.func)
    if dotted is None:
        return None
    path += dotted[len(head.value):]
    if not calls.holds(ctx, path):
        return None
    calls[id(call)] = path
    return "calls-project-function"


def project_call_shows(call: cst.CSTNode, ctx: "FileContext", fact: str) -> bool:
    """The project function `call` calls (a node `calls_project_function` noted) shows `fact` in its own file."""
    path = ctx.shared(_ProjectCalls).get(id(call))
    origins = Values.of(ctx).imported(path) if path is not None else None
    function = imported_function(origins, ctx) if origins is not None else None
    return function is not None and bool(function_facts(function[0], fact))


@recognizes(cst.Assign)
def clears_grad_by_assignment(node: cst.Assign, ctx: "FileContext") -> Optional[str]:
    for target in node.targets:
        if isinstance(target.target, cst.Attribute) and target.target.attr.value == "grad":
            return "clears-grad"
    return None


@recognizes(cst.Call)
def optimizer_step(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    if semantics.method_name(call) == "step" and semantics.is_optimizer(semantics.receiver(call), ctx):
        return "optimizer-step"
    return None


@recognizes(cst.Call)
def sets_mode(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    name = semantics.method_name(call)
    if name == "eval" and not call.args:
        return "sets-eval"
    if name == "train":
        mode = semantics.positional(call, 0) or semantics.keyword(call, "mode")
        if mode is None or semantics.literal(mode.value) is True:
            return "sets-train"
        if semantics.literal(mode.value) is False:
            return "sets-eval"
    return None


@recognizes(cst.Call)
def starts_processes(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """`torch.multiprocessing.spawn(...)`, `Process(...).start()`, and iterating a DataLoader with workers."""
    if ctx.qualified_name_in(call.func, MULTIPROCESSING_SPAWN):
        return "starts-workers"
    if semantics.method_name(call) == "start" and _is_process(semantics.receiver(call), ctx):
        return "starts-workers"
    if worker_loader_iterated_by_call(call, ctx) is not None:
        return "starts-workers"
    return None


@recognizes(cst.For)
def iterates_worker_loader(node: cst.For, ctx: "FileContext") -> Optional[str]:
    return "starts-workers" if worker_loader_in(node.iter, ctx) is not None else None


def _is_process(expr: Optional[cst.BaseExpression], ctx: "FileContext") -> bool:
    if isinstance(expr, cst.Call):
        return ctx.qualified_name_in(expr.func, PROCESS_CLASSES)
    return expr is not None and semantics.built_from_in(expr, PROCESS_CLASSES, ctx)


_ITERATING_CALLS = frozenset({"iter", "list", "enumerate", "next", "tuple", "zip"})


def worker_loader_iterated_by_call(call: cst.Call, ctx: "FileContext") -> Optional[cst.Call]:
    """For `next(iter(loader))`, `list(loader)`: the DataLoader construction with workers it iterates."""
    if not ctx.may_name(semantics.DATALOADER):
        return None
    if type(call.func) is cst.Name and call.func.value in ("iter", "next", "list", "tuple") and ctx.scopes.binding_scope(call.func.value, ctx.scope_nodes) is None:
        for arg in call.args:
            found = worker_loader_in(arg.value, ctx)
            if found is not None:
                return found
    return None


def worker_loader_in(expr: cst.BaseExpression, ctx: "FileContext") -> Optional[cst.Call]:
    """The DataLoader(...) call with workers that iterating `expr` would run, following the values it may hold
    (variables, `loaders[phase]`, what a function returns) and the calls that iterate their argument."""
    if not ctx.may_name(semantics.DATALOADER):
        return None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in _ITERATING_CALLS:
        for arg in expr.args:
            found = worker_loader_in(arg.value, ctx)
            if found is not None:
                return found
        return None
    for origin in Values.of(ctx).origins(expr):
        stack = origin.place.stack
        if semantics.is_dataloader_call(origin.node, ctx, stack) and semantics.may_start_workers(origin.node, ctx, stack):
            return origin.node
    return None
