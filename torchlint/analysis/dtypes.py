"""Torch dtypes as code names them: `torch.float32` and its aliases (`torch.float`), the casting methods
(`x.float()`), the legacy tensor types (`torch.cuda.FloatTensor`), names that by their spelling hold a dtype,
the dtype a torch factory call makes (`made_dtype`), where the dtype of a value was decided (`dtype_origins`), and
values that are Python numbers rather than tensors (`python_number`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, List, NamedTuple, Optional, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import holds_tensor, items_iterated, loaders_iterated
from torchlint.analysis.syntax import call_argument
from torchlint.analysis.values import Origin, Place, Values, method_of
from torchlint.engine.scopes import SCOPE_TYPES, scope_nodes_of
from torchlint.engine.walk import STATEMENT_TYPES, walk

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Canonical dtype names, and the aliases torch also exports for them.
DTYPES = frozenset({
    "float32", "float64", "float16", "bfloat16", "complex64", "complex128",
    "int64", "int32", "int16", "int8", "uint8", "bool",
})
FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16"})
DTYPE_ALIASES = {
    "float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
    "short": "int16", "cfloat": "complex64", "cdouble": "complex128",
}
# `x.float()` and friends: the dtype each method casts to.
CAST_METHODS = {
    "float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
    "long": "int64", "int": "int32", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool",
}
# Legacy tensor types accepted by `.type(...)`; `torch.cuda.<Type>` also moves to the GPU.
TENSOR_TYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
    "LongTensor": "int64", "IntTensor": "int32", "ShortTensor": "int16", "CharTensor": "int8",
    "ByteTensor": "uint8", "BoolTensor": "bool",
}

# Factories whose result has the default dtype, float32, when not given `dtype=`.
DEFAULT_FLOAT_FACTORIES = frozenset(
    f"torch.{name}" for name in ("zeros", "ones", "empty", "rand", "randn", "eye", "linspace", "logspace")
)
INT64_FACTORIES = frozenset({"torch.randint", "torch.randperm"})
# Methods of a tensor or array that return a Python int.
_INT_METHODS = frozenset({"size", "numel", "dim", "nelement", "ndimension"})
# Tensor methods whose result has their receiver's dtype: views, reshapes, repeats and copies (`view` only when given
# a shape: `x.view(torch.float16)` reinterprets the bytes as another dtype).
DTYPE_KEEPING_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "contiguous", "permute", "transpose", "t",
    "squeeze", "unsqueeze", "flatten", "unflatten", "movedim", "repeat", "repeat_interleave", "flip", "roll",
    "clone", "detach", "narrow", "select",
})
# How many reshapes `dtype_origins` looks through, one after the other.
_DTYPE_KEEPING_DEPTH = 8
# Operators that keep two Python ints an int (`/` makes a float, `**` does for a negative exponent).
_INT_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)


def dtype_of(expr: Optional[cst.CSTNode], ctx: "FileContext", stack=None) -> Optional[str]:
    """The canonical dtype a `torch.float`/`torch.float32`-style expression names, else None."""
    if expr is None:
        return None
    name = ctx.qualified_name(expr, stack)
    if not name or not name.startswith("torch."):
        return None
    short = name[len("torch."):]
    short = DTYPE_ALIASES.get(short, short)
    return short if short in DTYPES else None


def tensor_type_of(expr: cst.CSTNode, ctx: "FileContext", stack=None) -> Tuple[Optional[str], bool]:
    """(dtype, moves to CUDA) for `torch.FloatTensor` / `torch.cuda.FloatTensor`; (None, False) otherwise."""
    name = ctx.qualified_name(expr, stack) or ""
    for prefix, cuda in (("torch.cuda.", True), ("torch.", False)):
        if name.startswith(prefix) and name[len(prefix):] in TENSOR_TYPES:
            return TENSOR_TYPES[name[len(prefix):]], cuda
    return None, False


class NamedType(NamedTuple):
    """A dtype or legacy tensor type an expression names (`named_type`)."""

    dtype: str
    # A legacy tensor type (`torch.FloatTensor`), which `.type(...)` takes and `.to(...)` does not.
    legacy: bool
    # A CUDA tensor type (`torch.cuda.FloatTensor`); None when the values a name may hold differ in that.
    cuda: Optional[bool]


def named_type(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> Optional[NamedType]:
    """The dtype or legacy tensor type `expr` names, also through a name every value of which names that dtype
    (`dtype = torch.FloatTensor` in an earlier cell; `torch.cuda.FloatTensor if cuda else torch.FloatTensor`,
    float32 on a device not known); None otherwise."""
    found = _named_here(expr, ctx, stack)
    if found is not None or type(expr) is not cst.Name:
        return found
    named = {
        None if origin.applied or origin.opaque else _named_here(origin.node, origin.place.context, origin.place.stack)
        for origin in Values.of(ctx).origins(expr, stack)
    }
    if None in named or len({(each.dtype, each.legacy) for each in named}) != 1:
        return None
    first = next(iter(named))
    return first if len(named) == 1 else first._replace(cuda=None)


def _named_here(expr: cst.CSTNode, ctx: "FileContext", stack) -> Optional[NamedType]:
    dtype = dtype_of(expr, ctx, stack)
    if dtype:
        return NamedType(dtype, legacy=False, cuda=False)
    dtype, cuda = tensor_type_of(expr, ctx, stack)
    return NamedType(dtype, legacy=True, cuda=cuda) if dtype is not None else None


def names_dtype(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """A torch dtype, or a variable/attribute that by its name holds one (`dtype`, `x.dtype`, `amp_dtype`)."""
    if dtype_of(expr, ctx, stack):
        return True
    name = semantics.terminal_name(expr)
    return bool(name) and (name == "dtype" or name.endswith("_dtype"))


def made_dtype(call: cst.Call, ctx: "FileContext", stack=None) -> Optional[str]:
    """The dtype a torch factory call makes, as the source shows: its `dtype=`; the default dtype, float32, of
    `torch.zeros(n)`-style factories and of the legacy constructor `torch.Tensor(data)`; int64 of `torch.randint`
    and `torch.randperm`; the type of a legacy typed constructor (`torch.FloatTensor(data)`,
    `torch.cuda.LongTensor(n)`: it converts its data, or raises for a tensor of another dtype); int64 of
    `torch.arange` whose bounds are all Python ints as the source shows them (literals, `len(...)`, `x.shape[0]`,
    `x.size(0)`, sums and products of those, names only ever bound to them), and float32 of one with a float
    literal among its bounds; int64 of `torch.tensor` of a literal of ints (`[0, 2, 5]`). Observed on torch
    2.13: `torch.Tensor(t)` of a tensor returns `t` in its own dtype, so that one is read only when its data is not
    known to be a tensor."""
    name = ctx.qualified_name(call.func, stack)
    if name is None or not name.startswith("torch."):
        return None
    given = semantics.keyword(call, "dtype")
    if given is not None:
        return dtype_of(given.value, ctx, stack)
    if name in DEFAULT_FLOAT_FACTORIES:
        return "float32"
    if name in INT64_FACTORIES:
        return "int64"
    if name == "torch.arange" and semantics.keyword(call, "out") is None:
        # torch 2.13: int64 when every bound is an int, the default float dtype when one is a float.
        bounds = [arg.value for arg in call.args if arg.keyword is None or arg.keyword.value in ("start", "end", "step")]
        if not bounds or any(arg.star for arg in call.args):
            return None
        floats = [type(bound) is cst.Float for bound in bounds]
        if not all(is_float or _python_int(bound, ctx, stack, 0) for bound, is_float in zip(bounds, floats)):
            return None
        return "float32" if any(floats) else "int64"
    if name == "torch.tensor":
        # `torch.tensor([0, 2, 5])`: a literal of ints (no bools, no floats) makes int64.
        data = semantics.literal(call_argument(call, 0, "data"), None)
        return "int64" if _int_literal(data) else None
    if name == "torch.Tensor":
        data = call_argument(call, 0, "data")
        alone = data is not None and len(call.args) == 1
        return None if alone and holds_tensor(data, ctx, stack) else "float32"
    return tensor_type_of(call.func, ctx, stack)[0]


# torchvision's conversion of an image to a tensor: float32 of a PIL image (its 8-bit modes) or a uint8 array,
# scaled to [0, 1] (torchvision 0.x `to_tensor`, in the default dtype); the transforms after it in a `Compose` that
# keep a float tensor's dtype.
TO_TENSOR = frozenset({"torchvision.transforms.ToTensor", "torchvision.transforms.transforms.ToTensor"})
COMPOSE = frozenset({"torchvision.transforms.Compose", "torchvision.transforms.transforms.Compose"})
_FLOAT_KEEPING_TRANSFORMS = frozenset(
    f"torchvision.transforms{module}.{name}" for module in ("", ".transforms")
    for name in ("Normalize", "RandomErasing")
)


def applied_dtype(origin: Origin) -> Optional[str]:
    """The dtype of what applying the transform `origin` is built from gives (`origin.applied`): float32 for
    torchvision's `ToTensor()`, and for a `Compose([...])` of a literal list whose last transform is `ToTensor()`, or
    one after it that keeps a float tensor's dtype (`Normalize(mean, std)`). An image transform is given the images
    of a dataset: PIL images, for which `ToTensor()` makes float32; not in a file that changes the default dtype."""
    there, stack = origin.place.context, origin.place.stack
    if not origin.applied or type(origin.node) is not cst.Call or "set_default_" in there.text:
        return None
    if there.qualified_name_in(origin.node.func, TO_TENSOR, stack):
        return "float32"
    transforms = call_argument(origin.node, 0, "transforms")
    if not there.qualified_name_in(origin.node.func, COMPOSE, stack) or type(transforms) not in (cst.List, cst.Tuple):
        return None
    for element in reversed(transforms.elements):
        built = element.value
        if type(element) is cst.StarredElement or type(built) is not cst.Call:
            return None
        if there.qualified_name_in(built.func, TO_TENSOR, stack):
            return "float32"
        if not there.qualified_name_in(built.func, _FLOAT_KEEPING_TRANSFORMS, stack):
            return None
    return None


# Torch functions that join tensors: the result has their common dtype (all of one dtype: that dtype).
JOINS = frozenset(
    f"torch.{name}" for name in ("cat", "concat", "concatenate", "stack", "vstack", "hstack", "dstack", "row_stack")
)


def joined_tensors(call: cst.Call, ctx: "FileContext", stack) -> Optional[List[Tuple[cst.BaseExpression, tuple]]]:
    """The tensors a join (`torch.cat(tensors)`, `torch.stack`, ... without `out=` or `dtype=`) puts together, each
    with the stack it is evaluated at: the items of a literal list or tuple, or of a list a function builds by
    `append` alone (`images = []`, then `images.append(x)` in a loop, then `torch.cat(images)`: every other use of the
    name in the function, a nested one included, leaves them unknown). None when they are not known."""
    if ctx.qualified_name(call.func, stack) not in JOINS or any(
        semantics.keyword(call, keyword) is not None for keyword in ("out", "dtype")
    ):
        return None
    tensors = call_argument(call, 0, "tensors")
    if type(tensors) in (cst.List, cst.Tuple):
        if not tensors.elements or any(type(element) is cst.StarredElement for element in tensors.elements):
            return None
        return [(element.value, stack) for element in tensors.elements]
    if type(tensors) is not cst.Name:
        return None
    origins = Values.of(ctx).origins(tensors, stack)
    if len(origins) != 1 or origins[0].applied or origins[0].opaque or type(origins[0].node) is not cst.List:
        return None
    built = origins[0]
    function = built.place.scopes[-1]
    if built.place.context is not ctx or type(function) is not cst.FunctionDef or function is not scope_nodes_of(stack)[-1]:
        return None
    if any(type(element) is cst.StarredElement for element in built.node.elements):
        return None
    found = [(element.value, built.place.stack) for element in built.node.elements]
    appended = _appended(ctx, function, built.node, tensors.value, tensors, built.place.scopes[:-1])
    if appended is None:
        return None
    return found + appended or None


def _appended(
    ctx: "FileContext", function: cst.FunctionDef, built: cst.List, name: str, read: cst.Name, outer: tuple,
) -> Optional[List[Tuple[cst.BaseExpression, tuple]]]:
    """The values `function` appends to the list `built` bound to `name` (`name.append(x)`), each with its stack;
    None when the function uses the name otherwise than to bind it, append to it, or read it at `read`, where the
    use may see that list (a use of another binding, `return images` after `images = torch.cat(images)`, is not)."""
    found: List[Tuple[cst.BaseExpression, tuple]] = []
    scopes: List[cst.CSTNode] = list(outer)
    statements: List[cst.CSTNode] = []
    accounted = {id(read)}
    uses = []

    def on_visit(node: cst.CSTNode) -> bool:
        node_type = type(node)
        if node_type in SCOPE_TYPES:
            scopes.append(node)
        elif node_type in STATEMENT_TYPES:
            statements.append(node)
        if node_type is cst.Name and node.value == name:
            uses.append((node, tuple(scopes) + tuple(statements[-1:])))
        elif node_type is cst.AssignTarget and type(node.target) is cst.Name and node.target.value == name:
            accounted.add(id(node.target))
        elif node_type is cst.Call and type(node.func) is cst.Attribute and type(node.func.value) is cst.Name \
                and node.func.value.value == name and node.func.attr.value == "append":
            if len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star:
                accounted.add(id(node.func.value))
                found.append((node.args[0].value, tuple(scopes) + tuple(statements[-1:])))
        return True

    def on_leave(node: cst.CSTNode) -> None:
        if type(node) in SCOPE_TYPES:
            scopes.pop()
        elif type(node) in STATEMENT_TYPES:
            statements.pop()

    walk(function, on_visit, on_leave, wanted=(cst.Name,))
    values = Values.of(ctx)
    for use, at in uses:
        if id(use) not in accounted and any(origin.node is built for origin in values.origins(use, at)):
            return None
    return found


def dtype_origins(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> List[Origin]:
    """Where the dtype of the tensor `expr` holds at `stack` was decided: the origins of its value, stopping at casts
    (`Values.origins(..., through_casts=False)`), with each reshape, view, copy or index of a tensor among them
    (`x.expand(n, m).contiguous().view(-1)`, `x.clone()`, `x[mask]`) replaced by those of the tensor it is made from,
    whose dtype it has. A factory among them (`torch.arange(10)` of `torch.arange(10).view(-1)`) tells the dtype."""
    return _dtype_origins(expr, ctx, ctx.stack if stack is None else stack, 0)


def _dtype_origins(expr: cst.BaseExpression, ctx: "FileContext", stack, depth: int) -> List[Origin]:
    found: List[Origin] = []
    for origin in Values.of(ctx).origins(expr, stack, through_casts=False):
        there, at = origin.place.context, origin.place.stack
        source = None
        if not origin.applied and not origin.opaque and depth < _DTYPE_KEEPING_DEPTH:
            source = _dtype_kept_from(origin.node, there, at)
        items = _dataset_items(origin) if origin.opaque and depth < _DTYPE_KEEPING_DEPTH else None
        if items is not None:
            for item, place in items:
                found += _dtype_origins(item, place.context, place.stack, depth + 1)
        elif source is None:
            found.append(origin)
        else:
            found += _dtype_origins(source, there, at, depth + 1)
    return found


def _dataset_items(origin: Origin) -> Optional[List[Tuple[cst.BaseExpression, Place]]]:
    """For a loop target unpacked from a DataLoader's batches (`images` of `for images, labels in loader`, also under
    `enumerate`/`tqdm`), the expressions its part of the dataset's item is, each where `__getitem__` returns it:
    `ToTensor()(lr)` of `return ToTensor()(lr), ToTensor()(hr)`. The default collate stacks the items' tensors, which
    keeps their dtype. None unless the loader's dataset is, by every origin, an instance of one class (of the file or
    of a project file it imports) whose `__getitem__` returns literal tuples (or one value, for a whole batch)."""
    name, place = origin.node, origin.place
    if type(name) is not cst.Name:
        return None
    values = Values.of(place.context)
    found = values.bindings(name, place)
    if found is None or not found[1]:
        return None
    items: List[Tuple[cst.BaseExpression, Place]] = []
    for binding in found[1]:
        bound = values.items_bound(binding, place.scopes) if binding.definition is None else None
        if bound is None:
            if binding.value is None and binding.definition is None:
                return None  # a parameter, `+=`, `with ... as`: not an item of a loader
            continue  # an assignment (`image = image.float()` of the iteration before) is an origin of its own
        iterated, element = items_iterated(bound[0], binding.element, bound[1].context, bound[1].stack)
        loaders = loaders_iterated(iterated, bound[1].stack, bound[1].context) if element is not None else []
        if not loaders:
            return None
        for loader in loaders:
            returned = _items_returned(loader, element)
            if returned is None:
                return None
            items += returned
    return items or None


def _items_returned(loader: Origin, element: Tuple[int, ...]) -> Optional[List[Tuple[cst.BaseExpression, Place]]]:
    """Part `element` of what the `__getitem__` of the dataset of the `DataLoader(...)` call `loader` returns, at each
    `return` (`_dataset_items`)."""
    call, there = loader.node, loader.place.context
    if semantics.keyword(call, "collate_fn") is not None or len([arg for arg in call.args if arg.keyword is None]) > 6:
        return None  # a collate function of the project's own makes batches of its choosing
    dataset = call_argument(call, 0, "dataset")
    built = Values.of(there).instance_class(dataset, loader.place.stack) if dataset is not None else None
    getitem = method_of(built.node, "__getitem__") if built is not None else None
    if getitem is None:
        return None
    defining = Values.of(built.place.context)
    scopes = built.place.scopes + (built.node, getitem)
    found = []
    for statement in defining.returns(getitem):
        item = statement.value
        for index in element:
            if type(item) not in (cst.Tuple, cst.List) or index >= len(item.elements) or any(
                type(each) is cst.StarredElement for each in item.elements
            ):
                return None
            item = item.elements[index].value
        found.append((item, Place(built.place.context, scopes, statement)))
    return found or None


def _dtype_kept_from(node: cst.CSTNode, ctx: "FileContext", stack) -> Optional[cst.BaseExpression]:
    """The tensor whose dtype `node` has: the receiver of a dtype-keeping method (`x` of `x.view(-1)`), the value
    indexed by a subscript (`x` of `x[:, 0]`: indexing a tensor keeps its dtype; a literal container's items the
    value model follows already); None for anything else."""
    if type(node) is cst.Subscript:
        return node.value
    if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
        return None
    method = node.func.attr.value
    if method not in DTYPE_KEEPING_METHODS or ctx.qualified_name(node.func, stack) is not None:
        return None  # `torch.flatten(x)`-style functions are named by the module; only methods are read here
    if method == "view" and not _gives_shape(node, ctx, stack):
        return None
    return node.func.value


def _gives_shape(view: cst.Call, ctx: "FileContext", stack) -> bool:
    """`x.view(...)` is given a shape, not a dtype: several sizes, an unpacked shape, an int, a literal tuple or list,
    or a tensor's shape (`y.shape`, `y.size()`)."""
    args = view.args
    if len(args) != 1 or args[0].star:
        return bool(args)
    given = args[0].value
    return (
        type(given) in (cst.Tuple, cst.List) or _python_int(given, ctx, stack, 0)
        or type(given) is cst.Attribute and given.attr.value == "shape"
        or type(given) is cst.Call and type(given.func) is cst.Attribute and given.func.attr.value == "size" and not given.args
    )


