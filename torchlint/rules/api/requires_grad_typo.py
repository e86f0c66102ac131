import libcst as cst

from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words


class RequiresGradTypo(Rule):
    """
    ## What it does
    Flags assignments to `.require_grad` (missing `s`): `param.require_grad = False`.

    ## Why is this bad?
    Tensors and parameters accept any new Python attribute, so the assignment succeeds and
    changes nothing: `requires_grad` keeps its value (observed on torch 2.13:
    `t.require_grad = True` leaves `t.requires_grad == False`). Layers meant to be frozen
    keep training, and tensors meant to be trained never get a gradient, silently.

    ## Fix safety
    Safe: `.require_grad` is not an attribute torch reads, so renaming the target to
    `.requires_grad` only makes the assignment do what it says.
    """

    code = "TL603"
    name = "requires-grad-typo"
    # Only an assignment to the attribute `require_grad` is flagged.
    triggers = words("require_grad")
    fix_safety = "safe"
    message = (
        "`.require_grad` is a typo: the assignment creates an unused attribute and `requires_grad` "
        "stays unchanged (frozen layers keep training); write `.requires_grad`"
    )
    example = """
    for param in backbone.parameters():
        param.require_grad = False  # expect: TL603:5
    """
    use_instead = """
    for param in backbone.parameters():
        param.requires_grad = False
    """

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._check(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._check(node.target)

    def _check(self, target: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._check(element.value)
        elif isinstance(target, cst.Attribute) and target.attr.value == "require_grad":
            fix = Fix.safe("Rename to `requires_grad`", self.ctx.replace(target.attr, "requires_grad"))
            self.report(target, fix=fix)
