from typing import List, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.modules import ModuleClass, ModuleClasses, self_name, under_training_test
from torchlint.analysis.values import Values
from torchlint.engine.context import last_parts
from torchlint.engine.scopes import parameters
from torchlint.finding import Fix
from torchlint.fixes.rewrites import code_in_place, with_keywords
from torchlint.rules.base import Rule
from torchlint.rules.model._shared import IN_MODULE_CLASS
from torchlint.rules.triggers import words

_FUNCTIONS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
FUNCTIONAL_DROPOUTS = frozenset(f"torch.nn.functional.{name}" for name in _FUNCTIONS)
_PLAIN_DROPOUT = frozenset({"torch.nn.functional.dropout"})
# F.dropout(input, p=0.5, training=True, inplace=False): `training` is the third argument, the rate the second.
_TRAINING_POSITION = 2
_RATE_POSITION = 1
_ZERO_FACTORIES = frozenset({"torch.zeros", "torch.zeros_like"})


class DropoutAlwaysOn(Rule):
    """
    ## What it does
    Flags `F.dropout(x, p)` (also `F.dropout1d/2d/3d`, `F.alpha_dropout`,
    `F.feature_alpha_dropout`) called without a `training` argument in `forward` of an
    `nn.Module` subclass, or in a method `forward` calls through `self`.

    Not flagged: `training=self.training` (or any `training=` value, also the third
    positional argument), an explicit `training=True` (deliberate: Monte Carlo dropout,
    Tacotron's prenet), calls under `if self.training:` (any test reading `training`),
    a rate that is a parameter of the method with no default other than 0
    (`F.dropout(x, drop_prob)` in `forward(self, x, drop_prob)`: the caller chooses the
    rate on every call, and passes 0 where it wants none, as RVAE's sampling does; given up:
    a caller that passes a non-zero rate while evaluating, which the rule cannot see),
    `nn.Dropout` modules (they follow `eval()`), dropout of an all-zero tensor made in
    the call (`F.dropout(torch.zeros_like(h), p)`: zeros in either mode), calls passing
    `**kwargs`, and
    functional dropout outside Module methods (a plain function has no mode to follow).

    ## Why is this bad?
    The functional form has no module state to consult: its `training` parameter
    defaults to `True`. So after `model.eval()` the dropout still runs: on torch 2.13
    `F.dropout(x, 0.5)` in an evaluated model zeroes about half of the outputs (49.9%)
    and doubles the rest, so predictions are noisy and differ from call to call.

    ## Fix safety
    Unsafe: adds `training=self.training`, which changes the outputs in eval mode (that
    is the point, but a model evaluated or exported before the fix gives different
    numbers after it). Offered when the method's first parameter is the instance.
    """

    code = "TL705"
    name = "dropout-always-on"
    preview = (
        "In preview after held-out rounds 30-39 (docs/precision.md): 9 of 11 findings true at first sight. The false "
        "ones were a dropout rate every evaluation call passes as 0 (round 32) and dropout of `torch.zeros_like(h)`, "
        "zeros in either mode (round 39); both are trap fixtures now, and the rule leaves preview again when two "
        "rounds in a row read it at least 9 in 10 true."
    )
    triggers = IN_MODULE_CLASS & words(*_FUNCTIONS) & words("forward")
    call_parts = last_parts(FUNCTIONAL_DROPOUTS)
    uses_callgraph = True
    fix_safety = "unsafe"
    message = (
        "functional dropout defaults to `training=True`, so it keeps dropping after `model.eval()` (at its training "
        "rate, the kept values scaled up as in training); pass `training=self.training`"
    )
    # With the rate written as a number (or left at its default, 0.5), the message says what it does.
    rate_message = (
        "functional dropout defaults to `training=True`, so it keeps dropping after `model.eval()` (about {share} of "
        "the outputs zeroed at p={rate}, the rest scaled by {scale}); pass `training=self.training`"
    )
    example = """
    import torch.nn as nn
    import torch.nn.functional as F

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(128, 10)

        def forward(self, x):
            return self.fc(F.dropout(x, 0.5))  # expect: TL705:24
    """
    use_instead = """
    import torch.nn as nn
    import torch.nn.functional as F

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(128, 10)

        def forward(self, x):
            return self.fc(F.dropout(x, 0.5, training=self.training))
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes = ModuleClasses.of(ctx)
        self.calls: List[Tuple[cst.Call, ModuleClass, cst.FunctionDef, Fix, str]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if not self.ctx.qualified_name_in(node.func, FUNCTIONAL_DROPOUTS):
            return
        if syntax.keyword(node, "training") is not None or syntax.positional(node, _TRAINING_POSITION) is not None:
            return
        if syntax.has_star_kwargs(node) or any(arg.star == "*" for arg in node.args):
            return
        found = self.classes.enclosing(self.ctx.stack)
        if found is None or under_training_test(self.ctx, found[1]) or self._rate_chosen_by_caller(node, found[1]):
            return
        if self._drops_zeros(node):
            return
        self.calls.append((node, found[0], found[1], self._fix(node, found[1]), self._message(node)))

    def finish(self) -> None:
        for call, module, method, fix, message in self.calls:
            if id(method) in self.classes.forward_methods(module):
                self.report(call, message, fix=fix)

    def _message(self, call: cst.Call) -> str:
        """The message with the call's rate, when it is a number written in the call or the default, for `F.dropout`
        (the channel and alpha variants zero channels, or set values to a negative constant)."""
        if not self.ctx.qualified_name_in(call.func, _PLAIN_DROPOUT):
            return self.message
        written = syntax.keyword(call, "p") or syntax.positional(call, _RATE_POSITION)
        rate = 0.5 if written is None else syntax.literal(written.value)
        if type(rate) not in (int, float) or not 0 < rate < 1:
            return self.message
        return self.rate_message.format(share=f"{rate:.0%}", rate=f"{rate:g}", scale=f"{1 / (1 - rate):.3g}")

    def _rate_chosen_by_caller(self, call: cst.Call, method: cst.FunctionDef) -> bool:
        """The rate is a parameter of `method`, not rebound before the call, with no default or a default of 0: each
        call of the model says how much to drop, and the project turns dropout off by passing 0 (model calls reach
        `forward` through `__call__`, which the value model does not follow, so what they pass is not asked)."""
        rate = syntax.keyword(call, "p") or syntax.positional(call, _RATE_POSITION)
        if rate is None or type(rate.value) is not cst.Name:
            return False
        values = Values.of(self.ctx)
        found = values.bindings(rate.value, values.place(self.ctx.stack))
        if found is None or found[0] is not method or not found[1] or any(
            binding.statement is not None or binding.value is not None or binding.definition is not None
            for binding in found[1]
        ):
            return False
        param = next((param for param in parameters(method.params) if param.name.value == rate.value.value), None)
        return param is not None and (param.default is None or syntax.literal(param.default) == 0)

    def _drops_zeros(self, call: cst.Call) -> bool:
        """The input is a fresh all-zero tensor (`torch.zeros(...)`, `torch.zeros_like(h)`, `h.new_zeros(...)` written
        as the argument): dropout gives zeros back in either mode, so `training=` would change nothing. A name bound
        to one is not taken for zeros: it may be written in place before the call."""
        given = syntax.call_argument(call, 0, "input")
        return type(given) is cst.Call and (
            self.ctx.qualified_name(given.func) in _ZERO_FACTORIES or syntax.method_name(given) == "new_zeros"
        )

    def _fix(self, call: cst.Call, method: cst.FunctionDef):
        instance = self_name(method)
        if instance is None:
            return None
        fixed = with_keywords(call, [("training", cst.Attribute(cst.Name(instance), cst.Name("training")))])
        edit = self.ctx.replace(call, code_in_place(self.ctx, fixed, self.ctx.stack))
        return Fix.unsafe(f"Pass `training={instance}.training`", edit)