def _python_int(expr: cst.BaseExpression, ctx: "FileContext", stack, depth: int) -> bool:
    """`expr` is certainly a Python int: an integer literal, `len(...)`, `int(...)`, `x.shape[i]`, `x.size(i)`,
    `x.numel()`, ints combined by `+ - * // %`, or a name every value of which is one of those."""
    if depth > _INT_DEPTH:
        return False
    expr_type = type(expr)
    if expr_type is cst.Integer:
        return True
    if expr_type is cst.UnaryOperation:
        return type(expr.operator) in (cst.Minus, cst.Plus) and _python_int(expr.expression, ctx, stack, depth + 1)
    if expr_type is cst.BinaryOperation:
        return isinstance(expr.operator, _INT_OPERATORS) and all(
            _python_int(side, ctx, stack, depth + 1) for side in (expr.left, expr.right)
        )
    if expr_type is cst.Subscript:  # `x.shape[0]`
        value = expr.value
        return (
            type(value) is cst.Attribute and value.attr.value == "shape" and len(expr.slice) == 1
            and type(expr.slice[0].slice) is cst.Index and _python_int(expr.slice[0].slice.value, ctx, stack, depth + 1)
        )
    if expr_type is cst.Call:
        func = expr.func
        if type(func) is cst.Name:
            return func.value in ("len", "int") and ctx.scopes.binding_scope(func.value, scope_nodes_of(stack)) is None
        if type(func) is cst.Attribute and func.attr.value in _INT_METHODS:
            given = [arg for arg in expr.args if not arg.star]
            return len(given) == len(expr.args) and (
                func.attr.value != "size" and not given
                or func.attr.value == "size" and len(given) == 1 and _python_int(given[0].value, ctx, stack, depth + 1)
            )
        return False
    if expr_type is cst.Name:
        return _every_value(expr, ctx, stack, depth, _python_int)
    return False


