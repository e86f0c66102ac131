from typing import List, Optional, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.modules import (
    MODULE_ROOTS, PARAMETER, REGISTERING_CONTAINERS, STATELESS_LAYERS, ModuleClass, ModuleClasses, decorator_name,
    is_loss_class, is_self_attribute, is_torch_module_class, under_training_test,
)
from torchlint.analysis.values import Values
from torchlint.rules.base import Rule
from torchlint.rules.model._shared import IN_MODULE_CLASS
from torchlint.rules.triggers import words

_DROPOUTS = frozenset(
    f"torch.nn.{name}" for name in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout")
)
_NOT_REPORTED = STATELESS_LAYERS | REGISTERING_CONTAINERS
# Decorators that only set the grad mode or precision: the method still runs on every call.
_GRAD_MODE_DECORATORS = frozenset({"no_grad", "inference_mode", "enable_grad", "autocast"})


class LayerBuiltInForward(Rule):
    """
    ## What it does
    Flags a layer (`nn.Linear(...)`, `nn.Conv2d(...)`, `nn.BatchNorm*`, `nn.LayerNorm`,
    `nn.Embedding`, `nn.Dropout(...)`, a model builder, an instance of a Module class of
    the file or of a project file that holds layers or parameters) or an `nn.Parameter(...)`
    constructed inside `forward` of an `nn.Module` subclass, or inside a method `forward`
    calls through `self`.

    Not flagged: layers without parameters, buffers or train/eval behaviour (`nn.ReLU()`,
    `nn.Flatten()`, `nn.Softmax(dim)`, `nn.Identity()`, pooling, padding, `nn.Upsample`),
    loss modules, containers (`nn.Sequential(*self.blocks)` only wraps what is
    registered; a layer inside it is reported itself; a plain list it wraps is
    TL701's, which reports the list when no container registered outside `forward` holds it); construction in `__init__` or in
    helpers called from `__init__`; a dropout built under `if self.training:`; lazy
    creation that keeps the layer, `self.proj = nn.Linear(...)` under an `if` (`if
    self.proj is None:`), which runs once, or a parameter replaced under an `if`, also
    a submodule's (`self.embedding.weight = nn.Parameter(...)` in an EMA codebook update
    under `if self.training:`), which registers it; methods with a decorator other than a grad
    mode or autocast (`@singleton("projector")` in lucidrains' BYOL/DINO code, a
    `@cached_property`), which may build the layer once and keep it.

    Given up for that precision: a lazily created layer is not checked for being added
    to the optimizer after it was built, and a decorated method that does rebuild its
    layer on every call is not reported.

    ## Why is this bad?
    A layer built in `forward` is a new module on every call: a Linear or convolution
    starts from fresh random weights each time and is not registered, so `parameters()`
    does not return it, the optimizer never trains it and `state_dict()` does not save
    it. On torch 2.13 two forwards of such a model in `eval()` give different outputs. A
    new `nn.Dropout` is in training mode, so it keeps dropping after `model.eval()`; a
    new BatchNorm normalises with the batch's statistics even in `eval()`; a new
    LayerNorm, GroupNorm or RMSNorm starts again from scale 1 and shift 0 (it has no
    running statistics); an `nn.Parameter` made in `forward` leaves the module with no
    parameter of its own. An `nn.InstanceNorm*` without `affine=True` or
    `track_running_stats=True` holds nothing, so a new one is not reported.

    ## Fix safety
    No fix: build the layer once in `__init__` (its sizes are usually known there) and
    call it in `forward`.
    """

    code = "TL702"
    name = "layer-built-in-forward"
    triggers = IN_MODULE_CLASS & words("forward")
    uses_callgraph = True
    message = (
        "a layer built in `forward` is a new module on every call, with fresh random weights, and is not "
        "registered: the optimizer never trains it and `state_dict()` does not save it; build it once in `__init__`"
    )
    example = """
    import torch.nn as nn

    class Classifier(nn.Module):
        def __init__(self, features, classes):
            super().__init__()
            self.features = features
            self.classes = classes

        def forward(self, x):
            x = nn.Dropout(0.5)(x)  # expect: TL702:13
            return nn.Linear(self.features, self.classes)(x)  # expect: TL702:16
    """
    use_instead = """
    import torch.nn as nn

    class Classifier(nn.Module):
        def __init__(self, features, classes):
            super().__init__()
            self.dropout = nn.Dropout(0.5)
            self.head = nn.Linear(features, classes)

        def forward(self, x):
            return self.head(self.dropout(x))
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes = ModuleClasses.of(ctx)
        # (call, module class, method, the nodes around the call) for the calls in the methods of Module classes
        self.calls: List[Tuple[cst.Call, ModuleClass, cst.FunctionDef, Tuple[cst.CSTNode, ...]]] = []

    def visit_Call(self, node: cst.Call) -> None:
        found = self.classes.enclosing(self.ctx.stack)
        if found is None:
            return
        module, method = found
        if any(decorator_name(decorator) not in _GRAD_MODE_DECORATORS for decorator in method.decorators):
            return  # `@singleton("projector")`, `@cached_property`: the layer is built once and kept
        # What the call builds is asked in `finish`, of the calls in methods `forward` reaches: most calls of a
        # model's methods are in `__init__`, where building layers is right.
        self.calls.append((node, module, method, tuple(self.ctx.stack)))

    def finish(self) -> None:
        for node, module, method, stack in self.calls:
            if id(method) not in self.classes.forward_methods(module):
                continue
            kind = self._kind(node, stack)
            if kind is None or self._kept_once(node, module, method, stack):
                continue
            if kind in _DROPOUTS and under_training_test(self.ctx, method, stack):
                continue
            self.report(node, self._message(node, kind, method))

    def _kind(self, call: cst.Call, stack: Tuple[cst.CSTNode, ...]) -> Optional[str]:
        """The qualified name of the stateful layer or the parameter `call` builds, "class" for a Module class of the
        project with state, else None."""
        if self.ctx.qualified_name_in(call.func, PARAMETER, stack):
            return "torch.nn.Parameter"
        built = self.classes.builds_module(call, stack)
        if built is None or built in _NOT_REPORTED or is_loss_class(built):
            return None
        if built == "class" and not self._class_has_state(call, stack):
            return None
        if "InstanceNorm" in built and not any(syntax.keyword_is_true(call, name) for name in ("affine", "track_running_stats")):
            return None  # by default it has no parameters and no running statistics: a fresh one is the same
        return built

    def _class_has_state(self, call: cst.Call, stack: Tuple[cst.CSTNode, ...]) -> bool:
        return any(_has_state(module) for module in _classes_built(call, stack, self.ctx, frozenset()))

    def _kept_once(self, call: cst.Call, module: ModuleClass, method: cst.FunctionDef, stack: Tuple[cst.CSTNode, ...]) -> bool:
        """The layer is assigned to an attribute of the module (`self.proj = nn.Linear(...)`, or through a local
        name the method then assigns), where it is registered, under an `if` in the method or in a helper of
        `forward` (`make_weights` resizing a table): made on first use, or when it must change, and kept."""
        statement = stack[-2] if len(stack) > 1 else None
        if type(statement) is not cst.Assign or statement.value is not call or len(statement.targets) != 1:
            return False
        target = statement.targets[0].target
        if not _attribute_of_self(target, method):
            if type(target) is not cst.Name or not any(
                type(value) is cst.Name and value.value == target.value and module.assigning_method(value) is method
                for values in module.attributes().values() for value in values
            ):
                return False
        return method.name.value != "forward" or any(type(node) is cst.If for node in stack[stack.index(method):])

    def _message(self, call: cst.Call, kind: str, method: cst.FunctionDef) -> str:
        where = "`forward`" if method.name.value == "forward" else f"`{method.name.value}` (called from `forward`)"
        if kind == "torch.nn.Parameter":
            return (
                f"an `nn.Parameter` made in {where} is a new leaf on every call and is not registered: `parameters()` "
                "misses it, so the optimizer never trains it and `state_dict()` does not save it; create it in `__init__`"
            )
        if kind in _DROPOUTS:
            return (
                f"a dropout built in {where} is a new module in training mode on every call: it keeps dropping "
                "activations after `model.eval()`; build it in `__init__` (or call `F.dropout(x, p, training=self.training)`)"
            )
        if "BatchNorm" in kind or syntax.keyword_is_true(call, "track_running_stats"):
            return (
                f"a normalisation layer built in {where} is new on every call: in training mode it normalises with the "
                "batch's statistics even in `eval()`, and its running statistics and affine parameters are never kept, "
                "trained or saved; build it once in `__init__`"
            )
        if "Norm" in kind:  # LayerNorm, GroupNorm, RMSNorm: no running statistics, only the affine parameters
            return (
                f"a normalisation layer built in {where} is new on every call: its scale and shift start again from 1 "
                "and 0 each time and are never trained or saved; build it once in `__init__`"
            )
        return self.message.replace("`forward`", where, 1)


def _attribute_of_self(target: cst.BaseExpression, method: cst.FunctionDef) -> bool:
    """`self.proj`, or an attribute of a submodule (`self.embedding.weight`), where assigning registers it."""
    while type(target) is cst.Attribute and not is_self_attribute(target, method):
        target = target.value
    return is_self_attribute(target, method)


def _has_state(module: ModuleClass, seen: frozenset = frozenset()) -> bool:
    """The class derives from a torch layer with state, or assigns a layer with state (also a Module class of the
    project that has state) or a parameter to an attribute."""
    seen = seen | {id(module.node)}
    for base in module.node.bases:
        name = module.context.qualified_name(base.value, module.around)
        if is_torch_module_class(name) and name not in MODULE_ROOTS and name not in STATELESS_LAYERS:
            return True
    builds = ModuleClasses.of(module.context)
    for values in module.attributes().values():
        for value in values:
            if type(value) is not cst.Call:
                continue
            method = module.assigning_method(value)
            stack = module.stack_of(method) if method is not None else module.around + (module.node,)
            if module.context.qualified_name_in(value.func, PARAMETER, stack):
                return True
            built = builds.builds_module(value, stack)
            if built and built != "class" and built not in STATELESS_LAYERS and not is_loss_class(built):
                return True
            if built == "class" and any(_has_state(held) for held in _classes_built(value, stack, module.context, seen)):
                return True
    return any(_has_state(base, seen) for base in module.module_bases())


def _classes_built(call: cst.Call, stack, context, seen) -> List[ModuleClass]:
    """The Module classes of the project `call` may instantiate, not already being judged."""
    found = []
    for origin in Values.of(context).origins(call.func, stack):
        if type(origin.node) is cst.ClassDef and id(origin.node) not in seen:
            held = ModuleClasses.of(origin.place.context).module_class(origin.node, origin.place.scopes)
            if held is not None:
                found.append(held)
    return found
