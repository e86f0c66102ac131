from typing import Sequence

import libcst as cst

from torchlint.analysis.dtypes import python_number
from torchlint.analysis.values import Values
from torchlint.finding import Fix
from torchlint.rules.api._losses import reduces_to_scalar
from torchlint.rules.base import Rule
from torchlint.rules.triggers import fragments, project_imports

# Methods that reduce a whole tensor to a 0-dim one when called without arguments.
_FULL_REDUCTIONS = frozenset({"sum", "mean", "prod", "norm", "max", "min", "std", "var", "amax", "amin", "median", "nansum", "nanmean"})
_TORCH_FULL_REDUCTIONS = frozenset(f"torch.{name}" for name in _FULL_REDUCTIONS)
# Methods that keep a tensor's shape (what `Values` does not already follow through).
_SHAPE_KEEPING = frozenset({"detach", "clone", "contiguous", "abs", "sqrt", "exp", "log", "neg"})
# Arithmetic methods, which keep a tensor's shape when the other operand is a number (`kld.mul_(-0.5)`).
_NUMBER_ARITHMETIC = frozenset({"add", "sub", "mul", "div", "add_", "sub_", "mul_", "div_"})
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Power)
# The same in place (`loss /= n`): the result has the shape the operation without `=` gives.
_AUGMENTED_ARITHMETIC = (
    cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign, cst.DivideAssign, cst.FloorDivideAssign, cst.PowerAssign,
)
_MAX_DEPTH = 8
# What a 0-dim tensor can be moved to before it is indexed, still 0-dim.
_TO_HOST = frozenset({"cpu", "numpy"})
# Before 0.4 a loss was a one-element tensor: `loss.data[0]` was the way to read it, and `.item()` did not exist.
ITEM_SINCE = (0, 4)


