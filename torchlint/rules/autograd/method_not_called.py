from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis.training import OPTIMIZER_PARTS, optimizer_class
from torchlint.analysis.values import Values
from torchlint.engine.context import last_parts
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes

_TORCH_SAVE = frozenset({"torch.save", "torch.serialization.save"})
# The method a bare statement names, and what not calling it leaves as it was.
_LEFT_UNDONE = {
    "eval": "the model stays in training mode (dropout on, batch norm updating its statistics)",
    "train": "the model stays in the mode it was in",
    "zero_grad": "the gradients are not cleared and keep accumulating",
    "step": "no step runs (an optimizer leaves the weights as they are, a scheduler the learning rate)",
    "backward": "no gradient is computed",
}
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})


class MethodNotCalled(Rule):
    """
    ## What it does
    Flags a method named where it was meant to be called:

    - a bare statement `model.eval`, `model.train`, `optimizer.zero_grad`,
      `optimizer.step`, `scheduler.step` or `loss.backward` (no parentheses);
    - `torch.save(model.state_dict, f)`, also as a value of the dict being saved
      (`torch.save({"model": model.state_dict}, f)`);
    - an optimizer built on `model.parameters` (`torch.optim.SGD(model.parameters, lr=0.1)`),
      also as the `"params"` of a parameter group.

    Not flagged: the same names called; attribute references passed on as callbacks
    (`hooks.append(model.eval)`, `register(optimizer.step)`), stored, or read with `getattr`;
    an attribute the code assigns under the method's name (`self.parameters =
    list(net.parameters())` in a class that is not a Module).

    ## Why is this bad?
    Naming a method only reads it. Observed on torch 2.13: after a bare `model.eval`
    `model.training` is still True, and after a bare `opt.zero_grad` the gradients are kept.
    `torch.save(model.state_dict, f)` succeeds (it pickles the bound method, and the whole
    module with it), then `torch.load(f)` fails under the default `weights_only=True`
    (`UnpicklingError: Weights only load failed`), and with `weights_only=False`
    `load_state_dict` gets a method and raises `TypeError: Expected state_dict to be
    dict-like, got <class 'method'>`: a late crash, when the checkpoint is used.
    `optim.SGD(model.parameters, ...)` raises `TypeError: 'method' object is not iterable`
    at once.

    ## Fix safety
    Unsafe: the fix adds the call (`model.eval()`, `model.state_dict()`,
    `model.parameters()`). It makes the code do what it says, which changes what the program
    does: the model switches mode, the optimizer steps, the checkpoint holds tensors.
    """

    code = "TL114"
    name = "method-not-called"
    fix_safety = "unsafe"
    # Each shape names one of these methods after a dot.
    triggers = attributes(*_LEFT_UNDONE, "state_dict", *_PARAMETER_METHODS)
    call_parts = last_parts(_TORCH_SAVE) | OPTIMIZER_PARTS
    message = "`{code}` only names the method and does nothing: {undone}; call it: `{code}()`"
    example = """
    model.eval  # expect: TL114:1
    with torch.no_grad():
        accuracy = evaluate(model, loader)
    """
    use_instead = """
    model.eval()
    with torch.no_grad():
        accuracy = evaluate(model, loader)
    """

    _SAVED_METHOD = (
        "`{code}` is the method, not the state dict: `torch.save` pickles the bound method with the whole module, "
        "and loading it fails later (`Weights only load failed` under the default `weights_only=True`; with "
        "`weights_only=False`, `load_state_dict` raises `TypeError: Expected state_dict to be dict-like`); save "
        "`{code}()`"
    )
    _PARAMETERS_METHOD = (
        "`{code}` is the method, not the parameters: the optimizer raises `TypeError: 'method' object is not "
        "iterable`; pass `{code}()`"
    )

    def visit_Expr(self, node: cst.Expr) -> None:
        value = node.value
        if type(value) is cst.Attribute and value.attr.value in _LEFT_UNDONE:
            code = self.ctx.code(value)
            message = self.message.format(code=code, undone=_LEFT_UNDONE[value.attr.value])
            self.report(value, message, self._fix(value))

    def visit_Call(self, node: cst.Call) -> None:
        if semantics.terminal_name(node.func) == "save" and self.ctx.qualified_name_in(node.func, _TORCH_SAVE):
            saved = semantics.positional(node, 0) or semantics.keyword(node, "obj")
            for method in _uncalled(saved.value if saved is not None else None, frozenset({"state_dict"})):
                self.report(method, self._SAVED_METHOD.format(code=self.ctx.code(method)), self._fix(method))
        elif optimizer_class(node, self.ctx) is not None:
            params = semantics.positional(node, 0) or semantics.keyword(node, "params")
            for method in _uncalled(params.value if params is not None else None, _PARAMETER_METHODS, groups=True):
                if self._assigned(method):
                    continue
                self.report(method, self._PARAMETERS_METHOD.format(code=self.ctx.code(method)), self._fix(method))

    def _assigned(self, method: cst.Attribute) -> bool:
        """The name is an attribute the code assigns, not the method: `self.parameters = list(net.parameters())`
        in a class that is not a Module (LPIPS's `DistModel`)."""
        return any(not origin.opaque and origin.node is not method for origin in Values.of(self.ctx).origins(method))

    def _fix(self, method: cst.Attribute) -> Fix:
        code = self.ctx.code(method)
        return Fix.unsafe(f"Call it: `{code}()`", self.ctx.replace(method, f"{code}()"))


def _uncalled(expr: Optional[cst.BaseExpression], methods, groups: bool = False) -> Iterator[cst.Attribute]:
    """`x.m` for m in `methods`, as `expr` itself or as a value of the dict literal `expr` (with `groups`: of
    the dicts in the list literal `expr`, as optimizers take parameter groups)."""
    if expr is None:
        return
    if type(expr) is cst.Attribute and expr.attr.value in methods:
        yield expr
    elif type(expr) is cst.Dict and not groups:
        for element in expr.elements:
            if isinstance(element, cst.DictElement):
                yield from _uncalled(element.value, methods)
    elif type(expr) in (cst.List, cst.Tuple) and groups:
        for element in expr.elements:
            group = element.value
            if type(group) is cst.Dict:
                for item in group.elements:
                    if isinstance(item, cst.DictElement) and semantics.literal(item.key) == "params":
                        yield from _uncalled(item.value, methods)
