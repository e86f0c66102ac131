from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.flow import Binding
from torchlint.analysis.grad_mode import grad_disabled_by_a_caller
from torchlint.analysis.losses import is_loss_call
from torchlint.analysis.syntax import names_in
from torchlint.analysis.values import Place, Values
from torchlint.analysis.facts import BACKWARD_FUNCTIONS, is_backward_call
from torchlint.engine.context import last_parts
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

# Where a local tensor was computed, as far as gradients go.
NO_GRAD = "no-grad"  # with gradients disabled, or only from such values by parameter-free operations
CALLER_MODE = "caller-mode"  # in whatever grad mode the function's caller set
ENABLED = "enabled"  # under an explicit `enable_grad()` / `set_grad_enabled(True)`
# How an expression relates to gradients: only NO_GRAD inputs, may carry grad (SOURCE), or no tensor known (NEUTRAL).
SOURCE = "source"
NEUTRAL = "neutral"

_BUILTINS_PASSING_TENSORS = frozenset({"sum", "min", "max", "abs"})
_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


class Value(NamedTuple):
    where: str  # NO_GRAD, CALLER_MODE or ENABLED
    taint: str  # NO_GRAD, SOURCE or NEUTRAL


class BackwardUnderNoGrad(Rule):
    """
    ## What it does
    Flags `.backward()`, `torch.autograd.backward(...)` and `torch.autograd.grad(...)` on a
    tensor that was computed with gradients disabled: inside `with torch.no_grad()`,
    `with torch.inference_mode()` or `with torch.set_grad_enabled(False)`, after a
    `torch.set_grad_enabled(False)` statement in the same function (it switches the mode for
    the rest of the function), or in a function decorated with `torch.no_grad` /
    `torch.inference_mode`. It follows plain assignments
    in the function (`out` computed under `no_grad`, then `loss = criterion(out, y)`
    outside, then `loss.backward()`), and one call level in the module: a helper that runs
    the forward and the backward, called under `no_grad` or from a `no_grad` function.

    ## Why is this bad?
    A tensor computed with gradients disabled has no `grad_fn`, so there is nothing to
    backpropagate through: the backward call raises `RuntimeError: element 0 of tensors
    does not require grad and does not have a grad_fn` (observed on torch 2.13, for all
    four ways of disabling gradients). It is not silent, but it usually surfaces only
    when a refactoring moves the forward pass into an evaluation block.

    What matters is where the value was computed, not where `backward()` sits: a
    `backward()` call inside `no_grad` on a loss computed outside works (no_grad does not
    affect backward) and is not flagged. Nor are values recomputed with gradients enabled
    after the region, values combined with one that carries gradients (a tensor that
    requires grad, the output of a model or of the module's own layer, `self.net(x)`),
    code under a nested `torch.enable_grad()` /
    `set_grad_enabled(True)`, functions and lambdas merely defined inside the region, or
    collections that only gather tensors computed elsewhere (`grads = [p.grad for p in
    params]` in a `no_grad` function: each gradient keeps its `grad_fn`).

    ## Fix safety
    No fix: move the forward pass (and the loss) out of the no-grad region, which changes
    what the code computes.
    """

    code = "TL101"
    name = "backward-under-no-grad"
    uses_callgraph = True
    # Every report is at a backward call (`.backward()`, `torch.autograd.backward`/`grad`) in a region a
    # `no_grad`/`inference_mode`/`set_grad_enabled` disables, here or around a caller in the file.
    triggers = words("backward", "grad") & words("no_grad", "inference_mode", "set_grad_enabled")
    call_parts = last_parts(BACKWARD_FUNCTIONS) | {"backward"}
    message = (
        "backward on a tensor computed with gradients disabled (`no_grad`, `inference_mode` or "
        "`set_grad_enabled(False)`): it has no grad_fn, so this raises `RuntimeError: element 0 of tensors does "
        "not require grad and does not have a grad_fn`; compute the forward pass and the loss with gradients enabled"
    )
    example = """
    import torch

    with torch.no_grad():
        out = model(x)
    loss = criterion(out, y)
    loss.backward()  # expect: TL101:1
    """
    use_instead = """
    import torch

    out = model(x)
    loss = criterion(out, y)
    loss.backward()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.values = Values.of(ctx)
        # id(statement) -> the grad mode it runs in, for each statement that binds a computed value.
        self.modes: Dict[int, Optional[bool]] = {}
        # id(`x += y` statement) -> the statement: `+=` binds a value the flow does not record.
        self.augmented: Dict[int, cst.AugAssign] = {}
        # Each backward call and the stack at it: judged in `finish`, when every binding's mode is known.
        self.backwards: List[Tuple[cst.Call, Tuple[cst.CSTNode, ...]]] = []
        # (id(statement), name) -> the value a binding gives; None while it is being computed (a loop feeding
        # a name back into itself) and when it is not known.
        self.bound: Dict[Tuple[int, str], Optional[Value]] = {}
        self.caller_mode_backwards: Set[int] = set()

    # ------------------------------------------------------------ where values are computed

    def leave_Assign(self, node: cst.Assign) -> None:
        self._record_mode()

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._record_mode()

    def leave_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._record_mode()

    def leave_AugAssign(self, node: cst.AugAssign) -> None:
        self.augmented[id(node)] = node
        self._record_mode()

    def _record_mode(self) -> None:
        statement = self.values.place(self.ctx.stack).statement
        if statement is not None:
            self.modes[id(statement)] = semantics.grad_enabled_at(self.ctx.stack, self.ctx)

    def _name_value(self, name: str, place: Place) -> Optional[Value]:
        """The value of the local variable `name` at `place`: the join of the bindings that reach it (None when
        one of them is not known, or the name is not local: what is computed elsewhere runs in another mode)."""
        found = self.values.bindings(cst.Name(name), place)
        if found is None or found[0] is not place.scopes[-1]:
            return None
        values = [self._binding_value(binding, place.scopes) for binding in found[1]]
        if not values or None in values:
            return None
        return _joined(values)

    def _binding_value(self, binding: Binding, scopes: Tuple[cst.CSTNode, ...]) -> Optional[Value]:
        statement = binding.statement
        if statement is None or id(statement) not in self.modes:
            return None
        key = (id(statement), binding.name)
        if key in self.bound:
            return self.bound[key]
        self.bound[key] = None
        place = Place(self.ctx, scopes, statement)
        expression = binding.value
        if expression is None and id(statement) in self.augmented and not binding.element:
            augmented = self.augmented[id(statement)]
            expression = cst.BinaryOperation(augmented.target, cst.Add(), augmented.value)
        found = None if expression is None else self._evaluate(expression, place, self.modes[id(statement)])
        self.bound[key] = found
        return found

    def _evaluate(self, expr: cst.BaseExpression, place: Place, mode: Optional[bool]) -> Optional[Value]:
        """Where and how the value of `expr`, evaluated at `place` in grad mode `mode`, is computed (None: unknown)."""
        if _is_reference(expr):
            return self._variable(expr, place)
        gathered = _gathered_references(expr)
        if gathered is not None:
            return _merged_values([self._variable(reference, place) for reference in gathered])
        taint = self._taint(expr, place)
        if mode is False or taint == NO_GRAD:
            return Value(NO_GRAD, NO_GRAD)
        return Value(ENABLED if mode else CALLER_MODE, taint)

    def _variable(self, expr: cst.BaseExpression, place: Place) -> Optional[Value]:
        """A plain reference (`out`, `out.logits`, `out[0]`) shares its variable's value."""
        root = _root(expr)
        if not isinstance(root, cst.Name):
            return None
        return self._name_value(root.value, place)

    def _taint(self, expr: cst.CSTNode, place: Place) -> str:
        """NO_GRAD when `expr` is computed only from values computed without gradients, by operations
        that bring in no parameters (arithmetic, tensor methods, torch functions, losses)."""
        if isinstance(expr, _LITERALS):
            return NEUTRAL
        if isinstance(expr, cst.Name):
            value = self._name_value(expr.value, place)
            return NEUTRAL if value is None else value.taint
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            root = _root(expr)
            if isinstance(root, cst.Name):
                if _is_self(root):  # `self.weight` may well be a parameter
                    return SOURCE
                return NEUTRAL if self.ctx.qualified_name(root, place.stack) is not None else self._taint(root, place)
            return self._taint(expr.value, place)
        if isinstance(expr, cst.BinaryOperation):
            return _combine([self._taint(expr.left, place), self._taint(expr.right, place)])
        if isinstance(expr, cst.UnaryOperation):
            return self._taint(expr.expression, place)
        if isinstance(expr, (cst.Tuple, cst.List)):
            return _combine([self._taint(element.value, place) for element in expr.elements])
        if isinstance(expr, cst.Call):
            return self._call_taint(expr, place)
        return SOURCE

    def _call_taint(self, call: cst.Call, place: Place) -> str:
        if _requires_grad(call):
            return SOURCE  # a leaf that requires grad: whatever it is combined with gets a grad_fn
        arguments = [self._taint(arg.value, place) for arg in call.args]
        qualified = self.ctx.qualified_name(call.func, place.stack)
        if qualified is not None:
            # torch functions bring no parameters; building a module (`nn.Linear(...)`) does.
            function = qualified.rpartition(".")[2]
            return _combine(arguments) if qualified.startswith("torch.") and not function[:1].isupper() else SOURCE
        if is_loss_call(call, self.ctx, place.stack):
            return _combine(arguments)
        receiver = semantics.receiver(call)
        if receiver is not None and _is_self(_root(receiver)):
            return SOURCE  # the model's own layer or method (`self.online_net(states)`) brings its parameters
        if receiver is not None:
            owner = self._taint(receiver, place)
            if owner == NO_GRAD:  # out.mean(), out.logits.sum()
                return _combine([owner] + arguments)
            if semantics.method_name(call) == "scale":  # scaler.scale(loss)
                return _combine(arguments)
            # An unknown method given a tensor (`self.head(features)`) may bring its own parameters.
            return SOURCE if NO_GRAD in arguments or owner == SOURCE else NEUTRAL
        if isinstance(call.func, cst.Name) and call.func.value in _BUILTINS_PASSING_TENSORS:
            if self.ctx.scopes.binding_scope(call.func.value, place.scopes) is None:
                return _combine(arguments)
        return SOURCE

    # ------------------------------------------------------------ backward calls

    def visit_Call(self, node: cst.Call) -> None:
        if is_backward_call(node, self.ctx):
            self.backwards.append((node, tuple(self.ctx.stack)))

    def _judge(self, call: cst.Call, stack: Tuple[cst.CSTNode, ...]) -> None:
        tensors = self._backpropagated(call, stack)
        if tensors is None:
            return
        place, mode = self.values.place(stack), semantics.grad_enabled_at(stack, self.ctx)
        computed = [value.where for value in (self._evaluate(tensor, place, mode) for tensor in tensors) if value is not None]
        if NO_GRAD in computed:
            self.report(call)
        elif CALLER_MODE in computed:
            self.caller_mode_backwards.add(id(call))

    def _backpropagated(self, call: cst.Call, stack) -> Optional[List[cst.BaseExpression]]:
        if semantics.method_name(call) == "backward" and self.ctx.qualified_name(call.func, stack) not in BACKWARD_FUNCTIONS:
            tensor = semantics.receiver(call)
        else:
            arg = semantics.positional(call, 0) or semantics.keyword(call, "tensors") or semantics.keyword(call, "outputs")
            tensor = arg.value if arg is not None else None
        if isinstance(tensor, (cst.List, cst.Tuple)):
            return [element.value for element in tensor.elements]
        return [tensor] if tensor is not None else None

    def finish(self) -> None:
        for call, stack in self.backwards:
            self._judge(call, stack)
        # A helper that runs forward and backward, called with gradients disabled one level up.
        for key, function in self.ctx.callgraph.functions.items():
            facts = function.facts.get("backward-in-caller-grad-mode", ())
            backwards = [node for node in facts if id(node) in self.caller_mode_backwards]
            if not backwards:
                continue
            caller = grad_disabled_by_a_caller(key, self.ctx)
            if caller is None:
                continue
            row = self.ctx.location(caller)[0].row
            message = (
                f"`{key}()` computes this tensor and backpropagates it, but it is called with gradients disabled "
                f"(line {row}): the tensor has no grad_fn, so this raises `RuntimeError: element 0 of tensors does "
                "not require grad and does not have a grad_fn`; call it outside the no-grad region"
            )
            for node in backwards:
                self.report(node, message)