def _every_value(name: cst.Name, ctx: "FileContext", stack, depth: int, holds, counts_by_name: bool = False) -> bool:
    """`holds(value, ctx, stack, depth)` of every value the name may hold here, each followed to where it is made.
    `counts_by_name`: a parameter whose callers are not all known holds when it is named as a count
    (`_count_parameter`)."""
    origins = Values.of(ctx).origins(name, stack)
    return bool(origins) and all(
        # An opaque origin other than a name is an expression not followed further (`x.shape[0]`), read here.
        not origin.applied and (
            holds(origin.node, origin.place.context, origin.place.stack, depth + 1) if type(origin.node) is not cst.Name
            else counts_by_name and _count_parameter(origin)
        )
        for origin in origins
    )


# How many steps `_python_int` and `python_number` follow (names through names, nested arithmetic).
_INT_DEPTH = 8
# Operators that keep two Python numbers a Python number.
_NUMBER_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.Power)


def python_number(expr: cst.BaseExpression, ctx: "FileContext", stack, depth: int = 0) -> bool:
    """`expr` is certainly a Python number, not a tensor: a Python int (`_python_int`: `len(x)`, `x.size(0)`,
    `x.shape[0]`, `x.numel()`), a float literal, `float(...)`, `x.item()`, such numbers combined by arithmetic
    (`n_way * k_shot`, `1 / len(x)`), or a name every value of which is one of those or a parameter named as a count
    whose callers are not all known (`_count_parameter`: `2 * batch_size`). Arithmetic of a tensor and such a number
    keeps the tensor's shape."""
    if depth > _INT_DEPTH:
        return False
    expr_type = type(expr)
    if expr_type is cst.Integer or expr_type is cst.Float:
        return True
    if expr_type is cst.UnaryOperation:
        return type(expr.operator) in (cst.Minus, cst.Plus) and python_number(expr.expression, ctx, stack, depth + 1)
    if expr_type is cst.BinaryOperation:
        return isinstance(expr.operator, _NUMBER_OPERATORS) and all(
            python_number(side, ctx, stack, depth + 1) for side in (expr.left, expr.right)
        )
    if expr_type is cst.Call:
        func = expr.func
        if type(func) is cst.Name and func.value == "float":
            return ctx.scopes.binding_scope("float", scope_nodes_of(stack)) is None
        if type(func) is cst.Attribute and func.attr.value == "item":
            return not expr.args
        return _python_int(expr, ctx, stack, depth)
    if expr_type is cst.Subscript:
        return _python_int(expr, ctx, stack, depth)
    if expr_type is cst.Name:
        return _every_value(expr, ctx, stack, depth, python_number, counts_by_name=True)
    return False


