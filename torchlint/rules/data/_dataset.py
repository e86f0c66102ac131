"""What the data-loading rules ask about a DataLoader call: its arguments, and where its dataset was built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.engine.scopes import parameters, scope_nodes_of

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

DATASET_BASES = frozenset({
    "torch.utils.data.Dataset", "torch.utils.data.IterableDataset",
    "torch.utils.data.dataset.Dataset", "torch.utils.data.dataset.IterableDataset",
})
TENSOR_DATASET = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
# Wrappers that only pick items of the dataset they are given.
SUBSET = frozenset({"torch.utils.data.Subset", "torch.utils.data.dataset.Subset"})

# Modules whose functions build tensors or arrays in memory (`torch.randn`, `np.arange`, `np.random.normal`).
IN_MEMORY_PRODUCERS = frozenset({"torch", "numpy", "numpy.random"})
# ... except those that map a file lazily or return something else than the data.
LAZY_PRODUCERS = frozenset({"load", "memmap", "from_file", "default_rng", "RandomState", "Generator"})
SEQUENCE_BUILTINS = frozenset({"range", "list", "tuple"})

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
#            pin_memory, drop_last, timeout, worker_init_fn, ...)
_POSITIONS = {"dataset": 0, "collate_fn": 6, "worker_init_fn": 10}


def loader_argument(call: cst.Call, name: str) -> Optional[cst.Arg]:
    """The argument a DataLoader call passes for parameter `name`, by keyword or by position."""
    return semantics.keyword(call, name) or semantics.positional(call, _POSITIONS[name])


def construction(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> Optional[cst.Call]:
    """The call that built `expr`: the expression itself, or the last call assigned to the variable or `self.` attribute."""
    if isinstance(expr, cst.Call):
        return expr
    for value in reversed(ctx.assigned_values(expr, stack)):
        if isinstance(value, cst.Call):
            return value
    return None


def unwrapped(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> cst.BaseExpression:
    """The dataset under `Subset(...)` wrappers (written out or assigned), or `expr` itself."""
    for _ in range(8):  # a bound on `a = Subset(b)`, `b = Subset(a)` cycles
        built = construction(expr, ctx, stack)
        if built is None or ctx.qualified_name(built.func, stack) not in SUBSET:
            break
        inner = semantics.keyword(built, "dataset") or semantics.positional(built, 0)
        if inner is None:
            break
        expr = inner.value
    return expr


def holds_items(expr: cst.BaseExpression, ctx: "FileContext", stack=None, seen=frozenset()) -> bool:
    """`expr` already holds its items in memory, so indexing it is all a loader worker would do: a
    `TensorDataset`, a tensor or array built by torch/numpy, or a Python sequence (`range(n)`, `[...]`,
    `list(...)`), written out or last assigned to the variable or `self.` attribute."""
    expr = unwrapped(expr, ctx, stack)
    if isinstance(expr, (cst.List, cst.Tuple, cst.ListComp)):
        return True
    if isinstance(expr, (cst.Name, cst.Attribute)):  # a variable or a `self.` attribute
        code = ctx.code(expr)
        values = ctx.assigned_values(expr, stack) if code not in seen else []
        return bool(values) and holds_items(values[-1], ctx, stack, seen | {code})
    if not isinstance(expr, cst.Call):
        return False
    name = ctx.qualified_name(expr.func, stack)
    if name is None:
        return _is_builtin_sequence(expr.func, ctx, stack)
    module, _, function = name.rpartition(".")
    return name in TENSOR_DATASET or module in IN_MEMORY_PRODUCERS and function not in LAZY_PRODUCERS


def _is_builtin_sequence(func: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    if not isinstance(func, cst.Name) or func.value not in SEQUENCE_BUILTINS:
        return False
    return ctx.scopes.binding_scope(func.value, ctx.scope_nodes if stack is None else scope_nodes_of(stack)) is None


def is_dataset_class(node: cst.ClassDef, ctx: "FileContext", dataset_classes, stack) -> bool:
    """A class deriving from torch's Dataset/IterableDataset, directly or through a class named in `dataset_classes`.

    `stack` is where the class statement sits: its bases are evaluated there, not in the class body.
    """
    for base in node.bases:
        value = base.value.value if isinstance(base.value, cst.Subscript) else base.value  # Dataset[int]
        if ctx.qualified_name(value, stack) in DATASET_BASES:
            return True
        if isinstance(value, cst.Name) and value.value in dataset_classes:
            return True
    return False


def indexing_dataset(node: cst.ClassDef, ctx: "FileContext", stack) -> Optional[Tuple[Tuple[int, str], ...]]:
    """For a class whose `__getitem__` only indexes attributes each holding its items (a tensor built in
    `__init__`, a list), the `__init__` parameters (position after `self`, name) that those attributes
    merely store: the class is in memory when the arguments given for them are. None for any other class.

    `stack` is where the class statement sits.
    """
    methods = {statement.name.value: statement for statement in node.body.body if isinstance(statement, cst.FunctionDef)}
    getitem = methods.get("__getitem__")
    indexed = _indexed_attributes(getitem) if getitem is not None else None
    if not indexed:
        return None
    init = methods.get("__init__")
    init_parameters = [param.name.value for param in parameters(init.params)][1:] if init is not None else []
    method_stack = [*stack, node, init] if init is not None else [*stack, node]
    attributes = ctx.scopes.scope_of(node).attributes
    stored = []
    for attribute in indexed:
        values = attributes.get(attribute)
        if not values:
            return None
        for value in values:
            if isinstance(value, cst.Name) and value.value in init_parameters:
                stored.append((init_parameters.index(value.value), value.value))
            elif not holds_items(value, ctx, method_stack):
                return None
    return tuple(stored)


def _indexed_attributes(getitem: cst.FunctionDef) -> Optional[Set[str]]:
    """The attributes `__getitem__(self, index)` indexes, when that is all it does: `return self.data[index]`,
    `return self.x[index], self.y[index]`, `{"x": self.x[i]}`, or the same through local variables."""
    params = parameters(getitem.params)
    if len(params) != 2 or not isinstance(getitem.body, cst.IndentedBlock):
        return None
    self_name, index = params[0].name.value, params[1].name.value
    attributes: Set[str] = set()
    local_names: Set[str] = set()

    def indexes_only(expr: cst.BaseExpression) -> bool:
        if isinstance(expr, (cst.Tuple, cst.List)):
            return all(indexes_only(element.value) for element in expr.elements)
        if isinstance(expr, cst.Dict):
            return all(isinstance(element, cst.DictElement) and indexes_only(element.value) for element in expr.elements)
        if isinstance(expr, cst.Name):
            return expr.value in local_names
        if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
            target, key = expr.value, expr.slice[0].slice
            if (
                isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                and target.value.value == self_name and isinstance(key, cst.Index)
                and isinstance(key.value, cst.Name) and key.value.value == index
            ):
                attributes.add(target.attr.value)
                return True
        return False

    statements = list(getitem.body.body)
    if statements and _is_docstring(statements[0]):
        statements = statements[1:]
    for position, statement in enumerate(statements):
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        small = statement.body[0]
        last = position == len(statements) - 1
        if last and isinstance(small, cst.Return) and small.value is not None and indexes_only(small.value):
            return attributes
        if last or not isinstance(small, cst.Assign) or len(small.targets) != 1:
            return None
        target = small.targets[0].target
        if not isinstance(target, cst.Name) or not indexes_only(small.value):
            return None
        local_names.add(target.value)
    return None


def _is_docstring(statement: cst.BaseStatement) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    expression = statement.body[0]
    return isinstance(expression, cst.Expr) and isinstance(expression.value, (cst.SimpleString, cst.ConcatenatedString))
