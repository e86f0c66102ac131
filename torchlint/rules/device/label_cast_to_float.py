from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.conversions import Conversion, conversion, peel_moves
from torchlint.analysis.dtypes import CAST_METHODS, FLOAT_DTYPES, dtype_of
from torchlint.analysis.values import Values
from torchlint.finding import Fix
from torchlint.rules.base import Rule
from torchlint.rules.device._chains import chain_parent, tail_edit, to_call
from torchlint.rules.triggers import words

FLOAT_TARGET_LOSS_MODULES = frozenset(
    f"{prefix}.{name}"
    for prefix in ("torch.nn", "torch.nn.modules.loss")
    for name in ("BCELoss", "BCEWithLogitsLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss")
)
FLOAT_TARGET_LOSS_FUNCTIONS = frozenset(
    f"torch.nn.functional.{name}"
    for name in (
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "l1_loss",
        "smooth_l1_loss", "huber_loss", "kl_div",
    )
)
FLOAT_TARGET_LOSSES = FLOAT_TARGET_LOSS_MODULES | FLOAT_TARGET_LOSS_FUNCTIONS
# The methods a float cast can be written with (most calls are not one: checked before reading the call).
_FLOAT_CASTING_METHODS = frozenset(
    method for method, dtype in CAST_METHODS.items() if dtype in FLOAT_DTYPES
) | {"to", "type"}
INTEGER_DTYPES = frozenset({"int64", "int32", "int16", "int8", "uint8"})
# Names and producers of probability / one-hot targets: CrossEntropyLoss reads a float (N, C) target as class probabilities.
SOFT_TARGET_WORDS = ("soft", "onehot", "one_hot", "prob", "smooth", "mix", "dist")
SOFT_TARGET_PRODUCERS = frozenset({"one_hot", "softmax", "log_softmax", "sigmoid"})
# What float32/16 cannot tell apart: consecutive integers above the mantissa's reach.
MERGED_IDS = {
    "float32": "float32 also merges ids above 2**24 (16777217 -> 16777216)",
    "float16": "float16 also merges ids above 2**11 (2049 -> 2048)",
    "bfloat16": "bfloat16 also merges ids above 2**8 (257 -> 256)",
}
TORCH_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16"}


