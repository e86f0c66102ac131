from typing import Optional

import libcst as cst

from torchlint import semantics
from torchlint.engine.context import last_parts
from torchlint.finding import Fix
from torchlint.fixes.rewrites import code_in_place
from torchlint.analysis.values import PARTIAL, partial_call
from torchlint.rules.api._losses import LEGACY_KEYWORDS, LEGACY_REDUCTION_FUNCTIONS, LEGACY_REDUCTION_MODULES, legacy_reduction
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

_LEGACY_LOSSES = LEGACY_REDUCTION_MODULES | LEGACY_REDUCTION_FUNCTIONS
_BACKWARD_FUNCTIONS = frozenset({"torch.autograd.backward"})
# `reduction=` came with torch 0.4.1; `torch-version` keeps major.minor, so a project on 0.4 counts as having it.
REDUCTION_SINCE = (0, 4)


class RemovedKeyword(Rule):
    """
    ## What it does
    Flags keywords that old torch code passes and torch has replaced:

    - `retain_variables=` in `loss.backward(...)` or `torch.autograd.backward(...)`;
    - `size_average=` and `reduce=` in a torch loss, module (`nn.CrossEntropyLoss(size_average=False)`)
      or function (`F.nll_loss(out, y, reduce=False)`), also fixed by `functools.partial`
      (`partial(nn.CrossEntropyLoss, reduce=False)`: every call of the partial passes them on).

    Not flagged: `retain_graph=` and `reduction=`; keywords named `reduce` of other calls
    (`scatter_reduce`, `torch.distributed`); losses of other libraries; these keywords
    passed by position (`nn.L1Loss(False)`), which the rule does not read; `size_average=`
    and `reduce=` in code for torch below 0.4 (`torch-version`, or the project's own
    torch requirement), where they were the only spelling (`reduction=` came with 0.4.1;
    `torch-version` ignores the patch, so a project on 0.4 is judged as having it).

    ## Why is this bad?
    `retain_variables` is gone: on torch 2.13 `loss.backward(retain_variables=True)` raises
    `TypeError: Tensor.backward() got an unexpected keyword argument 'retain_variables'`.
    `size_average` and `reduce` still work but warn (`UserWarning: size_average and reduce
    args will be deprecated, please use reduction='sum' instead.`), and they override
    `reduction=`, so a loss that passes both computes what the legacy keywords say.

    ## Fix safety
    Safe, both: `retain_variables=` -> `retain_graph=` (old torch passed the value on to
    `retain_graph`); `size_average`/`reduce` -> the `reduction=` torch derives from them
    (`size_average=False` -> `reduction="sum"`, `reduce=False` -> `reduction="none"`,
    otherwise `"mean"`), the mapping of torch's own `legacy_get_string`, offered only when
    every legacy keyword is a literal `True`, `False` or `None` and no `reduction=` is given
    (in a `partial`, the partial's keywords are rewritten).
    The test suite runs each rewrite before and after on CPU.
    """

    code = "TL613"
    name = "removed-keyword"
    about_the_source = True
    # The flagged keyword is written in the file.
    triggers = words("retain_variables", "size_average", "reduce")
    call_parts = last_parts(_BACKWARD_FUNCTIONS | _LEGACY_LOSSES | PARTIAL) | {"backward"}
    fix_safety = "safe"
    message = (
        "`retain_variables=` is the old name of `retain_graph=` and no longer exists: `backward()` raises "
        "`TypeError: ... unexpected keyword argument 'retain_variables'`; use `retain_graph=`"
    )
    legacy_reduction_message = (
        "{keywords} the pre-0.4.1 spelling of `reduction=`: torch warns (`size_average and reduce args will be "
        "deprecated`) and they override `reduction=`; use {instead}"
    )
    example = """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss(size_average=False)  # expect: TL613:33
    loss = criterion(model(x), y)
    loss.backward(retain_variables=True)  # expect: TL613:15
    """
    use_instead = """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss(reduction="sum")
    loss = criterion(model(x), y)
    loss.backward(retain_graph=True)
    """

    def visit_Call(self, node: cst.Call) -> None:
        # `partial(nn.CrossEntropyLoss, reduce=False)` passes its keywords to every call it makes of the loss.
        called = partial_call(node, self.ctx) or node
        retain = semantics.keyword(called, "retain_variables")
        if retain is not None and (semantics.method_name(called) == "backward" or self.ctx.qualified_name_in(called.func, _BACKWARD_FUNCTIONS)):
            fix = None
            if semantics.keyword(called, "retain_graph") is None:
                fix = Fix.safe("Rename to `retain_graph=`", self.ctx.replace(retain.keyword, "retain_graph"))
            self.report(retain, fix=fix)
            return
        legacy = [arg for arg in called.args if arg.keyword is not None and arg.keyword.value in LEGACY_KEYWORDS]
        if not legacy or self.ctx.config.torch_version < REDUCTION_SINCE or not self.ctx.qualified_name_in(called.func, _LEGACY_LOSSES):
            return
        values = {arg.keyword.value: semantics.literal(arg.value) for arg in legacy}
        exact = all(value is None or isinstance(value, bool) for value in values.values())
        reduction = legacy_reduction(values.get("size_average"), values.get("reduce")) if exact else None
        instead = f'`reduction="{reduction}"`' if reduction is not None else "`reduction=` (\"mean\", \"sum\" or \"none\")"
        keywords = ", ".join(f"`{arg.keyword.value}=`" for arg in legacy) + (" is" if len(legacy) == 1 else " are")
        message = self.legacy_reduction_message.format(keywords=keywords, instead=instead)
        self.report(legacy[0], message, self._reduction_fix(node, legacy, reduction))

    def _reduction_fix(self, call: cst.Call, legacy: list, reduction: Optional[str]) -> Optional[Fix]:
        if reduction is None or semantics.keyword(call, "reduction") is not None or semantics.has_star_kwargs(call):
            return None
        first = legacy[0]
        replacement = first.with_changes(keyword=cst.Name("reduction"), value=cst.SimpleString(f'"{reduction}"'))
        dropped = {id(arg) for arg in legacy[1:]}
        args = [replacement if arg is first else arg for arg in call.args if id(arg) not in dropped]
        if id(call.args[-1]) in dropped:
            args[-1] = args[-1].with_changes(comma=call.args[-1].comma)
        rebuilt = call.with_changes(args=args)
        edit = self.ctx.replace(call, code_in_place(self.ctx, rebuilt, self.ctx.stack))
        return Fix.safe(f'Use `reduction="{reduction}"`', edit)
