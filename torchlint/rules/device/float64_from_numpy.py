import builtins
from typing import List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis import facts
from torchlint.analysis.conversions import TORCH_FROM_ARRAY, conversion
from torchlint.analysis.dtypes import dtype_of, tensor_type_of
from torchlint.analysis.loops import loop_nodes
from torchlint.analysis.modules import PARAMETER, builds_module
from torchlint.analysis.steps import per_step_function
from torchlint.analysis.syntax import call_argument
from torchlint.analysis.values import Values
from torchlint.engine.scopes import dotted_name, scope_nodes_of
from torchlint.finding import Edit, Fix
from torchlint.fixes.rewrites import code_in_place
from torchlint.rules.base import Rule
from torchlint.rules.data._dataset import TENSOR_DATASET
from torchlint.rules.device._chains import chain_parent
from torchlint.rules.triggers import words

# numpy's legacy random functions take no dtype: given a size they return float64 arrays (without one, a Python
# float, which torch makes float32). name -> position of the size among positional arguments.
RANDOM_FLOAT64 = {
    f"numpy.random.{name}": position
    for name, position in (
        ("rand", 0), ("randn", 0), ("random", 0), ("random_sample", 0), ("standard_normal", 0),
        ("uniform", 2), ("normal", 2),
    )
}
# Producers that default to float64 unless given a dtype: name -> position of `dtype` among positional arguments.
DEFAULT_FLOAT64 = {"numpy.zeros": 1, "numpy.ones": 1, "numpy.empty": 1, "numpy.linspace": 5}
DEFAULT_FLOAT64_MARKERS = frozenset({("torch.set_default_dtype", "float64"), ("torch.set_default_tensor_type", "float64")})
# Consumers whose float32 side meets the float64 tensor: layers, losses and functionals, the datasets a loader batches.
_FLOAT32_CONSUMERS = TENSOR_DATASET | semantics.DATALOADER
# Tensor methods whose result is no float tensor any more: reading it back, its shape, indices.
_NOT_FLOAT_RESULTS = frozenset({"numpy", "tolist", "item", "size", "dim", "numel", "argmax", "argmin", "argsort", "nonzero"})
_BUILTINS = frozenset(dir(builtins))
# How many times a value is followed to its origins and through what they are computed from (`x = noise[:4]`).
_FOLLOW_DEPTH = 4


