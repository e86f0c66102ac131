"""What the loss rules share: which loss a call is, and whether its input already went through
softmax, log_softmax or sigmoid.

The input is traced directly (`F.cross_entropy(F.softmax(z, 1), y)`, through shape-only
methods such as `.view(...)`), and through the value model to every value that may reach
it: variables, unpacked tuples, models of the same module whose output is an activation
(a class whose `forward` returns one, unless a condition in it reads `self.training`, or
an `nn.Sequential` whose last layer is one), however the model was moved or wrapped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar, Dict, FrozenSet, Optional, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.values import Origin, Place, Values
from torchlint.engine.scopes import Scope, scope_nodes_of
from torchlint.engine.walk import OwnScopeVisitor, walk_visitor
from torchlint.finding import Fix
from torchlint.rules.base import Rule

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

FUNCTION, METHOD, MODULE, MODULE_VARIABLE, MODEL = "function", "method", "module", "module variable", "model"

SOFTMAX = "softmax"
LOG_SOFTMAX = "log_softmax"
SIGMOID = "sigmoid"

ACTIVATION_FUNCTIONS = {
    "torch.softmax": SOFTMAX, "torch.nn.functional.softmax": SOFTMAX, "torch.special.softmax": SOFTMAX,
    "torch.log_softmax": LOG_SOFTMAX, "torch.nn.functional.log_softmax": LOG_SOFTMAX,
    "torch.special.log_softmax": LOG_SOFTMAX,
    "torch.sigmoid": SIGMOID, "torch.nn.functional.sigmoid": SIGMOID, "torch.special.expit": SIGMOID,
}
ACTIVATION_MODULES = {
    "torch.nn.Softmax": SOFTMAX, "torch.nn.Softmax2d": SOFTMAX, "torch.nn.LogSoftmax": LOG_SOFTMAX,
    "torch.nn.Sigmoid": SIGMOID,
    "torch.nn.modules.activation.Softmax": SOFTMAX, "torch.nn.modules.activation.Softmax2d": SOFTMAX,
    "torch.nn.modules.activation.LogSoftmax": LOG_SOFTMAX, "torch.nn.modules.activation.Sigmoid": SIGMOID,
}
ACTIVATION_METHODS = {"softmax": SOFTMAX, "log_softmax": LOG_SOFTMAX, "sigmoid": SIGMOID}
# Tensor methods that keep every value as it is: a softmax stays a softmax through them.
SHAPE_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "contiguous", "squeeze", "unsqueeze",
    "flatten", "float",
})
_MAX_DEPTH = 8
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


@dataclass(frozen=True)
class Trace:
    kind: str
    # The activation call found in the input's history (for a model: the model call).
    call: cst.Call
    # What the activation was applied to; None when it happens inside a model.
    source: Optional[cst.BaseExpression]
    # How the activation is spelled: FUNCTION (F.softmax(x)), METHOD (x.softmax(1)), MODULE (nn.Softmax(1)(x)),
    # MODULE_VARIABLE (softmax(x) after softmax = nn.Softmax(1)), or MODEL.
    form: str
    # The call can be edited without changing anything but this loss: it sits in the loss's
    # argument, or behind variables used nowhere else.
    editable: bool


class ActivationBeforeLoss(Rule):
    """A loss call whose input was already passed through an activation the loss applies (or expects) itself.

    Subclasses name the losses (`loss_modules`, `loss_functions`), the message for each activation
    kind they flag, and the fix.
    """

    loss_modules: ClassVar[FrozenSet[str]]
    loss_functions: ClassVar[FrozenSet[str]]
    messages: ClassVar[Dict[str, str]]

    def __init__(self, ctx):
        super().__init__(ctx)
        # Whether the file can name the loss modules and functions, read from its text once (`may_name`): every call
        # is asked.
        self.names_loss_modules = ctx.may_name(self.loss_modules)
        self.names_loss_functions = ctx.may_name(self.loss_functions)

    def visit_Call(self, node: cst.Call) -> None:
        # The input first: whether the call is a loss asks the value model of its callee.
        loss_input = semantics.positional(node, 0) or semantics.keyword(node, "input")
        if loss_input is None or not self._is_loss(node):
            return
        trace = self.ctx.shared(Tracer).trace(loss_input.value, tuple(self.ctx.stack))
        message = self.message_for(node, trace.kind) if trace is not None else None
        if message is not None:
            self.report(node, message, self.fix(trace) if trace.editable else None)

    def message_for(self, loss: cst.Call, kind: str) -> Optional[str]:
        """What to say of `loss` fed an activation of `kind`; None: nothing (that pairing is right)."""
        return self.messages.get(kind)

    def fix(self, trace: Trace) -> Optional[Fix]:
        return None

    def _is_loss(self, call: cst.Call) -> bool:
        return self.loss_name(call) is not None

    def loss_name(self, call: cst.Call) -> Optional[str]:
        """The qualified name of the loss function, or of the loss module's class, `call` computes (one of this
        rule's), else None."""
        ctx = self.ctx
        # A loss function bound to a name (`criterion = F.cross_entropy`) is followed only where one can be named.
        name = (
            semantics.function_named(call.func, self.loss_functions, ctx) if self.names_loss_functions
            else ctx.qualified_name(call.func)
        )
        if name in self.loss_functions:
            return name
        if type(call.func) is cst.Call:  # nn.CrossEntropyLoss()(logits, target)
            name = ctx.qualified_name(call.func.func)
        elif self.names_loss_modules:
            name = semantics.built_from(call.func, ctx)
        else:
            return None
        return name if name in self.loss_modules else None

    def drop_activation(self, trace: Trace) -> Optional[Fix]:
        """Replace the activation call by what it was applied to."""
        source = trace.source
        if source is None:
            return None
        text = self.ctx.code(source)
        if not isinstance(source, _ATOMS) and not source.lpar:
            text = f"({text})"
        return Fix.unsafe("Pass the logits", self.ctx.replace(trace.call, text))


