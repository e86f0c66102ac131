"""Models as the rules mean them: values built from a user `nn.Module` subclass, `nn.Sequential` or a model builder,
or names on which `.eval()`, `.train()` or `.parameters()` is called, and the names holding the same module as one
(`Models`); a model picked by name from a
package of models (`models.__dict__[args.model]()`), and a name a torch wrapper module is assigned to
(`net = nn.DataParallel(net)`), which hold a whole module whatever the value model can say of what they wrap."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.losses import CRITERION_NAME, is_loss_module
from torchlint.analysis.modules import ModuleClasses, is_loss_class
from torchlint.analysis.project import PROJECT
from torchlint.analysis.values import IDENTITY_WRAPPERS, MODULE_WRAPPERS, RETURNING_SELF, SEQUENTIAL, Place, Values
from torchlint.engine.scopes import dotted_name, scope_nodes_of

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

_MODEL_BUILDERS = ("torchvision.models.", "timm.create_model", "torch.hub.load")
_MODULE_BASES = ("LightningModule", "PreTrainedModel")
_COMPILE = frozenset({"torch.compile"})
# Readers of a saved file: what they return is whatever was saved, a whole model as well as a `state_dict`, so the
# call tells nothing and what the program does with the value decides (`model = torch.load(path)`, then `model.eval()`).
_LOADERS = frozenset({"torch.load", "torch.serialization.load", "torch.jit.load", "torch.jit._serialization.load"})
# How many `from .x import *` steps `_holds_module_classes` follows from a package into its modules.
_STAR_DEPTH = 2


class Models:
    """What the spec calls a model: built from a user `nn.Module` subclass, `nn.Sequential` or a
    model builder, or a name on which `.eval()`, `.train()` or `.parameters()` is called.

    Fed from the walk (`observe_class`, `observe_call`); ask `is_model` in `finish()`.
    """

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.classes: Set[str] = set()
        self.mode_receivers: Set[str] = set()
        # Each receiver of `.eval()`/`.train()`/`.parameters()` with the stack at its call, and (asked on first need,
        # in `finish`) the ids of the constructions it may hold (`_mode_receiver_origins`).
        self._receivers: List[Tuple[cst.BaseExpression, Tuple[cst.CSTNode, ...]]] = []
        self._receiver_origins: Optional[Set[int]] = None

    def observe_class(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
            name = self.ctx.qualified_name(value) or ""
            local = dotted_name(value)
            torch_module = name.startswith("torch.nn.") and not is_loss_module(name)
            if torch_module or name.endswith(_MODULE_BASES) or local in self.classes:
                self.classes.add(node.name.value)
                return

    def observe_call(self, node: cst.Call) -> None:
        if semantics.method_name(node) in ("eval", "train", "parameters"):
            receiver = semantics.receiver(node)
            name = dotted_name(receiver)
            if name:
                self.mode_receivers.add(name)
                self._receivers.append((receiver, tuple(self.ctx.stack)))

    def is_model(self, expr: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
        name = dotted_name(expr)
        if name is None:
            return False
        terminal = semantics.terminal_name(expr) or ""
        if CRITERION_NAME.match(terminal.lower()):
            return False
        if built_as_model(expr, self.ctx, stack):
            return True
        verdict = self._assigned_as_model(expr, stack, frozenset())
        if verdict is not None:
            return verdict
        return name in self.mode_receivers or self._holds_a_mode_receiver(expr, stack)

    def _holds_a_mode_receiver(self, expr: cst.BaseExpression, stack) -> bool:
        """`expr` may hold a value built by a call that a receiver of `.eval()`/`.train()`/`.parameters()` holds too:
        another name for the same module (`parallel_model = model.cuda()` after `model = torch.load(path)`, then
        `model.eval()` and `parallel_model(data)`)."""
        if self._receiver_origins is None:
            values = Values.of(self.ctx)
            self._receiver_origins = {
                id(origin.node) for receiver, at in self._receivers for origin in values.origins(receiver, at)
                if type(origin.node) is cst.Call and not origin.applied and not origin.opaque
            }
        if not self._receiver_origins:
            return False
        return any(
            type(origin.node) is cst.Call and not origin.applied and not origin.opaque and id(origin.node) in self._receiver_origins
            for origin in Values.of(self.ctx).origins(expr, stack)
        )

    def _assigned_as_model(self, expr: cst.BaseExpression, stack, seen: frozenset) -> Optional[bool]:
        """What the latest assignment of `expr` that tells says (`_built_as_model`), leaving out those in `seen`
        (the wrapper whose argument is asked of: `model = nn.DataParallel(model)`); None when none tells."""
        for value in reversed(self.ctx.assigned_values(expr, stack)):
            if id(value) in seen:
                continue
            verdict = self._built_as_model(value, stack, seen)
            if verdict is not None:
                return verdict
        return None

    def _built_as_model(self, value: cst.BaseExpression, stack, seen: frozenset = frozenset()) -> Optional[bool]:
        """True/False when the assigned value tells, None to look at an earlier assignment (`model = model.to(device)`)."""
        if not isinstance(value, cst.Call):
            return None
        if isinstance(value.func, cst.Name) and value.func.value in self.classes:
            return True
        if semantics.method_name(value) in RETURNING_SELF:
            # `model.cuda()` is what `model` was: the call tells nothing, even where `model` also names a module the
            # file imports (`import model`, then `model = torch.load(path)`), whose attribute it would resolve to.
            return None
        qualified = self.ctx.qualified_name(value.func, stack)
        if qualified in IDENTITY_WRAPPERS:  # `nn.DataParallel(model)`, `torch.compile(Net())`: the model it wraps
            wrapped = semantics.positional(value, 0) or semantics.keyword(value, "module")
            if wrapped is None:
                verdict = None
            elif type(wrapped.value) is cst.Name:
                # `model = nn.Embedding(10, 4)` then `model = nn.DataParallel(model)`: a layer still, as before it.
                verdict = self._assigned_as_model(wrapped.value, stack, seen | {id(value)})
            else:
                verdict = self._built_as_model(wrapped.value, stack, seen)
            # A `DataParallel` of something unknown is a module still (of a loss, not a model).
            return True if verdict is None and qualified in MODULE_WRAPPERS else verdict
        if picked_from_model_package(value, self.ctx, stack) is not None:
            return True
        if qualified is not None:
            if is_loss_module(qualified):
                return False
            if qualified in _LOADERS:
                return None
            if qualified == "torch.nn.Sequential" or qualified.startswith(_MODEL_BUILDERS) or qualified.endswith(".from_pretrained"):
                return True
            # A function of another project file the value model could not follow to what it returns (SlowFast's
            # `model = build_model(cfg)`, a registry lookup): the call does not tell, what the code does with it may.
            return None if PROJECT.holds(self.ctx.filename, qualified) else False
        if semantics.method_name(value) == "from_pretrained":
            return True
        return None


def built_as_model(expr: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    """Some value `expr` may hold is built as a model (a Module class of the file or of a project file, a container
    or a model builder; not a torch layer or loss), followed through parameters, `self.x` and imports."""
    for origin in Values.of(ctx).origins(expr, stack):
        if type(origin.node) is cst.Call and not origin.applied and not origin.opaque:
            built = ModuleClasses.of(origin.place.context).builds_module(origin.node, origin.place.stack)
            if built is not None and not is_loss_class(built) and (not built.startswith("torch.nn.") or built in SEQUENTIAL):
                return True
    return False


def picked_from_model_package(call: cst.Call, ctx: "FileContext", stack) -> Optional[str]:
    """The import path of the package of models `call` picks a model from by name and builds, or None:
    `models.__dict__[args.model]()` (and `vars(models)[name]()`), where `models` is `torchvision.models` or a project
    package or module of Module classes (defined in it, or in the modules it star-imports: mixup-cifar10's
    `models/__init__.py` is `from .resnet import *` lines). The name is the program's choice among the package's
    models; any other call of an unknown callable is not taken for a model."""
    func = call.func
    if type(func) is not cst.Subscript or len(func.slice) != 1 or not isinstance(func.slice[0].slice, cst.Index):
        return None
    namespace = func.value
    if type(namespace) is cst.Attribute and namespace.attr.value == "__dict__":
        package = namespace.value
    elif (
        type(namespace) is cst.Call and type(namespace.func) is cst.Name and namespace.func.value == "vars"
        and len(namespace.args) == 1 and not namespace.args[0].keyword and not namespace.args[0].star
    ):
        package = namespace.args[0].value
    else:
        return None
    if type(package) not in (cst.Name, cst.Attribute):
        return None
    path = Values.of(ctx).import_path(package, scope_nodes_of(stack) or [ctx.module])
    if path is None:
        return None
    if path == "torchvision.models" or path.startswith("torchvision.models."):
        return path
    found = PROJECT.resolve(ctx.filename, path, ctx.config)
    if found is None or found[1]:
        return None  # not a project module, or a name inside one
    return path if _holds_module_classes(found[0].context, _STAR_DEPTH) else None


def _holds_module_classes(package: "FileContext", depth: int) -> bool:
    """The module defines a Module class at its top level, or star-imports a project module that does."""
    classes = ModuleClasses.of(package)
    if any(
        type(statement) is cst.ClassDef and classes.module_class(statement, (package.module,)) is not None
        for statement in package.module.body
    ):
        return True
    if depth == 0:
        return False
    for imported in package.scopes.star_imports():
        found = PROJECT.resolve(package.filename, imported, package.config)
        if found is not None and not found[1] and _holds_module_classes(found[0].context, depth - 1):
            return True
    return False


def assigned_a_module_wrapper(name: cst.BaseExpression, ctx: "FileContext", stack) -> Optional[str]:
    """The torch wrapper module (`DataParallel`) an assignment of `name` that reaches `stack` builds, or None: after
    `net = nn.DataParallel(net)` the name holds a Module whatever it wraps, and so it does after `net =
    torch.compile(net)` (a compiled module is an `OptimizedModule`, a Module too; only a compiled function is a
    function). The value model sees through such wrappers to the module they wrap, so the assignments are read as
    written."""
    if type(name) is not cst.Name:
        return None
    values = Values.of(ctx)
    return _wrapper_bound(name, values, values.place(stack), _COMPILE_DEPTH)


# How many `torch.compile` assignments `_wrapper_bound` follows back to the wrapper they compile.
_COMPILE_DEPTH = 3


def _wrapper_bound(name: cst.Name, values: Values, place: Place, depth: int) -> Optional[str]:
    ctx = values.ctx
    found = values.bindings(name, place)
    if found is None:
        return None
    scope, bindings = found
    scopes = place.scopes[: place.scopes.index(scope) + 1] if scope in place.scopes else (ctx.module,)
    for binding in bindings:
        value = binding.value
        if type(value) is not cst.Call or binding.element:
            continue
        if ctx.qualified_name_in(value.func, MODULE_WRAPPERS, scopes):
            return semantics.terminal_name(value.func)
        if depth and binding.statement is not None and ctx.qualified_name_in(value.func, _COMPILE, scopes):
            # `net = torch.compile(net)` of a name that holds a wrapper where it is compiled, or of a wrapper built
            # in place (`torch.compile(nn.DataParallel(net))`).
            compiled = semantics.positional(value, 0) or semantics.keyword(value, "model")
            compiled = compiled.value if compiled is not None else None
            if type(compiled) is cst.Call and ctx.qualified_name_in(compiled.func, MODULE_WRAPPERS, scopes):
                return semantics.terminal_name(compiled.func)
            if type(compiled) is cst.Name:
                wrapper = _wrapper_bound(compiled, values, Place(ctx, scopes, binding.statement), depth - 1)
                if wrapper is not None:
                    return wrapper
    return None
