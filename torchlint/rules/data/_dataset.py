"""What the data-loading rules ask about a DataLoader call: its arguments, and where its dataset was built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from torchlint import semantics

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

DATASET_BASES = frozenset({
    "torch.utils.data.Dataset", "torch.utils.data.IterableDataset",
    "torch.utils.data.dataset.Dataset", "torch.utils.data.dataset.IterableDataset",
})
TENSOR_DATASET = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})

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


def is_tensor_dataset(loader: cst.Call, ctx: "FileContext") -> bool:
    """A DataLoader over a `TensorDataset`: the data is already in memory as tensors."""
    dataset = loader_argument(loader, "dataset")
    built = construction(dataset.value, ctx) if dataset is not None else None
    return built is not None and ctx.qualified_name(built.func) in TENSOR_DATASET


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
