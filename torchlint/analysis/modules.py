"""`nn.Module` classes: which classes are Modules, where a method of one is, what builds a module.

The model-definition rules (TL7xx) judge code inside Module classes. A class is a Module
when one of its bases is torch's `nn.Module`, a torch layer or container (`nn.Linear`,
`nn.Sequential`), Lightning's `LightningModule`, or a class that is itself a Module: of
the same file or of a project file its imports name (followed by the value model into
that file, `analysis/project.py`), any number of levels up. A base from any other
library is not known to be a Module, so its subclasses are not judged.

A method's place in the class matters to these rules: `forward` and the methods it calls
through `self` (`forward_methods`, from the file's call graph) run on every call of the
model; `__init__` runs once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.summaries import no_module_class
from torchlint.analysis.values import Origin, Values, method_of
from torchlint.engine.scopes import SCOPE_TYPES, dotted_name, parameters, scope_nodes_of
from torchlint.engine.walk import walk, walk_visitor

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Capitalised names under torch.nn that are not Modules.
_NOT_MODULES = frozenset({"Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer", "PackedSequence"})
_NOT_MODULE_PACKAGES = frozenset({"utils", "functional", "init", "parameter"})
MODULE_ROOTS = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
# Methods `nn.Module` has that tensors, optimizers, containers and numbers lack: a value they are called on is a module.
MODULE_ONLY_METHODS = frozenset({
    "eval", "train", "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
    "modules", "named_modules", "register_buffer", "register_parameter", "add_module", "get_submodule", "forward",
})
# Containers that register what they hold.
REGISTERING_CONTAINERS = frozenset({
    "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.ParameterList", "torch.nn.ParameterDict",
    "torch.nn.Sequential", "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.ModuleDict",
    "torch.nn.modules.container.ParameterList", "torch.nn.modules.container.ParameterDict",
    "torch.nn.modules.container.Sequential",
})
# Torch layers without parameters, buffers or a train/eval difference: a fresh one behaves like any other.
STATELESS_LAYERS = frozenset(
    f"torch.nn.{name}" for name in (
        "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "Hardtanh",
        "Hardswish", "Hardsigmoid", "Softplus", "Softsign", "Softmax", "LogSoftmax", "Softmax2d", "Softmin",
        "Tanhshrink", "Threshold", "LogSigmoid", "Hardshrink", "Softshrink", "GLU", "Flatten", "Unflatten",
        "Identity", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
        "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "Upsample",
        "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle",
        "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
        "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
        "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d", "CosineSimilarity",
        "PairwiseDistance", "Fold", "Unfold", "LocalResponseNorm",
    )
)
# The arguments through which a torch loss holds a tensor (`weight` and `pos_weight` buffers); a positional argument
# may be one of them too (`nn.CrossEntropyLoss(class_weights)`): at these positions in torch's signatures (2.13), and
# at any position for a loss not named here.
_LOSS_TENSOR_KEYWORDS = frozenset({"weight", "pos_weight"})
_LOSS_TENSOR_POSITIONS = {
    "BCELoss": (0,), "BCEWithLogitsLoss": (0, 4), "CrossEntropyLoss": (0,), "MultiLabelSoftMarginLoss": (0,),
    "MultiMarginLoss": (2,), "NLLLoss": (0,), "NLLLoss2d": (0,),
}
_LIGHTNING_PACKAGES = ("pytorch_lightning.", "lightning.")
# torchvision's model builders: `torchvision.models.resnet18`, `torchvision.models.detection.fasterrcnn_resnet50_fpn`
# (not the other names of its modules: `torchvision.models.inception.InceptionOutputs`).
_TORCHVISION_MODEL_PACKAGES = frozenset({"detection", "segmentation", "video", "quantization", "optical_flow"})
_TORCHVISION_NOT_BUILDERS = frozenset({"utils", "feature_extraction", "list_models", "get_model_weights", "get_weight", "get_model_builder"})
_MODEL_BUILDERS = ("torchvision.models.", "timm.create_model")


def is_torch_module_class(name: Optional[str]) -> bool:
    """`name` (a qualified name) is a Module class of torch (`torch.nn.Linear`, `torch.nn.modules.conv.Conv2d`) or
    Lightning's `LightningModule`."""
    if not name:
        return False
    if name.startswith(_LIGHTNING_PACKAGES) and name.endswith(".LightningModule"):
        return True
    parts = name.split(".")
    return (
        parts[:2] == ["torch", "nn"] and len(parts) >= 3 and parts[-1][:1].isupper()
        and parts[-1] not in _NOT_MODULES and _NOT_MODULE_PACKAGES.isdisjoint(parts[2:-1])
    )


