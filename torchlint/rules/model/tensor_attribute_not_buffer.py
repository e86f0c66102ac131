import re
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.modules import (
    PARAMETER, ModuleClass, ModuleClasses, builds_module, is_export_stand_in, is_self_attribute, rebound_later,
    self_name,
)
from torchlint.analysis.project import PROJECT
from torchlint.analysis.summaries import SUMMARIES, calls_from_importers
from torchlint.analysis.values import Values
from torchlint.engine.context import last_parts
from torchlint.engine.walk import walk
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.model._shared import IN_MODULE_CLASS
from torchlint.rules.triggers import words

TENSOR_FACTORIES = frozenset(
    f"torch.{name}" for name in (
        "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace",
        "eye", "tensor", "as_tensor", "from_numpy", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
        "randn_like", "tril", "triu", "stack", "cat", "Tensor", "FloatTensor", "LongTensor", "BoolTensor",
        "ByteTensor", "IntTensor", "DoubleTensor", "HalfTensor",
    )
)
# Factories that make a 0-dim tensor from one number: torch combines a 0-dim CPU tensor with tensors on any device.
_SCALAR_FACTORIES = frozenset({"torch.tensor", "torch.as_tensor", "torch.scalar_tensor"})
# Methods on a tensor that give something else than a tensor.
_NOT_TENSOR_METHODS = frozenset({"tolist", "item", "numpy", "size", "dim", "numel", "nelement", "data_ptr"})
# Factories of a tensor from data, as written (`torch.from_numpy(np.array([...]))` too), for `_numbers_on_the_cpu`.
_CPU_VECTOR_FACTORIES = frozenset({"torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor", "torch.from_numpy"})
_NUMPY_ARRAYS = frozenset({"numpy.array", "numpy.asarray"})
# Calls that make factories build on another device: tensors made in `__init__` are where the model goes.
_DEFAULT_DEVICE_SETTERS = frozenset({"torch.set_default_device", "torch.set_default_tensor_type"})
# A read that moves the tensor where it is used: `self.mask.to(x.device)`, `self.table.type_as(x)`.
_MOVING_METHODS = frozenset({"to", "cuda", "type_as", "type", "cpu"})
# Methods that give the same values on the same device, reshaped or detached: a move after them is a move of the
# attribute (`self.weight.view(*shape).to(logits.device)`, CoinCheung's pc_softmax).
_DEVICE_KEEPING_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "unsqueeze", "squeeze", "expand", "expand_as", "permute", "transpose",
    "t", "contiguous", "flatten", "unflatten", "detach", "clone", "movedim", "repeat",
})
# Reads of what a tensor is, not of its values on a device: `self.grid.size()`, `self.grid.shape`.
_SHAPE_READS = frozenset({"size", "dim", "numel", "nelement", "shape", "ndim"})
# How `forward` reads an attribute: wherever the tensor is (`HARMLESS`), as one element of it (`self.std[0]`: a
# 0-dim tensor, harmless while the tensor is on the CPU), or as a tensor it computes with.
HARMLESS, ELEMENT, COMPUTED = "harmless", "element", "computed"


