from typing import List, Optional, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.finding import Edit, Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words
from torchlint.rules.device import _shared

TORCH_FROM_ARRAY = frozenset({"torch.from_numpy", "torch.tensor", "torch.as_tensor"})
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


class Float64FromNumpy(_shared.LatestAssignments, Rule):
    """
    ## What it does
    Flags `torch.from_numpy(...)`, `torch.tensor(...)` and `torch.as_tensor(...)`
    applied to a numpy array that is float64 only because numpy defaults to it:
    `np.random.rand/randn/random/uniform/normal` given a size, `np.zeros/ones/empty/linspace`,
    `np.full` with a float fill value, `np.arange` with a float argument, `np.array`
    of float literals, with no `dtype`, directly or through a variable assigned from
    one in the same scope.

    ## Why is this bad?
    The tensor comes out float64: twice the memory of float32, matrix multiplies
    1.8-2x slower on CPU and far slower on most GPUs, and the first float32 layer
    it meets raises `RuntimeError: mat1 and mat2 must have the same dtype`
    (observed on torch 2.13).

    Not flagged: producers given a `dtype` (`dtype=np.float32`), results cast right
    away (`torch.from_numpy(x).float()`), and files that make float64 the default
    with `torch.set_default_dtype(torch.float64)`, where float64 is deliberate.

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
    message = (
        "numpy's float64 default becomes a float64 tensor: twice the memory, 1.8-2x slower matmul on CPU, and "
        "float32 layers raise `mat1 and mat2 must have the same dtype`; create the array with `dtype=np.float32` "
        "or add `.float()`"
    )
    example = """
    import numpy as np
    import torch

    noise = torch.from_numpy(np.random.randn(64, 128))  # expect: TL204:9
    grid = np.linspace(0, 1, 100)
    points = torch.tensor(grid)  # expect: TL204:10
    """
    use_instead = """
    import numpy as np
    import torch

    noise = torch.from_numpy(np.random.randn(64, 128).astype(np.float32))
    grid = np.linspace(0, 1, 100, dtype=np.float32)
    points = torch.tensor(grid)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.found: List[Tuple[cst.Call, Optional[Fix]]] = []
        self.float64_default = False

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name in ("torch.set_default_dtype", "torch.set_default_tensor_type"):
            argument = _shared.call_argument(node, 0, "d")
            if argument is not None and self._names_float64(argument):
                self.float64_default = True
        if name not in TORCH_FROM_ARRAY or semantics.keyword(node, "dtype") is not None:
            return
        array = _shared.call_argument(node, 0, "data" if name != "torch.from_numpy" else "ndarray")
        if array is None:
            return
        if isinstance(array, cst.Name):
            array = self.latest_value(array)
        if isinstance(array, cst.Call) and self._numpy_float64(array):
            self._check_what_follows(node)

    def finish(self) -> None:
        if self.float64_default:
            return
        for call, fix in self.found:
            self.report(call, fix=fix)

    def _names_float64(self, expr: cst.BaseExpression) -> bool:
        return _shared.dtype_of(expr, self.ctx) == "float64" or _shared.tensor_type_of(expr, self.ctx)[0] == "float64"

    def _numpy_float64(self, producer: cst.Call) -> bool:
        name = self.ctx.qualified_name(producer.func)
        if name in RANDOM_FLOAT64:
            return _shared.call_argument(producer, RANDOM_FLOAT64[name], "size") is not None
        if name in DEFAULT_FLOAT64:
            return not _has_dtype(producer, DEFAULT_FLOAT64[name])
        if name == "numpy.full":  # the fill value's type decides: np.full(n, 7) is int64
            fill = semantics.literal(_shared.call_argument(producer, 1, "fill_value"), None)
            return not _has_dtype(producer, 2) and isinstance(fill, float)
        if name == "numpy.arange":
            bounds = [arg.value for arg in producer.args if arg.keyword is None][:3]
            bounds += [arg.value for arg in producer.args if arg.keyword and arg.keyword.value in ("start", "stop", "step")]
            return not _has_dtype(producer, 3) and any(isinstance(semantics.literal(value, None), float) for value in bounds)
        if name == "numpy.array":
            items = semantics.literal(_shared.call_argument(producer, 0, "object"), None)
            return not _has_dtype(producer, 1) and _float_literals(items)
        return False

    def _check_what_follows(self, node: cst.Call) -> None:
        """Not flagged when a cast follows right away; the fix moves a float32 cast that follows the moves."""
        stack = self.ctx.stack
        index = len(stack) - 1
        parent = _shared.chain_parent(stack, index)
        read = _shared.conversion(parent, self.ctx) if parent is not None else None
        if read is not None and read.casts:
            return
        while read is not None and read.moves and not read.casts:
            index -= 2
            parent = _shared.chain_parent(stack, index)
            read = _shared.conversion(parent, self.ctx) if parent is not None else None
        if read is not None and read.casts and read.dtype == "float32" and not read.moves and read.complete and not read.keywords:
            moved = read.call.func.value.deep_replace(node, _cast_to_float(node))
            fix = Fix.safe("Cast right after the conversion", self.ctx.replace(read.call, self.ctx.code(moved)))
        else:
            _, end = self.ctx.location(node)
            fix = Fix.unsafe("Append `.float()`", Edit(".float()", end, end))
        self.found.append((node, fix))


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
