from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.flow import innermost_scope
from torchlint.analysis.facts import BACKWARD_FUNCTIONS, is_backward_call
from torchlint.rules.autograd._shared import grad_disabled_by_a_caller, is_loss_call, names_in
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
    # The innermost `if` the assignment sits in, and which arm: (id of the If, is the else arm).
    branch: Optional[Tuple[int, bool]] = None


class BackwardUnderNoGrad(Rule):
    """
    ## What it does
    Flags `.backward()`, `torch.autograd.backward(...)` and `torch.autograd.grad(...)` on a
    tensor that was computed with gradients disabled: inside `with torch.no_grad()`,
    `with torch.inference_mode()` or `with torch.set_grad_enabled(False)`, or in a function
    decorated with `torch.no_grad` / `torch.inference_mode`. It follows plain assignments
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
    after the region, code under a nested `torch.enable_grad()` /
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
        # (id of the function or module, variable) -> its latest value so far, in source order.
        self.values: Dict[Tuple[int, str], Value] = {}
        self.caller_mode_backwards: Set[int] = set()

    # ------------------------------------------------------------ where values are computed

    def leave_Assign(self, node: cst.Assign) -> None:
        value = self._evaluate(node.value)
        for target in node.targets:
            self._bind(target.target, value)

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, self._evaluate(node.value))

    def leave_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, self._evaluate(cst.BinaryOperation(node.target, cst.Add(), node.value)))

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name, None)

    def _bind(self, target: cst.BaseExpression, value: Optional[Value]) -> None:
        if isinstance(target, cst.Name):
            key = (id(innermost_scope(self.ctx.stack)), target.value)
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = self._merged(self.values.get(key), value._replace(branch=_branch(self.ctx.stack)))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, value)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, value)

    @staticmethod
    def _merged(earlier: Optional[Value], later: Value) -> Value:
        """`if train: out = model(x)` / `else: with no_grad(): out = model(x)`: after the `if`, `out` may have
        gradients, so the arm computed with them wins."""
        if earlier is None or earlier.branch is None or later.branch is None:
            return later
        same_if, other_arm = earlier.branch[0] == later.branch[0], earlier.branch[1] != later.branch[1]
        if same_if and other_arm and later.where == NO_GRAD:
            return earlier._replace(branch=later.branch)
        return later

    def _evaluate(self, expr: cst.BaseExpression) -> Optional[Value]:
        """Where and how the value of `expr`, evaluated at the current point, is computed (None: unknown)."""
        if _is_reference(expr):
            return self._variable(expr)
        gathered = _gathered_references(expr)
        if gathered is not None:
            return _merged_values([self._variable(reference) for reference in gathered])
        mode = semantics.grad_enabled_at(self.ctx.stack, self.ctx)
        taint = self._taint(expr)
        if mode is False or taint == NO_GRAD:
            return Value(NO_GRAD, NO_GRAD)
        return Value(ENABLED if mode else CALLER_MODE, taint)

    def _variable(self, expr: cst.BaseExpression) -> Optional[Value]:
        """A plain reference (`out`, `out.logits`, `out[0]`) shares its variable's value."""
        root = _root(expr)
        if not isinstance(root, cst.Name):
            return None
        return self.values.get((id(innermost_scope(self.ctx.stack)), root.value))

    def _taint(self, expr: cst.CSTNode) -> str:
        """NO_GRAD when `expr` is computed only from values computed without gradients, by operations
        that bring in no parameters (arithmetic, tensor methods, torch functions, losses)."""
        if isinstance(expr, _LITERALS):
            return NEUTRAL
        if isinstance(expr, cst.Name):
            value = self.values.get((id(innermost_scope(self.ctx.stack)), expr.value))
            return NEUTRAL if value is None else value.taint
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            root = _root(expr)
            if isinstance(root, cst.Name):
                if root.value == "self":  # `self.weight` may well be a parameter
                    return SOURCE
                return NEUTRAL if self.ctx.qualified_name(root) is not None else self._taint(root)
            return self._taint(expr.value)
        if isinstance(expr, cst.BinaryOperation):
            return _combine([self._taint(expr.left), self._taint(expr.right)])
        if isinstance(expr, cst.UnaryOperation):
            return self._taint(expr.expression)
        if isinstance(expr, (cst.Tuple, cst.List)):
            return _combine([self._taint(element.value) for element in expr.elements])
        if isinstance(expr, cst.Call):
            return self._call_taint(expr)
        return SOURCE

    def _call_taint(self, call: cst.Call) -> str:
        if _requires_grad(call):
            return SOURCE  # a leaf that requires grad: whatever it is combined with gets a grad_fn
        arguments = [self._taint(arg.value) for arg in call.args]
        qualified = self.ctx.qualified_name(call.func)
        if qualified is not None:
            # torch functions bring no parameters; building a module (`nn.Linear(...)`) does.
            function = qualified.rpartition(".")[2]
            return _combine(arguments) if qualified.startswith("torch.") and not function[:1].isupper() else SOURCE
        if is_loss_call(call, self.ctx):
            return _combine(arguments)
        receiver = semantics.receiver(call)
        if receiver is not None:
            owner = self._taint(receiver)
            if owner == NO_GRAD:  # out.mean(), out.logits.sum()
                return _combine([owner] + arguments)
            if semantics.method_name(call) == "scale":  # scaler.scale(loss)
                return _combine(arguments)
            # An unknown method given a tensor (`self.head(features)`) may bring its own parameters.
            return SOURCE if NO_GRAD in arguments or owner == SOURCE else NEUTRAL
        if isinstance(call.func, cst.Name) and call.func.value in _BUILTINS_PASSING_TENSORS:
            if self.ctx.scopes.binding_scope(call.func.value, self.ctx.stack) is None:
                return _combine(arguments)
        return SOURCE

    # ------------------------------------------------------------ backward calls

    def visit_Call(self, node: cst.Call) -> None:
        if not is_backward_call(node, self.ctx):
            return
        tensors = self._backpropagated(node)
        if tensors is None:
            return
        computed = [value.where for value in map(self._evaluate, tensors) if value is not None]
        if NO_GRAD in computed:
            self.report(node)
        elif CALLER_MODE in computed:
            self.caller_mode_backwards.add(id(node))

    def _backpropagated(self, call: cst.Call) -> Optional[List[cst.BaseExpression]]:
        if semantics.method_name(call) == "backward" and self.ctx.qualified_name(call.func) not in BACKWARD_FUNCTIONS:
            tensor = semantics.receiver(call)
        else:
            arg = semantics.positional(call, 0) or semantics.keyword(call, "tensors") or semantics.keyword(call, "outputs")
            tensor = arg.value if arg is not None else None
        if isinstance(tensor, (cst.List, cst.Tuple)):
            return [element.value for element in tensor.elements]
        return [tensor] if tensor is not None else None

    def finish(self) -> None:
        """A helper that runs forward and backward, called with gradients disabled one level up."""
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
    flag = semantics.keyword(call, "requires_grad")
    return flag is not None and semantics.literal(flag.value) is True


def _branch(stack) -> Optional[Tuple[int, bool]]:
    for index in range(len(stack) - 2, -1, -1):
        node = stack[index]
        if isinstance(node, cst.If):
            return id(node), stack[index + 1] is node.orelse
        if isinstance(node, (cst.FunctionDef, cst.Lambda)):
            return None
    return None


def _root(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr


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