class Float64FromNumpy(Rule):
    """
    ## What it does
    Flags `torch.from_numpy(...)`, `torch.tensor(...)` and `torch.as_tensor(...)`
    applied to a numpy array that is float64 only because numpy defaults to it:
    `np.random.rand/randn/random/uniform/normal` given a size, `np.zeros/ones/empty/linspace`,
    `np.full` with a float fill value, `np.arange` with a float argument, `np.array`
    of float literals, with no `dtype`, directly or through the values a variable may
    hold (a function of the file returning one included), when that float64 tensor
    reaches float32 code. It does where it, or a value computed from it with its
    dtype kept (indexed, sliced, `.view(...)`, `.to(device)`, in arithmetic), is
    passed to a model, a layer or a loss (`model(x)`, `self.fc(x)`, `criterion(out,
    y)`, `F.mse_loss(...)`), to a `TensorDataset` or `DataLoader`, is combined by an
    operator with a model's output or a parameter, or is given to any call or
    operator (Python's own `print` and such aside) in a training loop (a loop that
    runs a backward or an optimizer step) or in a function run once per step (a
    `forward`, a `*_step`, one called from a loop of the file; see TL206). A conversion moved to a device before it is cast
    (`torch.from_numpy(x).to(device).float()`) reaches no code as float64 but is
    copied as float64: it is flagged where it runs every step.

    ## Why is this bad?
    The tensor comes out float64: twice the memory of float32, and 1024x1024 matrix
    multiplies ran 1.6-2.1x slower on CPU (two runs). A float32 layer given it raises
    `RuntimeError: mat1 and mat2 must have the same dtype, but got Double and Float`,
    and a float64 target silently makes the loss float64 (observed on torch 2.13).

    Not flagged: a float64 tensor that is only printed, inspected, compared or
    converted back (`.numpy()`, `.tolist()`), as tutorials showing memory sharing
    with numpy do; one only made in a training step, without reaching float32 code;
    one combined with data outside a training step (denormalising images to plot
    them); one handed to other objects' methods (a test's
    `metric.update((torch.from_numpy(a), ...))`); producers given a `dtype`
    (`dtype=np.float32`), results cast right away (`torch.from_numpy(x).float()`, or
    `.type_as(torch.FloatTensor())`, or `.type(dtype)` after `dtype = torch.FloatTensor`) or before they reach the model (`model(x.float())`), and files that make float64 the
    default with `torch.set_default_dtype(torch.float64)`, where float64 is
    deliberate.

    Given up for that precision: float64 tensors that never reach float32 code in
    the file, which the rule used to flag wherever they were made; one that reaches
    it only through code the rule does not follow: a function of another file, a
    call it cannot see through (`torch.cat([x, y])`, an object's method), an
    optimizer given it as a parameter, a closure called from the loop (`net = lambda
    X: linreg(X, w, b)`). A tensor cast under another name (`x = x.float()`) is
    still taken for float64, since the value model follows `.float()` as returning
    its receiver.

    ## Fix safety
    Safe when the result is cast to float32 anyway a little later in the same chain
    (`torch.from_numpy(x).to(device).float()`): the cast moves up to the conversion,
    so the values are the same and the float64 copy never exists. Otherwise unsafe:
    the fix appends `.float()`, which halves the precision, and after
    `torch.from_numpy` the tensor no longer shares memory with the array.
    """

    code = "TL204"
    name = "float64-from-numpy"
    # The array must come from a `numpy.*` producer resolved through the file's imports, which write `numpy`
    # (a rarer word than the torch converters' `tensor`/`from_numpy`/`as_tensor`).
    triggers = words("numpy")
    fix_safety = "safe or unsafe"
    uses_callgraph = True
    message = (
        "numpy's float64 default becomes a float64 tensor that reaches float32 code: 2x the memory, and "
        "float32 layers raise `mat1 and mat2 must have the same dtype`; create the array with `dtype=np.float32` "
        "or add `.float()`"
    )
    example = """
    import numpy as np
    import torch

    model = torch.nn.Linear(128, 10)
    noise = torch.from_numpy(np.random.randn(64, 128))  # expect: TL204:9
    outputs = model(noise)
    grid = np.linspace(0, 1, 128)
    points = torch.tensor(grid)  # expect: TL204:10
    logits = model(points[None])
    """
    use_instead = """
    import numpy as np
    import torch

    model = torch.nn.Linear(128, 10)
    noise = torch.from_numpy(np.random.randn(64, 128).astype(np.float32))
    outputs = model(noise)
    grid = np.linspace(0, 1, 128, dtype=np.float32)
    points = torch.tensor(grid)
    logits = model(points[None])
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # The float64 conversions, each with its fix and, when it is moved before a cast, the stack at it.
        self.found: List[Tuple[cst.Call, Optional[Fix], Optional[Tuple[cst.CSTNode, ...]]]] = []
        self.float64_default = False
        # Where a float64 tensor may meet float32 code: call arguments and arithmetic, with their stacks.
        self.calls: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]] = []
        self.arithmetic: List[Tuple[cst.BinaryOperation, Tuple[cst.CSTNode, ...]]] = []
        # Loops that train (ids): a backward or an optimizer step in the body, or a same-module call that runs one.
        self.training_loops: Set[int] = set()
        self.loop_calls: List[Tuple[Tuple[int, ...], str]] = []
        # Models known by what is done to them: `model.eval()`, `net.parameters()`.
        self.mode_receivers: Set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        self._observe(node)
        if name in ("torch.set_default_dtype", "torch.set_default_tensor_type"):
            argument = call_argument(node, 0, "d")
            if argument is not None and self._names_float64(argument):
                self.float64_default = True
        if name not in TORCH_FROM_ARRAY or semantics.keyword(node, "dtype") is not None:
            return
        array = call_argument(node, 0, "data" if name != "torch.from_numpy" else "ndarray")
        if array is None:
            return
        for origin in Values.of(self.ctx).origins(array):
            if type(origin.node) is cst.Call and self._numpy_float64(origin.node, origin.place.stack):
                self._check_what_follows(node)
                return

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self.arithmetic.append((node, tuple(self.ctx.stack)))

    def _observe(self, node: cst.Call) -> None:
        """Note the call as a place a tensor may be consumed, and what it says about models and training loops."""
        stack = self.ctx.stack
        if node.args:
            self.calls.append((node, tuple(stack)))
        if semantics.method_name(node) in ("eval", "train", "parameters"):
            receiver = dotted_name(semantics.receiver(node))
            if receiver:
                self.mode_receivers.add(receiver)
        loops = loop_nodes(stack)
        if not loops:
            return
        if facts.backward(node, self.ctx) or facts.optimizer_step(node, self.ctx):
            self.training_loops.update(id(loop) for loop in loops)
        callee = self.ctx.callgraph.callee_key(node, stack)
        if callee is not None:
            self.loop_calls.append((tuple(id(loop) for loop in loops), callee))

    def finish(self) -> None:
        if self.float64_default or not self.found:
            return
        for loops, callee in self.loop_calls:
            graph = self.ctx.callgraph
            if graph.facts_of(callee, "backward") or graph.facts_of(callee, "optimizer-step"):
                self.training_loops.update(loops)
        sources = {id(call) for call, _, _ in self.found}
        reached: Set[int] = set()
        for call, stack in self.calls:
            if self._consumes_float32(call, stack) or (not _is_builtin(call, self.ctx, stack) and self._per_step(stack)):
                for arg in call.args:
                    reached |= self._sources(arg.value, stack, sources)
        for operation, stack in self.arithmetic:
            left = self._sources(operation.left, stack, sources)
            right = self._sources(operation.right, stack, sources)
            if (left or right) and (
                self._per_step(stack)
                or (left and self._model_value(operation.right, stack))
                or (right and self._model_value(operation.left, stack))
            ):
                reached |= left | right
        for call, fix, moved_then_cast in self.found:
            if id(call) in reached or (moved_then_cast is not None and self._per_step(moved_then_cast)):
                self.report(call, fix=fix)

    # ------------------------------------------------------------ where the float64 tensor goes

    def _per_step(self, stack: Sequence[cst.CSTNode]) -> bool:
        """In a training loop's body or in a function run once per step."""
        return any(id(loop) in self.training_loops for loop in loop_nodes(stack)) or per_step_function(self.ctx, stack)

    def _sources(self, expr: cst.BaseExpression, stack, sources: Set[int], depth: int = 0) -> Set[int]:
        """The float64 conversions (ids, among `sources`) whose tensor `expr` may hold, with its dtype unchanged."""
        found = set()
        for part in self._dtype_kept(expr, stack):
            if id(part) in sources:
                found.add(id(part))
            elif type(part) in (cst.Name, cst.Attribute, cst.Subscript, cst.Call) and depth < _FOLLOW_DEPTH:
                for origin in Values.of(self.ctx).origins(part, stack, through_casts=False):
                    # An origin the model could not follow further (`features[:4]`, `features[index]`) is still
                    # computed from a tensor, with its dtype.
                    if origin.node is not part:
                        found |= self._sources(origin.node, origin.place.stack, sources, depth + 1)
        return found

    def _dtype_kept(self, expr: cst.BaseExpression, stack) -> List[cst.BaseExpression]:
        """The values `expr` is computed from with their dtype kept: through indexing, arithmetic and tensor
        methods (`t.view(...)`, `t.to(device)`), stopping at casts (`t.float()`) and non-float results."""
        while True:
            if type(expr) is cst.Subscript:
                expr = expr.value
            elif type(expr) is cst.UnaryOperation:
                expr = expr.expression
            elif type(expr) is cst.BinaryOperation:
                return self._dtype_kept(expr.left, stack) + self._dtype_kept(expr.right, stack)
            elif type(expr) is cst.Call and type(expr.func) is cst.Attribute and self.ctx.qualified_name(expr.func, stack) is None:
                read = conversion(expr, self.ctx, stack)
                if (read is not None and read.casts) or expr.func.attr.value in _NOT_FLOAT_RESULTS:
                    return []
                expr = expr.func.value
            else:
                return [expr]

    def _consumes_float32(self, call: cst.Call, stack) -> bool:
        """A call of a model, layer or loss (float32 weights or outputs), a functional, or a TensorDataset/DataLoader."""
        func = call.func
        name = self.ctx.qualified_name(func, stack)
        if name is not None:
            return name.startswith("torch.nn.functional.") or name in _FLOAT32_CONSUMERS
        if type(func) is cst.Call:  # nn.MSELoss()(output, target)
            return builds_module(self.ctx, func, stack)
        if dotted_name(func) in self.mode_receivers:
            return True
        return any(
            not origin.opaque and not origin.applied and type(origin.node) is cst.Call
            and builds_module(self.ctx, origin.node, origin.place.stack)
            for origin in Values.of(self.ctx).origins(func, stack)
        )

    def _model_value(self, expr: cst.BaseExpression, stack) -> bool:
        """`expr` may hold a model's output or a parameter: what float32 weights make."""
        for origin in Values.of(self.ctx).origins(expr, stack):
            if origin.applied:
                return True
            node = origin.node
            if not origin.opaque and type(node) is cst.Call and (
                self.ctx.qualified_name(node.func, origin.place.stack) in PARAMETER
                or self._consumes_float32(node, origin.place.stack)
            ):
                return True
        return False

    def _names_float64(self, expr: cst.BaseExpression) -> bool:
        return dtype_of(expr, self.ctx) == "float64" or tensor_type_of(expr, self.ctx)[0] == "float64"

    def _numpy_float64(self, producer: cst.Call, stack) -> bool:
        name = self.ctx.qualified_name(producer.func, stack)
        if name in RANDOM_FLOAT64:
            return call_argument(producer, RANDOM_FLOAT64[name], "size") is not None
        if name in DEFAULT_FLOAT64:
            return not _has_dtype(producer, DEFAULT_FLOAT64[name])
        if name == "numpy.full":  # the fill value's type decides: np.full(n, 7) is int64
            fill = semantics.literal(call_argument(producer, 1, "fill_value"), None)
            return not _has_dtype(producer, 2) and isinstance(fill, float)
        if name == "numpy.arange":
            bounds = [arg.value for arg in producer.args if arg.keyword is None][:3]
            bounds += [arg.value for arg in producer.args if arg.keyword and arg.keyword.value in ("start", "stop", "step")]
            return not _has_dtype(producer, 3) and any(isinstance(semantics.literal(value, None), float) for value in bounds)
        if name == "numpy.array":
            items = semantics.literal(call_argument(producer, 0, "object"), None)
            return not _has_dtype(producer, 1) and _float_literals(items)
        return False

    def _check_what_follows(self, node: cst.Call) -> None:
        """Not flagged when a cast follows right away; the fix moves a float32 cast that follows the moves."""
        stack = self.ctx.stack
        index = len(stack) - 1
        parent = chain_parent(stack, index)
        read = conversion(parent, self.ctx) if parent is not None else None
        if read is not None and read.casts:
            return
        while read is not None and read.moves and not read.casts:
            index -= 2
            parent = chain_parent(stack, index)
            read = conversion(parent, self.ctx) if parent is not None else None
        if read is not None and read.casts and read.dtype == "float32" and not read.moves and read.complete and not read.keywords:
            moved = read.call.func.value.deep_replace(node, _cast_to_float(node))
            fix = Fix.safe("Cast right after the conversion", self.ctx.replace(read.call, code_in_place(self.ctx, moved, stack)))
        else:
            _, end = self.ctx.location(node)
            fix = Fix.unsafe("Append `.float()`", Edit(".float()", end, end))
        # Cast after the moves, the tensor reaches no code as float64, but it is moved as float64: a cost where the
        # conversion runs every step.
        self.found.append((node, fix, tuple(stack) if read is not None and read.casts else None))


def _is_builtin(call: cst.Call, ctx, stack) -> bool:
    """`print(t)`, `len(t)`, `isinstance(t, ...)`: Python's own functions show or inspect a tensor."""
    func = call.func
    return type(func) is cst.Name and func.value in _BUILTINS and ctx.scopes.binding_scope(func.value, scope_nodes_of(stack)) is None


def _cast_to_float(call: cst.Call) -> cst.Call:
    return cst.Call(func=cst.Attribute(value=call, attr=cst.Name("float")))


def _has_dtype(call: cst.Call, position: int) -> bool:
    """A dtype given by keyword, at its positional slot, or possibly in `**kwargs`."""
    return (
        semantics.keyword(call, "dtype") is not None
        or semantics.positional(call, position) is not None
        or semantics.has_star_kwargs(call)
    )


def _float_literals(value) -> bool:
    """Nested lists/tuples of numbers with at least one float: what `np.array` makes float64."""
    def leaves(item):
        if isinstance(item, (list, tuple)):
            for element in item:
                yield from leaves(element)
        else:
            yield item

    numbers = list(leaves(value)) if isinstance(value, (list, tuple)) else []
    return bool(numbers) and all(type(n) in (int, float) for n in numbers) and any(type(n) is float for n in numbers)
