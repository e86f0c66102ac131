"""What the loss rules share: which loss a call is, and whether its input already went through
softmax, log_softmax or sigmoid.

The input is traced directly (`F.cross_entropy(F.softmax(z, 1), y)`, through shape-only
methods such as `.view(...)`), through variables assigned in the same function, and through
models of the same module whose output is an activation: a class whose `forward` returns one
(unless it depends on `self.training`), or an `nn.Sequential` whose last layer is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Dict, FrozenSet, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.engine.walk import walk, walk_visitor
from torchlint import semantics
from torchlint.engine.scopes import Scope
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.data._dataset import construction

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
MODULE_METHODS_RETURNING_SELF = frozenset({
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train", "eval", "requires_grad_", "to_empty",
})
SEQUENTIAL = frozenset({"torch.nn.Sequential", "torch.nn.modules.container.Sequential"})
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

    def __init__(self, ctx: "FileContext"):
        super().__init__(ctx)
        # Assigned values the walk has passed: the assignment that feeds a loss call is the last one before it.
        self.assigned_so_far: Set[int] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        self.assigned_so_far.add(id(node.value))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.assigned_so_far.add(id(node.value))

    def visit_Call(self, node: cst.Call) -> None:
        if not self._is_loss(node):
            return
        loss_input = semantics.positional(node, 0) or semantics.keyword(node, "input")
        if loss_input is None:
            return
        stack = tuple(self.ctx.stack)
        trace = Tracer(self.ctx, self.assigned_so_far).trace(loss_input.value, stack, branches(stack))
        if trace is not None and trace.kind in self.messages:
            self.report(node, self.messages[trace.kind], self.fix(trace) if trace.editable else None)

    def fix(self, trace: Trace) -> Optional[Fix]:
        return None

    def _is_loss(self, call: cst.Call) -> bool:
        ctx = self.ctx
        if ctx.qualified_name(call.func) in self.loss_functions:
            return True
        if isinstance(call.func, cst.Call):  # nn.CrossEntropyLoss()(logits, target)
            return ctx.qualified_name(call.func.func) in self.loss_modules
        return semantics.built_from_in(call.func, self.loss_modules, ctx)

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
    """Follows a loss input back to an activation. `assigned` limits variables to the assignments made so far
    (None: take each variable's last assignment, as for a model's `forward`)."""

    def __init__(self, ctx: "FileContext", assigned: Optional[Set[int]], memo: Optional[Tuple[dict, dict]] = None):
        self.ctx = ctx
        self.assigned = assigned
        # Shared by the tracers of one loss call: id(class) -> the activation its forward ends in (None: none),
        # and id(scope node) -> the if/else blocks holding each value assigned or returned in it.
        self.forward_kinds, self.branch_maps = memo if memo is not None else ({}, {})

    def trace(
        self, expr: cst.BaseExpression, stack: Tuple[cst.CSTNode, ...], here: FrozenSet[int], depth: int = 0,
        editable: bool = True, inside: Optional[Dict[str, cst.BaseExpression]] = None,
    ) -> Optional[Trace]:
        """The activation `expr` (evaluated inside the if/else blocks `here`) comes from, if any."""
        if depth > _MAX_DEPTH:
            return None
        while isinstance(expr, cst.Call) and semantics.method_name(expr) in SHAPE_METHODS:
            expr = semantics.receiver(expr)
        if isinstance(expr, cst.Call):
            found = self._activation(expr, stack)
            if found is not None:
                kind, source, form = found
                return Trace(kind, expr, source, form, editable)
            kind = self._model_output(expr, stack, depth)
            return Trace(kind, expr, None, MODEL, False) if kind else None
        if isinstance(expr, cst.Name):
            scope = self.ctx.scopes.binding_scope(expr.value, stack)
            value = self._value_of(expr, scope, inside or {}) if scope is not None else None
            if value is None:
                return None
            assigned_in = self._branch_map(scope.node).get(id(value), frozenset())
            if not assigned_in <= here:
                return None  # `if use_probabilities: out = out.softmax(1)`: maybe, maybe not
            editable = editable and self._used_once(expr, scope)
            return self.trace(value, stack, assigned_in, depth + 1, editable, {**(inside or {}), expr.value: value})
        return None

    def _branch_map(self, scope_node: cst.CSTNode) -> Dict[int, FrozenSet[int]]:
        found = self.branch_maps.get(id(scope_node))
        if found is None:
            collector = _BranchMap()
            walk(scope_node, collector.on_visit, collector.on_leave)
            found = self.branch_maps[id(scope_node)] = collector.branches
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

    def _value_of(self, name: cst.Name, scope: Scope, inside: Dict[str, cst.BaseExpression]) -> Optional[cst.BaseExpression]:
        """The assignment of `name` that reaches this point."""
        values = scope.assignments.get(name.value, [])
        current = inside.get(name.value)
        if current is not None:  # `x = x.view(-1)`: the x on the right is the one assigned before
            index = next((i for i, value in enumerate(values) if value is current), len(values))
            values = values[:index]
        elif self.assigned is not None:
            values = [value for value in values if id(value) in self.assigned]
        return values[-1] if values else None

    def _used_once(self, name: cst.Name, scope: Scope) -> bool:
        """Assigned once and read once: editing its value changes nothing else."""
        if len(scope.assignments.get(name.value, ())) != 1:
            return False
        counter = _NameCount(name.value)
        walk_visitor(scope.node, counter)
        return counter.count == 2

    def _model_output(self, call: cst.Call, stack, depth: int) -> Optional[str]:
        """The activation a same-module model applies last, when `call` runs one."""
        ctx = self.ctx
        if isinstance(call.func, cst.Name) and call.func.value == "self":
            owner = ctx.enclosing(cst.ClassDef, stack=stack + (call,))
            return self._forward_kind(owner, depth) if owner is not None else None
        built = construction(call.func, ctx, stack)
        # Net().to(device).eval(): the module methods return the model itself
        while isinstance(built, cst.Call) and semantics.method_name(built) in MODULE_METHODS_RETURNING_SELF:
            built = semantics.receiver(built)
        if not isinstance(built, cst.Call):
            return None
        name = ctx.qualified_name(built.func, stack)
        if name in SEQUENTIAL:
            layers = [arg.value for arg in built.args if arg.keyword is None and not arg.star]
            last = layers[-1] if layers else None
            return ACTIVATION_MODULES.get(ctx.qualified_name(last.func, stack)) if isinstance(last, cst.Call) else None
        if name is None and isinstance(built.func, cst.Name):
            model_class = _class_named(built.func.value, ctx, stack)
            return self._forward_kind(model_class, depth) if model_class is not None else None
        return None

    def _forward_kind(self, model_class: cst.ClassDef, depth: int) -> Optional[str]:
        if id(model_class) in self.forward_kinds:
            return self.forward_kinds[id(model_class)]
        self.forward_kinds[id(model_class)] = None  # a forward that calls itself ends nowhere
        forward = next(
            (item for item in model_class.body.body if isinstance(item, cst.FunctionDef) and item.name.value == "forward"),
            None,
        )
        kind = None
        if forward is not None:
            returns = _Returns()
            walk_visitor(forward.body, returns)
            if not returns.depends_on_training:
                tracer = Tracer(self.ctx, None, (self.forward_kinds, self.branch_maps))
                stack = (self.ctx.module, model_class, forward, forward.body)
                returned_in = self._branch_map(forward)
                for value in returns.values:
                    trace = tracer.trace(value, stack, returned_in.get(id(value), frozenset()), depth + 1)
                    if trace is not None:
                        kind = trace.kind
                        break
        self.forward_kinds[id(model_class)] = kind
        return kind


def branches(stack: Sequence[cst.CSTNode]) -> FrozenSet[int]:
    """The `if`/`else` blocks of its function that hold the last node of `stack` (ids of the blocks)."""
    found = []
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(node, cst.If):
            found.append(id(stack[index + 1]))
    return frozenset(found)


class _BranchMap(cst.CSTVisitor):
    """For each value assigned or returned in one scope (not in the scopes nested in it): its if/else blocks."""

    def __init__(self):
        self.stack = []
        self.branches: Dict[int, FrozenSet[int]] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        if isinstance(node, (cst.Assign, cst.AnnAssign, cst.Return)) and node.value is not None:
            self.branches[id(node.value)] = branches(self.stack)
        return len(self.stack) == 1 or not isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef))

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()


def _class_named(name: str, ctx: "FileContext", stack: Sequence[cst.CSTNode]) -> Optional[cst.ClassDef]:
    """The class statement of the module (or enclosing function) that binds `name`."""
    scope = ctx.scopes.binding_scope(name, stack)
    if scope is None or not isinstance(scope.node, (cst.Module, cst.FunctionDef)):
        return None
    statements = scope.node.body if isinstance(scope.node, cst.Module) else scope.node.body.body
    for statement in statements:
        if isinstance(statement, cst.ClassDef) and statement.name.value == name:
            return statement
    return None


class _Returns(cst.CSTVisitor):
    """The values a `forward` returns, and whether any condition in it reads `.training`."""

    def __init__(self):
        self.values = []
        self.depends_on_training = False

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.values.append(node.value)

    def _condition(self, node) -> None:
        finder = _TrainingFlag()
        walk_visitor(node.test, finder)
        self.depends_on_training = self.depends_on_training or finder.found

    visit_If = visit_IfExp = visit_While = _condition

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


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
