"""What `torch.load(..., weights_only=True)` (the default since torch 2.6) refuses to rebuild, as values of code.

Observed on torch 2.13 with numpy 2.4 (docs/observed.md, "Checkpoints under weights_only=True"): the
weights-only unpickler rebuilds tensors, parameters, `torch.Size`/`dtype`/`device`, Python's
numbers, strings, bytes, `None`, lists, tuples, sets, dicts and `OrderedDict`; every other global
the pickle names fails the load with `UnpicklingError: Weights only load failed ... Unsupported global: GLOBAL
<name>`. `refused_leaves` follows a saved expression to the values it holds and names the ones that fail.
Whole modules, optimizers and schedulers are left to TL502 (whole-object-checkpoint).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.syntax import argument_for, isinstance_test
from torchlint.analysis.modules import MODULE_ONLY_METHODS, names_module_class
from torchlint.analysis.project import PROJECT
from torchlint.analysis.values import Origin, Values

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


class Refused(NamedTuple):
    """A kind of value the weights-only unpickler refuses."""

    # What it is, in a message: "an `argparse.Namespace`".
    label: str
    # The global torch names in its error (`Unsupported global: GLOBAL argparse.Namespace`).
    global_name: str
    # The save-side change that loads (`{value}` is the saved expression's code).
    remedy: str
    # What to pass to `safe_globals([...])` for a file one trusts, and what else it may need.
    allow: str
    allow_note: str
    # The names whose allow-listing in the file (`add_safe_globals([Namespace])`) makes it load.
    listed: Tuple[str, ...]
    # The replacement of the saved expression the fix writes (`vars({value})`), or "" for no fix.
    fix: str = ""


# Each allow-list below was checked on torch 2.13 with numpy 2.4 (docs/observed.md).
NAMESPACE = Refused(
    "an `argparse.Namespace`", "argparse.Namespace", "save `vars({value})` (a dict)", "argparse.Namespace", "",
    ("Namespace",), "vars({value})",
)
SIMPLE_NAMESPACE = Refused(
    "a `types.SimpleNamespace`", "types.SimpleNamespace", "save `vars({value})` (a dict)", "types.SimpleNamespace", "",
    ("SimpleNamespace",), "vars({value})",
)
_NUMPY_DTYPE_NOTE = " (the `np.dtypes` class of its dtype: `Float64DType` for float64)"
NUMPY_SCALAR = Refused(
    "a numpy scalar", "numpy._core.multiarray.scalar", "save `{value}.item()` (a Python number)",
    "np._core.multiarray.scalar, np.dtype, np.dtypes.Float64DType", _NUMPY_DTYPE_NOTE, ("scalar",), "{value}.item()",
)
NUMPY_ARRAY = Refused(
    "a numpy array", "numpy._core.multiarray._reconstruct",
    "save `{value}.tolist()` (a list), or `torch.from_numpy({value})` (a tensor)",
    "np._core.multiarray._reconstruct, np.ndarray, np.dtype, np.dtypes.Float64DType", _NUMPY_DTYPE_NOTE,
    ("_reconstruct",), "{value}.tolist()",
)
NUMPY_RANDOM_STATE = Refused(
    "numpy's random state (a tuple holding an array)", "numpy._core.multiarray._reconstruct",
    "save the state as a tensor (`torch.from_numpy(state[1])`, the other fields as they are)",
    "np._core.multiarray._reconstruct, np.ndarray, np.dtype, np.dtypes.UInt32DType", "", ("_reconstruct",),
)
PATH = Refused(
    "a `pathlib.Path`", "pathlib.PosixPath", "save `str({value})`", "pathlib.PosixPath", " (`pathlib.WindowsPath` on Windows)",
    ("PosixPath", "WindowsPath"), "str({value})",
)
PARTIAL = Refused(
    "a `functools.partial`", "functools.partial", "save what it is built from (the function's name and arguments)",
    "functools.partial", " and the function it wraps", ("partial",),
)
DEFAULTDICT = Refused(
    "a `collections.defaultdict`", "collections.defaultdict", "save `dict({value})`", "collections.defaultdict",
    " and its default factory (`int`, `list`)", ("defaultdict",), "dict({value})",
)
DATETIME = Refused(
    "a `datetime`", "datetime.datetime", "save `{value}.isoformat()`", "datetime.datetime", "", ("datetime",),
)
FROZENSET = Refused("a `frozenset`", "frozenset", "save `set({value})`", "frozenset", "", ("frozenset",), "set({value})")


def project_class_instance(class_name: str) -> Refused:
    return Refused(
        f"an instance of the project class `{class_name}`", f"<its module>.{class_name}",
        "save its fields (`vars(...)`, `dataclasses.asdict(...)`)", class_name, "", (class_name,),
    )


# Calls of installed code whose result is one of the refused kinds, by qualified name.
_NUMPY_SCALARS = frozenset(
    "numpy." + name
    for name in (
        "float16 float32 float64 int8 int16 int32 int64 uint8 bool_ mean sum max min median std var average prod "
        "amax amin nanmean nansum nanmax nanmin nanmedian nanstd argmax argmin"
    ).split()
)
# Reductions give an array, not a scalar, when given an axis.
_AXIS_KEYWORDS = frozenset({"axis", "keepdims", "out"})
_NUMPY_ARRAYS = frozenset(
    "numpy." + name
    for name in (
        "array asarray zeros ones empty full arange linspace stack concatenate vstack hstack zeros_like ones_like "
        "eye random.rand random.randn"
    ).split()
)
# Elementwise functions: an array for an array, a numpy scalar for a number; either is refused, and `.tolist()` turns
# both into Python values.
_NUMPY_ELEMENTWISE = frozenset(
    "numpy." + name
    for name in "sin cos tan exp log log2 log10 sqrt abs absolute square clip round floor ceil where diag unique".split()
)
_BY_NAME = {
    "argparse.Namespace": NAMESPACE,
    "types.SimpleNamespace": SIMPLE_NAMESPACE,
    "pathlib.Path": PATH,
    "pathlib.PosixPath": PATH,
    "pathlib.WindowsPath": PATH,
    "functools.partial": PARTIAL,
    "collections.defaultdict": DEFAULTDICT,
    "datetime.datetime": DATETIME,
    "datetime.datetime.now": DATETIME,
    "datetime.datetime.utcnow": DATETIME,
    "frozenset": FROZENSET,
    "numpy.random.get_state": NUMPY_RANDOM_STATE,
}
_BUILTINS = frozenset({"frozenset"})
# Annotations of a parameter that say what it holds (`args: argparse.Namespace`).
_ANNOTATED = frozenset({"argparse.Namespace", "types.SimpleNamespace", "pathlib.Path"})
_ARGUMENT_PARSERS = frozenset({"argparse.ArgumentParser"})
# How deep a saved container is searched (`{"meta": {"args": args}}`).
_MAX_NESTING = 3


class Caller(NamedTuple):
    """A call, in another place, of the project function whose `torch.save` is being read: what the function's
    parameters hold is what this call passes (`save_model(model, optimizer, opt, epoch, path)` with the dict built
    in `util.py` from `opt`)."""

    function: cst.FunctionDef
    call: cst.Call
    context: "FileContext"
    stack: Tuple[cst.CSTNode, ...]


class Leaf(NamedTuple):
    """A refused value the saved expression holds."""

    # The keys that lead to it (`["args"]`, `[0]`; "" for the saved object itself).
    where: str
    # The expression written in the checkpoint's container (`args` in `{"args": args}`), and its file.
    written: cst.BaseExpression
    context: "FileContext"
    refused: Refused
    # Every value `written` may hold is of this kind: replacing it (`vars(args)`) is exact.
    uniform: bool


def refused_leaves(
    ctx: "FileContext", expr: cst.BaseExpression, stack: Sequence[cst.CSTNode], where: str = "", nesting: int = 0,
    copied: bool = False, caller: Optional[Caller] = None,
) -> List[Leaf]:
    """The values `expr` may hold that a weights-only load refuses, each with the key path that holds it.

    `copied`: `expr` is what `dict(expr)` copies into a plain dict, so only the values it holds count (`dict(counts)`
    of a defaultdict loads). `caller`: `expr` is read in a function of another file that this call runs, and its
    parameters hold what the call passes."""
    found: List[Leaf] = []
    origins = Values.of(ctx).origins(expr, stack)
    kinds = []
    for origin in origins:
        node, there, octx = origin.node, origin.place.stack, origin.place.context
        if origin.opaque and nesting < _MAX_NESTING:
            # `def save_checkpoint(state, ...): torch.save(state, ...)`: what the file's calls pass for the parameter.
            passed = _passed_for(origin, caller)
            if passed is not None:
                for call_context, argument, call_stack in passed:
                    # The function may use the argument otherwise than saving it (`train(opt)` reads `opt.lr`):
                    # replacing the argument itself (`vars(opt)`) is no exact fix; a value inside it may be.
                    found += [
                        leaf._replace(uniform=False) if leaf.written is argument else leaf
                        for leaf in refused_leaves(call_context, argument, call_stack, where, nesting + 1)
                    ]
            else:
                kinds.append(_annotated(origin))  # `def save(args: argparse.Namespace)`
                continue
        if origin.opaque or origin.applied:
            kinds.append(None)
            continue
        if type(node) in (cst.Dict, cst.List, cst.Tuple, cst.Set) or _is_dict_call(octx, node, there):
            kinds.append(None)  # a container: replacing the expression that names it would not be exact
        if type(node) is cst.Dict and nesting < _MAX_NESTING:
            for element in node.elements:
                if isinstance(element, cst.DictElement):
                    found += refused_leaves(octx, element.value, there, where + _key(element.key), nesting + 1, caller=caller)
                else:  # `**other`
                    found += refused_leaves(octx, element.value, there, where, nesting + 1, caller=caller)
        elif type(node) in (cst.List, cst.Tuple, cst.Set) and nesting < _MAX_NESTING:
            for index, element in enumerate(node.elements):
                found += refused_leaves(octx, element.value, there, f"{where}[{index}]", nesting + 1, caller=caller)
        elif _is_dict_call(octx, node, there) and nesting < _MAX_NESTING:
            for argument in node.args:
                if argument.keyword is not None:
                    found += refused_leaves(
                        octx, argument.value, there, f'{where}["{argument.keyword.value}"]', nesting + 1, caller=caller,
                    )
                elif not argument.star:
                    found += refused_leaves(octx, argument.value, there, where, nesting + 1, copied=True, caller=caller)
        elif not copied:
            kinds.append(classify(origin))
    refused = next((kind for kind in kinds if kind is not None), None)
    if refused is not None:
        found.append(Leaf(where, expr, ctx, refused, all(kind == refused for kind in kinds)))
    return found


def classify(origin: Origin) -> Optional[Refused]:
    """The refused kind of the value an origin builds, or None when it loads or is not known."""
    node, there, octx = origin.node, origin.place.stack, origin.place.context
    if type(node) is cst.BinaryOperation:
        return _arithmetic(node, there, octx)
    if type(node) is not cst.Call:
        return None
    name = octx.qualified_name(node.func, there) or ""
    if not name and type(node.func) is cst.Name and node.func.value in _BUILTINS:
        name = node.func.value  # a builtin: no import names it
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name in _NUMPY_SCALARS:
        given_axis = any(argument.keyword is not None and argument.keyword.value in _AXIS_KEYWORDS for argument in node.args)
        return NUMPY_ARRAY if given_axis else NUMPY_SCALAR
    if name in _NUMPY_ARRAYS or name in _NUMPY_ELEMENTWISE:
        return NUMPY_ARRAY
    method = semantics.method_name(node)
    if method == "numpy" and not node.args:
        return NUMPY_ARRAY  # `outputs.cpu().numpy()`
    if method == "astype" and type(node.func) is cst.Attribute:
        # A tensor has no `astype`: the receiver is a numpy value (`np.sin(x).astype("float64")`), and so is the result.
        receiver = Values.of(octx).origins(node.func.value, there)
        if receiver and all(classify(origin) in (NUMPY_ARRAY, NUMPY_SCALAR) for origin in receiver):
            return NUMPY_ARRAY
    if method == "parse_args" and type(node.func) is cst.Attribute:
        parsers = Values.of(octx).origins(node.func.value, there)
        if parsers and all(
            type(parser.node) is cst.Call and parser.place.context.qualified_name(parser.node.func, parser.place.stack) in _ARGUMENT_PARSERS
            for parser in parsers
        ):
            return NAMESPACE
        return None
    for callee in Values.of(octx).origins(node.func, there):
        if type(callee.node) is cst.ClassDef and not names_module_class(callee):  # a Module is TL502's
            return project_class_instance(callee.node.name.value)
    return None


def _arithmetic(node: cst.BinaryOperation, there, octx: "FileContext") -> Optional[Refused]:
    """`Path(root) / "best.pt"` is a Path; numpy values with numpy values or numbers give numpy values
    (`np.float64(3) / 4`, `correct / np.sum(counts)`); anything else (a tensor operand) is not known."""
    sides = []
    for side in (node.left, node.right):
        if type(side) in (cst.Integer, cst.Float):
            sides.append("number")
            continue
        origins = Values.of(octx).origins(side, there)
        kinds = {classify(origin) if type(origin.node) not in (cst.Integer, cst.Float) else "number" for origin in origins}
        sides.append(kinds.pop() if len(kinds) == 1 else None)
    if type(node.operator) is cst.Divide and sides[0] is PATH:
        return PATH
    if None in sides or PATH in sides:
        return None
    if NUMPY_ARRAY in sides:
        return NUMPY_ARRAY
    return NUMPY_SCALAR if NUMPY_SCALAR in sides else None


def allow_listed_nearby(ctx: "FileContext", names: Tuple[str, ...]) -> bool:
    """A file near this one calls `safe_globals`/`add_safe_globals` and names one of `names`: a file next to it (the
    script that loads what this one saves), or in the folder of a project module it imports (a project's own
    `load()` wrapper that allow-lists numpy's `_reconstruct` in `utils/other.py`, imported as `from .utils import
    load`). Each file read is recorded with the cached result."""
    patterns = [re.compile(rb"\b" + re.escape(name.encode()) + rb"\b") for name in names]

    def allow_lists(data: bytes) -> bool:
        return b"safe_globals" in data and any(pattern.search(data) for pattern in patterns)

    if not ctx.filename:
        return False
    if PROJECT.neighbours_hold(ctx.filename, allow_lists):
        return True
    folders = set()
    for module in sorted(ctx.file_text.imported_modules):
        located = PROJECT.locate(ctx.filename, module)
        if located is None or os.path.dirname(located[0]) in folders:
            continue
        folders.add(os.path.dirname(located[0]))
        read = PROJECT.read(located[0])
        if (read is not None and allow_lists(read[0])) or PROJECT.neighbours_hold(located[0], allow_lists):
            return True
    return False


def _annotated(origin: Origin) -> Optional[Refused]:
    """The refused kind a parameter's annotation declares (`args: argparse.Namespace`, `root: Path`)."""
    param = _parameter(origin)
    if param is None or param.annotation is None:
        return None
    octx = origin.place.context
    name = octx.qualified_name(param.annotation.annotation, origin.place.scopes)
    return _BY_NAME.get(name or "") if name in _ANNOTATED else None


def _parameter(origin: Origin) -> Optional[cst.Param]:
    """The parameter of a module-level function an opaque origin names."""
    function = origin.place.scopes[-1]
    if type(origin.node) is not cst.Name or len(origin.place.scopes) != 2 or type(function) is not cst.FunctionDef:
        return None
    params = function.params
    every = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    return next((param for param in every if param.name.value == origin.node.value), None)


def _passed_for(
    origin: Origin, caller: Optional[Caller] = None,
) -> Optional[List[Tuple["FileContext", cst.BaseExpression, Tuple[cst.CSTNode, ...]]]]:
    """For a parameter of a module-level function, the argument each call of the function passes for it, with the
    call's file and stack: the one `caller` when the function is the one it runs, else the calls in the function's
    file; None when the function is used otherwise than called by name, or a call passes `*args` or `**kwargs` or
    leaves the parameter to its default (what it then holds is not the caller's)."""
    param = _parameter(origin)
    if param is None:
        return None
    function = origin.place.scopes[-1]
    octx = origin.place.context
    if caller is not None and caller.function is function:
        given = argument_for(caller.call, function, param.name.value)
        return [(caller.context, given, caller.stack)] if given is not None else None
    # The value model's own index of the calls of each name, with their stacks: one walk per file.
    calls = Values.of(octx).calls_by_name(function.name.value)
    if not calls:
        return None
    given = [argument_for(call, function, param.name.value) for call, _ in calls]
    if any(argument is None for argument in given):
        return None
    return [(octx, argument, stack) for argument, (_, stack) in zip(given, calls)]


class _StacksTo(cst.CSTVisitor):
    """The nodes from the module down to each of `targets`, as the engine's stack holds them while it visits it."""

    def __init__(self, targets: Sequence[cst.CSTNode]):
        self.targets = {id(target) for target in targets}
        self.stack: List[cst.CSTNode] = []
        self.found: dict = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        if id(node) in self.targets:
            self.found[id(node)] = tuple(self.stack)
        return len(self.found) < len(self.targets)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()


def stacks_to(module: cst.Module, targets: Sequence[cst.CSTNode]) -> dict:
    """`id(target)` -> the stack down to it, for each of `targets` in `module` (`(module,)` for one not found)."""
    finder = _StacksTo(targets)
    module.visit(finder)
    return {id(target): finder.found.get(id(target), (module,)) for target in targets}


def _is_dict_call(ctx: "FileContext", call: cst.CSTNode, stack) -> bool:
    if type(call) is not cst.Call:
        return False
    return ctx.qualified_name(call.func, stack) in ("dict", "builtins.dict") or (
        type(call.func) is cst.Name and call.func.value == "dict"
    )


def _key(key: cst.BaseExpression) -> str:
    if isinstance(key, cst.SimpleString):
        return f'["{key.evaluated_value}"]'
    if isinstance(key, cst.Integer):
        return f"[{key.value}]"
    return "[...]"


# Methods of torch's modules and optimizers that tensors, containers and numbers lack: a loaded value they are called
# on, or one called like a function, was pickled whole, and the weights-only unpickler refuses its class
# (`Unsupported global: GLOBAL torch.nn.modules.linear.Linear`, observed on torch 2.13).
_WHOLE_OBJECT_METHODS = MODULE_ONLY_METHODS | {"state_dict", "load_state_dict", "zero_grad"}
# Calls that give back the same kind of value, a module for a module and a tensor for a tensor (`ckpt["model"].float()`),
# and `get`, an item of the loaded dict.
_SAME_KIND = frozenset({"float", "half", "double", "bfloat16", "to", "cuda", "cpu", "get"})
# Tests of what a value is: code that handles a whole module and a state dict alike (`isinstance(ckpt, nn.Module)`).
_KIND_TESTS = frozenset({"isinstance", "hasattr", "type", "callable"})
_MODULE = "torch.nn.Module"
# How many names the loaded value may pass through (`ckpt = torch.load(...)`, `model = ckpt["model"].float()`).
_MAX_NAMES = 2


def whole_object_use(ctx: "FileContext", load: cst.Call, stack: Sequence[cst.CSTNode]) -> Optional[cst.CSTNode]:
    """The code that uses what `load` (a `torch.load` call, innermost of `stack`) returns, or an item of it, as a whole
    module (`model.eval()`, `ckpt["model"].float().state_dict()`, `net(x)`), in the scope of the load, in the methods
    of its class (`self.ckpt = torch.load(...)`) or, one call deep, in a function of the project it is handed to: a file
    that holds one was written by `torch.save(model)`, which `weights_only=True` refuses to load. None when nothing
    shows it, or when the scope tests what a name holding it holds (`isinstance(ckpt, nn.Module)`: code for either
    kind)."""
    answers = ctx.shared(_Reads).answers  # TL501 and TL502 both ask of each load
    if id(load) not in answers:
        answers[id(load)] = _whole_object_use(ctx, load, stack)
    return answers[id(load)]


def _whole_object_use(ctx: "FileContext", load: cst.Call, stack: Sequence[cst.CSTNode]) -> Optional[cst.CSTNode]:
    found = _climb(load, stack)
    if type(found) is cst.Attribute:
        return _attribute_use(ctx, found, stack)
    if type(found) is _Passed:
        return _passed_use(ctx, found, stack)
    if type(found) is not cst.Name:
        return found
    scope = next((node for node in reversed(stack[:-1]) if isinstance(node, (cst.FunctionDef, cst.Lambda))), ctx.module)
    if isinstance(scope, cst.Lambda):
        return None
    # name -> the statement binding the loaded value (or what `_climb` reached from it) to the name
    around = tuple(stack[:stack.index(scope)]) if scope is not ctx.module else ()
    return _name_use(ctx, scope, around, {found.value: _binding_statement(stack)}, passes=True)


def _name_use(
    ctx: "FileContext", scope: cst.CSTNode, around: Tuple[cst.CSTNode, ...], names: Dict[str, Optional[cst.CSTNode]],
    passes: bool,
) -> Optional[cst.CSTNode]:
    """The first use as a whole module, in `scope` (with `around`, the nodes outside it), of the names `names` binds
    (each to the statement binding the loaded value to it, None for a parameter holding it), where only those bindings
    reach; `passes`: a name handed to a function of the project is followed into it, one call deep."""
    reads = ctx.shared(_Reads).of(scope, around)
    flow = Values.of(ctx).flow(scope)
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in reads.tested:
            return None
        asserted = reads.asserted.get(name)
        if asserted is not None and [ctx.qualified_name(each, asserted[1]) for each in asserted[0]] == [_MODULE]:
            return asserted[1][-1]  # `assert isinstance(src_module, torch.nn.Module)`
        tracked = set(map(id, names.values()))
        for read, around in reads.names.get(name, ()):
            reaching = flow.reaching(name, flow.position(around))
            if not reaching or any(id(binding.statement) not in tracked for binding in reaching):
                continue
            used = _climb(read, around)
            if type(used) is cst.Call:
                return used
            if type(used) is _Passed and passes:
                used = _passed_use(ctx, used, around)
                if used is not None:
                    return used
            if type(used) is cst.Name and len(names) < _MAX_NAMES and used.value not in names:
                names[used.value] = _binding_statement(around)
                pending.append(used.value)
    return None


class _Passed(NamedTuple):
    """A loaded value handed to a call as its argument `arg`."""

    call: cst.Call
    arg: cst.Arg


def _passed_use(ctx: "FileContext", passed: _Passed, stack: Sequence[cst.CSTNode]) -> Optional[cst.CSTNode]:
    """For a loaded value handed to a function of the file or the project (`extract_scales(ckpt["model"])`,
    `copy_params_and_buffers(src_module=data["net"], ...)`): its use as a whole module in that function, through the
    parameter that takes it and not rebound there; None for a method or anything else."""
    call, arg = passed
    origins = Values.of(ctx).origins(call.func, stack)
    if arg.star or len(origins) != 1 or type(origins[0].node) is not cst.FunctionDef:
        return None
    function, there = origins[0].node, origins[0].place
    if type(there.scopes[-1]) is cst.ClassDef:
        return None  # a method: what its parameters take depends on how it is called
    params = function.params
    if arg.keyword is not None:
        taking = [param for param in (*params.posonly_params, *params.params, *params.kwonly_params) if param.name.value == arg.keyword.value]
    else:
        index = next(index for index, each in enumerate(each for each in call.args if each.keyword is None) if each is arg)
        positional = [*params.posonly_params, *params.params]
        taking = positional[index:index + 1]
    if not taking:
        return None
    return _name_use(there.context, function, there.scopes, {taking[0].name.value: None}, passes=False)


def _attribute_use(ctx: "FileContext", target: cst.Attribute, stack: Sequence[cst.CSTNode]) -> Optional[cst.CSTNode]:
    """For `self.ckpt = torch.load(...)` in a method: the first use as a whole module of `self.ckpt` in any method of
    the class (a trainer that loads in `__init__` and resumes in `train`), when no other statement assigns it."""
    if type(target.value) is not cst.Name or target.value.value != "self":
        return None
    methods = [index for index, node in enumerate(stack) if type(node) is cst.FunctionDef]
    if not methods or methods[-1] < 2 or type(stack[methods[-1] - 2]) is not cst.ClassDef:
        return None
    reads = ctx.shared(_Reads).of(stack[methods[-1] - 2], tuple(stack[:methods[-1] - 2]))
    name = target.attr.value
    if name in reads.tested or reads.assigned.get(name) != 1:
        return None
    for read, around in reads.attributes.get(name, ()):
        used = _climb(read, around)
        if type(used) is cst.Call:
            return used
    return None


def _climb(node: cst.CSTNode, stack: Sequence[cst.CSTNode]):
    """From `node` (innermost of `stack`) up through subscripts and same-kind calls: the call that uses the value as a
    whole module, the name or attribute an assignment binds it to, the call it is handed to (`_Passed`), or None."""
    depth = len(stack) - 2
    while depth >= 0:
        parent = stack[depth]
        if type(parent) is cst.Subscript and parent.value is node:
            node = parent
        elif type(parent) is cst.Attribute and parent.value is node:
            call = stack[depth - 1] if depth > 0 else None
            if type(call) is not cst.Call or call.func is not parent:
                return None
            if parent.attr.value in _WHOLE_OBJECT_METHODS:
                return call
            if parent.attr.value not in _SAME_KIND:
                return None
            node, depth = call, depth - 1
        elif type(parent) is cst.Call:
            return parent if parent.func is node else None
        elif type(parent) is cst.Arg and parent.value is node and depth > 0 and type(stack[depth - 1]) is cst.Call:
            return _Passed(stack[depth - 1], parent)
        elif type(parent) is cst.Assign and parent.value is node and len(parent.targets) == 1:
            target = parent.targets[0].target
            return target if type(target) in (cst.Name, cst.Attribute) else None
        elif type(parent) is cst.AnnAssign and parent.value is node and type(parent.target) in (cst.Name, cst.Attribute):
            return parent.target
        else:
            return None
        depth -= 1
    return None


class _ScopeReads(NamedTuple):
    # name -> each read of it (not an assignment's target), in source order, with the nodes from the scope down to it
    names: Dict[str, List[Tuple[cst.Name, Tuple[cst.CSTNode, ...]]]]
    # the same for `self.<name>` (in a class: its methods)
    attributes: Dict[str, List[Tuple[cst.Attribute, Tuple[cst.CSTNode, ...]]]]
    # how many statements assign `self.<name>`
    assigned: Dict[str, int]
    # names and `self` attributes (by name) a kind test reads (`isinstance(ckpt, nn.Module)`)
    tested: Set[str]
    # name -> the classes of the `isinstance(name, ...)` an `assert` makes, with the nodes from the module down to that
    # call: what the code requires the name to be
    asserted: Dict[str, Tuple[List[cst.BaseExpression], Tuple[cst.CSTNode, ...]]]


class _Reads:
    """Per file, for each scope asked about (a function, the module, or a class with its methods): the reads of each
    name and `self` attribute, in one walk of the scope, so that every load of the scope is answered from it (a
    script with a hundred module-level loads walks its module once); and the answer for each load asked about."""

    def __init__(self, ctx: "FileContext"):
        self._scopes: Dict[int, _ScopeReads] = {}
        # id of a `torch.load` call -> `whole_object_use`'s answer
        self.answers: Dict[int, Optional[cst.CSTNode]] = {}

    def of(self, scope: cst.CSTNode, around: Tuple[cst.CSTNode, ...]) -> _ScopeReads:
        """The reads in `scope`, each with the nodes from the module down to it (`around`: those outside `scope`)."""
        found = self._scopes.get(id(scope))
        if found is None:
            walker = _ReadsWalk(scope, around)
            scope.visit(walker)
            found = self._scopes[id(scope)] = _ScopeReads(
                walker.names, walker.attributes, walker.assigned, walker.tested, walker.asserted,
            )
        return found


class _ReadsWalk(cst.CSTVisitor):
    """The walk `_Reads` makes: a function's or the module's own code (not the functions and classes it defines), a
    class's methods."""

    def __init__(self, scope: cst.CSTNode, around: Tuple[cst.CSTNode, ...]):
        self.scope = scope
        self.in_class = type(scope) is cst.ClassDef
        self.stack: List[cst.CSTNode] = list(around)
        self.names: Dict[str, list] = {}
        self.attributes: Dict[str, list] = {}
        self.assigned: Dict[str, int] = {}
        self.tested: Set[str] = set()
        self.asserted: Dict[str, Tuple[List[cst.BaseExpression], Tuple[cst.CSTNode, ...]]] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        if node is not self.scope and isinstance(node, (cst.ClassDef, cst.Lambda)):
            return False
        if node is not self.scope and type(node) is cst.FunctionDef and not (
            self.in_class and self.stack[-2] is self.scope.body
        ):
            return False  # a method of the class is walked; other functions a scope defines are not
        node_type = type(node)
        if node_type is cst.Call and type(node.func) is cst.Name and node.func.value in _KIND_TESTS:
            parent = self.stack[-2] if len(self.stack) > 1 else None
            tested = isinstance_test(node) if type(parent) is cst.Assert and parent.test is node else None
            if tested is not None and type(tested[0]) is cst.Name:
                self.asserted.setdefault(tested[0].value, (tested[1], tuple(self.stack)))
                return True
            for arg in node.args:
                if type(arg.value) is cst.Name:
                    self.tested.add(arg.value.value)
                elif _is_self_attribute(arg.value):
                    self.tested.add(arg.value.attr.value)
        elif node_type is cst.Name and not self.in_class and not _is_target(self.stack):
            self.names.setdefault(node.value, []).append((node, tuple(self.stack)))
        elif node_type is cst.Attribute and self.in_class and _is_self_attribute(node):
            if _is_target(self.stack):
                self.assigned[node.attr.value] = self.assigned.get(node.attr.value, 0) + 1
            else:
                self.attributes.setdefault(node.attr.value, []).append((node, tuple(self.stack)))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()


def _is_self_attribute(node: cst.CSTNode) -> bool:
    return type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self"


def _binding_statement(stack: Sequence[cst.CSTNode]) -> cst.CSTNode:
    """The innermost assignment of `stack`, whose value `_climb` reached."""
    return next(node for node in reversed(stack) if isinstance(node, (cst.Assign, cst.AnnAssign)))


def _is_target(stack: Sequence[cst.CSTNode]) -> bool:
    """The innermost node of `stack` is a name (or `self.x`) an assignment or a loop binds."""
    name, parent = stack[-1], stack[-2] if len(stack) > 1 else None
    return (
        type(parent) is cst.AssignTarget and parent.target is name
        or type(parent) in (cst.AugAssign, cst.AnnAssign, cst.For) and parent.target is name
    )