def is_loss_class(name: Optional[str]) -> bool:
    return bool(name) and name.startswith("torch.nn.") and name.endswith("Loss")


@dataclass(frozen=True)
class ModuleClass:
    """A class known to be an `nn.Module`, with the file it is in and the scopes around its statement."""

    node: cst.ClassDef
    context: "FileContext"
    around: Tuple[cst.CSTNode, ...]

    def method(self, name: str) -> Optional[cst.FunctionDef]:
        return method_of(self.node, name)

    def methods(self) -> List[cst.FunctionDef]:
        return [statement for statement in self.node.body.body if type(statement) is cst.FunctionDef]

    def stack_of(self, method: cst.FunctionDef) -> Tuple[cst.CSTNode, ...]:
        """Where code in `method` is evaluated, for `qualified_name` and the value model."""
        return self.around + (self.node, method)

    def attributes(self) -> Dict[str, List[cst.BaseExpression]]:
        """`self.name = value` in any method: name -> the values, in source order."""
        return self.context.scopes.scope_of(self.node).attributes

    def assigning_method(self, value: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        return self.context.scopes.scope_of(self.node).attribute_methods.get(id(value))

    def module_bases(self) -> List["ModuleClass"]:
        """The bases that are Module classes of the file or of a project file."""
        return ModuleClasses.of(self.context).bases_of(self)

    def inherits(self, name: str) -> Optional[bool]:
        """Whether a base defines the method `name`: True when a Module base of the file or of the project does,
        None when a base is a torch layer or Lightning class (they define most methods), False otherwise."""
        unknown = any(
            is_torch_module_class(qualified) and qualified not in MODULE_ROOTS
            for qualified in (self.context.qualified_name(base.value, self.around) for base in self.node.bases)
        )
        for base in self.module_bases():
            inherited = True if base.method(name) is not None else base.inherits(name)
            if inherited:
                return True
            unknown = unknown or inherited is None
        return None if unknown else False


# A class's `__init__` and the call building the class (`CrossEntropyLoss2d(size_average=False)`).
_Building = Tuple[cst.FunctionDef, cst.Call]


class ModuleClasses:
    """One per file (`ModuleClasses.of(ctx)`): which of its classes are Modules, asked once each."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self._known: Dict[int, Optional[ModuleClass]] = {}
        self._bases: Dict[int, List[ModuleClass]] = {}
        self._enclosing: Dict[int, Optional[Tuple[ModuleClass, cst.FunctionDef]]] = {}
        self._forwards: Dict[int, Set[int]] = {}

    @classmethod
    def of(cls, ctx: "FileContext") -> "ModuleClasses":
        return ctx.shared(cls)

    def module_class(self, node: cst.ClassDef, around: Sequence[cst.CSTNode], seen: FrozenSet[int] = frozenset()) -> Optional[ModuleClass]:
        """`node` as a ModuleClass when it is one; `around` holds the scope nodes enclosing its statement."""
        if id(node) in self._known:
            return self._known[id(node)]
        if id(node) in seen:
            return None
        around = tuple(node for node in around if type(node) in SCOPE_TYPES)
        candidate = ModuleClass(node, self.ctx, around)
        found = None
        for base in node.bases:
            value = base.value.value if type(base.value) is cst.Subscript else base.value
            if is_torch_module_class(self.ctx.qualified_name(value, around)):
                found = candidate
                break
        if found is None and self._project_bases(candidate, seen | {id(node)}):
            found = candidate
        self._known[id(node)] = found
        return found

    def bases_of(self, module: ModuleClass) -> List[ModuleClass]:
        if id(module.node) not in self._bases:
            self._project_bases(module, frozenset({id(module.node)}))
        return self._bases.get(id(module.node), [])

    def _project_bases(self, module: ModuleClass, seen: FrozenSet[int]) -> List[ModuleClass]:
        found: List[ModuleClass] = []
        values = Values.of(self.ctx)
        for base in module.node.bases:
            value = base.value.value if type(base.value) is cst.Subscript else base.value
            if type(value) not in (cst.Name, cst.Attribute) or is_torch_module_class(self.ctx.qualified_name(value, module.around)):
                continue
            path = values.import_path(value, module.around)
            if path is not None and no_module_class(self.ctx, path, is_torch_module_class):
                continue  # the imported file's summary tells, without parsing it
            for origin in values.origins(value, module.around):
                if type(origin.node) is cst.ClassDef:
                    there = ModuleClasses.of(origin.place.context)
                    base_class = there.module_class(origin.node, origin.place.scopes, seen)
                    if base_class is not None:
                        found.append(base_class)
        self._bases[id(module.node)] = found
        return found

    def builds_stateless_module(
        self, call: cst.Call, stack: Sequence[cst.CSTNode], depth: int = 0, building: Optional[_Building] = None,
    ) -> bool:
        """`call` builds a module that holds no parameter and no buffer: a torch layer without any (`nn.ReLU()`), a
        torch loss given no weight (`nn.CrossEntropyLoss()`, `nn.NLLLoss(None)`: its `weight` buffer is None), or a
        stateless Module class of the file or of a project file (`builds_stateless_class`). `building`: `call` is in
        the `__init__` of a class being built by a known call, so a parameter of that `__init__` holds what the call
        passes (`nn.NLLLoss2d(weight)` in a class built with no `weight=`, whose default is None)."""
        built = self.builds_module(call, stack)
        if built in STATELESS_LAYERS:
            return True
        loss = built.rpartition(".")[2] if built is not None and built.startswith("torch.nn.") else None
        if is_loss_class(built) or loss in _LOSS_TENSOR_POSITIONS:
            positions = _LOSS_TENSOR_POSITIONS.get(loss)
            return not any(
                arg.star or (_may_take_tensor(arg, index, positions) and not self._given_none(arg.value, stack, building))
                for index, arg in enumerate(call.args)
            )
        return built == "class" and self._all_stateless(call, stack, depth + 1)

    def _given_none(self, value: cst.BaseExpression, stack: Sequence[cst.CSTNode], building: Optional[_Building]) -> bool:
        """`value` is None: written so, or a parameter of the `__init__` being built (never rebound) to which the
        building call passes None, or nothing where its default is None."""
        if type(value) is not cst.Name:
            return False
        if value.value == "None":
            return True
        if building is None:
            return False
        init, call = building
        values = Values.of(self.ctx)
        found = values.bindings(value, values.place(stack))
        if found is None or found[0] is not init or not found[1] or not all(
            binding.statement is None and binding.value is None for binding in found[1]
        ):
            return False
        given = _passed_to_init(call, init, value.value)
        return type(given) is cst.Name and given.value == "None"

    def builds_stateless_class(self, call: cst.Call, stack: Sequence[cst.CSTNode]) -> bool:
        """`call` builds a Module class of the file or of a project file that holds no parameter and no buffer
        (`stateless`): a list of fresh ones loses nothing when it is not registered."""
        return self._all_stateless(call, stack, 0)

    def _all_stateless(self, call: cst.Call, stack, depth: int) -> bool:
        """Every class `call` may build is a stateless Module class (`stateless`), and nothing built is passed to it
        (`Scale(nn.Parameter(...))` hands it state through a parameter)."""
        if any(type(arg.value) in (cst.Call, cst.Lambda) for arg in call.args):
            return False
        classes = [origin for origin in Values.of(self.ctx).origins(call.func, stack) if type(origin.node) is cst.ClassDef]
        if not classes:
            return False
        for origin in classes:
            there = ModuleClasses.of(origin.place.context)
            module = there.module_class(origin.node, origin.place.scopes)
            if module is None or not there.stateless(module, depth, call):
                return False
        return True

    def stateless(self, module: ModuleClass, depth: int = 0, built_by: Optional[cst.Call] = None) -> bool:
        """The class holds no parameter or buffer, `_STATELESS_DEPTH` classes deep: its bases are `nn.Module` or such
        classes, it registers nothing by name (`register_buffer`, `add_module`, ...), and what its methods assign to
        `self` is a stateless torch layer, such a class, a literal or arithmetic, or a parameter of the method that
        the class never calls (`self.kernel_size = kernel_size`). Anything else may hold state. `built_by`: the call
        building the class, whose arguments its `__init__`'s parameters hold (a loss given its `weight` parameter
        holds no tensor when the call gives None)."""
        if depth > _STATELESS_DEPTH:
            return False
        for base in module.node.bases:
            qualified = self.ctx.qualified_name(base.value, module.around)
            if is_torch_module_class(qualified) and qualified not in MODULE_ROOTS:
                return False
        if not all(ModuleClasses.of(base.context).stateless(base, depth + 1) for base in module.module_bases()):
            return False
        found = _SelfUses()
        walk_visitor(module.node.body, found)
        if found.registers or found.unpacked:
            return False
        init = module.method("__init__")
        for name, values in module.attributes().items():
            for value in values:
                method = module.assigning_method(value)
                stack = module.stack_of(method) if method is not None else module.around + (module.node,)
                building = (init, built_by) if method is not None and method is init and built_by is not None else None
                if not self._stateless_value(value, stack, name in found.called, depth, building):
                    return False
        return True

    def _stateless_value(self, value: cst.BaseExpression, stack, called: bool, depth: int, building: Optional[_Building]) -> bool:
        if not syntax.is_missing(syntax.literal(value)) or type(value) in _ARITHMETIC:
            return True
        if type(value) is cst.Call:
            return self.builds_stateless_module(value, stack, depth, building)
        if _names_torch_function(self.ctx.qualified_name(value, stack) if type(value) in (cst.Name, cst.Attribute) else None):
            return True  # `self.loss = F.binary_cross_entropy`: a function as a value holds no tensor
        if type(value) is cst.Name and not called:
            values = Values.of(self.ctx)
            found = values.bindings(value, values.place(stack))
            # A parameter of the method (whatever its calls pass): were it a module, the class would call it.
            return found is not None and type(found[0]) is cst.FunctionDef and bool(found[1]) and all(
                binding.statement is None and binding.value is None for binding in found[1]
            )
        return False

    def enclosing(self, stack: Sequence[cst.CSTNode]) -> Optional[Tuple[ModuleClass, cst.FunctionDef]]:
        """The Module class and its method (a def directly in the class body) whose code holds the innermost point
        of `stack`, also inside functions nested in the method."""
        # Asked for most nodes of a file: the answer depends only on the innermost scope around the point (a scope
        # node last on `stack` is not in its own code), a few nodes up from it.
        for index in range(len(stack) - 2, -1, -1):
            if type(stack[index]) in SCOPE_TYPES:
                key = id(stack[index])
                if key not in self._enclosing:
                    self._enclosing[key] = self._enclosing_method(scope_nodes_of(stack[: index + 1]))
                return self._enclosing[key]
        return None

    def _enclosing_method(self, scopes: Sequence[cst.CSTNode]) -> Optional[Tuple[ModuleClass, cst.FunctionDef]]:
        for index in range(len(scopes) - 2, -1, -1):
            if type(scopes[index]) is cst.ClassDef:
                method = scopes[index + 1]
                if type(method) is not cst.FunctionDef:
                    return None
                module = self.module_class(scopes[index], scopes[:index])
                return (module, method) if module is not None else None
        return None

    def forward_methods(self, module: ModuleClass, depth: int = 4) -> Set[int]:
        """ids of `forward` and of the methods of the class it calls through `self`, `depth` calls deep (needs the
        file's call graph, complete only in `finish()`: the rule sets `uses_callgraph`)."""
        found = self._forwards.get(id(module.node))
        if found is not None:
            return found
        forward = module.method("forward")
        graph = self.ctx.callgraph
        if forward is None or graph is None:
            return set()
        key = graph.key_of(forward, module.around + (module.node, forward))
        prefix = module.node.name.value + "."
        methods = {id(method) for method in module.methods()}
        found = self._forwards[id(module.node)] = {
            id(function.node) for function in graph.reachable(key, depth)
            if function.key.startswith(prefix) and id(function.node) in methods
        }
        return found

    def builds_module(self, call: cst.Call, stack: Sequence[cst.CSTNode]) -> Optional[str]:
        """What `call` builds, when it builds a module: its qualified name for a torch layer or container or a model
        builder (`torchvision.models.resnet18`, `timm.create_model`, `*.from_pretrained`), "class" for a Module
        class of the file or of a project file; None otherwise (`nn.Parameter(...)` is not a module)."""
        name = self.ctx.qualified_name(call.func, stack)
        if name is not None:
            if is_torch_module_class(name):
                return name
            if name == "timm.create_model" or _is_torchvision_builder(name):
                return name
        if type(call.func) is cst.Attribute and call.func.attr.value == "from_pretrained":
            return "from_pretrained"
        if type(call.func) not in (cst.Name, cst.Attribute) or (name is not None and name.startswith("torch.")):
            return None
        for origin in Values.of(self.ctx).origins(call.func, stack):
            if type(origin.node) is cst.ClassDef:
                there = ModuleClasses.of(origin.place.context)
                if there.module_class(origin.node, origin.place.scopes) is not None:
                    return "class"
        return None


_STATELESS_DEPTH = 3
# Expressions that compute numbers or flags: no module comes out of them.
_ARITHMETIC = (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.BooleanOperation, cst.FormattedString)
# Methods that give a Module state by name.
_REGISTERING = frozenset({"register_buffer", "register_parameter", "add_module", "register_module"})


class _SelfUses(cst.CSTVisitor):
    """What a class body does with `self` that the attribute table does not show: registrations
    (`self.register_buffer(...)`, `setattr`), attributes assigned by unpacking or with an annotation, and the
    attribute names it calls (`self.pool(x)`, `self.block.forward(x)`)."""

    def __init__(self):
        self.registers = False
        # Attributes assigned by unpacking or with an annotation, which the class's attribute table does not hold.
        self.unpacked = False
        self.called: Set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is cst.Name and func.value == "setattr":
            self.registers = True
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
            if func.attr.value in _REGISTERING:
                self.registers = True
            self.called.add(func.attr.value)
        # `self.block.forward(x)`: the attribute is a module, called through a method.
        if type(func) is cst.Attribute and type(func.value) is cst.Attribute and type(func.value.value) is cst.Name and func.value.value.value == "self":
            self.called.add(func.value.attr.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        # `self.a, self.b = ...` sets attributes; `b, c, h, w = input.size()` in a `forward` sets only locals.
        if any(type(target.target) in (cst.Tuple, cst.List) and _unpacks_attribute(target.target) for target in node.targets):
            self.unpacked = True

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if type(node.target) is cst.Attribute:
            self.unpacked = True


def _may_take_tensor(arg: cst.Arg, index: int, positions: Optional[Tuple[int, ...]]) -> bool:
    """The argument of a torch loss (the `index`th of its call) is one it keeps a tensor of: `weight=`, or at a
    position `positions` names (any position for a loss whose positions are not known)."""
    if arg.keyword is not None:
        return arg.keyword.value in _LOSS_TENSOR_KEYWORDS
    return positions is None or index in positions


def _passed_to_init(call: cst.Call, init: cst.FunctionDef, name: str) -> Optional[cst.BaseExpression]:
    """What `call` of a class passes its `__init__`'s parameter `name` (`self` is bound by the instance), or the
    parameter's default where it passes nothing; None when unknown (`*args` or `**kwargs` in the call)."""
    if any(arg.star for arg in call.args):
        return None
    given = syntax.argument_for(call, init, name, method=True)
    if given is not None:
        return given
    param = next((param for param in parameters(init.params) if param.name.value == name), None)
    return param.default if param is not None else None


def _unpacks_attribute(target: cst.BaseExpression) -> bool:
    """An unpacking target assigns an attribute (`self.h, self.w = ...`, nested or starred too)."""
    for element in target.elements:
        value = element.value
        if type(value) in (cst.Tuple, cst.List):
            if _unpacks_attribute(value):
                return True
        elif type(value) is not cst.Name:
            return True
    return False


def _names_torch_function(qualified: Optional[str]) -> bool:
    """`qualified` names a function of torch's (`torch.nn.functional.relu`, `torch.sigmoid`): lower-case, unlike its
    classes (`torch.nn.Linear`) and the parameters and tensors they make."""
    return bool(qualified) and qualified.startswith("torch.") and qualified.rpartition(".")[2][:1].islower()


def _is_torchvision_builder(name: str) -> bool:
    parts = name.split(".")
    if parts[:2] != ["torchvision", "models"] or parts[-1].startswith("_") or parts[-1] in _TORCHVISION_NOT_BUILDERS:
        return False
    return parts[-1].islower() and (len(parts) == 3 or (len(parts) == 4 and parts[2] in _TORCHVISION_MODEL_PACKAGES))


def self_name(method: cst.FunctionDef) -> Optional[str]:
    """The name of a method's first parameter (`self`), None for a method without one or a static method."""
    if any(decorator_name(decorator) == "staticmethod" for decorator in method.decorators):
        return None
    first = method.params.posonly_params or method.params.params
    return first[0].name.value if first else None


def decorator_name(decorator: cst.Decorator) -> Optional[str]:
    """`singleton` for `@singleton("projector")`, `abstractmethod` for `@abc.abstractmethod`."""
    target = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
    return syntax.terminal_name(target)


def is_self_attribute(expr: cst.CSTNode, method: cst.FunctionDef) -> bool:
    """`expr` is `self.<name>` for the method's own first parameter."""
    return (
        type(expr) is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == self_name(method)
    )


def rebound_later(stack: Sequence[cst.CSTNode], target: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The value that the last of the statements after the one at the innermost point of `stack`, in its block,
    assigns to `target` (an attribute, `self.w`): a straight-line rebinding that replaces the first value whenever
    that one is made (`self.w = torch.randn(m, d)` then `self.w = nn.Parameter(f(self.w))`, as T2T-ViT writes it);
    None when no later statement of the block rebinds it before a `return` or `raise`. An attribute is what its
    last such binding holds."""
    written = dotted_name(target)
    index = next((index for index in range(len(stack) - 1, 0, -1) if type(stack[index]) is cst.SimpleStatementLine), None)
    if written is None or index is None or type(stack[index - 1]) not in (cst.IndentedBlock, cst.Module):
        return None
    statements = stack[index - 1].body
    position = next(position for position, statement in enumerate(statements) if statement is stack[index])
    found = None
    for statement in statements[position + 1:]:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) in (cst.Return, cst.Raise):
                return found
            if type(small) is cst.Assign and any(dotted_name(each.target) == written for each in small.targets):
                found = small.value
            elif type(small) is cst.AnnAssign and small.value is not None and dotted_name(small.target) == written:
                found = small.value
    return found


def under_training_test(ctx: "FileContext", method: cst.FunctionDef, stack: Optional[Sequence[cst.CSTNode]] = None) -> bool:
    """The innermost point of `stack` (default: the node being visited) sits in `method` under an `if` (or a
    conditional expression) whose test reads `training` (`if self.training:`): code that runs in one mode only."""
    stack = ctx.stack if stack is None else stack
    for index in range(stack.index(method), len(stack) - 1):
        node, child = stack[index], stack[index + 1]
        if type(node) in (cst.If, cst.IfExp) and child is not node.test and "training" in ctx.code(node.test):
            return True
    return False


def runs_only_while_built(ctx: "FileContext", function: cst.FunctionDef, stack: Sequence[cst.CSTNode], depth: int = 0) -> bool:
    """`function` (with `stack`, the nodes around it ending with it) runs only while a model is built: it is an
    `__init__`, or a function the file calls only from such functions (a shape probe, a backbone picker), up to
    three calls deep. Never `forward`, which calling the module runs; never a function the file does not call."""
    name = function.name.value
    if name == "__init__":
        return True
    if name == "forward" or depth >= 3:
        return False
    sites = ctx.callgraph.call_sites(ctx.callgraph.key_of(function, scope_nodes_of(stack)))
    return bool(sites) and all(runs_in_builder(ctx, site.stack, depth + 1) for site in sites)


# Types a value tested with `isinstance` is a tensor, not a module, under.
_TENSOR_CLASSES = PARAMETER | {"torch.Tensor"}
_MODULE_CLASS = "torch.nn.Module"


def tested_as_tensor(ctx: "FileContext", expr: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
    """The innermost point of `stack` runs only where `expr` is a tensor by an `isinstance` test around it, in its
    function: in the body of `if isinstance(expr, nn.Parameter):` (or `torch.Tensor`, or a tuple of those), or in the
    `else` of `if isinstance(expr, nn.Module):` (a loop over a mix of modules and parameters)."""
    written = dotted_name(expr)
    if written is None:
        return False
    for depth in range(len(stack) - 2, -1, -1):
        branch, arm = stack[depth], stack[depth + 1]
        if type(branch) in SCOPE_TYPES:
            return False
        if type(branch) is not cst.If or arm is branch.test:
            continue
        tested = _isinstance_classes(ctx, branch.test, written, stack[:depth + 1])
        if arm is branch.body and tested and tested <= _TENSOR_CLASSES or arm is branch.orelse and tested == {_MODULE_CLASS}:
            return True
    return False


def _isinstance_classes(ctx: "FileContext", test: cst.BaseExpression, written: str, stack) -> Optional[Set[str]]:
    """The qualified names of the classes `isinstance(<written>, ...)` tests, when `test` is that call."""
    found = syntax.isinstance_test(test)
    if found is None or dotted_name(found[0]) != written:
        return None
    return {ctx.qualified_name(element, stack) or "" for element in found[1]}


# The bases of a custom autograd operation.
_AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})
# Random draws an export stand-in makes up its outputs from, by qualified name or its start.
_RANDOM_DRAWS = ("torch.rand", "torch.randn", "torch.randint", "torch.randperm", "random.", "numpy.random.")


def is_export_stand_in(ctx: "FileContext", function_class: cst.ClassDef, around: Sequence[cst.CSTNode]) -> bool:
    """`function_class` (with `around`, the nodes outside it) is a `torch.autograd.Function` that only stands in for
    an operator while a model is exported: it defines `symbolic` (what ONNX export writes in its place) and no
    `backward`, and its `forward` makes its outputs up from random draws (YOLOv6's `ORT_NMS` and `TRT_NMS`:
    `torch.randint(...)`, `torch.randn(...)` of the output's shape). Its `forward` runs when the model is traced for
    export, once; a real operator (an NMS kernel with a `symbolic` for export) computes its outputs and is no
    stand-in."""
    if method_of(function_class, "symbolic") is None or method_of(function_class, "backward") is not None:
        return False
    forward = method_of(function_class, "forward")
    if forward is None or not any(
        ctx.qualified_name(base.value, around) in _AUTOGRAD_FUNCTIONS for base in function_class.bases
    ):
        return False
    stack = [*around, function_class, forward]
    draws = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Call and (ctx.qualified_name(node.func, stack) or "").startswith(_RANDOM_DRAWS):
            draws.append(node)
        return not draws

    walk(forward.body, on_visit, lambda node: None)
    return bool(draws)


def runs_in_builder(ctx: "FileContext", stack: Sequence[cst.CSTNode], depth: int = 0) -> bool:
    """The innermost point of `stack` is in a function that `runs_only_while_built`."""
    for index in range(len(stack) - 1, -1, -1):
        if type(stack[index]) is cst.FunctionDef:
            return runs_only_while_built(ctx, stack[index], stack[: index + 1], depth)
    return False


def builds_module(ctx: "FileContext", call: cst.Call, stack) -> bool:
    """`call` builds an `nn.Module`: a torch layer, loss or container, a model builder (`torchvision.models.*`,
    `timm.create_model`, `*.from_pretrained`), or a Module class of the project (`names_module_class`)."""
    name = ctx.qualified_name(call.func, stack) or ""
    if name.startswith("torch.nn.") and name.rpartition(".")[2][:1].isupper() and name not in PARAMETER:
        return True
    if name.startswith(_MODEL_BUILDERS) or syntax.method_name(call) == "from_pretrained":
        return True
    return any(names_module_class(origin) for origin in Values.of(ctx).origins(call.func, stack))


def names_module_class(origin: Origin) -> bool:
    """`origin` is a class of the file or of a project file that is an `nn.Module`: it defines `forward` (its base may
    be of a library not known here), or a base is a Module any number of project classes up (`class
    RNNModelSearch(RNNModel)` with `class RNNModel(nn.Module)`, darts: no `forward` of its own)."""
    return type(origin.node) is cst.ClassDef and (
        method_of(origin.node, "forward") is not None
        or ModuleClasses.of(origin.place.context).module_class(origin.node, origin.place.scopes) is not None
    )
