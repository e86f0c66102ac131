"""What a function does, as the rules' call-graph questions need it: backward, clearing gradients, optimizer
steps, mode switches, starting worker processes.

The torch half of the engine's fact recognizers (`torchlint/engine/facts.py` holds the registry); the
families add their own in `rules/<family>/_facts.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis import syntax
from torchlint.analysis.loops import is_accumulating_backward
from torchlint.analysis.project import PROJECT
from torchlint.analysis.summaries import SUMMARIES, defining_file, function_facts, imported_function, shows_no_fact
from torchlint.analysis.values import PROGRESS_BARS, Origin, Values, advanced_iterator, iterated_items
from torchlint.engine.context import last_parts
from torchlint.engine.facts import recognizes, recognizes_when_asked
from torchlint.engine.scopes import dotted_name, scope_nodes_of
from torchlint.engine.walk import OwnScopeVisitor, walk, walk_visitor

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

BACKWARD_FUNCTIONS = frozenset({"torch.autograd.backward", "torch.autograd.grad"})
MULTIPROCESSING_SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})
PROCESS_CLASSES = frozenset({"torch.multiprocessing.Process", "multiprocessing.Process"})
_ITERATING_CALLS = frozenset({"iter", "list", "enumerate", "next", "tuple", "zip"})
# Those of them that iterate their argument at once (`enumerate` and `zip` iterate when their result is).
_ITERATING_BUILTINS = frozenset({"iter", "next", "list", "tuple"})
# The methods `iter()` and `next()` call, which older code calls itself (`loader.__iter__()`).
_ITERATING_DUNDERS = frozenset({"__iter__", "__next__"})


# Distributed autograd's backward keeps the gradients in its context (`dist_autograd.get_gradients`) and never writes
# `.grad`: nothing accumulates between iterations and no optimizer reads `.grad`, so it is no backward to the rules.
DISTRIBUTED_BACKWARD = frozenset({"torch.distributed.autograd.backward"})


def is_backward_call(call: cst.Call, ctx: "FileContext", stack=None) -> bool:
    if semantics.method_name(call) == "backward":
        return not ctx.qualified_name_in(call.func, DISTRIBUTED_BACKWARD, stack)
    return ctx.qualified_name_in(call.func, BACKWARD_FUNCTIONS, stack)


@recognizes(cst.Call, last_parts(BACKWARD_FUNCTIONS) | {"backward"})
def backward(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    return "backward" if is_backward_call(call, ctx) else None


def uses_autograd_grad(function_key: str, ctx: "FileContext") -> bool:
    """The file's function `function_key` runs a backward that does not accumulate into `.grad` (`torch.autograd.grad`)."""
    function = ctx.callgraph.functions.get(function_key)
    return function is not None and any(not is_accumulating_backward(node) for node in function.facts.get("backward", ()))


@recognizes(cst.Call, frozenset({"zero_grad", "zero_", "detach_"}))
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
        possible = PROJECT.imported_by(ctx.filename, ctx.file_text.imported_modules)
        # The local names an import binds to a project file: a call whose head is another name (`torch.zeros`,
        # `np.mean`, a local) calls no project function.
        self.heads = ctx.scopes.names_imported_from(lambda path: PROJECT.holds(ctx.filename, path)) if possible else frozenset()
        # import path -> whether it names a project file, for the names this file calls
        self.known: Dict[str, bool] = {}

    def holds(self, ctx: "FileContext", path: str) -> bool:
        found = self.known.get(path)
        if found is None:
            found = self.known[path] = PROJECT.holds(ctx.filename, path)
        return found


def project_import_names(ctx: "FileContext") -> frozenset:
    """The local names this file's imports bind to project files (`Net` after `from model import Net`)."""
    return ctx.shared(_ProjectCalls).heads


