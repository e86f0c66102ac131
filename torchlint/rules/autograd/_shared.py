"""What several autograd rules ask about the code: loops and the facts in them,
loss computations, models, the names an expression reads.

Everything here is fed from the engine's single walk (a rule calls `observe`
from its visitor methods); nothing walks the tree again.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, List, Optional, Sequence, Set

import libcst as cst

from torchlint import semantics
from torchlint.analysis.loops import FUNCTION_BOUNDARIES, is_accumulating_backward
from torchlint.analysis.training import Iterations
from torchlint.analysis.modules import ModuleClasses, is_loss_class
from torchlint.analysis.values import IDENTITY_WRAPPERS, SEQUENTIAL, Values
from torchlint.engine.scopes import dotted_name
from torchlint.rules.base import Rule
from torchlint.rules.autograd import _facts  # noqa: F401  (registers the facts the loops record)

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

# Sets of exact types, tested with `type(node) in ...`: these helpers scan the stack at every visit, and
# `isinstance` on libcst's abstract node classes costs several times more.

_CRITERION_NAME = re.compile(r"^(criterion|.*_criterion|criterion_.*|loss_?fn|loss_?func(tion)?|.*_loss_?fn|.*_loss_?func)$")
# Functional losses whose name does not end in `_loss`.
LOSS_FUNCTIONS = frozenset({"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"})
_MODEL_BUILDERS = ("torchvision.models.", "timm.create_model", "torch.hub.load")
_MODULE_BASES = ("LightningModule", "PreTrainedModel")
# Function names that say "this evaluates": evaluate, run_validation, test, predict_batch, inference_loop, ...
_EVALUATION_WORDS = frozenset({
    "eval", "evaluate", "evaluation", "val", "valid", "validate", "validation", "test", "testing", "predict", "prediction",
})


def uses_autograd_grad(function_key: str, ctx: "FileContext") -> bool:
    function = ctx.callgraph.functions.get(function_key)
    return function is not None and any(not is_accumulating_backward(node) for node in function.facts.get("backward", ()))


# Asked of the function around every call some rules visit: a few names per file, each many times.
@lru_cache(maxsize=4096)
def names_an_evaluation(name: str) -> bool:
    words = [word for word in name.lower().split("_") if word]
    return any(word in _EVALUATION_WORDS or word.startswith("infer") for word in words)


def evaluates(function_key: str, ctx: "FileContext") -> bool:
    """The function puts a model in eval mode or is named like an evaluation."""
    function = ctx.callgraph.functions.get(function_key)
    return names_an_evaluation(function_key.rpartition(".")[2]) or (function is not None and "sets-eval" in function.facts)


def innermost_function(stack: Sequence[cst.CSTNode]) -> Optional[cst.FunctionDef]:
    for node in reversed(stack[:-1]):
        if type(node) is cst.FunctionDef:
            return node
    return None


def names_in(expr: Optional[cst.CSTNode]) -> List[str]:
    """Variables (`loss`) and attribute chains (`self.total`) an expression reads."""
    found: List[str] = []
    _add_names(expr, found)
    return found


def _add_names(expr: Optional[cst.CSTNode], found: List[str]) -> None:
    # Asked of most assignments' values: exact types (`isinstance` on libcst's abstract node classes is slow), and
    # one list filled down the recursion rather than a generator at each level.
    if expr is None:
        return
    dotted = dotted_name(expr)
    if dotted is not None:
        found.append(dotted)
        return
    expr_type = type(expr)
    if expr_type is cst.Call:
        _add_names(semantics.receiver(expr), found)
        for arg in expr.args:
            _add_names(arg.value, found)
    elif expr_type is cst.BinaryOperation:
        _add_names(expr.left, found)
        _add_names(expr.right, found)
    elif expr_type is cst.UnaryOperation:
        _add_names(expr.expression, found)
    elif expr_type is cst.Subscript or expr_type is cst.Attribute:
        _add_names(expr.value, found)
    elif expr_type is cst.Tuple or expr_type is cst.List or expr_type is cst.Dict:
        for element in expr.elements:
            _add_names(element.value, found)
    elif expr_type is cst.IfExp:  # either arm is the value; the test is only read
        _add_names(expr.body, found)
        _add_names(expr.orelse, found)


def grad_disabled_by_a_caller(function_key: str, ctx: "FileContext") -> Optional[cst.Call]:
    """A same-module call of `function_key` made with gradients disabled, if there is one."""
    for site in ctx.callgraph.call_sites(function_key):
        if semantics.grad_enabled_at(site.stack, ctx) is False:
            return site.node
    return None


def under_dynamic_grad_mode(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> bool:
    """Inside `with torch.set_grad_enabled(<not a literal>)` (or such a decorator) in the same function."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) is cst.With and stack[index + 1] is node.body:
            if any(_is_dynamic_grad_mode(item.item, ctx, stack[: index + 1]) for item in node.items):
                return True
        elif type(node) in FUNCTION_BOUNDARIES:
            return isinstance(node, cst.FunctionDef) and any(
                _is_dynamic_grad_mode(decorator.decorator, ctx, stack[:index]) for decorator in node.decorators
            )
    return False


