from typing import Optional, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.engine.context import last_parts
from torchlint.finding import Fix
from torchlint.fixes.rewrites import code_in_place
from torchlint.analysis import syntax
from torchlint.analysis.modules import ModuleClass, ModuleClasses
from torchlint.analysis.values import PARTIAL, partial_call
from torchlint.rules.api._losses import (
    LEGACY_KEYWORDS, LEGACY_REDUCTION_FUNCTIONS, LEGACY_REDUCTION_MODULES, SIZE_AVERAGE_POSITION, legacy_reduction,
)
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
      (`partial(nn.CrossEntropyLoss, reduce=False)`: every call of the partial passes them on),
      or a subclass of a torch loss module passes them to its base's constructor
      (`super().__init__(weight, reduce=False)`, `nn.NLLLoss.__init__(self, size_average=False)`;
      also through classes of the project between them that define no `__init__`).

    Not flagged: `retain_graph=` and `reduction=`; keywords named `reduce` of other calls
    (`scatter_reduce`, `torch.distributed`); losses of other libraries; these keywords
    passed by position (`nn.L1Loss(False)`), which the rule does not read; a base class of
    the project with its own `__init__`, which takes `reduce=` as its own parameter; `size_average=`
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
    every legacy keyword is a literal `True`, `False` or `None`, no `reduction=` is given
    and no positional argument reaches `size_average` (`super().__init__(weight, False,
    ignore_index, reduce=False)` passes `size_average=False` by position: beside it
    `reduction="none"` would read as "sum"; the message then names no value). In a
    `partial`, the partial's keywords are rewritten.
    The test suite runs each rewrite before and after on CPU.
    """

    code = "TL613"
    name = "removed-keyword"
    about_the_source = True
    # The flagged keyword is written in the file.
    triggers = words("retain_variables", "size_average", "reduce")
    # `__init__`: a loss subclass's constructor calling its base's, `super().__init__(reduce=False)`.
    call_parts = last_parts(_BACKWARD_FUNCTIONS | _LEGACY_LOSSES | PARTIAL) | {"backward", "__init__"}
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
        if not legacy or self.ctx.config.torch_version < REDUCTION_SINCE:
            return
        loss = self._loss_called(called)
        if loss is None:
            return
        # Positional arguments from the loss's `size_average` on are legacy values the keywords do not show.
        positional_only = loss[1] <= SIZE_AVERAGE_POSITION[loss[0].rpartition(".")[2]]
        values = {arg.keyword.value: semantics.literal(arg.value) for arg in legacy}
        exact = positional_only and all(value is None or isinstance(value, bool) for value in values.values())
        reduction = legacy_reduction(values.get("size_average"), values.get("reduce")) if exact else None
        instead = f'`reduction="{reduction}"`' if reduction is not None else "`reduction=` (\"mean\", \"sum\" or \"none\")"
        keywords = ", ".join(f"`{arg.keyword.value}=`" for arg in legacy) + (" is" if len(legacy) == 1 else " are")
        message = self.legacy_reduction_message.format(keywords=keywords, instead=instead)
        self.report(legacy[0], message, self._reduction_fix(node, legacy, reduction))

    def _loss_called(self, call: cst.Call) -> Optional[Tuple[str, int]]:
        """The torch loss `call` calls or constructs, with the number of positional arguments it receives (a `*args`
        may hold any number): the loss itself (`nn.NLLLoss(weight, reduce=False)`), or in a subclass of a loss
        module the base's constructor (`super().__init__(weight, reduce=False)`, `nn.NLLLoss.__init__(self, ...)`)."""
        positional = [arg for arg in call.args if arg.keyword is None]
        count = float("inf") if any(arg.star for arg in positional) else len(positional)
        name = self.ctx.qualified_name(call.func)
        if name in _LEGACY_LOSSES:
            return name, count
        if syntax.method_name(call) != "__init__":
            return None
        constructed = call.func.value
        if self.ctx.qualified_name_in(constructed, LEGACY_REDUCTION_MODULES) and positional:  # `self` comes first
            return self.ctx.qualified_name(constructed), count - 1
        found = ModuleClasses.of(self.ctx).enclosing(self.ctx.stack)
        if type(constructed) is not cst.Call or found is None or not _is_super_of(constructed, found[0]):
            return None
        base = _loss_base(found[0])
        return (base, count) if base is not None else None

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


def _is_super_of(call: cst.Call, module: ModuleClass) -> bool:
    """`call` is `super()` or `super(Class, self)` for the class `module` (its bases come next)."""
    if type(call.func) is not cst.Name or call.func.value != "super":
        return False
    first = syntax.positional(call, 0)
    return not call.args or (
        len(call.args) == 2 and first is not None and type(first.value) is cst.Name and first.value.value == module.node.name.value
    )


def _loss_base(module: ModuleClass) -> Optional[str]:
    """The torch loss module whose constructor `super().__init__` in `module` runs: its first base, or the first base
    of a Module class of the project that does not define `__init__` (`class TopKLoss(CrossentropyND)` where
    `class CrossentropyND(nn.CrossEntropyLoss)` defines only `forward`). A base with its own `__init__` takes the
    keywords as its own parameters."""
    seen = set()
    while module.node.bases and id(module.node) not in seen:
        seen.add(id(module.node))
        first = module.node.bases[0].value
        name = module.context.qualified_name(first, module.around)
        if name in LEGACY_REDUCTION_MODULES:
            return name
        bases = module.module_bases()
        if not bases or bases[0].node.name.value != syntax.terminal_name(first) or bases[0].method("__init__") is not None:
            return None
        module = bases[0]
    return None
