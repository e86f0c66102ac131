import re
from typing import Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import holds_tensor
from torchlint.analysis.file_kind import FileKind
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.triggers import attributes

# Tensor methods that return a new tensor (or the same one) and leave their receiver as it was.
_CONVERSIONS = frozenset({
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "long", "int", "bool",
    "view", "reshape", "unsqueeze", "squeeze", "t", "permute", "transpose", "contiguous", "clamp", "detach", "flatten",
})
# Of those, the ones a tensor takes no positional argument for: `metric.detach(engine)` is another object's method.
_NO_POSITIONAL = frozenset({"cpu", "float", "double", "half", "bfloat16", "long", "int", "bool", "t", "contiguous", "detach"})
# A cell boundary in the script a notebook is linted as, or in a percent-format `.py` notebook.
_CELL_MARK = re.compile(r"#\s*%%")


class DiscardedConversion(Rule):
    """
    ## What it does
    Flags a bare expression statement that converts a tensor and throws the result
    away: `x.to(device)`, `x.cuda()`, `x.cpu()`, `x.float()`/`double()`/`half()`/`long()`/
    `int()`/`bool()`, `x.view(...)`, `reshape`, `unsqueeze`, `squeeze`, `t()`, `permute`,
    `transpose`, `contiguous()`, `clamp(...)`, `detach()`, `flatten()` (also chained:
    `x.float().cuda()`).

    The receiver must be known to hold a tensor: made by a torch function
    (`torch.zeros(...)`, `torch.tensor(...)`, `F.relu(...)`) or by a tensor method of
    a tensor, computed by arithmetic with a tensor (`latent + torch.randn_like(latent) *
    strength`, also returned by a function of the file), a buffer or parameter the module
    registers by name (`self.register_buffer("inv_freq", ...)`, then `self.inv_freq`),
    unpacked from a DataLoader's batches (`for images, labels in loader:`),
    or a parameter its function calls tensor-only methods on (`x.size(0)`,
    `x.unsqueeze(1)`, `x.detach()`).

    Not flagged: `nn.Module`s (`model.to(device)`, `model.cuda()`,
    `self.encoder.half()` convert in place), in-place methods (`x.clamp_(0, 1)`,
    `x.unsqueeze_(0)`), the last line of a notebook cell (Jupyter displays it; a
    trailing `;` hides it, and then it is flagged), and objects that are not known to
    be tensors: a whole batch (`for batch in loader: batch.to(device)`; a Hugging Face
    `BatchEncoding` moves its tensors in place), a value returned by a function or
    method torchlint cannot follow, `metric.detach(engine)`.

    Given up for that precision: conversions of tensors whose origin is not
    followed (an attribute of another object, a model's output, a parameter used
    only as an argument), which stay quiet.

    ## Why is this bad?
    Tensor conversions are not in place: each returns a new tensor (or the same one
    unchanged) and leaves the receiver as it was. Observed on torch 2.13: after bare
    `x.double()`, `x.to(torch.float64)`, `y.unsqueeze(0)`, `y.t()`, `y.clamp(0, 1)` or
    `y.detach()`, the tensor is still float32 with shape (2, 3). Modules are the
    exception (`m.double()` converts `m` and returns it), which is why the line looks
    right. Code after it runs on the unconverted tensor: on the wrong device (an error
    later, far from the cause), in the wrong dtype or shape, or still attached to
    the graph.

    ## Fix safety
    Unsafe: `x.to(device)` -> `x = x.to(device)` when the receiver is a plain name. It
    changes what the following code sees, which is the point, but it may also
    change results (a tensor that was used on the CPU now moves).
    """

    code = "TL208"
    name = "discarded-conversion"
    triggers = attributes(*_CONVERSIONS)
    fix_safety = "unsafe"
    message = (
        "the result of `{call}` is discarded: tensor conversions are not in place (the tensor stays as it was, "
        "unlike a module's `.to()`); assign it: `{assigned}`"
    )
    example = """
    import torch

    def train_step(model, images, labels, device):
        images.to(device)  # expect: TL208:5
        labels.long()  # expect: TL208:5
        return model(images.unsqueeze(1)), labels.size(0)
    """
    use_instead = """
    import torch

    def train_step(model, images, labels, device):
        images = images.to(device)
        labels = labels.long()
        return model(images.unsqueeze(1)), labels.size(0)
    """

    def visit_Expr(self, node: cst.Expr) -> None:
        call = node.value
        if type(call) is not cst.Call or not _converts(call):
            return
        receiver = call.func.value
        while type(receiver) is cst.Call and _converts(receiver):
            receiver = receiver.func.value
        if self._displayed(node) or not holds_tensor(receiver, self.ctx):
            return
        code = self.ctx.code(call)
        fix = None
        assigned = f"x = {code}"
        if type(receiver) is cst.Name:
            assigned = f"{receiver.value} = {code}"
            fix = Fix.unsafe("Assign the result back", self.ctx.replace(call, assigned))
        self.report(call, self.message.format(call=code, assigned=assigned), fix)

    def _displayed(self, node: cst.Expr) -> bool:
        """The last statement of a notebook cell without a `;`: Jupyter shows its value, so it is used."""
        if self.ctx.file_kind is not FileKind.NOTEBOOK or isinstance(node.semicolon, cst.Semicolon):
            return False
        stack = self.ctx.stack
        line = stack[-2] if len(stack) >= 2 else None
        if type(stack[0]) is not cst.Module or len(stack) != 3 or type(line) is not cst.SimpleStatementLine:
            return False
        if line.body[-1] is not node:
            return False
        body = stack[0].body
        following = _next_statement(body, line)
        return following is None or any(
            line.comment is not None and _CELL_MARK.match(line.comment.value) for line in following.leading_lines
        )


def _converts(call: cst.Call) -> bool:
    method = semantics.method_name(call)
    if method not in _CONVERSIONS:
        return False
    return method not in _NO_POSITIONAL or semantics.positional(call, 0) is None


def _next_statement(body, statement) -> Optional[cst.CSTNode]:
    for index, candidate in enumerate(body):
        if candidate is statement:
            return body[index + 1] if index + 1 < len(body) else None
    return None