class LabelCastToFloat(Rule):
    """
    ## What it does
    Flags a float cast (`.float()`, `.double()`, `.half()`, `.to(<float dtype>)`,
    `.type(torch.FloatTensor)`) of a label-like name when the result is the target of
    a class-index loss (`nn.CrossEntropyLoss`, `nn.NLLLoss`, `F.cross_entropy`,
    `F.nll_loss`, or a criterion variable bound to one), directly, through device
    moves or through a variable; or when the name holds integer class ids from the
    same scope (`torch.randint`, `.long()`, `dtype=torch.long`).

    ## Why is this bad?
    Class-index targets must be integers: CrossEntropyLoss and NLLLoss raise
    `RuntimeError: expected target dtype to be Long or Byte, but got Float`. Even
    before a loss sees them, float32 cannot hold every id above 2**24:
    16777217 becomes 16777216, and 1,000 consecutive ids from 2**24 collapse to 501
    distinct values (observed on torch 2.13).

    Not flagged: casts whose consumer needs float targets (`BCELoss`,
    `BCEWithLogitsLoss`, `MSELoss`, `L1Loss`, `SmoothL1Loss`, `HuberLoss`,
    `KLDivLoss` and their functional forms), soft-label targets (one-hot or
    probability targets of the logits' shape, which CrossEntropyLoss reads as class
    probabilities), and binary labels from `torch.randint(0, 2, ...)`, which feed
    float-target losses.

    ## Fix safety
    Unsafe: the fix drops the cast (`target.float()` -> `target`). That is right for
    class indices, but the code after the cast may rely on a float tensor.

    ## Options
    - `label-names`: glob patterns of label-like names (default `y`, `y_true`,
      `target(s)`, `label(s)`, `gt`, `cls`, `class_ids`, `*_label(s)`, `*_target(s)`).
    """

    code = "TL203"
    name = "label-cast-to-float"
    # Every finding is a float cast: a `.float()`-style method, a float dtype (aliases included) or a float
    # tensor type, whose last part is written however torch is imported.
    triggers = words("float", "double", "half", "bfloat16", "float32", "float64", "float16", "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor")
    fix_safety = "unsafe"
    message = (
        "class labels cast to float: CrossEntropyLoss/NLLLoss raise `expected target dtype to be Long or Byte, "
        "but got Float`, and float32 merges ids above 2**24 (16777217 -> 16777216); keep the labels int64"
    )
    example = """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()
    loss = criterion(model(images), labels.float())  # expect: TL203:33
    """
    use_instead = """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()
    loss = criterion(model(images), labels)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        # Casts whose result was assigned to a name: id(assigned value) -> (assigned value, cast, integer ids?)
        self.assigned: Dict[int, Tuple[cst.BaseExpression, cst.Call, bool]] = {}
        self.float_consumed: Set[int] = set()
        self.reported: Set[int] = set()
        # Whether the file can name the losses each call is asked about, read from its text once (`may_name`).
        self.names_class_index_losses = ctx.may_name(semantics.CLASS_INDEX_LOSSES)
        self.names_float_target_losses = ctx.may_name(FLOAT_TARGET_LOSSES)

    def visit_Call(self, node: cst.Call) -> None:
        if not self.assigned and semantics.method_name(node) not in _FLOAT_CASTING_METHODS:
            # Not a cast, and no cast is held by a variable yet for a loss call to read: whether the call is a
            # loss, which the value model is asked, would change nothing.
            return
        if self.names_class_index_losses and semantics.is_class_index_loss(node, self.ctx):
            self._check_target_variable(node)
        elif self._needs_float_target(node):
            for arg in node.args:
                for _, cast, _ in self._casts_bound_to(peel_moves(arg.value, self.ctx)):
                    self.float_consumed.add(id(cast))
        else:
            self._check_cast(node)

    def finish(self) -> None:
        for _, cast, integer_ids in self.assigned.values():
            if integer_ids and id(cast) not in self.float_consumed:
                self._report(cast)

    # -------------------------------------------------------------- the cast itself

    def _check_cast(self, node: cst.Call) -> None:
        if semantics.method_name(node) not in _FLOAT_CASTING_METHODS:
            return
        read = conversion(node, self.ctx)
        if read is None or read.dtype not in FLOAT_DTYPES:
            return
        labels = peel_moves(node.func.value, self.ctx)
        if not self._is_label(labels) or self._is_soft_target(labels):
            return
        integer_ids = self._holds_integer_ids(labels)
        # Follow the result through device moves (`labels.float().to(device)`) to what consumes it.
        index = len(self.ctx.stack) - 1
        while True:
            parent = chain_parent(self.ctx.stack, index)
            read_parent = conversion(parent, self.ctx) if parent is not None else None
            if read_parent is None or not read_parent.moves or read_parent.casts:
                break
            index -= 2
        result = self.ctx.stack[index]
        holder = self.ctx.stack[index - 1] if index >= 1 else None
        if isinstance(holder, cst.Arg) and index >= 2 and isinstance(self.ctx.stack[index - 2], cst.Call):
            consumer = self.ctx.stack[index - 2]
            stack = self.ctx.stack[: index - 1]
            if semantics.is_class_index_loss(consumer, self.ctx, stack):
                if holder is _target_arg(consumer):
                    self._report(node)
                return
            if self._needs_float_target(consumer, stack):
                return
        elif isinstance(holder, cst.Assign) and holder.value is result and len(holder.targets) == 1:
            target = holder.targets[0].target
            if isinstance(target, cst.Name):
                self.assigned[id(result)] = (result, node, integer_ids)
                return
        if integer_ids:
            self._report(node)

    def _is_label(self, expr: cst.BaseExpression) -> bool:
        name = _label_name(expr)
        return bool(name) and self.ctx.config.is_label_name(name)

    def _is_soft_target(self, labels: cst.BaseExpression) -> bool:
        name = (_label_name(labels) or "").lower()
        if any(word in name for word in SOFT_TARGET_WORDS):
            return True
        value = self._latest_value(labels)
        return isinstance(value, cst.Call) and semantics.terminal_name(value.func) in SOFT_TARGET_PRODUCERS

    def _holds_integer_ids(self, labels: cst.BaseExpression) -> bool:
        """The name was last assigned class ids: `torch.randint(0, C, ...)`, `.long()`, `dtype=torch.long`."""
        value = self._latest_value(labels)
        if not isinstance(value, cst.Call):
            return False
        value = peel_moves(value, self.ctx)
        if not isinstance(value, cst.Call):
            return False
        if self.ctx.qualified_name(value.func) == "torch.randint":
            return not _binary_randint(value)
        read = conversion(value, self.ctx)
        if read is not None and read.dtype in INTEGER_DTYPES:
            return True
        dtype = semantics.keyword(value, "dtype")
        return dtype is not None and dtype_of(dtype.value, self.ctx) in ("int64", "int32")

    # -------------------------------------------------------------- through a variable

    def _casts_bound_to(self, name: cst.BaseExpression) -> List[Tuple[cst.BaseExpression, cst.Call, bool]]:
        """The casts whose result `name` currently holds (the assignments of it that reach this point)."""
        return [self.assigned[id(value)] for value in Values.of(self.ctx).assigned_here(name) if id(value) in self.assigned]

    def _latest_value(self, name: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        """The one value the variable holds here, when a single plain assignment reaches this point."""
        values = Values.of(self.ctx).assigned_here(name)
        return values[0] if len(values) == 1 else None

    def _check_target_variable(self, loss: cst.Call) -> None:
        target = _target_arg(loss)
        if target is None:
            return
        for _, cast, _ in self._casts_bound_to(peel_moves(target.value, self.ctx)):
            self._report(cast)

    def _needs_float_target(self, call: cst.Call, stack=None) -> bool:
        if not self.names_float_target_losses:
            return False
        if self.ctx.qualified_name_in(call.func, FLOAT_TARGET_LOSS_FUNCTIONS, stack):
            return True
        if type(call.func) is cst.Call:  # nn.BCELoss()(pred, target)
            return self.ctx.qualified_name_in(call.func.func, FLOAT_TARGET_LOSS_MODULES, stack)
        # `bce = F.binary_cross_entropy_with_logits`, then `bce(logits, y.float())`.
        return semantics.built_from_in(call.func, FLOAT_TARGET_LOSS_MODULES, self.ctx, stack) or (
            semantics.function_named(call.func, FLOAT_TARGET_LOSS_FUNCTIONS, self.ctx, stack) in FLOAT_TARGET_LOSS_FUNCTIONS
        )

    # -------------------------------------------------------------- reporting

    def _report(self, cast: cst.Call) -> None:
        if id(cast) in self.reported:
            return
        self.reported.add(id(cast))
        read = conversion(cast, self.ctx)
        message = (
            f"class labels cast to {read.dtype}: CrossEntropyLoss/NLLLoss raise `expected target dtype to be Long "
            f"or Byte, but got {TORCH_TYPE_NAMES[read.dtype]}`"
        )
        if read.dtype in MERGED_IDS:
            message += f", and {MERGED_IDS[read.dtype]}"
        self.report(cast, message + "; keep the labels int64 (drop the cast)", self._fix(read))

    def _fix(self, read: Conversion) -> Optional[Fix]:
        if not read.complete:
            return None
        receiver = read.call.func.value
        if read.moves:  # `.to(device, torch.float32)`: keep the move
            content = to_call(read.device, *read.keywords)
            return Fix.unsafe("Drop the cast, keep the move", tail_edit(self.ctx, read.call, read.call, content))
        if read.keywords:
            return None
        return Fix.unsafe("Drop the cast", self.ctx.replace(read.call, self.ctx.code(receiver)))


def _label_name(expr: cst.BaseExpression) -> Optional[str]:
    """`labels` for `labels`, `batch.labels` and `batch["labels"]`."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        index = expr.slice[0].slice
        key = semantics.literal(index.value) if isinstance(index, cst.Index) else None
        return key if isinstance(key, str) else None
    return semantics.terminal_name(expr)


def _target_arg(loss: cst.Call) -> Optional[cst.Arg]:
    return semantics.keyword(loss, "target") or semantics.positional(loss, 1)


def _binary_randint(call: cst.Call) -> bool:
    """`torch.randint(0, 2, size)` / `torch.randint(2, size)`: 0/1 labels, the input of float-target losses."""
    positional = [arg.value for arg in call.args if arg.keyword is None]
    high = semantics.keyword(call, "high")
    if high is not None:
        bound = high.value
    else:  # randint(high, size) or randint(low, high, size)
        bound = positional[1] if len(positional) >= 3 else positional[0] if positional else None
    value = semantics.literal(bound, default=None)
    return isinstance(value, int) and value <= 2