class Tracer:
    """Follows a loss input back to an activation through the value model (`analysis/values.py`): variables,
    unpacked tuples, a model's `forward` (however the model was moved or wrapped), the last layer of an
    `nn.Sequential`. Every value that may reach the loss must come out of the same activation."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.values = Values.of(ctx)
        # id(forward) -> whether a condition in it reads `.training`
        self.training_dependent: Dict[int, bool] = {}

    def trace(self, expr: cst.BaseExpression, stack: Tuple[cst.CSTNode, ...], depth: int = 0) -> Optional[Trace]:
        """The activation `expr`, evaluated at the innermost point of `stack`, comes from, if any."""
        if depth > _MAX_DEPTH:
            return None
        while isinstance(expr, cst.Call) and semantics.method_name(expr) in SHAPE_METHODS:
            expr = semantics.receiver(expr)
        if isinstance(expr, cst.Call):
            found = self._activation(expr, stack)
            if found is not None:
                kind, source, form = found
                return Trace(kind, expr, source, form, True)
        if not isinstance(expr, _ATOMS):
            return None
        origins = self.values.origins(expr, stack)
        traces = []
        for origin in origins:
            if origin.node is expr or origin.opaque:
                return None
            trace = self._trace_origin(origin, stack, depth)
            if trace is None:
                return None
            traces.append(trace)
        if not traces or len({trace.kind for trace in traces}) != 1:
            return None
        if len(traces) == 1 and traces[0].form != MODEL and self._editable(expr, origins[0], stack):
            return traces[0]
        return replace(traces[0], editable=False)

    def _trace_origin(self, origin: Origin, stack: Tuple[cst.CSTNode, ...], depth: int) -> Optional[Trace]:
        place = origin.place
        if origin.applied:  # the output of a layer, such as the last one of an nn.Sequential
            kind = ACTIVATION_MODULES.get(place.context.qualified_name(origin.node.func, place.stack))
            return Trace(kind, origin.node, None, MODEL, False) if kind else None
        inside_forward = _forward_around(place, stack)
        if inside_forward is not None and self._depends_on_training(inside_forward):
            return None  # `if self.training: return logits`: probabilities only at inference
        tracer = place.context.shared(Tracer)
        trace = tracer.trace(origin.node, place.stack, depth + 1)
        if trace is not None and (place.context is not self.ctx or place.scopes != tuple(scope_nodes_of(stack))):
            # Made in a model's forward or a helper: the softmax is left there for the author to move.
            return Trace(trace.kind, trace.call, None, MODEL, False)
        return trace

    def _editable(self, name: cst.BaseExpression, origin: Origin, stack) -> bool:
        """`probabilities = F.softmax(z, 1)` right before the loss, the name read nowhere else: the fix edits only
        what this loss sees."""
        statement = origin.place.statement
        if type(name) is not cst.Name or type(statement) is not cst.Assign or len(statement.targets) != 1:
            return False
        target = statement.targets[0].target
        if type(target) is not cst.Name or target.value != name.value:
            return False
        scope = self.ctx.scopes.binding_scope(name.value, stack)
        return scope is not None and len(scope.assignments.get(name.value, ())) == 1 and _used_once(name.value, scope)

    def _depends_on_training(self, forward: cst.FunctionDef) -> bool:
        found = self.training_dependent.get(id(forward))
        if found is None:
            conditions = _Conditions()
            walk_visitor(forward.body, conditions)
            found = self.training_dependent[id(forward)] = conditions.read_training
        return found

    def _activation(self, call: cst.Call, stack) -> Optional[Tuple[str, Optional[cst.BaseExpression], str]]:
        """(kind, input, form) when `call` applies softmax, log_softmax or sigmoid."""
        ctx = self.ctx
        name = ctx.qualified_name(call.func, stack)
        first = semantics.positional(call, 0) or semantics.keyword(call, "input")
        if name in ACTIVATION_FUNCTIONS:
            return ACTIVATION_FUNCTIONS[name], first.value if first else None, FUNCTION
        if isinstance(call.func, cst.Call):  # nn.Softmax(dim=1)(x)
            module_name, form = ctx.qualified_name(call.func.func, stack), MODULE
        else:  # softmax = nn.Softmax(dim=1) ... softmax(x)
            module_name, form = semantics.built_from(call.func, ctx, stack), MODULE_VARIABLE
        if module_name in ACTIVATION_MODULES:
            return ACTIVATION_MODULES[module_name], first.value if first else None, form
        method = semantics.method_name(call)
        owner = semantics.receiver(call)
        is_self = isinstance(owner, cst.Name) and owner.value == "self"
        if method in ACTIVATION_METHODS and name is None and not is_self:  # logits.softmax(dim=1)
            return ACTIVATION_METHODS[method], owner, METHOD
        return None


def _forward_around(place: Place, use_stack) -> Optional[cst.FunctionDef]:
    """The `forward` method `place` is in, when it is not where the loss is computed."""
    scopes = place.scopes
    if scopes and type(scopes[-1]) is cst.FunctionDef and scopes[-1].name.value == "forward":
        if not any(node is scopes[-1] for node in use_stack):
            return scopes[-1]
    return None


def _used_once(name: str, scope: Scope) -> bool:
    """Assigned once and read once: editing its value changes nothing else."""
    counter = _NameCount(name)
    walk_visitor(scope.node, counter)
    return counter.count == 2


class _Conditions(OwnScopeVisitor):
    """Whether any condition of a function (not of those nested in it) reads `.training`."""

    def __init__(self):
        self.read_training = False

    def _condition(self, node) -> None:
        finder = _TrainingFlag()
        walk_visitor(node.test, finder)
        self.read_training = self.read_training or finder.found

    visit_If = visit_IfExp = visit_While = _condition


class _TrainingFlag(cst.CSTVisitor):
    def __init__(self):
        self.found = False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "training":
            self.found = True


class _NameCount(cst.CSTVisitor):
    def __init__(self, name: str):
        self.name = name
        self.count = 0

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.count += 1
