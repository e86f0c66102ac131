from typing import Optional

import libcst as cst

from torchlint import semantics
from torchlint.finding import Fix
from torchlint.rules.api._names import import_edit, spell
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words


def is_one(node: cst.BaseExpression) -> bool:
    value = semantics.literal(node)
    return type(value) in (int, float) and value == 1


def single_argument(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The value of a call's only argument when it is plain positional (no keywords like `out=`)."""
    if len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star:
        return call.args[0].value
    return None


class Log1p(Rule):
    """
    ## What it does
    Flags `torch.log(1 + x)` and `torch.log(x + 1)`.

    ## Why is this bad?
    For small `x`, `1 + x` rounds away most of `x` before the logarithm sees it: in float32,
    `torch.log(1 + torch.tensor(1e-8))` is `0.0` while `torch.log1p(torch.tensor(1e-8))` is
    `1e-08`. Losses and log-likelihoods built this way lose precision or become exactly zero.

    ## Fix safety
    Unsafe: `torch.log1p(x)` computes the same function more accurately, so results change in
    their last bits (and a value that came out as exactly `0.0` becomes the true small value).
    torchlint calls a fix safe only when the fixed code gives identical tensors. The file's alias of
    torch is kept (`T.log(1 + x)` -> `T.log1p(x)`); calls with other arguments (`out=`) are
    not reported.
    """

    code = "TL606"
    name = "log1p"
    about_the_source = True
    # Only a call resolving to `torch.log` is flagged: its last part is written in the import or the attribute chain.
    triggers = words("log")
    call_parts = frozenset({"log"})
    fix_safety = "unsafe"
    message = "`torch.log(1 + x)` loses precision for small `x` (1e-8 gives 0.0 in float32); write `torch.log1p(x)`"
    example = """
    import torch

    nll = -torch.log(1 + probs)  # expect: TL606:8
    """
    use_instead = """
    import torch

    nll = -torch.log1p(probs)
    """

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified_name(node.func) != "torch.log":
            return
        argument = single_argument(node)
        if not isinstance(argument, cst.BinaryOperation) or not isinstance(argument.operator, cst.Add):
            return
        if is_one(argument.left):
            rest = argument.right
        elif is_one(argument.right):
            rest = argument.left
        else:
            return
        self.report(node, fix=self._fix(node, argument, rest))

    def _fix(self, node: cst.Call, argument: cst.BinaryOperation, rest: cst.BaseExpression) -> Optional[Fix]:
        edits = [self.ctx.replace(argument, self.ctx.code(rest))]
        spelled = spell(self.ctx, "torch.log1p", self.ctx.stack)
        if spelled is None:
            extra = import_edit(self.ctx, "torch.log1p", self.ctx.stack)
            if extra is None:
                return None
            spelled = "torch.log1p"
            edits.append(extra)
        edits.append(self.ctx.replace(node.func, spelled))
        return Fix.unsafe("Replace with `torch.log1p`", *edits)