def under_grad_mode_context(stack: Sequence[cst.CSTNode], ctx: "FileContext") -> bool:
    """Inside a `with` of a context manager from outside torch, in the same function, whose name says it
    switches to evaluation or sets the grad mode: monai's `eval_mode(model)` enters `no_grad` itself."""
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if type(node) in FUNCTION_BOUNDARIES:
            return False
        if type(node) is cst.With and stack[index + 1] is node.body:
            for item in node.items:
                manager = item.item.func if isinstance(item.item, cst.Call) else item.item
                qualified = ctx.qualified_name(manager, stack[: index + 1]) or ""
                if not qualified.startswith("torch.") and _names_a_grad_mode(semantics.terminal_name(manager) or ""):
                    return True
    return False


def _names_a_grad_mode(name: str) -> bool:
    words = [word for word in name.lower().split("_") if word]
    return names_an_evaluation(name) or any(word in ("grad", "grads", "nograd") for word in words)


def _is_dynamic_grad_mode(expr: cst.BaseExpression, ctx: "FileContext", stack) -> bool:
    return (
        isinstance(expr, cst.Call)
        and ctx.qualified_name(expr.func, stack) in semantics.SET_GRAD_ENABLED
        and semantics.grad_mode_of(expr, ctx, stack) is None
    )


# ------------------------------------------------------------------ losses


def is_loss_module(qualified: Optional[str]) -> bool:
    return bool(qualified) and qualified.startswith("torch.nn.") and qualified.endswith("Loss")


def is_loss_call(call: cst.CSTNode, ctx: "FileContext", stack=None) -> bool:
    """`F.cross_entropy(...)`, `F.mse_loss(...)`, `nn.MSELoss()(...)`, or `criterion(...)` where the criterion
    is built from an `nn.*Loss` or named like one."""
    if not isinstance(call, cst.Call):
        return False
    if isinstance(call.func, cst.Call):
        return is_loss_module(ctx.qualified_name(call.func.func, stack))
    name = ctx.qualified_name(call.func, stack)
    if name is not None:
        function = name.rpartition(".")[2]
        return name.startswith("torch.nn.functional.") and (function.endswith("_loss") or function in LOSS_FUNCTIONS)
    if is_loss_module(semantics.built_from(call.func, ctx, stack)):
        return True
    terminal = semantics.terminal_name(call.func)
    return bool(terminal) and bool(_CRITERION_NAME.match(terminal.lower()))


def is_loss_value(expr: cst.CSTNode, ctx: "FileContext", stack=None) -> bool:
    """A loss call, possibly scaled or summed: `criterion(out, y) / accumulation_steps`."""
    if isinstance(expr, cst.BinaryOperation):
        return is_loss_value(expr.left, ctx, stack) or is_loss_value(expr.right, ctx, stack)
    if isinstance(expr, cst.UnaryOperation):
        return is_loss_value(expr.expression, ctx, stack)
    return is_loss_call(expr, ctx, stack)


# ------------------------------------------------------------------ models


class Models:
    """What the spec calls a model: built from a user `nn.Module` subclass, `nn.Sequential` or a
    model builder, or a name on which `.eval()`, `.train()` or `.parameters()` is called.

    Fed from the walk (`observe_class`, `observe_call`); ask `is_model` in `finish()`.
    """

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.classes: Set[str] = set()
        self.mode_receivers: Set[str] = set()

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
            receiver = dotted_name(semantics.receiver(node))
            if receiver:
                self.mode_receivers.add(receiver)

    def is_model(self, expr: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
        name = dotted_name(expr)
        if name is None:
            return False
        terminal = semantics.terminal_name(expr) or ""
        if _CRITERION_NAME.match(terminal.lower()):
            return False
        if built_as_model(expr, self.ctx, stack):
            return True
        for value in reversed(self.ctx.assigned_values(expr, stack)):
            verdict = self._built_as_model(value, stack)
            if verdict is not None:
                return verdict
        return name in self.mode_receivers

    def _built_as_model(self, value: cst.BaseExpression, stack) -> Optional[bool]:
        """True/False when the assigned value tells, None to look at an earlier assignment (`model = model.to(device)`)."""
        if not isinstance(value, cst.Call):
            return None
        if isinstance(value.func, cst.Name) and value.func.value in self.classes:
            return True
        qualified = self.ctx.qualified_name(value.func, stack)
        if qualified in IDENTITY_WRAPPERS:  # `nn.DataParallel(model)`, `torch.compile(Net())`: the model it wraps
            wrapped = semantics.positional(value, 0) or semantics.keyword(value, "module")
            return self._built_as_model(wrapped.value, stack) if wrapped is not None else None
        if qualified is not None:
            if is_loss_module(qualified):
                return False
            return (
                qualified == "torch.nn.Sequential"
                or qualified.startswith(_MODEL_BUILDERS)
                or qualified.endswith(".from_pretrained")
            )
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


class IterationRule(Rule):
    """A rule about what one training iteration does, in order: it feeds the file's shared `Iterations` index
    from the engine's walk (each call and assignment is a moment of an iteration) and judges in `finish`."""

    def __init__(self, ctx):
        super().__init__(ctx)
        self.iterations = ctx.shared(Iterations)

    def visit_Call(self, node: cst.Call) -> None:
        self.iterations.observe(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.iterations.observe(node)