# Parameters named as a count or a size (`batch_size`, `n`, `num_boxes`, `n_samples`, `total_count`).
_COUNT_NAME = re.compile(r"^(n|count|num_?\w+|n_\w+|\w*batch_size|\w+_count)$")


def _count_parameter(origin: Origin) -> bool:
    """An opaque origin that is a parameter of its function, still as passed, whose callers are not all known, named
    as a count or size (`batch_size`, `num_pos`) or with a number as its default (`scale=2`): a Python number, as its
    author means it. A caller may still pass a tensor, but one standing for a count is 0-dim (`mask.sum()`), and
    arithmetic of a 0-dim tensor and a 0-dim value is 0-dim all the same: what `python_number` is asked for."""
    name = origin.node
    if type(name) is not cst.Name or not origin.opaque:
        return False
    values = Values.of(origin.place.context)
    found = values.bindings(name, origin.place)
    if found is None or type(found[0]) is not cst.FunctionDef or not values.holds_what_was_passed(name, origin.place):
        return False
    params = found[0].params
    param = next((
        param for param in (*params.posonly_params, *params.params, *params.kwonly_params)
        if param.name.value == name.value
    ), None)
    if param is None:
        return False
    default = param.default
    return _COUNT_NAME.match(name.value) is not None or (
        default is not None and type(default) in (cst.Integer, cst.Float)
    )


def _int_literal(data) -> bool:
    """A non-empty literal list/tuple (nested) of ints, or an int; bools are not ints here (they make torch.bool)."""
    if type(data) is int:
        return True
    return isinstance(data, (list, tuple)) and bool(data) and all(_int_literal(item) for item in data)
