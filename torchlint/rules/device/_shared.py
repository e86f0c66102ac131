"""What the device/dtype rules share: reading a conversion call (`.cuda()`, `.to(...)`, `.type_as(...)`,
`.float()`, `.type(...)`), naming torch as the file imports it, the value a name was
last assigned, edits on method chains, and which code runs once per training step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, AbstractSet, Dict, List, Optional, Sequence, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState

from torchlint import semantics
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.loops import FUNCTION_BOUNDARIES, loop_nodes
from torchlint.analysis.modules import runs_only_while_built
from torchlint.analysis.values import Values, method_of
from torchlint.engine.scopes import dotted_name, scope_nodes_of
from torchlint.engine.walk import statement_structure, walk, walk_visitor
from torchlint.finding import Edit

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
DEVICE_STRING = re.compile(r"(cpu|cuda|mps|xpu|xla|meta|hpu|npu|ipu|privateuseone)(:\d+)?")
CUDA_STRING = re.compile(r"cuda(:\d+)?")
_DEVICE_PREFIX = re.compile(r"(cpu|cuda|mps|xpu|npu|hpu)(:|$)")
# The methods `conversion` reads: a rule acting on conversions only needs calls of these (`Rule.call_parts`).
CONVERSION_METHODS = frozenset(CAST_METHODS) | {"cuda", "cpu", "to", "type", "type_as"}
# What makes a tensor of a numpy array (or other data).
TORCH_FROM_ARRAY = frozenset({"torch.from_numpy", "torch.tensor", "torch.as_tensor"})
_TO_KEYWORDS = ("device", "dtype", "non_blocking", "copy", "memory_format")


@dataclass
class Conversion:
    """One `.cuda()` / `.cpu()` / `.to(...)` / `.type(...)` / `.type_as(...)` / `.float()`-style call, read."""

    call: cst.Call
    # Code naming the target device (`"cuda"` for `.cuda()`), when the call moves.
    device: Optional[str] = None
    device_node: Optional[cst.BaseExpression] = None
    # The canonical dtype when known ("float32"), and the expression naming it when written out.
    dtype: Optional[str] = None
    dtype_node: Optional[cst.BaseExpression] = None
    # Other arguments as `name=value` code (non_blocking, copy, memory_format), in order.
    keywords: Tuple[str, ...] = ()
    # Every argument was understood, so a fix may rewrite the call.
    complete: bool = True

    @property
    def moves(self) -> bool:
        return self.device is not None

    @property
    def casts(self) -> bool:
        return self.dtype is not None or self.dtype_node is not None

    @property
    def to_host(self) -> bool:
        """`.cpu()`, `.to("cpu")`: the call moves to the CPU, as written."""
        return self.device == '"cpu"' or semantics.literal(self.device_node, None) == "cpu"

    def dtype_code(self, ctx: "FileContext", stack=None) -> Optional[str]:
        """Code naming the dtype (`torch.float32`, or the user's own expression); None without a name for torch."""
        if self.dtype_node is not None:
            return ctx.code(self.dtype_node)
        return torch_attribute(ctx, self.dtype, stack)


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


def names_dtype(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """A torch dtype, or a variable/attribute that by its name holds one (`dtype`, `x.dtype`, `amp_dtype`)."""
    if dtype_of(expr, ctx, stack):
        return True
    name = semantics.terminal_name(expr)
    return bool(name) and (name == "dtype" or name.endswith("_dtype"))


def names_device(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> bool:
    """A device string, `torch.device(...)`, an f-string like `f"cuda:{rank}"`, or a name that says device."""
    if isinstance(expr, cst.SimpleString):
        value = semantics.literal(expr)
        return isinstance(value, str) and bool(DEVICE_STRING.fullmatch(value))
    if isinstance(expr, cst.FormattedString):
        first = expr.parts[0] if expr.parts else None
        return isinstance(first, cst.FormattedStringText) and bool(_DEVICE_PREFIX.match(first.value))
    if isinstance(expr, cst.Call):
        return ctx.qualified_name(expr.func, stack) == "torch.device"
    if isinstance(expr, cst.IfExp):  # "cuda" if use_cuda else "cpu"
        return names_device(expr.body, ctx, stack) or names_device(expr.orelse, ctx, stack)
    name = semantics.terminal_name(expr)
    if not name:
        return False
    lowered = name.lower()
    if lowered == ctx.config.device_name.lower() or "device" in lowered or lowered == "dev":
        return True
    # A variable named otherwise (`v23 = torch.device(...)`) holds a device when every value it may hold is one.
    origins = Values.of(ctx).origins(expr, stack) if type(expr) is cst.Name else ()
    return bool(origins) and all(
        type(origin.node) in (cst.SimpleString, cst.FormattedString, cst.Call, cst.IfExp) and not origin.applied
        and names_device(origin.node, origin.place.context, origin.place.stack) for origin in origins
    )


def conversion(call: cst.Call, ctx: "FileContext", stack=None) -> Optional[Conversion]:
    """Read `call` as a device move and/or dtype cast on a value; None when it is neither (or when what it casts
    to is not in the source: `.type_as(other_tensor)`)."""
    method = semantics.method_name(call)
    if method not in CONVERSION_METHODS or ctx.qualified_name(call.func, stack) is not None:
        return None  # not a method called on a value (`torch.cuda.x()`, `np.float(...)`)
    if any(arg.star for arg in call.args):
        return None
    positional = [arg.value for arg in call.args if arg.keyword is None]
    keywords = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    if method in CAST_METHODS:
        if positional or set(keywords) - {"memory_format"}:
            return None
        return Conversion(call, dtype=CAST_METHODS[method], keywords=_keyword_code(ctx, keywords))
    if method == "cpu":
        if positional or set(keywords) - {"memory_format"}:
            return None
        return Conversion(call, device='"cpu"', keywords=_keyword_code(ctx, keywords))
    if method == "cuda":
        return _read_cuda(call, ctx, positional, keywords)
    if method == "type":
        return _read_type(call, ctx, stack, positional, keywords)
    if method == "type_as":
        return _read_type_as(call, ctx, stack, positional, keywords)
    return _read_to(call, ctx, stack, positional, keywords)


def _keyword_code(ctx: "FileContext", keywords: Dict[str, cst.BaseExpression]) -> Tuple[str, ...]:
    return tuple(f"{name}={ctx.code(value)}" for name, value in keywords.items())


def cuda_device_code(argument: Optional[cst.BaseExpression], ctx: "FileContext") -> str:
    """The device `.cuda(argument)` moves to, as code for `.to(...)`/`device=`: `"cuda"`, `"cuda:1"`, or the expression."""
    value = semantics.literal(argument, default=argument)
    if argument is None or value is None:
        return '"cuda"'
    if isinstance(value, int) and not isinstance(value, bool):
        return f'"cuda:{value}"'
    if isinstance(value, str) and CUDA_STRING.fullmatch(value):
        return f'"{value}"'
    return ctx.code(argument)


def _read_cuda(call, ctx, positional, keywords) -> Optional[Conversion]:
    # Tensor.cuda(device=None, non_blocking=False, memory_format=...)
    if len(positional) > 2 or set(keywords) - {"device", "non_blocking", "memory_format"}:
        return None
    if positional and "device" in keywords or len(positional) == 2 and "non_blocking" in keywords:
        return None
    device = positional[0] if positional else keywords.pop("device", None)
    extra = {}
    if len(positional) == 2:
        extra["non_blocking"] = positional[1]
    extra.update(keywords)
    return Conversion(call, device=cuda_device_code(device, ctx), device_node=device, keywords=_keyword_code(ctx, extra))


def _read_type(call, ctx, stack, positional, keywords) -> Optional[Conversion]:
    # `.type()` with no argument returns a string; `.type(dtype, non_blocking)` converts.
    target = positional[0] if positional else keywords.get("dtype")
    if target is None or len(positional) > 1 or set(keywords) - {"dtype"}:
        return None
    dtype = dtype_of(target, ctx, stack)
    if dtype:
        return Conversion(call, dtype=dtype, dtype_node=target)
    dtype, cuda = tensor_type_of(target, ctx, stack)
    if dtype is None:
        return None
    # The fix names the dtype itself: `torch.FloatTensor` is not a dtype `.to()` accepts.
    return Conversion(call, dtype=dtype, device='"cuda"' if cuda else None)


def _read_type_as(call, ctx, stack, positional, keywords) -> Optional[Conversion]:
    # `.type_as(other)` casts to the type of `other`: read only when `other` is built by a legacy tensor type
    # (`x.type_as(torch.FloatTensor())`, a float32 cast; `torch.cuda.FloatTensor()` also moves to the GPU).
    if len(positional) != 1 or keywords or type(positional[0]) is not cst.Call:
        return None
    dtype, cuda = tensor_type_of(positional[0].func, ctx, stack)
    if dtype is None:
        return None
    return Conversion(call, dtype=dtype, device='"cuda"' if cuda else None)


def _read_to(call, ctx, stack, positional, keywords) -> Optional[Conversion]:
    # Tensor.to(device, dtype, non_blocking, copy) | to(dtype, non_blocking, copy) | to(other) | to(memory_format=)
    complete = not set(keywords) - set(_TO_KEYWORDS)
    device = keywords.pop("device", None)
    dtype_node = keywords.pop("dtype", None)
    extra: Dict[str, cst.BaseExpression] = {}
    if positional:
        first = positional[0]
        if names_dtype(first, ctx, stack):
            slots = ("dtype", "non_blocking", "copy")
        elif names_device(first, ctx, stack):
            slots = ("device", "dtype", "non_blocking", "copy")
        else:
            return None  # `.to(other_tensor)` or a value we cannot read
        if len(positional) > len(slots):
            return None
        for slot, value in zip(slots, positional):
            if slot == "device":
                if device is not None:
                    return None
                device = value
            elif slot == "dtype":
                if dtype_node is not None:
                    return None
                dtype_node = value
            else:
                extra[slot] = value
    for name in ("non_blocking", "copy", "memory_format"):
        if name in keywords:
            if name in extra:
                return None
            extra[name] = keywords.pop(name)
    extra.update(keywords)
    if device is None and dtype_node is None:
        return None
    return Conversion(
        call,
        device=ctx.code(device) if device is not None else None,
        device_node=device,
        dtype=dtype_of(dtype_node, ctx, stack),
        dtype_node=dtype_node,
        keywords=_keyword_code(ctx, extra),
        complete=complete,
    )


def stays_on_its_device(move: Conversion, ctx: "FileContext", stack=None) -> bool:
    """`move` names the device its tensor is on already, so `.to()` returns the tensor as it is: no copy, no
    conversion. `x.to(x.device)` (also after casts, which keep the device: `x.half().to(x.device)`), or
    `t.to(device)` where every value `t` may hold was made by a torch factory given that same `device=` (`t =
    torch.zeros(n, device=device)`)."""
    target = move.device_node
    base = semantics.receiver(move.call)
    while type(base) is cst.Call:
        read = conversion(base, ctx, stack)
        if read is None or read.moves:
            return False
        base = semantics.receiver(base)
    if target is None or base is None:
        return False
    if type(target) is cst.Attribute and target.attr.value == "device":
        return dotted_name(target.value) is not None and dotted_name(target.value) == dotted_name(base)
    written = ctx.code(target)
    if type(base) is cst.Call:
        return _made_on(base, written, ctx, stack)
    if type(base) is not cst.Name:
        return False
    # Its assignments as written: the value model follows `.to(...)` to its receiver, which would take
    # `torch.zeros(n, device=device).cpu()` for a tensor on `device`.
    values = Values.of(ctx)
    found = values.bindings(base, values.place(ctx.stack if stack is None else stack))
    bindings = found[1] if found is not None else []
    return bool(bindings) and all(
        type(binding.value) is cst.Call and not binding.element and _made_on(binding.value, written, ctx, stack)
        for binding in bindings
    )


def _made_on(call: cst.Call, device_code: str, ctx: "FileContext", stack) -> bool:
    """`call` is a torch function given `device=<device_code>`."""
    given = semantics.keyword(call, "device")
    return (
        given is not None and ctx.code(given.value) == device_code
        and (ctx.qualified_name(call.func, stack) or "").startswith("torch.")
    )


def implements_method(ctx: "FileContext", name: str) -> bool:
    """Inside `def <name>(self, ...)`: a class implementing `.cuda()`/`.double()` by delegating to its tensors,
    which forwards its caller's choice rather than making one."""
    function = ctx.enclosing(cst.FunctionDef)
    return function is not None and function.name.value == name


def computed_cuda_device(read: Conversion) -> bool:
    """`.cuda(index)` with a device the program computed (not a literal): it follows a choice made elsewhere,
    like `.to(device)` does, and is reached only where that choice is a CUDA device."""
    node = read.device_node
    return node is not None and semantics.is_missing(semantics.literal(node))


# ------------------------------------------------------------------ naming torch


def torch_name(ctx: "FileContext", stack=None) -> Optional[str]:
    """The name under which torch itself is reachable at `stack` (`torch`, `T`), or None."""
    stack = ctx.stack if stack is None else stack
    candidates = []
    for scope in ctx.scopes.chain(stack):
        candidates.extend(name for name, path in scope.imports.items() if path == "torch")
    candidates.sort(key=lambda name: name != "torch")
    for name in candidates:
        if ctx.scopes.resolve(name, stack) == "torch":
            return name
    return None


def torch_attribute(ctx: "FileContext", attribute: Optional[str], stack=None) -> Optional[str]:
    """`T.float32` for attribute "float32" in a file that did `import torch as T`; None when torch has no name."""
    if attribute is None:
        return None
    module = torch_name(ctx, stack)
    return f"{module}.{attribute}" if module else None


# ------------------------------------------------------------------ chains and edits


def chain_parent(stack: Sequence[cst.CSTNode], index: int) -> Optional[cst.Call]:
    """The call `stack[index]` is the receiver of (`x.float()` -> the call `x.float().cuda()`), if any."""
    if index >= 2:
        attribute, call = stack[index - 1], stack[index - 2]
        if isinstance(attribute, cst.Attribute) and attribute.value is stack[index]:
            if isinstance(call, cst.Call) and call.func is attribute:
                return call
    return None


def tail_edit(ctx: "FileContext", first: cst.Call, last: cst.Call, content: str) -> Edit:
    """Replace a chain's tail from the method name of `first` through the end of `last` (`float().cuda()`)."""
    if first is not last and first.lpar:
        # `(x.cuda()).float()`: the tail would cross the inner call's parentheses; rewrite the whole chain.
        return ctx.replace(last, f"{ctx.code(first.func.value)}.{content}")
    start, _ = ctx.location(first.func.attr)
    _, end = ctx.location(last)
    return Edit(content, start, end)


def code_in_place(ctx: "FileContext", node: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> str:
    """The code of `node` (a rebuilt one too) for an edit where `stack` points. `ctx.code` writes continuation
    lines without the indentation of the blocks around them (`torch.zeros(\n    n,\n)` in a loop body loses
    it); libcst adds it from the blocks being generated, given here as the engine's positions do."""
    module = ctx.module
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline)
    state.indent_tokens = [
        module.default_indent if block.indent is None else block.indent for block in stack if type(block) is cst.IndentedBlock
    ]
    node._codegen(state)
    return "".join(state.tokens)


def to_call(*arguments: Optional[str]) -> str:
    return "to(" + ", ".join(argument for argument in arguments if argument) + ")"


def expression(code: str) -> cst.BaseExpression:
    """`code` parsed as an expression; one spanning lines is parenthesized, as it would be outside its call."""
    try:
        return cst.parse_expression(code)
    except cst.ParserSyntaxError:
        return cst.parse_expression(f"({code})")


def with_keywords(call: cst.Call, keywords: Sequence[Tuple[str, cst.BaseExpression]]) -> cst.Call:
    """`call` with `name=value` keyword arguments appended, keeping a trailing-comma layout."""
    args = list(call.args)
    trailing = args[-1].comma if args and isinstance(args[-1].comma, cst.Comma) else None
    if trailing is not None:
        # `f(\n    a,\n)`: new arguments go on their own lines, the last one keeps the trailing comma.
        inner = args[-2].comma if len(args) >= 2 else cst.Comma(whitespace_after=call.whitespace_before_args)
        args[-1] = args[-1].with_changes(comma=inner)
        commas = [inner] * (len(keywords) - 1) + [trailing]
    else:
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if args:
            args[-1] = args[-1].with_changes(comma=space)
        commas = [space] * (len(keywords) - 1) + [cst.MaybeSentinel.DEFAULT]
    no_space = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    for (name, value), comma in zip(keywords, commas):
        args.append(cst.Arg(value=value, keyword=cst.Name(name), equal=no_space, comma=comma))
    return call.with_changes(args=args)


def peel_moves(expr: cst.BaseExpression, ctx: "FileContext", stack=None) -> cst.BaseExpression:
    """`x` for `x.to(device).cuda()`: strip device moves (that do not cast) off the end of a chain."""
    while isinstance(expr, cst.Call):
        read = conversion(expr, ctx, stack)
        if read is None or not read.moves or read.casts:
            break
        expr = expr.func.value
    return expr


def call_argument(call: cst.Call, index: int, name: str) -> Optional[cst.BaseExpression]:
    arg = semantics.keyword(call, name) or semantics.positional(call, index)
    return arg.value if arg is not None else None


# ------------------------------------------------------------------ modules

PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
_MODEL_BUILDERS = ("torchvision.models.", "timm.create_model")


def builds_module(ctx: "FileContext", call: cst.Call, stack) -> bool:
    """`call` builds an `nn.Module`: a torch layer, loss or container, a model builder (`torchvision.models.*`,
    `timm.create_model`, `*.from_pretrained`), or a class of the file with a `forward`."""
    name = ctx.qualified_name(call.func, stack) or ""
    if name.startswith("torch.nn.") and name.rpartition(".")[2][:1].isupper() and name not in PARAMETER:
        return True
    if name.startswith(_MODEL_BUILDERS) or semantics.method_name(call) == "from_pretrained":
        return True
    return any(
        type(origin.node) is cst.ClassDef and method_of(origin.node, "forward") is not None
        for origin in Values.of(ctx).origins(call.func, stack)
    )


# ------------------------------------------------------------------ code that runs every step

# Name words of functions that run once per step: `forward`, `training_step`, `run_iteration`, `step`.
_STEP_WORDS = frozenset({"forward", "step", "iteration"})
# Name words of training functions: per step too, unless the function holds the loop over the steps itself
# (`def train(): <setup>; for batch in loader: ...` runs its setup once).
_TRAIN_WORDS = frozenset({"train", "training"})
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# How many callers up a function is followed to a loop or a per-step function.
_CALLER_DEPTH = 3


def name_words(name: str) -> frozenset:
    """`train_one_epoch` -> {train, one, epoch}; `trainStep` -> {train, step}."""
    return frozenset(word.lower() for part in name.split("_") for word in _CAMEL_HUMP.split(part) if word)


def in_a_step_loop(ctx: "FileContext", stack: Sequence[cst.CSTNode]) -> bool:
    """The innermost point of `stack` is in the body of a loop of its own function that repeats per step: the
    innermost loop holding it, unless that loop holds a loop that runs backward, itself or in a function of the file
    it calls (`for epoch in ...: noise = ...; train(epoch)`): what such a loop does besides its inner training loop
    runs once per epoch. Not in a test file, whose loops run the test once per parameter (`for device in devices:`)."""
    if ctx.file_kind is FileKind.TEST:
        return False
    loops = loop_nodes(stack) or _while_tested(stack)
    return bool(loops) and not ctx.shared(_EpochLoops).holds_a_training_loop(loops[0], stack)


def _while_tested(stack: Sequence[cst.CSTNode]) -> List[cst.CSTNode]:
    """The `while` whose test holds the innermost point of `stack` (`while has_unfinished(...):`, evaluated before
    every iteration), within its function, else []."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            break
        if type(node) is cst.While and stack[index + 1] is node.test:
            return [node]
    return []


class _EpochLoops:
    """Which loops hold a loop that runs backward, themselves or through the file's functions they call (`ctx.shared`)."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self._known: Dict[int, bool] = {}

    def holds_a_training_loop(self, loop: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> bool:
        found = self._known.get(id(loop))
        if found is None:
            function = self.ctx.callgraph.current(stack)
            backward = {id(node) for node in function.facts.get("backward", ())}
            found = self._known[id(loop)] = bool(backward) and _loop_holding(loop.body, backward) or any(
                _calls_a_training_loop(self.ctx, site.callee)
                for site in function.calls
                if any(node is loop for node in site.stack)
            )
        return found


_STATEMENTS_OF_A_BODY = statement_structure(cst.IndentedBlock) | {cst.SimpleStatementSuite}


def _loop_holding(body: cst.CSTNode, wanted: AbstractSet[int]) -> bool:
    """A `for` or `while` among the statements of `body` (functions and classes defined there not counted) that
    holds one of the nodes `wanted` (by id)."""
    loops = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.For or type(node) is cst.While:
            loops.append(node)
            return False
        return True

    walk(body, on_visit, lambda node: None, descend=_STATEMENTS_OF_A_BODY)
    return any(_holds(loop, wanted) for loop in loops)


def _holds(root: cst.CSTNode, wanted: AbstractSet[int]) -> bool:
    found = []

    def on_visit(node: cst.CSTNode) -> bool:
        if id(node) in wanted:
            found.append(node)
        return not found and type(node) not in FUNCTION_BOUNDARIES

    walk(root, on_visit, lambda node: None)
    return bool(found)


def _calls_a_training_loop(ctx: "FileContext", callee: str) -> bool:
    """The file's function `callee` runs backward and holds a loop (`train(epoch)`, looping over the batches)."""
    function = ctx.callgraph.functions.get(callee)
    return (
        function is not None and type(function.node) is cst.FunctionDef
        and bool(ctx.callgraph.facts_of(callee, "backward")) and bool(Values.of(ctx).flow(function.node).loop_ends)
    )


def per_step_function(ctx: "FileContext", stack: Sequence[cst.CSTNode], depth: int = 0) -> bool:
    """The innermost point of `stack` is in a function that runs once per training step: a `forward`, a
    `*_step`, a function named for training (that holds no loop of its own), one without a loop of its own called
    from a loop (`in_a_step_loop`), or one called from such a function in the same file. Functions nested in one of
    those run with it."""
    for index in range(len(stack) - 2, -1, -1):
        function = stack[index]
        if type(function) is not cst.FunctionDef:
            continue
        words = name_words(function.name.value)
        key = ctx.callgraph.key_of(function, scope_nodes_of(stack[: index + 1]))
        if words & _STEP_WORDS and not runs_only_while_built(ctx, function, stack[: index + 1]):
            return True
        loops = bool(Values.of(ctx).flow(function).loop_ends)
        if words & _TRAIN_WORDS and not loops:
            return True
        if depth < _CALLER_DEPTH:
            stacks = [site.stack for site in ctx.callgraph.call_sites(key)]
            owner = scope_nodes_of(stack[:index])[-1:]
            if owner and type(owner[0]) is cst.ClassDef:  # a method, also called through instances
                stacks += [site for _, site in Values.of(ctx).method_calls(owner[0], function.name.value)]
            for site in stacks:
                # A function with a loop of its own, called from a loop, is a driver run once per item (`for weight in
                # weights: export(weight)`, `for epoch ...: train_one_epoch()`): its loops repeat, its setup does not.
                if (not loops and in_a_step_loop(ctx, site)) or per_step_function(ctx, site, depth + 1):
                    return True
    return False


def in_a_cuda_branch(stack: Sequence[cst.CSTNode], availability: bool = True) -> bool:
    """The innermost point of `stack` is in a branch taken only when the program asks for CUDA (`if args.cuda:`,
    `if device.type == "cuda":`, `x.cuda() if use_gpu else x`): without a GPU it does not run. With
    `availability`, a test of whether CUDA is there counts too (`if torch.cuda.is_available():`); without, only a
    test of what the program chose does (CUDA may be there while the program chose the CPU)."""
    for parent, child in zip(stack, stack[1:]):
        if (type(parent) is cst.If or type(parent) is cst.IfExp) and child is not parent.test:
            asks = _asks_for_cuda(parent.test, availability)
            if asks is not None and asks == (child is parent.body):
                return True
    return False


def _asks_for_cuda(test: cst.BaseExpression, availability: bool = True) -> Optional[bool]:
    """True for a condition that holds when CUDA is wanted (`args.cuda`, `backend == "cuda"`), False for one
    that holds when it is not (`not use_gpu`, `device.type != "cuda"`), None when it says nothing about CUDA.
    Without `availability`, calls (`torch.cuda.is_available()`, `torch.cuda.device_count() > 1`) say nothing."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _asks_for_cuda(test.expression, availability)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        sides = {_asks_for_cuda(test.left, availability), _asks_for_cuda(test.right, availability)} - {None}
        return True if True in sides else (False if sides else None)
    if not availability and (
        type(test) is cst.Call
        or type(test) is cst.Comparison and (type(test.left) is cst.Call or any(type(target.comparator) is cst.Call for target in test.comparisons))
    ):
        return None
    finder = _CudaMention()
    walk_visitor(test, finder)
    if not finder.found:
        return None
    negated = (cst.NotEqual, cst.IsNot, cst.NotIn)
    return not (isinstance(test, cst.Comparison) and any(isinstance(target.operator, negated) for target in test.comparisons))


class _CudaMention(cst.CSTVisitor):
    def __init__(self):
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        lowered = node.value.lower()
        self.found = self.found or "cuda" in lowered or "gpu" in lowered

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.found = self.found or is_cuda_string(node)


def is_cuda_string(expr: cst.BaseExpression) -> bool:
    """`"cuda"` or `"cuda:N"` written as a string."""
    value = semantics.literal(expr, None) if type(expr) in (cst.SimpleString, cst.ConcatenatedString) else None
    return isinstance(value, str) and bool(CUDA_STRING.fullmatch(value))