def _requires_grad(call: cst.Call) -> bool:
    """`torch.randn(3, requires_grad=True)`, `x.requires_grad_()`, `nn.Parameter(...)` is caught as a constructor."""
    if semantics.method_name(call) == "requires_grad_":
        flag = semantics.positional(call, 0) or semantics.keyword(call, "requires_grad")
        return flag is None or semantics.literal(flag.value) is True
    return semantics.keyword_is_true(call, "requires_grad")


def _root(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr


def _is_self(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "self"


def _is_reference(expr: cst.BaseExpression) -> bool:
    """`out`, `out.logits`, `outputs[0]`: no computation of its own."""
    return isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript)) and isinstance(_root(expr), cst.Name)


def _gathered_references(expr: cst.BaseExpression) -> Optional[List[cst.BaseExpression]]:
    """The existing tensors a collection only gathers, computing nothing: `[a, b.grad]`, `[p.grad for p in params]`
    (the elements of `params`); None when `expr` computes something.

    Gathering under `no_grad` keeps each tensor's `grad_fn`: where they were computed is what counts.
    """
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        references = [element.value for element in expr.elements]
        return references if all(map(_is_reference, references)) else None
    if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp)) and expr.for_in.inner_for_in is None:
        if not _is_reference(expr.elt):
            return None
        if _root(expr.elt).value not in set(names_in(expr.for_in.target)):
            return [expr.elt]
        # An element of the iterable, or something it holds: only a variable's elements are known.
        return [expr.for_in.iter] if _is_reference(expr.for_in.iter) else []
    return None


def _joined(values: List[Value]) -> Value:
    """The value of a name that one of several bindings gave: computed without gradients only if every one was
    (`if train: out = model(x)` / `else: with no_grad(): out = model(x)` may have gradients after the `if`)."""
    for where in (ENABLED, CALLER_MODE, NO_GRAD):
        if any(value.where == where for value in values):
            return Value(where, _joined_taint([value.taint for value in values]))
    return values[0]


def _joined_taint(taints: List[str]) -> str:
    if SOURCE in taints:
        return SOURCE
    return NO_GRAD if all(taint == NO_GRAD for taint in taints) else NEUTRAL


def _merged_values(values: List[Optional[Value]]) -> Optional[Value]:
    """The value of a collection: computed without gradients if any element was (backward on it raises)."""
    known = [value for value in values if value is not None]
    if not known:
        return None
    for where in (NO_GRAD, CALLER_MODE, ENABLED):
        if any(value.where == where for value in known):
            return Value(where, _combine([value.taint for value in known]))
    return None


def _combine(taints: List[str]) -> str:
    if SOURCE in taints:
        return SOURCE
    return NO_GRAD if NO_GRAD in taints else NEUTRAL