class IndexZeroDimTensor(Rule):
    """
    ## What it does
    Flags `x.data[0]` and `x[0]` where `x` is a 0-dim tensor: a torch loss (`F.nll_loss(...)`,
    `criterion(out, y)` for a criterion built from an `nn.*Loss` in the file, without
    `reduction="none"` or `reduce=False`; positional arguments before `reduce` are taken,
    `nn.NLLLoss2d(weight, size_average, ignore_index)`), a whole-tensor reduction called without a
    dimension (`(...).sum()`, `.mean()`, `.max()`, `torch.sum(x)`, ...), arithmetic of such
    values and numbers (`loss_l + loss_c`, `loss / 2`, `kld.mul_(-0.5)`, `loss.sum() / n`
    after `n = 51`; a number may be a size, `loss.sum() / x.size(0)`, `x.shape[0]`,
    `len(x)`, `x.numel()`, another value's `.item()`, `float(...)`, a parameter named as a
    count or size or with a number as default when its callers are not all seen
    (`loss / (2 * batch_size)`, `num_pos`, `n`: a Python number, or a 0-dim tensor, which keeps
    the result 0-dim all the same), or arithmetic of
    those, or a name or attribute bound only to numbers, `self.coord_scale = 1`), also in place
    (`loss /= num_matched_boxes`, `loss *= 0.5`), and a running sum started at a number and added to
    in a loop (`total_loss = 0`, then `total_loss += loss.data * len(data)`, read after the loop
    as `total_loss[0]`; the start is left out beside the 0-dim values added), followed through
    the file's assignments (`loss = criterion(out, y)`) and what the file's functions
    return (`loss = loss_function(recon, x, mu, logvar)`) and what a method of the class
    returns when called on `self` (`loss, prec = self._forward(x, y)`, or a subclass's
    override of it: each must give a 0-dim value), or those of a project file it
    imports (`pytorch_ssim.ssim(sr, hr).data[0]` where `ssim` returns `ssim_map.mean()`),
    and `criterion(out, y)` for a criterion built from a Module class of the file or of a
    project file (`criterion = MultiBoxLoss()`) whose `forward` returns such a value, also
    received as a parameter from every call of the function (`train(loader, net, criterion)`
    in the script's `main()`), also
    after a move to the host
    (`loss.data.cpu()[0]`, `loss.data.cpu().numpy()[0]`: still 0-dim, a 0-d array).

    Not flagged: indexing a tensor with dimensions (`out.data[0]` of a batch, `x.sum(1)[0]`),
    `.size()[0]`, lists and tuples, assignments to an element (`w.data[0] = 1.0`), and values
    the rule cannot follow: a loss divided by a parameter named otherwise (`loss / weights`:
    it may be a tensor with dimensions), a criterion received as a parameter whose callers it cannot
    all see (`def train(model, criterion)` called from a file outside the project, or a
    public function of a module that nothing runs and no project file imports: callers
    outside the project may pass any criterion), a running sum one of whose terms is not
    followed (`errG_total += w_loss`, `w_loss` scaled by a setting of a config object), a function that returns a 0-dim value on one path and a tensor with dimensions on another
    (`if size_average: return ssim_map.mean()` else `ssim_map.mean(1)`: which path a call takes is not
    followed); code for torch below 0.4
    (`torch-version`, or the project's own torch requirement), where a loss was a
    one-element tensor, `loss.data[0]` read it and `.item()` did not exist yet. Given up
    for that precision: those values, which fail just the same when they are 0-dim.

    ## Why is this bad?
    Before torch 0.4 a loss was a 1-element tensor and `loss.data[0]` read its value. Since
    then a reduction gives a 0-dim tensor, and indexing one raises on torch 2.13:
    `IndexError: invalid index of a 0-dim tensor. Use tensor.item() in Python or
    tensor.item<T>() in C++ to convert a 0-dim tensor to a number`.

    ## Fix safety
    `x.data[0]` -> `x.item()`: safe, both give the Python number the old code read (the
    test suite runs both under an emulation of the old indexing). `x[0]` -> `x.item()`:
    unsafe: before 0.4 `x[0]` gave a 1-element tensor, not a number, so code after it may
    expect a tensor.
    """

    code = "TL611"
    name = "index-zero-dim-tensor"
    about_the_source = True
    # The value is a torch loss or a reduction: the file names torch (an import, or a call of one), or it comes from a
    # project file the file imports (`criterion = MultiBoxLoss()` of multibox_loss.py), where torch is named.
    triggers = fragments("torch") | project_imports()
    fix_safety = "safe or unsafe"
    message = (
        "this is a 0-dim tensor (a loss or a full reduction): indexing it raises `IndexError: invalid index of a "
        "0-dim tensor. Use tensor.item()`; before torch 0.4 it was a 1-element tensor; use `.item()`"
    )
    # `.numpy()` of a 0-dim tensor is a 0-d array, and numpy words the same failure its own way.
    array_message = (
        "this is a 0-dim array (`.numpy()` of a loss or a full reduction): indexing it raises `IndexError: too many "
        "indices for array: array is 0-dimensional, but 1 were indexed`; before torch 0.4 it was a 1-element "
        "tensor; use `.item()`"
    )
    example = """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()
    loss = criterion(model(images), labels)
    running_loss += loss.data[0]  # expect: TL611:17
    """
    use_instead = """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()
    loss = criterion(model(images), labels)
    running_loss += loss.item()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # Whether the value being judged is known to be a tensor, so that its methods are torch's.
        self.tensor_methods = False
        # The in-place updates being judged (`total += loss` in a loop, which its own target reaches again).
        self._updates_judged: set = set()

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if self.ctx.config.torch_version < ITEM_SINCE or not _indexes_zero(node) or self._is_target(node):
            return
        indexed = node.value
        # Moved to the host first (`loss.data.cpu().numpy()[0]`): `.cpu()` keeps the shape, `.numpy()` makes a 0-d
        # array, which `[0]` fails on the same way.
        array = type(indexed) is cst.Call and type(indexed.func) is cst.Attribute and indexed.func.attr.value == "numpy"
        while type(indexed) is cst.Call and not indexed.args and type(indexed.func) is cst.Attribute and indexed.func.attr.value in _TO_HOST:
            indexed = indexed.func.value
        through_data = type(indexed) is cst.Attribute and indexed.attr.value == "data"
        tensor = indexed.value if through_data else indexed
        # `.data` is a tensor's: there `.sum()` is torch's; elsewhere it may be pandas' (`df.max()` is a Series).
        self.tensor_methods = through_data
        if not self._is_scalar(self.ctx, tensor, self.ctx.stack, 0):
            return
        edit = self.ctx.replace(node, f"{self.ctx.code(tensor)}.item()")
        fix = Fix.safe("Use `.item()`", edit) if through_data else Fix.unsafe("Use `.item()`", edit)
        self.report(node, self.array_message if array else self.message, fix=fix)

    def _is_target(self, node: cst.Subscript) -> bool:
        parent = self.ctx.stack[-2] if len(self.ctx.stack) > 1 else None
        return isinstance(parent, (cst.AssignTarget, cst.Del)) or (isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and parent.target is node)

    def _is_scalar(self, ctx, expr: cst.BaseExpression, stack: Sequence[cst.CSTNode], depth: int) -> bool:
        """`expr`, evaluated inside `stack` in the file of `ctx`, is 0-dim. An origin may lie in another project file
        (what an imported function returns, what an imported loss class's `forward` returns): it is read there, with
        that file's imports."""
        return self._scalar_or_neutral(ctx, expr, stack, depth) is True

    def _scalar_or_neutral(self, ctx, expr: cst.BaseExpression, stack: Sequence[cst.CSTNode], depth: int):
        """True when `expr` is 0-dim, False when it may be something else, None when every origin is neutral: a
        number that starts a running sum (`total = 0`, then `total += loss` in a loop: the sum of 0 and 0-dim
        tensors is one) or an in-place update already being judged (the loop's way back to the `+=`). A number
        origin is left out only beside a 0-dim one: `x.data` of the number would fail otherwise, `x[0]` too."""
        if depth > _MAX_DEPTH:
            return False
        origins = Values.of(ctx).origins(expr, stack, dereferenced=True)
        if not origins:
            return False
        scalar = False
        for origin in origins:
            if origin.opaque:
                judged = self._updated_in_place(origin, depth)
            elif python_number(origin.node, origin.place.context, origin.place.stack):
                judged = None
            else:
                judged = self._is_scalar_node(origin.place.context, origin.node, origin.place.stack, origin.applied, depth)
            if judged is False:
                return False
            scalar = scalar or judged is True
        return True if scalar else None

    def _updated_in_place(self, origin, depth: int):
        """An origin the value model leaves opaque because a binding of the name is an in-place update
        (`loc_loss /= num_matched_boxes`, `errD_total += errD` in a loop): 0-dim when every binding it stands for
        is arithmetic of the name's value before it and a number or 0-dim value, each of those 0-dim, as
        `loc_loss / num_matched_boxes` would be; None when each is an update already being judged (the value before
        it is the one the judgement is about). A parameter, a loop target or any other unknown binding leaves it
        unknown (False)."""
        ctx = origin.place.context
        if type(origin.node) is not cst.Name:
            return False
        found = Values.of(ctx).bindings(origin.node, origin.place)
        if found is None:
            return False
        scope, bindings = found
        if scope not in origin.place.scopes:
            return False
        scopes = origin.place.scopes[: origin.place.scopes.index(scope) + 1]
        unknown = [binding for binding in bindings if binding.value is None and binding.definition is None]
        if not unknown or not all(
            type(binding.statement) is cst.AugAssign and isinstance(binding.statement.operator, _AUGMENTED_ARITHMETIC)
            for binding in unknown
        ):
            return False
        pending = [binding.statement for binding in unknown if id(binding.statement) not in self._updates_judged]
        if not pending:
            return None
        self._updates_judged.update(map(id, pending))
        try:
            return all(
                self._arithmetic_is_scalar(ctx, (statement.target, statement.value), scopes + (statement,), depth)
                for statement in pending
            )
        finally:
            self._updates_judged.difference_update(map(id, pending))

    def _is_scalar_node(self, ctx, node: cst.CSTNode, stack, applied: bool, depth: int) -> bool:
        if type(node) is cst.Call:
            if applied or reduces_to_scalar(node, ctx, stack, applied=False):
                return reduces_to_scalar(node, ctx, stack, applied=True) if applied else True
            return self._reduction_call(ctx, node, stack, depth)
        if type(node) is cst.Attribute and node.attr.value == "data":
            return self._is_scalar(ctx, node.value, stack, depth + 1)
        if type(node) is cst.BinaryOperation and isinstance(node.operator, _ARITHMETIC):
            return self._arithmetic_is_scalar(ctx, (node.left, node.right), stack, depth)
        if type(node) is cst.UnaryOperation and isinstance(node.operator, cst.Minus):
            return self._is_scalar(ctx, node.expression, stack, depth + 1)
        return False

    def _arithmetic_is_scalar(self, ctx, sides, stack, depth: int) -> bool:
        """Arithmetic of 0-dim values and numbers, at least one of them a tensor, is 0-dim."""
        tensor = False
        for side in sides:
            if python_number(side, ctx, stack):
                continue
            judged = self._scalar_or_neutral(ctx, side, stack, depth + 1)
            if judged is False:
                return False
            tensor = tensor or judged is True
        return tensor

    def _reduction_call(self, ctx, call: cst.Call, stack, depth: int) -> bool:
        func = call.func
        if ctx.qualified_name_in(func, _TORCH_FULL_REDUCTIONS, stack):
            return len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star
        if type(func) is not cst.Attribute:
            return False
        method = func.attr.value
        if not self.tensor_methods:
            return False
        if method in _FULL_REDUCTIONS:
            return not call.args
        if method == "dot":
            return True
        if method in _NUMBER_ARITHMETIC:
            keeps_shape = (
                len(call.args) == 1 and call.args[0].keyword is None and python_number(call.args[0].value, ctx, stack)
            )
        else:
            keeps_shape = method in _SHAPE_KEEPING and not call.args
        return keeps_shape and self._is_scalar(ctx, func.value, stack, depth + 1)


def _indexes_zero(node: cst.Subscript) -> bool:
    if len(node.slice) != 1 or type(node.slice[0].slice) is not cst.Index:
        return False
    index = node.slice[0].slice.value
    return type(index) is cst.Integer and _is_zero(index.value)


def _is_zero(integer: str) -> bool:
    """An integer literal (`0`, `00`, `0x0`, `0_0`) is zero when it has no digit but zeros after its base prefix:
    what its `evaluated_value` says, without the compile that costs."""
    digits = integer.lower()
    if digits.startswith(("0x", "0o", "0b")):
        digits = digits[2:]
    return set(digits) <= {"0", "_"}
