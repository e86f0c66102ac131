from typing import Optional

import libcst as cst

from torchlint.finding import Fix
from torchlint.rules.api._names import import_edit, spell
from torchlint.rules.api.log1p import is_one, single_argument
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words


class Expm1(Rule):
    """
    ## What it does
    Flags `torch.exp(x) - 1`.

    ## Why is this bad?
    For small `x`, `exp(x)` is close to 1 and the subtraction cancels most significant
    digits: in float32, `torch.exp(torch.tensor(1e-8)) - 1` is `0.0` while
    `torch.expm1(torch.tensor(1e-8))` is `1e-08`.

    ## Fix safety
    Unsafe: `torch.expm1(x)` computes the same function more accurately, so results change in
    their last bits (and a value that came out as exactly `0.0` becomes the true small value).
    torchlint calls a fix safe only when the fixed code gives identical tensors. The file's alias of
    torch is kept; calls with other arguments (`out=`) are not reported.
    """

    code = "TL607"
    name = "expm1"
    about_the_source = True
    # Only a call resolving to `torch.exp` is flagged: its last part is written in the import or the attribute chain.
    triggers = words("exp")
    fix_safety = "unsafe"
    message = "`torch.exp(x) - 1` cancels to 0 for small `x` (1e-8 gives 0.0 in float32); write `torch.expm1(x)`"
    example = """
    import torch

    growth = torch.exp(rate) - 1  # expect: TL607:10
    """
    use_instead = """
    import torch

    growth = torch.expm1(rate)
    """

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if not isinstance(node.operator, cst.Subtract) or not is_one(node.right):
            return
        call = node.left
        if not isinstance(call, cst.Call) or self.ctx.qualified_name(call.func) != "torch.exp":
            return
        argument = single_argument(call)
        if argument is not None:
            self.report(node, fix=self._fix(node, argument))

    def _fix(self, node: cst.BinaryOperation, argument: cst.BaseExpression) -> Optional[Fix]:
        spelled = spell(self.ctx, "torch.expm1", self.ctx.stack)
        extra = []
        if spelled is None:
            edit = import_edit(self.ctx, "torch.expm1", self.ctx.stack)
            if edit is None:
                return None
            spelled, extra = "torch.expm1", [edit]
        replacement = self.ctx.replace(node, f"{spelled}({self.ctx.code(argument)})")
        return Fix.unsafe("Replace with `torch.expm1`", replacement, *extra)
