"""torch's losses as the old-code rules see them: which reduce to a 0-dim tensor, which still take the legacy
`size_average=`/`reduce=` keywords, and what those keywords mean as `reduction=`.

The names are those of torch 2.13 (tests/test_api_fixes.py checks them against the installed torch's signatures).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from torchlint import semantics
from torchlint.analysis import syntax

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext

_LEGACY_MODULE_NAMES = (
    "BCELoss", "BCEWithLogitsLoss", "CosineEmbeddingLoss", "CrossEntropyLoss", "HingeEmbeddingLoss", "KLDivLoss",
    "L1Loss", "MSELoss", "MarginRankingLoss", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss",
    "NLLLoss", "NLLLoss2d", "PoissonNLLLoss", "SmoothL1Loss", "SoftMarginLoss", "TripletMarginLoss",
)
_LEGACY_FUNCTION_NAMES = (
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss", "cross_entropy",
    "hinge_embedding_loss", "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss", "multi_margin_loss",
    "multilabel_margin_loss", "multilabel_soft_margin_loss", "nll_loss", "poisson_nll_loss", "smooth_l1_loss",
    "soft_margin_loss", "triplet_margin_loss",
)
# Loss functions with a `reduction=` parameter (default "mean"): without "none" they return a 0-dim tensor.
_REDUCING_FUNCTION_NAMES = _LEGACY_FUNCTION_NAMES + (
    "ctc_loss", "gaussian_nll_loss", "huber_loss", "triplet_margin_with_distance_loss",
)

LEGACY_REDUCTION_MODULES = frozenset(
    f"{module}.{name}" for module in ("torch.nn", "torch.nn.modules.loss") for name in _LEGACY_MODULE_NAMES
)
LEGACY_REDUCTION_FUNCTIONS = frozenset(f"torch.nn.functional.{name}" for name in _LEGACY_FUNCTION_NAMES)
REDUCING_FUNCTIONS = frozenset(f"torch.nn.functional.{name}" for name in _REDUCING_FUNCTION_NAMES)
LEGACY_KEYWORDS = ("size_average", "reduce")
# The legacy loss modules by the position of their `reduce` parameter: the arguments before it (`weight`,
# `size_average`, `ignore_index`: `nn.NLLLoss2d(weight, size_average, ignore_index)`) cannot ask for no reduction,
# since without `reduce` torch reduces whatever `size_average` is (`legacy_reduction`). Another loss module's first
# parameter may be `reduction` (`nn.HuberLoss("none")`): there no positional argument is taken.
REDUCE_POSITION = {
    "BCELoss": 2, "BCEWithLogitsLoss": 2, "CosineEmbeddingLoss": 2, "CrossEntropyLoss": 3, "HingeEmbeddingLoss": 2,
    "KLDivLoss": 1, "L1Loss": 1, "MSELoss": 1, "MarginRankingLoss": 2, "MultiLabelMarginLoss": 1,
    "MultiLabelSoftMarginLoss": 2, "MultiMarginLoss": 4, "NLLLoss": 3, "NLLLoss2d": 3, "PoissonNLLLoss": 4,
    "SmoothL1Loss": 1, "SoftMarginLoss": 1, "TripletMarginLoss": 5,
}
# The legacy loss modules and functions by the position of their `size_average` parameter, the first of the two: a
# call with more positional arguments may give the legacy keywords by position too (`nn.NLLLoss(weight, False,
# reduce=False)`), which the keywords alone do not tell.
SIZE_AVERAGE_POSITION = {
    "BCELoss": 1, "BCEWithLogitsLoss": 1, "CosineEmbeddingLoss": 1, "CrossEntropyLoss": 1, "HingeEmbeddingLoss": 1,
    "KLDivLoss": 0, "L1Loss": 0, "MSELoss": 0, "MarginRankingLoss": 1, "MultiLabelMarginLoss": 0,
    "MultiLabelSoftMarginLoss": 1, "MultiMarginLoss": 3, "NLLLoss": 1, "NLLLoss2d": 1, "PoissonNLLLoss": 2,
    "SmoothL1Loss": 0, "SoftMarginLoss": 0, "TripletMarginLoss": 4,
    "binary_cross_entropy": 3, "binary_cross_entropy_with_logits": 3, "cosine_embedding_loss": 4, "cross_entropy": 3,
    "hinge_embedding_loss": 3, "kl_div": 2, "l1_loss": 2, "margin_ranking_loss": 4, "mse_loss": 2,
    "multi_margin_loss": 5, "multilabel_margin_loss": 2, "multilabel_soft_margin_loss": 3, "nll_loss": 3,
    "poisson_nll_loss": 4, "smooth_l1_loss": 2, "soft_margin_loss": 2, "triplet_margin_loss": 7,
}


def legacy_reduction(size_average: Optional[bool], reduce: Optional[bool]) -> str:
    """The `reduction` torch computes from the legacy keywords (None: not given), as its
    `torch.nn._reduction.legacy_get_string` does."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        return "mean"
    return "sum" if reduce else "none"


def literal_reduction(call: cst.Call) -> Optional[str]:
    """The reduction a loss call or constructor asks for with literal keywords ("mean" when it says nothing);
    None when a keyword is not a literal or `**kwargs` may hold one."""
    if syntax.has_star_kwargs(call):
        return None
    legacy = {}
    for name in LEGACY_KEYWORDS:
        arg = syntax.keyword(call, name)
        value = syntax.literal(arg.value) if arg is not None else None
        if value is not None and not isinstance(value, bool):
            return None
        legacy[name] = value
    if any(value is not None for value in legacy.values()):
        return legacy_reduction(legacy["size_average"], legacy["reduce"])  # they override `reduction=`
    arg = syntax.keyword(call, "reduction")
    if arg is None:
        return "mean"
    value = syntax.literal(arg.value)
    return value if isinstance(value, str) else None


def reduces_to_scalar(call: cst.Call, ctx: "FileContext", stack, applied: bool) -> bool:
    """`call` gives a 0-dim loss: a torch loss function called, or (`applied`) a torch loss module built by
    `call` and then applied, with no positional argument that could be the reduction."""
    if applied:
        name = ctx.qualified_name(call.func, stack) or ""
        positional_allowed = REDUCE_POSITION.get(name.rpartition(".")[2], 0)
        is_loss = (
            name.startswith("torch.nn.") and (name.endswith("Loss") or name in LEGACY_REDUCTION_MODULES)
            and sum(arg.keyword is None for arg in call.args) <= positional_allowed
        )
    else:  # also a loss function kept as a value: `criterion = F.cross_entropy`, then `criterion(out, y)`
        name = semantics.function_named(call.func, REDUCING_FUNCTIONS, ctx, stack)
        is_loss = name in REDUCING_FUNCTIONS and sum(arg.keyword is None for arg in call.args) <= 2
    return is_loss and not any(arg.star for arg in call.args) and literal_reduction(call) not in (None, "none")