class TensorAttributeNotBuffer(Rule):
    """
    ## What it does
    Flags `self.x = torch.<factory>(...)` in `__init__` of an `nn.Module` subclass (a
    tensor, not a Parameter or buffer: `torch.zeros/ones/arange/tensor/...`, also with
    methods chained on it, `torch.ones(n, n).tril()`) when `forward`, or a method it
    calls through `self`, reads `self.x`.

    Not flagged: `self.register_buffer("x", ...)`, `nn.Parameter(...)`, Python scalars,
    0-dim tensors of one number (`torch.tensor(0.5)`: torch combines a 0-dim CPU tensor
    with tensors on any device), tensors created inside `forward`, constants used only
    in `__init__` or in methods `forward` does not call, attributes other methods assign
    again (state the class manages itself), a tensor that a later statement of the same
    block of `__init__` rebinds to an `nn.Parameter` or a module (`self.w = torch.randn(m, d)`
    then `self.w = nn.Parameter(f(self.w))`: a temporary; rebound to another factory's
    tensor, the attribute is judged at that line; rebound to a tensor computed from it,
    `self.w = self.w / self.w.norm()`, it stays a plain tensor and is flagged), attributes `forward` moves where it
    reads them (`self.mask.to(x.device)`, `.type_as(x)`, also after methods that keep the
    tensor where it is: `self.weight.view(*shape).to(x.device)`, `.reshape`, `.unsqueeze`,
    `.permute`, `.detach`, ...), reads only in the test
    of an `if`/`while` (MONAI's `if self.node_a[0][d]:`, host-side control flow), only
    for their shape (`self.grid.size()`, `.shape`, `len(self.grid)`), or only copied into
    another tensor (`batch[i] = self.grid`, `out.copy_(self.grid)`: the copy converts to the
    target's device and dtype), a 1-D CPU tensor of numbers read only one element at a time
    (`self.std = torch.tensor([0.1, 0.1, 0.2, 0.2])` read as `self.std[0]`: each element is
    a 0-dim CPU tensor, which works with tensors on any device and does not change their
    dtype; the same on the GPU, `.cuda()`, is flagged: a 0-dim CUDA tensor does not mix
    with another device), and
    files that set the
    default device or tensor type (`torch.set_default_device`,
    `torch.set_default_tensor_type`: karpathy's llm.c builds its KV cache on the GPU
    that way), or classes that a file importing them builds and that file sets it
    (`def build(): torch.set_default_device(device); return KVCache(n)` in main.py;
    where not every call of the class is known, any file that may import its module).
    Nor an attribute that an `_apply(self, fn)` override converts with `fn` (alone or
    through `map(fn, ...)`), in the file or in one that names the class and may import
    its module or lies in its folder or a folder above: YOLOv5's and YOLOv6's
    `Model._apply` runs `self.detect.stride = fn(self.detect.stride)`, so the model's
    `.to()`, `.cuda()` and `.half()` convert the head's strides too (held-out round 57).
    The override is matched by the attribute's name: an attribute of the same name in
    another class of those files is given up. Nor a read that only hands the tensor to
    `Op.apply(...)` of an autograd Function that stands in for an operator at export
    (a `symbolic`, no `backward`, outputs made up from random draws: YOLOv6's
    `ORT_NMS.apply(boxes, scores, self.max_obj, ...)`), whose `forward` never computes
    with it.

    Nor a tensor made on a device (`torch.arange(n, device=device)`) in a class the file
    builds and never moves or converts: every instance bound to a name that is only
    called or read for attributes (`model(x)`, `model.parameters()`), no
    `.to()`/`.cuda()`/`.half()`-style call on it (in any function: the value model
    follows the name, also through `model = torch.compile(model)`, which wraps the
    instance without moving it) nor on `self` in the class. An instance given to any other call, returned,
    held by another module or aliased may be moved where the rule does not look: it is
    still reported, as is a class the file does not build.

    A tensor made with `requires_grad=True`, or with `.requires_grad_()` chained on it, is
    meant as a parameter: the message then says to wrap it in `nn.Parameter` (no fix is
    offered).

    Given up for that precision: a tensor attribute read only through an alias or a
    helper of another object is not seen as read.

    ## Why is this bad?
    Only parameters and buffers belong to the module's state. A plain tensor attribute
    is left behind by `model.to(device)`, `.cuda()` and `.half()`/`.double()`, and is not
    in `state_dict()`: on torch 2.13, after `m.double()` the layers are float64 while the
    attribute stays float32, and `M().to("meta")` leaves it on the CPU. On a GPU the
    forward then mixes devices and raises; a checkpoint does not restore it.

    ## Fix safety
    Unsafe: `self.x = value` becomes `self.register_buffer("x", value, persistent=False)`.
    The tensor then moves and converts with the module (that is the point, but
    `.half()` now converts a float attribute, which changes results); `persistent=False`
    keeps it out of `state_dict()`, so checkpoints keep their keys. Offered when the
    assignment is a statement of its own.
    """

    code = "TL707"
    name = "tensor-attribute-not-buffer"
    preview = (
        "Held-out rounds 15-17 (20 repositories read at first sight, docs/precision.md): 8 of 22 findings true (36%); the false ones were tensors read only for their shape, copied into another tensor, or meant as parameters."
    )
    triggers = IN_MODULE_CLASS & words("forward") & words(*(name.rpartition(".")[2] for name in TENSOR_FACTORIES))
    call_parts = last_parts(_DEFAULT_DEVICE_SETTERS) | {"register_buffer"}
    uses_callgraph = True
    fix_safety = "unsafe"
    message = (
        "a plain tensor attribute is not a buffer: `model.to(device)`, `.cuda()` and `.half()` leave it behind "
        "(a device mismatch in `forward` on GPU) and `state_dict()` does not hold it; use `self.register_buffer`"
    )
    example = """
    import torch
    import torch.nn as nn

    class CausalAttention(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.mask = torch.ones(size, size).tril()  # expect: TL707:9
            self.proj = nn.Linear(size, size)

        def forward(self, scores):
            return self.proj(scores.masked_fill(self.mask == 0, float("-inf")))
    """
    use_instead = """
    import torch
    import torch.nn as nn

    class CausalAttention(nn.Module):
        def __init__(self, size):
            super().__init__()
            self.register_buffer("mask", torch.ones(size, size).tril(), persistent=False)
            self.proj = nn.Linear(size, size)

        def forward(self, scores):
            return self.proj(scores.masked_fill(self.mask == 0, float("-inf")))
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes = ModuleClasses.of(ctx)
        # (target, statement, module class, init, stack)
        self.candidates: List[Tuple[cst.Attribute, cst.Assign, ModuleClass, cst.FunctionDef, tuple]] = []
        # (class id, attribute) -> (method id, how it is read: HARMLESS, ELEMENT or COMPUTED) of each read
        self.reads: Dict[Tuple[int, str], List[Tuple[int, str]]] = {}
        # (class id, attribute) registered as a buffer by name
        self.registered: Set[Tuple[int, str]] = set()
        self.default_device_set = False
        # class id -> whether the file never moves what it builds of the class (`_never_moved`), asked once each.
        self._unmoved: Dict[int, bool] = {}
        # class id -> whether a file that imports this one builds the class under another default device.
        self._under_default_device: Dict[int, bool] = {}
        # class id -> the attribute names an `_apply` override in this file or one importing it converts (`_apply_moves`)
        self._moved_by_apply: Dict[int, FrozenSet[str]] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        if type(node.value) is not cst.Call:
            return
        found = self.classes.enclosing(self.ctx.stack)
        if found is None or found[1].name.value != "__init__" or not self._is_tensor(node.value):
            return
        for target in node.targets:
            if is_self_attribute(target.target, found[1]):
                self.candidates.append((target.target, node, found[0], found[1], tuple(self.ctx.stack)))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        stack = self.ctx.stack
        if type(node.value) is not cst.Name or len(stack) < 2 or type(stack[-2]) is cst.AssignTarget:
            return
        found = self.classes.enclosing(stack)
        if found is None or not is_self_attribute(node, found[1]):
            return
        kind = HARMLESS if self._passed_to_export_stand_in(stack) else _read_kind(node, stack)
        self.reads.setdefault((id(found[0].node), node.attr.value), []).append((id(found[1]), kind))

    def _passed_to_export_stand_in(self, stack) -> bool:
        """The read (the last of `stack`) is an argument of `Op.apply(...)`, `Op` an autograd Function that only stands
        in for an operator at export (`is_export_stand_in`): its `forward` makes its outputs up and computes nothing
        with the tensor, which ONNX export writes into the graph whatever its device (YOLOv6's `ORT_NMS.apply(x,
        self.max_obj)`)."""
        if len(stack) < 3 or type(stack[-2]) is not cst.Arg or type(stack[-3]) is not cst.Call:
            return False
        func = stack[-3].func
        if type(func) is not cst.Attribute or func.attr.value != "apply":
            return False
        origins = Values.of(self.ctx).origins(func.value, stack)
        return len(origins) == 1 and type(origins[0].node) is cst.ClassDef and is_export_stand_in(
            origins[0].place.context, origins[0].node, origins[0].place.stack,
        )

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name_in(node.func, _DEFAULT_DEVICE_SETTERS):
            self.default_device_set = True
        if syntax.method_name(node) != "register_buffer":
            return
        found = self.classes.enclosing(self.ctx.stack)
        name = syntax.positional(node, 0) or syntax.keyword(node, "name")
        if found is not None and name is not None and isinstance(syntax.literal(name.value), str):
            self.registered.add((id(found[0].node), syntax.literal(name.value)))

    def finish(self) -> None:
        if self.default_device_set:
            return
        for target, statement, module, init, stack in self.candidates:
            key = (id(module.node), target.attr.value)
            if key in self.registered or self._assigned_elsewhere(module, target.attr.value, init):
                continue
            if self._replaced(target, stack):
                continue
            if self._built_under_a_default_device(module) or target.attr.value in self._moved_by_overrides(module):
                continue
            forwards = self.classes.forward_methods(module)
            kinds = {kind for method, kind in self.reads.get(key, []) if method in forwards}
            if not kinds or HARMLESS in kinds or (COMPUTED not in kinds and self._numbers_on_the_cpu(statement.value, stack)):
                continue
            if not _requires_grad(statement.value) and _made_on_a_device(statement.value) and self._never_moved(module):
                continue
            if _requires_grad(statement.value):
                self.report(target, self._parameter_message(target))
            else:
                self.report(target, self._message(target), self._fix(target, statement, init))

    def _replaced(self, target: cst.Attribute, stack: tuple) -> bool:
        """A later statement of `__init__`'s block rebinds the attribute (`rebound_later`) to a factory's tensor,
        judged there, or to a Parameter or a module, which the module registers: the first tensor was a temporary
        (`self.w = torch.randn(m, d)` then `self.w = nn.Parameter(f(self.w))`). A tensor computed from it
        (`self.w = self.w / self.w.norm()`) stays a plain tensor and is judged here."""
        final = rebound_later(stack, target)
        return type(final) is cst.Call and (
            self._is_tensor(final, stack) or self.ctx.qualified_name_in(final.func, PARAMETER, stack)
            or builds_module(self.ctx, final, stack)
        )

    def _is_tensor(self, value: cst.BaseExpression, stack: Optional[tuple] = None) -> bool:
        """A torch factory's result, possibly with tensor methods chained on it; not a 0-dim tensor of a number (read
        where `stack` ends; default: the node being visited)."""
        while type(value) is cst.Call and type(value.func) is cst.Attribute and type(value.func.value) is cst.Call:
            if value.func.attr.value in _NOT_TENSOR_METHODS:
                return False
            value = value.func.value
        if type(value) is not cst.Call or not self.ctx.qualified_name_in(value.func, TENSOR_FACTORIES, stack):
            return False
        if self.ctx.qualified_name(value.func, stack) in _SCALAR_FACTORIES:
            data = syntax.positional(value, 0) or syntax.keyword(value, "data")
            return data is None or not isinstance(syntax.literal(data.value), (int, float, bool))
        return True

    def _numbers_on_the_cpu(self, value: cst.BaseExpression, stack: tuple) -> bool:
        """A 1-D tensor of numbers made on the CPU: `torch.tensor([0.1, 0.2])`,
        `torch.from_numpy(np.array([0.1, 0.2]).astype(np.float32))` (without a `device=`, nothing chained on it)."""
        if type(value) is not cst.Call or syntax.keyword(value, "device") is not None or not value.args:
            return False
        data = value.args[0].value
        while type(data) is cst.Call and syntax.method_name(data) == "astype":  # `np.array([...]).astype(np.float32)`
            data = data.func.value
        if type(data) is cst.Call and self.ctx.qualified_name_in(data.func, _NUMPY_ARRAYS, stack) and data.args:
            data = data.args[0].value
        numbers = syntax.literal(data, None)
        return (
            self.ctx.qualified_name_in(value.func, _CPU_VECTOR_FACTORIES, stack) and isinstance(numbers, (list, tuple))
            and bool(numbers) and all(type(number) in (int, float) for number in numbers)
        )

    def _never_moved(self, module: ModuleClass) -> bool:
        """The file builds the class and nothing it can see moves or converts what it built: every instance is bound
        to a name (or called right away), the name is only called or read for attributes (`model(x)`,
        `model.parameters()`), with no `.to()`/`.cuda()`/`.half()`-style call on it or on an attribute of it, and the
        class does not convert itself (`self.to(...)`). An instance given away (an argument, a submodule, returned,
        aliased) may be moved where the rule does not look."""
        answer = self._unmoved.get(id(module.node))
        if answer is None:
            answer = self._unmoved[id(module.node)] = _NeverMoved(self.ctx, module).answer()
        return answer

    def _built_under_a_default_device(self, module: ModuleClass) -> bool:
        """A file that imports the class's module builds it and sets the default device or tensor type, as a file
        that builds its own class would (`def build(): torch.set_default_device(device); return Attention(n)` in
        main.py): the calls of the class there (`calls_from_importers`), or, where those are not all known, any
        file of the project that may import the module, or import one of those (a re-export), whose text names the
        class."""
        answer = self._under_default_device.get(id(module.node))
        if answer is None:
            sites = calls_from_importers(self.ctx, module.node.name.value) if module.context is self.ctx else []
            if sites is None:
                files = _importers_naming(self.ctx.filename, module.node.name.value)
            else:
                files = sorted({site[0].filename for site in sites})
            answer = self._under_default_device[id(module.node)] = any(
                SUMMARIES.section(path, self.ctx.config, _SETS_DEFAULT_DEVICE, _sets_default_device) for path in files
            )
        return answer

    def _moved_by_overrides(self, module: ModuleClass) -> FrozenSet[str]:
        """The attribute names that an `_apply(self, fn)` override converts with `fn`, in this file or in one that
        names the class and may import its module, or lies in its folder or one above (`Project.files_above`: a
        project too large for its importers to be known): YOLOv5's and YOLOv6's `Model._apply` runs `fn` on its
        head's `stride` and `grid` (`self.detect.stride = fn(self.detect.stride)`), so `.to()`, `.cuda()` and
        `.half()` of the model convert those plain tensors too."""
        answer = self._moved_by_apply.get(id(module.node))
        if answer is None:
            names = set(_apply_moves(self.ctx))
            named = re.compile(rb"\b" + re.escape(module.node.name.value.encode()) + rb"\b")
            texts = ((path, (PROJECT.read(path) or (b"",))[0]) for path in PROJECT.files_above(self.ctx.filename))
            nearby = [path for path, text in texts if b"def _apply(" in text and named.search(text)]
            for path in sorted(set(_importers_naming(self.ctx.filename, module.node.name.value) + nearby)):
                names.update(SUMMARIES.section(path, self.ctx.config, _APPLY_MOVES, _apply_moves) or ())
            answer = self._moved_by_apply[id(module.node)] = frozenset(names)
        return answer

    def _assigned_elsewhere(self, module: ModuleClass, name: str, init: cst.FunctionDef) -> bool:
        return any(module.assigning_method(value) is not init for value in module.attributes().get(name, []))

    def _message(self, target: cst.Attribute) -> str:
        shown = self.ctx.code(target)
        return (
            f"`{shown}` is a plain tensor attribute, not a buffer: `model.to(device)`, `.cuda()` and `.half()` leave it "
            "behind (a device mismatch in `forward` on GPU) and `state_dict()` does not hold it; register it with "
            f"`self.register_buffer(\"{target.attr.value}\", ..., persistent=False)`"
        )

    def _parameter_message(self, target: cst.Attribute) -> str:
        return (
            f"`{self.ctx.code(target)}` is a tensor with `requires_grad=True`, not an `nn.Parameter`: `parameters()` "
            "misses it (an optimizer built from them never trains it), `model.to(device)`/`.cuda()`/`.half()` leave "
            "it behind and `state_dict()` does not save it; wrap it in `nn.Parameter(...)`"
        )

    def _fix(self, target: cst.Attribute, statement: cst.Assign, init: cst.FunctionDef) -> Optional[Fix]:
        if len(statement.targets) != 1:
            return None
        instance = self_name(init)
        content = f"{instance}.register_buffer(\"{target.attr.value}\", {self.ctx.code(statement.value)}, persistent=False)"
        return Fix.unsafe("Register it as a buffer", self.ctx.replace(statement, content))


