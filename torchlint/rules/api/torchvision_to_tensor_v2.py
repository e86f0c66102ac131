from typing import Optional

import libcst as cst

from torchlint.finding import Fix
from torchlint.rules.api._names import import_edit, spell
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

TO_TENSOR = "torchvision.transforms.v2.ToTensor"
V2 = "torchvision.transforms.v2"


class TorchvisionToTensorV2(Rule):
    """
    ## What it does
    Flags uses of `torchvision.transforms.v2.ToTensor` (under any import alias). The v1
    `torchvision.transforms.ToTensor` is not deprecated and is not flagged.

    ## Why is this bad?
    torchvision deprecated it: building it warns `UserWarning: The transform ToTensor() is
    deprecated and will be removed in a future release. Instead, please use
    v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]).Output is equivalent
    up to float precision.` (torchvision's own message; torchvision is not installed where
    torchlint's tests run.)

    ## Fix safety
    Safe, as torchvision documents the replacement as equivalent up to float precision:
    `v2.ToTensor()` becomes `v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])`,
    written with the file's own names for `v2` and `torch` (adding `import torch` when the
    file has none). Offered for calls without arguments only.
    """

    code = "TL609"
    name = "torchvision-to-tensor-v2"
    about_the_source = True
    # Only a reference resolving to `v2.ToTensor` is flagged: its last part is written in the import or the chain.
    triggers = words("ToTensor")
    reference_parts = frozenset({"ToTensor"})
    fix_safety = "safe"
    message = (
        "`v2.ToTensor()` is deprecated and will be removed (it warns when built); write "
        "`v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])`"
    )
    example = """
    from torchvision.transforms import v2

    transform = v2.Compose([v2.RandomHorizontalFlip(), v2.ToTensor()])  # expect: TL609:52
    """
    use_instead = """
    import torch
    from torchvision.transforms import v2

    transform = v2.Compose([v2.RandomHorizontalFlip(), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    """

    def visit_reference(self, node: cst.BaseExpression, qualified: str) -> None:
        stack = self.ctx.stack
        if qualified == TO_TENSOR:
            parent = stack[-2]
            call = parent if isinstance(parent, cst.Call) and parent.func is node and not parent.args else None
            self.report(node, fix=self._fix(call) if call is not None else None)

    def _fix(self, call: cst.Call) -> Optional[Fix]:
        stack = self.ctx.stack
        v2 = spell(self.ctx, V2, stack)
        torch = spell(self.ctx, "torch", stack)
        extra = []
        if torch is None:
            edit = import_edit(self.ctx, "torch", stack)
            torch, extra = "torch", [edit]
        if v2 is None or extra == [None]:
            return None
        text = f"{v2}.Compose([{v2}.ToImage(), {v2}.ToDtype({torch}.float32, scale=True)])"
        return Fix.safe("Replace with `v2.ToImage()` and `v2.ToDtype(torch.float32, scale=True)`", self.ctx.replace(call, text), *extra)
