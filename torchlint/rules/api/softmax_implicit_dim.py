import libcst as cst

from torchlint import semantics
from torchlint.engine.context import last_parts
from torchlint.engine.walk import walk
from torchlint.rules.api._compat import in_compat_branch
from torchlint.rules.base import Rule
from torchlint.rules.triggers import fragments

# F.softmax(input, dim=None, _stacklevel=3, dtype=None): `dim` is the second parameter.
FUNCTIONS = frozenset(f"torch.nn.functional.{name}" for name in ("softmax", "log_softmax", "softmin"))
# nn.Softmax(dim=None): the only parameter.
MODULES = frozenset(
    f"{module}.{name}" for module in ("torch.nn", "torch.nn.modules.activation") for name in ("Softmax", "LogSoftmax", "Softmin")
)


class SoftmaxImplicitDim(Rule):
    """
    ## What it does
    Flags `F.softmax(x)`, `F.log_softmax(x)` and `F.softmin(x)` called without `dim`, and
    `nn.Softmax()`, `nn.LogSoftmax()` and `nn.Softmin()` built without it (also with
    `dim=None`, which means the same).

    Not flagged: any explicit `dim`, by keyword or position; a softmax module kept in an
    attribute its class never reads (`self.softmax = nn.LogSoftmax()` and nothing calls
    `self.softmax`): built and never called, it guesses nothing and does not warn; code
    chosen by the running version, either arm of a torch version test (`if
    LooseVersion(torch.__version__) < LooseVersion("0.3"): F.log_softmax(x)`, for a torch
    that had no `dim`), as TL601, TL602, TL605 and TL608 leave it; calls
    passing `*args` or `**kwargs`; `torch.softmax(x)`, `x.softmax()` and `torch.log_softmax(x)` without `dim`,
    which raise `TypeError: softmax() missing 1 required positional arguments: "dim"` at once:
    nothing runs silently there.

    ## Why is this bad?
    Without `dim`, torch guesses: dim 0 for 0-D, 1-D and 3-D input, dim 1 otherwise. For a 2-D
    `(batch, classes)` tensor that is right, but for a 3-D `(batch, time, vocabulary)` tensor it
    normalises across the batch (observed on torch 2.13: the result sums to 1 over dim 0), and
    for 4-D input over the channels. torch warns each time (`UserWarning: Implicit dimension
    choice for softmax has been deprecated. Change the call to include dim=X as an
    argument.`): the guess is deprecated.

    ## Fix safety
    No fix: the dimension the code means depends on the input's shape, which the rule does not
    know; the guess is only right for some shapes. Pass `dim=` yourself (`dim=-1` for the
    classes or vocabulary on the last axis).
    """

    code = "TL615"
    name = "softmax-implicit-dim"
    about_the_source = True
    # The call is a softmax variant of torch.nn or torch.nn.functional, all spelled with "soft".
    triggers = fragments("soft")
    call_parts = last_parts(FUNCTIONS | MODULES)
    message = (
        "softmax without `dim`: torch guesses dim 0 for 0-D, 1-D and 3-D input (for a (batch, time, vocabulary) "
        "tensor: across the batch), dim 1 otherwise, and warns `Implicit dimension choice ... has been deprecated`; "
        "pass `dim=`"
    )
    example = """
    import torch.nn as nn
    import torch.nn.functional as F

    probabilities = F.softmax(logits)  # expect: TL615:17
    head = nn.Sequential(nn.Linear(512, 10), nn.LogSoftmax())  # expect: TL615:42
    """
    use_instead = """
    import torch.nn as nn
    import torch.nn.functional as F

    probabilities = F.softmax(logits, dim=-1)
    head = nn.Sequential(nn.Linear(512, 10), nn.LogSoftmax(dim=1))
    """

    def visit_Call(self, node: cst.Call) -> None:
        if any(arg.star for arg in node.args):
            return
        if self.ctx.qualified_name_in(node.func, FUNCTIONS):
            dim = semantics.keyword(node, "dim") or semantics.positional(node, 1)
        elif self.ctx.qualified_name_in(node.func, MODULES):
            dim = semantics.keyword(node, "dim") or semantics.positional(node, 0)
            if dim is None and _never_called(node, self.ctx.stack):
                return
        else:
            return
        if (dim is None or semantics.literal(dim.value, default=0) is None) and not in_compat_branch(
            self.ctx.stack, lambda expr: self.ctx.qualified_name(expr) is not None,
        ):
            self.report(node)


def _never_called(call: cst.Call, stack) -> bool:
    """`self.softmax = nn.LogSoftmax()` in a class that never reads `self.softmax`: a softmax module only guesses
    (and warns) when it is called, and one kept in an attribute nothing reads never is."""
    parent = stack[-2] if len(stack) > 1 else None
    if type(parent) is not cst.Assign or parent.value is not call:
        return False
    targets = [target.target for target in parent.targets]
    if not all(type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self" for target in targets):
        return False
    owner = next((node for node in reversed(stack) if type(node) is cst.ClassDef), None)
    if owner is None:
        return False
    names = {target.attr.value for target in targets}
    assigned = {id(target) for target in targets}
    read = []

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Attribute and node.attr.value in names and id(node) not in assigned:
            read.append(node)
        return not read

    walk(owner, on_visit, lambda node: None)
    return not read