@recognizes(cst.Call, call_heads=project_import_names)
def calls_project_function(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """A call of a function imported from a project file (`zero_grad(params)` after `from fp16_util import
    zero_grad`). What it does there is read only when a rule asks (`project_call_shows`): that parses the file."""
    head = syntax.head_name(call.func)
    calls = ctx.shared(_ProjectCalls)
    if head not in calls.heads:
        return None
    path = ctx.scopes.resolve(head, ctx.scope_nodes)
    # The name must come from a project file (`torch.zeros` never does), and then the whole call path must name one.
    if path is None or not calls.holds(ctx, path):
        return None
    dotted = dotted_name(call.func)
    if dotted is None:
        return None
    path += dotted[len(head):]
    if not calls.holds(ctx, path):
        return None
    calls[id(call)] = path
    return "calls-project-function"


def project_call_shows(call: cst.CSTNode, ctx: "FileContext", fact: str) -> bool:
    """The project function `call` calls (a node `calls_project_function` noted) shows `fact` in its own file."""
    return bool(project_call_facts(call, ctx, fact))


def project_call_facts(call: cst.CSTNode, ctx: "FileContext", fact: str) -> List[cst.CSTNode]:
    """The nodes showing `fact` in the project function `call` calls (a node `calls_project_function` noted), in its
    own file (`function_facts`): for a question about which backward they run (`torch.autograd.grad`)."""
    path = ctx.shared(_ProjectCalls).get(id(call))
    if path is None or shows_no_fact(ctx, path, fact):
        return []
    origins = Values.of(ctx).imported(path)
    function = imported_function(origins, ctx) if origins is not None else None
    return function_facts(function[0], fact) if function is not None else []


@recognizes(cst.Assign)
def clears_grad_by_assignment(node: cst.Assign, ctx: "FileContext") -> Optional[str]:
    for target in node.targets:
        if type(target.target) is cst.Attribute and target.target.attr.value == "grad":
            return "clears-grad"
    return None


@recognizes(cst.Call, frozenset({"step"}))
def optimizer_step(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    if semantics.method_name(call) == "step" and semantics.is_optimizer(semantics.receiver(call), ctx):
        return "optimizer-step"
    return None


@recognizes(cst.Call, frozenset({"eval", "train"}))
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


@recognizes(cst.Call, last_parts(MULTIPROCESSING_SPAWN) | {"start"} | _ITERATING_BUILTINS | _ITERATING_DUNDERS)
def starts_processes(call: cst.Call, ctx: "FileContext") -> Optional[str]:
    """`torch.multiprocessing.spawn(...)`, `Process(...).start()`, and iterating a DataLoader with workers."""
    if ctx.qualified_name_in(call.func, MULTIPROCESSING_SPAWN):
        return "starts-workers"
    if semantics.method_name(call) == "start" and _is_process(semantics.receiver(call), ctx):
        return "starts-workers"
    if worker_loader_iterated_by_call(call, ctx) is not None:
        return "starts-workers"
    return None


@recognizes_when_asked(cst.For, "starts-workers")
def iterates_worker_loader(node: cst.For, ctx: "FileContext", stack: Tuple[cst.CSTNode, ...]) -> bool:
    return worker_loader_in(node.iter, ctx, stack) is not None


def _is_process(expr: Optional[cst.BaseExpression], ctx: "FileContext") -> bool:
    if isinstance(expr, cst.Call):
        return ctx.qualified_name_in(expr.func, PROCESS_CLASSES)
    return expr is not None and semantics.built_from_in(expr, PROCESS_CLASSES, ctx)




def _may_reach_dataloader(ctx: "FileContext") -> bool:
    """The file may iterate a DataLoader: it names one, or it imports a project file, whose functions and classes
    may build one (pix2pixHD's train.py: `CreateDataLoader(opt).load_data()`, the DataLoader built in
    data/custom_dataset_data_loader.py)."""
    return ctx.may_name(semantics.DATALOADER) or bool(project_import_names(ctx))


def worker_loader_iterated_by_call(call: cst.Call, ctx: "FileContext") -> Optional[cst.Call]:
    """For `next(iter(loader))`, `list(loader)`, `loader.__iter__()`: the DataLoader construction with workers it
    iterates."""
    if not _may_reach_dataloader(ctx):
        return None
    if type(call.func) is cst.Attribute:
        operand = iterated_items(call, ctx, ctx.scope_nodes)
        if operand is None:
            operand = advanced_iterator(call, ctx, ctx.scope_nodes)
        return None if operand is None else worker_loader_in(operand, ctx)
    if type(call.func) is cst.Name and call.func.value in _ITERATING_BUILTINS and ctx.scopes.binding_scope(call.func.value, ctx.scope_nodes) is None:
        for arg in call.args:
            found = worker_loader_in(arg.value, ctx)
            if found is not None:
                return found
    return None


def worker_loader_in(
    expr: cst.BaseExpression, ctx: "FileContext", stack: Optional[Sequence[cst.CSTNode]] = None,
) -> Optional[cst.Call]:
    """The DataLoader(...) call with workers that iterating `expr` (inside `stack`, default: the node being visited)
    would run, following the values it may hold (variables, `loaders[phase]`, what a function returns) and the calls
    that iterate their argument."""
    if not _may_reach_dataloader(ctx):
        return None
    if stack is None:
        stack = ctx.stack
    return _worker_loader_in(expr, ctx, stack, ctx.scope_nodes if stack is ctx.stack else scope_nodes_of(stack))


def _worker_loader_in(
    expr: cst.BaseExpression, ctx: "FileContext", stack: Sequence[cst.CSTNode], scopes: Sequence[cst.CSTNode],
) -> Optional[cst.Call]:
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in _ITERATING_CALLS:
        for arg in expr.args:
            found = _worker_loader_in(arg.value, ctx, stack, scopes)
            if found is not None:
                return found
        return None
    iterated = iterated_items(expr, ctx, scopes)
    if iterated is not None:  # `loader.__iter__()`
        return _worker_loader_in(iterated, ctx, stack, scopes)
    for origin in _beneath_wrappers(Values.of(ctx).origins(expr, stack), starting_workers=expr):
        there, built_at = origin.place.context, origin.place.stack
        if semantics.is_dataloader_call(origin.node, there, built_at) and semantics.may_start_workers(origin.node, there, built_at):
            return origin.node
    return None


def worker_loader_given_to_iteration(call: cst.Call, ctx: "FileContext") -> Optional[Tuple[cst.Call, str, str]]:
    """For a call (evaluated at `ctx.stack`) of a function another project file defines at module level
    (`fit(model, dataloader=loader)` after `from lib.train import fit`) that iterates the parameter the call gives a
    DataLoader with workers (`iterated_parameters`): that DataLoader construction, the function's name and its file.
    Read from the summary of the defining file, so the file is parsed once, by the first lint that asks."""
    if not ctx.may_name(semantics.DATALOADER):
        return None
    path = Values.of(ctx).import_path(call.func, ctx.scope_nodes)
    located = defining_file(ctx.filename, path, ctx.config) if path is not None else None
    if located is None or not located[1]:
        return None
    where, name = located
    iterated = (SUMMARIES.section(where, ctx.config, _ITERATED_PARAMETERS, iterated_parameters) or {}).get(name, ())
    for parameter, position in iterated:
        given = syntax.keyword(call, parameter)
        if given is None and position >= 0 and not any(arg.star == "*" for arg in call.args):  # `*args` shifts them
            given = syntax.positional(call, position)
        if given is not None:
            found = worker_loader_in(given.value, ctx)
            if found is not None:
                return found, name, where
    return None


_ITERATED_PARAMETERS = "iterated-parameters"


def iterated_parameters(ctx: "FileContext") -> Dict[str, Tuple[Tuple[str, int], ...]]:
    """A summary section: for each function the file defines at module level (its name bound by that definition
    only), the parameters its own body iterates as they were given: `for batch in dataloader`, also beneath
    `enumerate`, `zip`, `tqdm` and the like (`_wrapped`), `iter(dataloader)`, `next(iter(dataloader))`,
    `list(dataloader)`, a comprehension over it, before any rebinding of the name. Each parameter comes with its
    position among the positional parameters, -1 for a keyword-only one. What a function does with a loader it is
    given, for the calls of it in other files (`worker_loader_given_to_iteration`)."""
    flow = Values.of(ctx).flow(ctx.module)
    found: Dict[str, Tuple[Tuple[str, int], ...]] = {}
    for statement in ctx.module.body:
        if type(statement) is not cst.FunctionDef:
            continue
        bindings = flow.reaching(statement.name.value, None)
        if len(bindings) == 1 and bindings[0].definition is statement:
            iterated = _parameters_iterated_in(statement, ctx)
            if iterated:
                found[statement.name.value] = iterated
    return found


def _parameters_iterated_in(function: cst.FunctionDef, ctx: "FileContext") -> Tuple[Tuple[str, int], ...]:
    params = function.params
    positions = {param.name.value: index for index, param in enumerate((*params.posonly_params, *params.params))}
    positions.update((param.name.value, -1) for param in params.kwonly_params)
    values = Values.of(ctx)
    stack: List[cst.CSTNode] = [ctx.module, function]
    iterated: Set[str] = set()

    def on_visit(node: cst.CSTNode) -> bool:
        stack.append(node)
        if type(node) in _NOT_THIS_FUNCTION:
            return False
        place = values.place(stack)
        for expr in _iterated_by(node, ctx, place.scopes):
            for name in _beneath_inline_wrappers(expr, place, 0):
                if type(name) is cst.Name and name.value in positions and values.holds_what_was_passed(name, place):
                    iterated.add(name.value)
        return True

    walk(function.body, on_visit, lambda node: stack.pop())
    return tuple(sorted((name, positions[name]) for name in iterated))


_NOT_THIS_FUNCTION = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def _iterated_by(node: cst.CSTNode, ctx: "FileContext", scopes) -> List[cst.BaseExpression]:
    """What `node` iterates itself: the iterable of a `for` or a comprehension, the argument of `iter`, `next`,
    `list`, `tuple` (the builtins) and the receiver of `__iter__()`, `__next__()`."""
    node_type = type(node)
    if node_type in (cst.For, cst.CompFor):
        return [node.iter]
    if node_type is not cst.Call:
        return []
    if type(node.func) is cst.Name and node.func.value in _ITERATING_BUILTINS and ctx.scopes.binding_scope(node.func.value, scopes) is None:
        return [arg.value for arg in node.args if arg.keyword is None and not arg.star]
    dunder = iterated_items(node, ctx, scopes)
    if dunder is None:
        dunder = advanced_iterator(node, ctx, scopes)
    return [dunder] if dunder is not None else []


def _beneath_inline_wrappers(expr: cst.BaseExpression, place, depth: int) -> List[cst.BaseExpression]:
    """What iterating `expr` iterates, beneath the wrappers written around it there (`enumerate(tqdm(loader))`)."""
    wrapped = _wrapped(Origin(expr, place), True, True) if depth < _WRAPPER_DEPTH else None
    if wrapped is None:
        return [expr]
    return [inner for each in wrapped for inner in _beneath_inline_wrappers(each, place, depth + 1)]


# Calls whose iteration yields the items of their first argument, in order: progress bars (`PROGRESS_BARS`), which
# iterate it only when they are iterated, and iterator helpers, which call `iter()` on it when they are made.
_ITEM_PRESERVING = PROGRESS_BARS | {"itertools.islice", "itertools.cycle"}
# Iterating these iterates every argument (`enumerate`'s index aside): enough to start a loader's workers.
_ITERATING_EVERY_ARGUMENT = frozenset({"enumerate", "zip", "itertools.chain", "itertools.zip_longest"})
# Accelerate's methods returning the loader they are given, wrapped: its workers start when the wrapper is iterated.
_PREPARING = frozenset({"prepare", "prepare_data_loader", "skip_first_batches"})
_ACCELERATOR = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
_WRAPPER_DEPTH = 4


def _beneath_wrappers(
    origins: List[Origin], starting_workers: Optional[cst.BaseExpression] = None, depth: int = 0,
) -> List[Origin]:
    """`origins`, with each iteration wrapper among them (`tqdm(loader)`, `iter(loader)`, also bound to a name before:
    `bar = tqdm(loader)`) replaced by the origins of what it wraps.

    `starting_workers`, the expression iterated, asks instead "does iterating it start a loader's workers": then also
    the wrappers whose items differ but whose iteration iterates what they wrap (`enumerate`, `zip`,
    `itertools.chain`) and accelerate's `prepare(loader)` are looked beneath; those that call `iter()` on what they
    wrap when they are made (`iter`, `enumerate`, `islice`) only when written where it is iterated: bound to a name
    first, they started the workers there (`batches = iter(loader)`, then `next(batches)` starts nothing)."""
    found: List[Origin] = []
    for origin in origins:
        wrapped = None
        if depth < _WRAPPER_DEPTH and not origin.applied:
            wrapped = _wrapped(origin, starting_workers is not None, origin.node is starting_workers)
        if wrapped is None:
            found.append(origin)
            continue
        values = Values.of(origin.place.context)
        for expr in wrapped:
            found += _beneath_wrappers(values.origins(expr, origin.place.stack), starting_workers and expr, depth + 1)
    return found


def _wrapped(origin: Origin, starting_workers: bool, inline: bool) -> Optional[List[cst.BaseExpression]]:
    """What the wrapper call `origin` iterates, None when it is no wrapper (`_beneath_wrappers`)."""
    call = origin.node
    ctx, stack = origin.place.context, origin.place.stack
    items = iterated_items(call, ctx, origin.place.scopes)
    if items is not None:  # `iter(loader)`, `loader.__iter__()`
        return [items] if inline or not starting_workers else None
    if type(call) is not cst.Call or not call.args:
        return None
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if not positional:
        return None
    name = ctx.qualified_name(call.func, stack)
    if name is None and type(call.func) is cst.Name and ctx.scopes.binding_scope(call.func.value, origin.place.scopes) is None:
        name = call.func.value  # a builtin
    if name in PROGRESS_BARS or (name in _ITEM_PRESERVING and (inline or not starting_workers)):
        return positional[:1]
    if not starting_workers:
        return None
    if name in _ITERATING_EVERY_ARGUMENT and (inline or name == "itertools.chain"):
        return positional
    if semantics.method_name(call) in _PREPARING and len(positional) == 1 and any(
        type(owner.node) is cst.Call and owner.place.context.qualified_name_in(owner.node.func, _ACCELERATOR, owner.place.stack)
        for owner in Values.of(ctx).origins(call.func.value, stack)
    ):
        return positional
    return None


# ------------------------------------------------------------------ which values are tensors

# torch functions whose result is a tensor, whatever their arguments.
TENSOR_FUNCTIONS = frozenset(f"torch.{name}" for name in (
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace", "eye",
    "tensor", "as_tensor", "from_numpy", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
    "randn_like", "randint_like", "normal", "bernoulli", "multinomial", "cat", "stack", "where", "matmul",
    "Tensor", "FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "ByteTensor", "BoolTensor",
))
_FUNCTIONAL = "torch.nn.functional."
# Tensor methods whose result is a tensor when their receiver is one (`.to`, `.float()` and the like the value
# model follows to the receiver already).
_TENSOR_TO_TENSOR = frozenset({
    "view", "view_as", "reshape", "reshape_as", "unsqueeze", "squeeze", "permute", "transpose", "t", "contiguous",
    "clamp", "detach", "flatten", "clone", "long", "int", "bool", "byte", "short", "expand", "expand_as", "repeat",
})
# Methods only a torch tensor has (numpy arrays, modules and containers lack them): a parameter they are called on
# in its function holds a tensor. `.shape`, `.view`, `.reshape` and `.transpose` are numpy's too.
_TENSOR_ONLY_METHODS = frozenset({
    "size", "dim", "numel", "unsqueeze", "permute", "contiguous", "detach", "item", "masked_fill", "new_zeros",
    "new_ones", "new_full", "new_empty", "backward", "element_size",
})
_TENSOR_DEPTH = 4


def holds_tensor(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """Every value `expr` may hold at `stack` is a torch tensor: made by a torch function (`torch.zeros`,
    `F.relu`), by a tensor method of a tensor (`x.view(...)`), by arithmetic with a tensor (`x + noise`, `-x`),
    unpacked from the batches of a DataLoader
    (`for images, labels in loader`; a whole batch may be a dict or a `BatchEncoding`, whose `.to()` works in
    place), or a parameter its function calls tensor-only methods on (`x.size(0)`, `x.unsqueeze(1)`)."""
    return _holds_tensor(expr, ctx, ctx.stack if stack is None else stack, 0)


def _holds_tensor(expr: cst.BaseExpression, ctx: "FileContext", stack, depth: int) -> bool:
    if depth > _TENSOR_DEPTH:
        return False
    values = Values.of(ctx)
    origins = values.origins(expr, stack)
    return bool(origins) and all(_tensor_origin(origin, depth) for origin in origins)


def _tensor_origin(origin, depth: int) -> bool:
    node, place = origin.node, origin.place
    ctx = place.context
    if origin.applied:
        return False
    if origin.opaque:
        return type(node) is cst.Name and _bound_to_tensors(node, place, ctx)
    if type(node) is cst.BinaryOperation:
        # Arithmetic with a tensor on either side gives a tensor (`latent + torch.randn_like(latent) * strength`).
        return any(_holds_tensor(side, ctx, place.stack, depth + 1) for side in (node.left, node.right))
    if type(node) is cst.UnaryOperation and type(node.operator) is not cst.Not:
        return _holds_tensor(node.expression, ctx, place.stack, depth + 1)
    if type(node) is not cst.Call:
        return False
    name = ctx.qualified_name(node.func, place.stack)
    if name is not None:
        return name in TENSOR_FUNCTIONS or (name.startswith(_FUNCTIONAL) and name[len(_FUNCTIONAL):].islower())
    method = semantics.method_name(node)
    return method in _TENSOR_TO_TENSOR and _holds_tensor(node.func.value, ctx, place.stack, depth + 1)


def _bound_to_tensors(name: cst.Name, place, ctx: "FileContext") -> bool:
    """The unknown bindings of `name` (parameters, loop targets) all hold tensors."""
    found = Values.of(ctx).bindings(name, place)
    if found is None:
        return False
    scope, bindings = found
    values = Values.of(ctx)
    # Unknown: parameters, loop targets (`next(batches)` of `batches = iter(loader)` too), `+=`, `with ... as`.
    unknown = [
        (binding, values.items_bound(binding, place.scopes)) for binding in bindings
        if binding.definition is None and (binding.value is None or advanced_iterator(binding.value, ctx, place.scopes) is not None)
    ]
    unknown = [(binding, items) for binding, items in unknown if binding.value is None or items is not None]
    if not unknown:
        return False
    for binding, items in unknown:
        if binding.statement is None:  # a parameter
            if type(scope) is not cst.FunctionDef or name.value not in ctx.shared(_TensorParameters).of(scope):
                return False
        elif items is None or not _unpacked_from_loader(binding, items):
            return False
    return True


def _unpacked_from_loader(binding, items) -> bool:
    """A loop target unpacked from a DataLoader's batch (`items`: what the loop iterates, and where): `images` of
    `for images, labels in loader`, of `for i, (images, labels) in enumerate(tqdm(loader))` or of
    `images, labels = next(batches)` after `batches = iter(loader)`."""
    iterated, element = items_iterated(items[0], binding.element, items[1].context, items[1].stack)
    if not element:
        return False
    return bool(loaders_iterated(iterated, items[1].stack, items[1].context))


def items_iterated(
    expr: cst.BaseExpression, element=(), ctx: Optional["FileContext"] = None, stack=None,
) -> Tuple[cst.BaseExpression, Optional[Tuple[int, ...]]]:
    """What a `for` over `expr` iterates beneath `enumerate(...)`, `zip(...)` and `tqdm(...)`, and the path of the
    target `element` (the unpacking path of a loop target) within one of its items; None: not in an item (the index
    `enumerate` adds). With `ctx` (and `stack`, where `expr` is evaluated), progress bars imported under any name
    (`from tqdm import tqdm as progress`) too."""
    while type(expr) is cst.Call and expr.args:
        callee = semantics.terminal_name(expr.func)
        index = 0
        if callee == "enumerate" and type(expr.func) is cst.Name:
            if element:
                if element[0] != 1:
                    return expr, None
                element = element[1:]
        elif callee == "zip" and type(expr.func) is cst.Name:
            # `for (x, y), (u, v) in zip(a, b)`: the first part of each item is an item of `a`.
            if not element or element[0] >= len(expr.args) or any(arg.star or arg.keyword for arg in expr.args):
                return expr, None
            index, element = element[0], element[1:]
        elif callee != "tqdm" and (ctx is None or not ctx.qualified_name_in(expr.func, PROGRESS_BARS, stack)):
            break
        expr = expr.args[index].value
    return expr, element


def loaders_iterated(expr: cst.BaseExpression, stack, ctx: "FileContext") -> List[Origin]:
    """The `DataLoader(...)` constructions `expr` holds at `stack`: [] unless every value it may hold is one."""
    if not _may_reach_dataloader(ctx):
        return []
    origins = _beneath_wrappers(Values.of(ctx).origins(expr, stack))
    if origins and all(
        semantics.is_dataloader_call(origin.node, origin.place.context, origin.place.stack) for origin in origins
    ):
        return origins
    return []


class _TensorParameters:
    """For each function asked about: its parameters that tensor-only methods are called on in its own body."""

    def __init__(self, ctx: "FileContext"):
        self.found: Dict[int, FrozenSet[str]] = {}

    def of(self, function: cst.FunctionDef) -> FrozenSet[str]:
        names = self.found.get(id(function))
        if names is None:
            collector = _TensorMethodReceivers()
            walk_visitor(function.body, collector)
            names = self.found[id(function)] = frozenset(collector.names)
        return names


class _TensorMethodReceivers(OwnScopeVisitor):
    def __init__(self):
        self.names: Set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        receiver = semantics.receiver(node)
        if type(receiver) is cst.Name and semantics.method_name(node) in _TENSOR_ONLY_METHODS:
            self.names.add(receiver.value)


# ---------------------------------------------------------------- values that hold no autograd graph

# torch functions that make a tensor from numbers, shapes or other tensors: what they return requires grad only when
# given `requires_grad=True` or an input that requires grad. `torch.load` (a saved tensor may require grad) and the
# modules of `torch.nn` (parameters) are not among them.
_GRAPHLESS_MODULES = ("torch.", "torch.nn.functional.")
_GRAPH_MAKING = frozenset({"torch.load", "torch.nn.Parameter", "torch.nn.parameter.Parameter"})
_VARIABLE = frozenset({"torch.autograd.Variable", "torch.autograd.variable.Variable"})
# The standard library's random numbers: Python numbers, given arguments without graph (`random.randint(0, n - 1)`
# building a target batch; `random.uniform(a, b)` of tensors would compute with them, hence the arguments' check).
_PYTHON_NUMBERS = frozenset(
    f"random.{name}" for name in ("random", "randint", "randrange", "uniform", "gauss", "normalvariate", "getrandbits")
)
# Module classes of `torch.nn` named `...Loss` that hold parameters.
_LOSSES_WITH_PARAMETERS = frozenset({"torch.nn.AdaptiveLogSoftmaxWithLoss"})
_NO_GRAPH_DEPTH = 12


def holds_no_graph(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """Every value `expr` may hold at `stack` is known to be no part of an autograd graph: made only from literals and
    tensors torch's factories make without `requires_grad=True` (`torch.randn(5, 5)`, `Variable(torch.randn(5))`),
    through torch's functions (`F.softmax`), tensor methods (but `requires_grad_`), arithmetic, subscripts and torch
    loss modules without parameters (`nn.NLLLoss()`), followed through names by the value model. A parameter, a
    model's output, a batch of a loader, or anything the model does not follow is not known to be so."""
    return _no_graph(expr, ctx, ctx.stack if stack is None else stack, 0)


def _no_graph(expr: cst.BaseExpression, ctx: "FileContext", stack, depth: int) -> bool:
    if depth > _NO_GRAPH_DEPTH:
        return False
    expr_type = type(expr)
    if expr_type in (cst.Integer, cst.Float, cst.SimpleString):
        return True
    if expr_type is cst.UnaryOperation:
        return _no_graph(expr.expression, ctx, stack, depth + 1)
    if expr_type is cst.BinaryOperation:
        return _no_graph(expr.left, ctx, stack, depth + 1) and _no_graph(expr.right, ctx, stack, depth + 1)
    if expr_type in (cst.List, cst.Tuple):
        return all(type(item) is cst.Element and _no_graph(item.value, ctx, stack, depth + 1) for item in expr.elements)
    if expr_type in (cst.ListComp, cst.GeneratorExp):  # its item, read in its own scope (what `for` binds is unknown)
        return _no_graph(expr.elt, ctx, tuple(stack) + (expr,), depth + 1)
    if expr_type is cst.Subscript:
        return _no_graph(expr.value, ctx, stack, depth + 1) and all(
            type(part.slice) is cst.Index and _no_graph(part.slice.value, ctx, stack, depth + 1) for part in expr.slice
        )
    if expr_type is cst.Call:
        return _call_without_graph(expr, ctx, stack, depth)
    if expr_type is cst.Attribute:  # `torch.long`, `torch.pi`: torch's constants
        return (ctx.qualified_name(expr, stack) or "").startswith("torch.")
    if expr_type is cst.Name:
        if expr.value in ("True", "False", "None") and ctx.scopes.binding_scope(expr.value, scope_nodes_of(stack)) is None:
            return True
        origins = Values.of(ctx).origins(expr, stack)
        return bool(origins) and all(
            not origin.opaque and not origin.applied and origin.node is not expr
            and _no_graph(origin.node, origin.place.context, origin.place.stack, depth + 1)
            for origin in origins
        )
    return False


def _call_without_graph(call: cst.Call, ctx: "FileContext", stack, depth: int) -> bool:
    if any(arg.star for arg in call.args) or not all(_no_graph(arg.value, ctx, stack, depth + 1) for arg in call.args):
        return False
    requires_grad = semantics.keyword(call, "requires_grad")
    if requires_grad is not None and semantics.literal(requires_grad.value, None) is not False:
        return False
    func = call.func
    name = ctx.qualified_name(func, stack)
    if name is not None:
        return _graphless_function(name)
    if type(func) is cst.Call:  # `nn.NLLLoss()(output, target)`
        return _graphless_loss(func, ctx, stack, depth)
    if type(func) is cst.Attribute:
        if func.attr.value == "requires_grad_":
            return False
        receiver = func.value
        if _no_graph(receiver, ctx, stack, depth + 1):  # a tensor method of a tensor without graph
            return True
    if type(func) is cst.Name:  # `criterion(output, target)` after `criterion = nn.NLLLoss()` (or `= F.nll_loss`)
        origins = Values.of(ctx).origins(func, stack)
        return bool(origins) and all(
            not origin.opaque and not origin.applied and (
                _graphless_loss(origin.node, origin.place.context, origin.place.stack, depth + 1)
                if type(origin.node) is cst.Call
                else type(origin.node) in (cst.Name, cst.Attribute)
                and _graphless_function(origin.place.context.qualified_name(origin.node, origin.place.stack) or "")
            )
            for origin in origins
        )
    return False


def _graphless_function(name: str) -> bool:
    """The function `name` (qualified) returns no graph for arguments without one: torch's functions that make or
    compute tensors, `Variable`, random's numbers."""
    if name in _VARIABLE or name in _PYTHON_NUMBERS:
        return True
    module = name.rpartition(".")[0] + "."
    return module in _GRAPHLESS_MODULES and name not in _GRAPH_MAKING and not _is_module_class(name)


def _graphless_loss(built: cst.Call, ctx: "FileContext", stack, depth: int) -> bool:
    """`built` makes a torch loss module without parameters, from arguments without graph (`weight=`)."""
    name = ctx.qualified_name(built.func, stack)
    return (
        name is not None and name.startswith("torch.nn.") and name.endswith("Loss") and name not in _LOSSES_WITH_PARAMETERS
        and not any(arg.star for arg in built.args) and all(_no_graph(arg.value, ctx, stack, depth + 1) for arg in built.args)
    )


def _is_module_class(name: str) -> bool:
    """`torch.X` where X is capitalised but not a tensor type: a class such as `torch.Generator` (not a tensor)."""
    short = name.rpartition(".")[2]
    return short[:1].isupper() and not short.endswith("Tensor")