_SETS_DEFAULT_DEVICE = "sets-default-device"
_APPLY_MOVES = "apply-moves"


def _importers_naming(path: str, name: str) -> List[str]:
    """The files that may import the module `path`, or re-export it (`Project.importers_around`), whose text names
    `name`."""
    pattern = re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")
    return [other for other in PROJECT.importers_around(path) if pattern.search((PROJECT.read(other) or (b"",))[0])]


def _sets_default_device(ctx) -> bool:
    """The file calls `torch.set_default_device` or `torch.set_default_tensor_type` (a section of its summary)."""
    found = []
    stack: List[cst.CSTNode] = []

    def on_visit(node: cst.CSTNode) -> bool:
        stack.append(node)
        if type(node) is cst.Call and ctx.qualified_name_in(node.func, _DEFAULT_DEVICE_SETTERS, stack):
            found.append(node)
        return not found

    walk(ctx.module, on_visit, lambda node: stack.pop())
    return bool(found)


def _apply_moves(ctx) -> Tuple[str, ...]:
    """The attribute names the file's `_apply(self, fn)` overrides pass to `fn`, alone or through `map(fn, ...)`:
    `self.detect.stride = fn(self.detect.stride)`, `m.grid = list(map(fn, m.grid))` (a section of its summary)."""
    names: Set[str] = set()
    for statement in ctx.module.body:
        if type(statement) is not cst.ClassDef:
            continue
        for method in statement.body.body:
            params = method.params.params if type(method) is cst.FunctionDef and method.name.value == "_apply" else ()
            if len(params) < 2:
                continue
            applied = params[1].name.value

            def on_visit(node: cst.CSTNode) -> bool:
                if type(node) is cst.Call and type(node.func) is cst.Name and node.args:
                    passed = node.args[0].value
                    if node.func.value == "map" and len(node.args) > 1 and type(passed) is cst.Name and passed.value == applied:
                        passed = node.args[1].value
                    elif node.func.value != applied:
                        return True
                    if type(passed) is cst.Attribute:
                        names.add(passed.attr.value)
                return True

            walk(method.body, on_visit, lambda node: None)
    return tuple(sorted(names))


