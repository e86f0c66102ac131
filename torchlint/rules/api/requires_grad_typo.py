import libcst as cst

from torchlint import semantics
from torchlint.analysis.values import Values

from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words


# Torch functions that make a new tensor which requires grad only when asked (`requires_grad=True`), whatever their
# arguments (not `torch.cat` or `torch.as_tensor`, whose result can come from tensors that require grad).
FRESH_TENSORS = frozenset(f"torch.{name}" for name in (
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace", "eye",
    "tensor", "from_numpy", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
    "randint_like", "Tensor", "FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "ByteTensor",
    "BoolTensor",
))


class RequiresGradTypo(Rule):
    """
    ## What it does
    Flags assignments to `.require_grad` (missing `s`): `param.require_grad = False`.

    ## Why is this bad?
    Tensors and parameters accept any new Python attribute, so the assignment succeeds and
    changes nothing: `requires_grad` keeps its value (observed on torch 2.13:
    `t.require_grad = True` leaves `t.requires_grad == False`). Layers meant to be frozen
    keep training, and tensors meant to be trained never get a gradient, silently.
    Where the tensor comes straight from a torch factory (`torch.zeros(...)`, without
    `requires_grad=True`) and the line sets `False`, it does not require grad anyway:
    the message says that nothing changes there, only that the line does not do what it
    says.

    ## Fix safety
    Safe: `.require_grad` is not an attribute torch reads, so renaming the target to
    `.requires_grad` only makes the assignment do what it says.
    """

    code = "TL603"
    name = "requires-grad-typo"
    about_the_source = True
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
            self._check(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._check(node.target, node.value)

    def _check(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._check(element.value, value)
        elif isinstance(target, cst.Attribute) and target.attr.value == "require_grad":
            fix = Fix.safe("Rename to `requires_grad`", self.ctx.replace(target.attr, "requires_grad"))
            message = None
            if semantics.literal(value, None) is False and self._fresh_from_factory(target.value):
                message = (
                    "`.require_grad` is a typo: the assignment creates an unused attribute; this tensor comes from a "
                    "torch factory and does not require grad anyway, so nothing changes here, but the line does not do "
                    "what it says; write `.requires_grad`"
                )
            self.report(target, message, fix=fix)

    def _fresh_from_factory(self, tensor: cst.BaseExpression) -> bool:
        """Every value `tensor` may hold is made by a torch factory without `requires_grad=` (through casts)."""
        values = Values.of(self.ctx)
        # `.requires_grad_()` returns its tensor, so the value model follows it back to the factory: seen here.
        if any("requires_grad_" in self.ctx.code(value) for value in values.assigned_here(tensor)):
            return False
        origins = values.origins(tensor)
        return bool(origins) and all(
            type(origin.node) is cst.Call and not origin.applied and not origin.opaque
            and origin.place.context.qualified_name(origin.node.func, origin.place.stack) in FRESH_TENSORS
            and semantics.keyword(origin.node, "requires_grad") is None
            for origin in origins
        )
