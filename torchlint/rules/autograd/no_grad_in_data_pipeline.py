from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Set, Union

import libcst as cst

from torchlint import semantics
from torchlint.engine.scopes import dotted_name
from torchlint.finding import Edit, Fix, Location
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

NO_GRAD = frozenset({"torch.no_grad", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"})
DATASET_BASES = frozenset({
    "torch.utils.data.Dataset", "torch.utils.data.IterableDataset", "torch.utils.data.dataset.Dataset",
    "torch.utils.data.dataset.IterableDataset",
})
DATASET_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__"})
TENSOR_BUILDERS = frozenset({
    "torch.stack", "torch.cat", "torch.concat", "torch.concatenate", "torch.tensor", "torch.as_tensor",
    "torch.from_numpy", "torch.nn.utils.rnn.pad_sequence", "torch.utils.data.default_collate",
    "torch.utils.data.dataloader.default_collate", "torch.utils.data._utils.collate.default_collate",
})
# Calls that only shape data: builtins, and tensor or container methods.
_DATA_BUILTINS = frozenset({
    "len", "range", "zip", "enumerate", "list", "tuple", "dict", "int", "float", "isinstance", "sorted", "max", "min",
})
_DATA_METHODS = frozenset({
    "float", "long", "int", "half", "double", "bool", "to", "view", "reshape", "unsqueeze", "squeeze", "permute",
    "transpose", "contiguous", "clone", "numpy", "tolist", "append", "extend", "items", "keys", "values", "get",
    "size", "flatten", "type", "t", "expand", "repeat",
})
_PARTIAL = frozenset({"functools.partial"})


@dataclass
class _Region:
    """A `with torch.no_grad():` block or a `@torch.no_grad()` function, and whether it only builds tensors."""

    node: Union[cst.With, cst.Decorator]
    body: cst.BaseSuite
    function: str
    in_dataset: bool
    only_builds_tensors: bool = True


class NoGradInDataPipeline(Rule):
    """
    ## What it does
    Flags `torch.no_grad()`, as a `with` block or a decorator, in a function used as a
    DataLoader `collate_fn` or in `__getitem__` / `__iter__` of a `Dataset` /
    `IterableDataset` subclass, when the guarded code only builds tensors from data
    (`torch.stack`, `torch.cat`, `torch.tensor`, `torch.as_tensor`, `torch.from_numpy`,
    `pad_sequence`, `default_collate`, indexing, tensor methods).

    Guarded code that calls anything else (a model, a feature extractor, a transform)
    is not flagged: there the region may matter.

    ## Why is this bad?
    Tensors built from data do not require grad, so autograd records nothing for them
    with or without the region: `no_grad` changes nothing here, yet it runs for every
    sample or batch and suggests to the reader that the data pipeline touches a model.

    ## Fix safety
    Safe: the context manager is dropped and its body dedented (the decorator line is
    removed); the code computes the same tensors. No fix is offered for a `with` that
    has other items, or whose body holds a multi-line string (dedenting would change it).
    """

    code = "TL105"
    name = "no-grad-in-data-pipeline"
    uses_callgraph = True
    # A region counts only in a method of a `Dataset`/`IterableDataset` subclass or a function given to `DataLoader`,
    # and the region is a `no_grad`.
    triggers = words("Dataset", "IterableDataset", "DataLoader") & words("no_grad")
    fix_safety = "safe"
    message = (
        "`torch.no_grad()` here guards only tensor construction from data, which never records a graph: it changes "
        "nothing and runs for every sample or batch; drop it"
    )
    example = """
    import torch
    from torch.utils.data import DataLoader


    def collate(batch):
        with torch.no_grad():  # expect: TL105:5
            return torch.stack([sample for sample in batch])


    loader = DataLoader(dataset, batch_size=8, collate_fn=collate)
    """
    use_instead = """
    import torch
    from torch.utils.data import DataLoader


    def collate(batch):
        return torch.stack([sample for sample in batch])


    loader = DataLoader(dataset, batch_size=8, collate_fn=collate)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.datasets: Set[str] = set()
        self.open: List[_Region] = []
        self.regions: List[_Region] = []
        # Functions passed as `collate_fn`; `*.name` for a method passed through an object (`dataset.collate`).
        self.collate_functions: Set[str] = set()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
            if self.ctx.qualified_name(value) in DATASET_BASES or dotted_name(value) in self.datasets:
                self.datasets.add(node.name.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        for decorator in node.decorators:
            if self._is_no_grad(decorator.decorator, self.ctx.stack[:-1]):
                self._open(decorator, node.body, node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._close(node.body)

    def visit_With(self, node: cst.With) -> None:
        function = self._function()
        if function is not None and any(self._is_no_grad(item.item, self.ctx.stack) for item in node.items):
            self._open(node, node.body, function)

    def leave_With(self, node: cst.With) -> None:
        self._close(node.body)

    def visit_Call(self, node: cst.Call) -> None:
        if semantics.is_dataloader_call(node, self.ctx):
            self._note_collate_function(node)
        if self.open and not self._builds_tensor(node):
            for region in self.open:
                if any(ancestor is region.body for ancestor in self.ctx.stack):
                    region.only_builds_tensors = False

    # ------------------------------------------------------------ regions

    def _is_no_grad(self, expr: cst.BaseExpression, stack) -> bool:
        target = expr.func if isinstance(expr, cst.Call) else expr
        return self.ctx.qualified_name(target, stack) in NO_GRAD

    def _function(self) -> Optional[cst.FunctionDef]:
        for node in reversed(self.ctx.stack[:-1]):
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return node if isinstance(node, cst.FunctionDef) else None
        return None

    def _open(self, node, body: cst.BaseSuite, function: cst.FunctionDef) -> None:
        stack = self.ctx.stack
        index = max(i for i, ancestor in enumerate(stack) if ancestor is function)
        key = self.ctx.callgraph.key_of(function, stack[: index + 1])
        owner = stack[index - 2] if index >= 2 else None  # ClassDef > IndentedBlock > FunctionDef
        in_dataset = (
            function.name.value in DATASET_METHODS and isinstance(owner, cst.ClassDef) and owner.name.value in self.datasets
        )
        region = _Region(node, body, key, in_dataset)
        self.open.append(region)
        self.regions.append(region)

    def _close(self, body: cst.BaseSuite) -> None:
        if self.open and self.open[-1].body is body:
            self.open.pop()

    def _builds_tensor(self, call: cst.Call) -> bool:
        if self.ctx.qualified_name(call.func) in TENSOR_BUILDERS:
            return True
        if isinstance(call.func, cst.Name) and call.func.value in _DATA_BUILTINS:
            return self.ctx.scopes.binding_scope(call.func.value, self.ctx.stack) is None
        return semantics.method_name(call) in _DATA_METHODS

    # ------------------------------------------------------------ collate functions

    def _note_collate_function(self, loader: cst.Call) -> None:
        arg = semantics.keyword(loader, "collate_fn") or semantics.positional(loader, 6)
        value = arg.value if arg is not None else None
        while isinstance(value, cst.Call) and self.ctx.qualified_name(value.func) in _PARTIAL and value.args:
            value = value.args[0].value
        if isinstance(value, cst.Name):
            self.collate_functions.add(value.value)
        elif isinstance(value, cst.Attribute):
            self.collate_functions.add(f"*.{value.attr.value}")

    def _is_collate_function(self, key: str) -> bool:
        owner, _, name = key.rpartition(".")
        return key in self.collate_functions or (bool(owner) and f"*.{name}" in self.collate_functions)

    # ------------------------------------------------------------ findings

    def finish(self) -> None:
        for region in self.regions:
            if region.only_builds_tensors and (region.in_dataset or self._is_collate_function(region.function)):
                self.report(region.node, fix=self._fix(region))

    def _fix(self, region: _Region) -> Optional[Fix]:
        lines = self.ctx.text.splitlines()
        start, end = self.ctx.location(region.node)
        if isinstance(region.node, cst.Decorator):
            edit = Edit("", Location(start.row, 1), Location(end.row + 1, 1))
            return Fix.safe("remove the decorator", edit)
        if len(region.node.items) != 1:
            return None
        body = region.node.body
        if isinstance(body, cst.SimpleStatementSuite):
            content = "".join(self.ctx.code(statement) for statement in body.body).strip()
        else:
            content = self._dedented(body, lines, start, end)
            if content is None:
                return None
        edit = Edit(content, start, Location(end.row, len(lines[end.row - 1]) + 1))
        return Fix.safe("remove `with torch.no_grad():` and dedent its body", edit)

    def _dedented(self, body: cst.IndentedBlock, lines: List[str], start: Location, end: Location) -> Optional[str]:
        """The block's lines one level less indented, starting at the `with` keyword's column."""
        outer = lines[start.row - 1][: start.column - 1]
        inner = outer + (body.indent if body.indent is not None else self.ctx.module.default_indent)
        block = lines[start.row:end.row]
        text = "\n".join(block)
        if '"""' in text or "'''" in text:
            return None
        dedented = []
        for line in block:
            if not line.strip():
                dedented.append("")
            elif line.startswith(inner):
                dedented.append(outer + line[len(inner):])
            else:
                return None
        first = dedented[0]
        dedented[0] = first[len(outer):] if first.startswith(outer) else first
        return "\n".join(dedented)