def _made_on_a_device(value: cst.BaseExpression) -> bool:
    """The factory under the chained methods is given `device=` (`torch.arange(n, device=device)`): made where the
    module's code chose, not left on the CPU by default."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and type(value.func.value) is cst.Call:
        value = value.func.value
    return type(value) is cst.Call and syntax.keyword(value, "device") is not None


class _NeverMoved:
    """Walks the file for `TensorAttributeNotBuffer._never_moved`: the instances of one Module class, and what is done
    to the values that may hold them."""

    def __init__(self, ctx, module: ModuleClass):
        self.ctx = ctx
        self.module = module
        self.stack: List[cst.CSTNode] = []
        self.instances: List[cst.Call] = []
        self.names: Set[str] = set()
        self.escapes = False
        self.moves_itself = False
        # Names moved or converted (`model` of `model.encoder.cuda()`) and names used otherwise than called or read
        # for an attribute (given to a call, returned, aliased), with where: asked at the end whether they may hold
        # an instance.
        self.used: List[Tuple[cst.Name, Tuple[cst.CSTNode, ...]]] = []

    def answer(self) -> bool:
        walk(self.ctx.module, self._visit, lambda node: self.stack.pop())
        if not self.instances or self.escapes or self.moves_itself:
            return False
        instances = {id(instance) for instance in self.instances}
        # Only a name an instance is bound to may hold one: an alias (`m = model`) is itself a use of that name.
        return not any(
            id(origin.node) in instances
            for name, stack in self.used if name.value in self.names
            for origin in Values.of(self.ctx).origins(name, stack)
        )

    def _visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        if type(node) is cst.Call:
            self._call(node)
        elif type(node) is cst.Name and len(self.stack) > 1:
            parent = self.stack[-2]
            read = (type(parent) is cst.Attribute and parent.value is node) or (type(parent) is cst.Call and parent.func is node)
            if not read and type(parent) not in (cst.AssignTarget, cst.Attribute, cst.Param, cst.FunctionDef, cst.ClassDef) and not self._compiled(node):
                self.used.append((node, tuple(self.stack)))
        return True

    def _compiled(self, name: cst.Name) -> bool:
        """`name` is what `torch.compile(name)` compiles: the compiled module wraps the same instance without moving
        it, and the value model follows the instance through the result, so moves of that are still seen."""
        if len(self.stack) < 3 or type(self.stack[-2]) is not cst.Arg or type(self.stack[-3]) is not cst.Call:
            return False
        call, arg = self.stack[-3], self.stack[-2]
        return bool(call.args) and call.args[0] is arg and not arg.keyword and not arg.star and (
            self.ctx.qualified_name(call.func, tuple(self.stack[:-2])) == "torch.compile"
        )

    def _call(self, call: cst.Call) -> None:
        if syntax.method_name(call) in _CONVERTING:
            root = call.func.value
            while type(root) in (cst.Attribute, cst.Call, cst.Subscript):
                root = root.func if type(root) is cst.Call else root.value
            if type(root) is cst.Name and root.value == "self" and any(node is self.module.node for node in self.stack):
                self.moves_itself = True
            elif type(root) is cst.Name:
                self.used.append((root, tuple(self.stack)))
        if syntax.terminal_name(call.func) != self.module.node.name.value or not any(
            origin.node is self.module.node for origin in Values.of(self.ctx).origins(call.func, tuple(self.stack))
        ):
            return
        self.instances.append(call)
        parent = self.stack[-2]
        named = type(parent) is cst.Assign and parent.value is call and all(
            type(target.target) is cst.Name for target in parent.targets
        )
        if named:
            self.names.update(target.target.value for target in parent.targets)
        elif not (type(parent) is cst.Expr or type(parent) is cst.Call and parent.func is call):
            self.escapes = True


# What moves or converts a module (its parameters and buffers, not its plain tensor attributes).
_CONVERTING = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "type", "to_empty", "xpu", "mps"})


def _requires_grad(value: cst.BaseExpression) -> bool:
    """The factory is given `requires_grad=True`, or a method chained on it is `.requires_grad_()` (with no argument
    or `True`): meant as a parameter."""
    while type(value) is cst.Call and type(value.func) is cst.Attribute and type(value.func.value) is cst.Call:
        if value.func.attr.value == "requires_grad_":
            flag = syntax.positional(value, 0) or syntax.keyword(value, "requires_grad")
            if flag is None or syntax.literal(flag.value, None) is True:
                return True
        value = value.func.value
    return type(value) is cst.Call and syntax.keyword_is_true(value, "requires_grad")


def _read_kind(node: cst.Attribute, stack) -> str:
    """How the read `node` (the last of `stack`) uses the tensor: HARMLESS when it works wherever the tensor is
    (moved to where it is used, read on the host in a test, read for its shape, copied into another tensor), ELEMENT
    for one element (`self.std[0]`), else COMPUTED."""
    parent = stack[-2]
    if _in_a_test(stack) or _copied(node, stack):
        return HARMLESS
    if type(parent) is cst.Attribute and parent.value is node:
        method, index = _after_device_keeping_methods(stack)
        if method.attr.value in _MOVING_METHODS:
            return HARMLESS if index > 0 and type(stack[index - 1]) is cst.Call else COMPUTED
        return HARMLESS if method.attr.value in _SHAPE_READS else COMPUTED
    if type(parent) is cst.Subscript and parent.value is node and len(parent.slice) == 1:
        index = parent.slice[0].slice
        if type(index) is cst.Index and type(syntax.literal(index.value, None)) is int:
            return ELEMENT
    return COMPUTED


def _after_device_keeping_methods(stack) -> Tuple[cst.Attribute, int]:
    """The attribute read on the result of the calls of `_DEVICE_KEEPING_METHODS` chained on the tensor (the last of
    `stack`), with its index in `stack`: `.to` of `self.weight.view(*shape).to(device)`; without such calls, the
    attribute read on the tensor itself (`stack[-2]`)."""
    index = len(stack) - 2
    attribute = stack[index]
    while attribute.attr.value in _DEVICE_KEEPING_METHODS and index >= 2:
        call, above = stack[index - 1], stack[index - 2]
        if type(call) is not cst.Call or call.func is not attribute or type(above) is not cst.Attribute or above.value is not call:
            break
        attribute, index = above, index - 2
    return attribute, index


def _copied(node: cst.Attribute, stack) -> bool:
    """The read is the value copied into another tensor: `batch[i] = self.grid`, `out.copy_(self.grid)`, `len(...)`."""
    parent = stack[-2]
    if type(parent) is cst.Assign:
        return parent.value is node and all(type(target.target) is cst.Subscript for target in parent.targets)
    if type(parent) is cst.Arg and len(stack) > 2 and type(stack[-3]) is cst.Call:
        call = stack[-3]
        return syntax.method_name(call) == "copy_" or (type(call.func) is cst.Name and call.func.value == "len")
    return False


def _in_a_test(stack) -> bool:
    """The innermost node of `stack` is in the test of an `if`, `while`, conditional expression or `assert`
    (`if self.node_a[0][d]:`): read on the host, it works wherever the model is."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement)) and type(node) not in (cst.If, cst.While, cst.Assert):
            return False
        if type(node) in (cst.If, cst.While, cst.IfExp, cst.Assert) and stack[index + 1] is node.test:
            return True
    return False
