from typing import List

import libcst as cst

from torchlint import semantics
from torchlint.finding import Edit, Fix, Location
from torchlint.engine.context import last_parts
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

CHECKPOINT_FUNCTIONS = frozenset({"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"})
# The keywords the two functions take themselves (torch 2.13). `checkpoint`'s reentrant variant, the default, refuses any
# other with `ValueError: Unexpected keyword arguments`, and its other variant hands it to the checkpointed function;
# `checkpoint_sequential` refuses it in both.
_OWN_KEYWORDS = frozenset({
    "use_reentrant", "preserve_rng_state", "context_fn", "determinism_check", "debug", "early_stop",
    "functions", "segments", "input",
})


def keywords_passed_on(call: cst.Call) -> List[str]:
    """The keywords of a checkpoint call that are not the checkpoint function's own, in the order written."""
    return [arg.keyword.value for arg in call.args if arg.keyword is not None and arg.keyword.value not in _OWN_KEYWORDS]


class CheckpointWithoutUseReentrant(Rule):
    """
    ## What it does
    Flags `torch.utils.checkpoint.checkpoint(...)` and `checkpoint_sequential(...)` calls that
    do not pass `use_reentrant=`.

    ## Why is this bad?
    Without it, torch 2.13 warns at each call (Python shows it once per line: `UserWarning: torch.utils.checkpoint: the
    use_reentrant parameter should be passed explicitly. Starting in PyTorch 2.9, calling
    checkpoint without use_reentrant will raise an exception. use_reentrant=False is
    recommended, ...`) and runs the legacy reentrant variant, which returns no gradients for
    the checkpointed parameters when none of the inputs requires grad, and does not support
    `torch.autograd.grad`. The default has been announced to become an error.

    A `checkpoint` call that also passes keywords for the checkpointed function
    (`checkpoint(block, hidden, mask=mask)`) does not run at all: the default (reentrant)
    variant refuses them on every call, `ValueError: Unexpected keyword arguments: mask`
    (torch 2.13). It is reported with that error and no fix: `use_reentrant=False` passes
    the keywords on to the function, which is right only where the function takes them
    (`custom_forward(*inputs)` does not, and fails with `TypeError` instead).
    `checkpoint_sequential` refuses such keywords whatever `use_reentrant` says: not flagged.

    ## Fix safety
    Unsafe: adds `use_reentrant=False`, the variant torch recommends. It differs from the
    current default (reentrant): gradients now flow when no input requires grad, and code
    that relied on the reentrant behaviour may change. Not offered when the call passes
    `**kwargs` (which may already hold the argument; such calls are not reported).
    """

    code = "TL604"
    name = "checkpoint-without-use-reentrant"
    about_the_source = True
    # Both functions live in `torch.utils.checkpoint`, and each part of a resolved name is written in the file.
    triggers = words("checkpoint")
    call_parts = last_parts(CHECKPOINT_FUNCTIONS)
    fix_safety = "unsafe"
    message = (
        "`checkpoint` without `use_reentrant=`: torch warns that it should be passed explicitly and runs the legacy "
        "reentrant variant (no parameter gradients when no input requires grad); pass `use_reentrant=False`"
    )
    keywords_message = (
        "`checkpoint` with keywords for the checkpointed function and no `use_reentrant=`: the default (reentrant) "
        "variant refuses them on every call, `ValueError: Unexpected keyword arguments: {names}`; "
        "`use_reentrant=False` passes them on to the function, if it takes them"
    )
    example = """
    from torch.utils.checkpoint import checkpoint

    out = checkpoint(block, hidden)  # expect: TL604:7
    """
    use_instead = """
    from torch.utils.checkpoint import checkpoint

    out = checkpoint(block, hidden, use_reentrant=False)
    """

    def visit_Call(self, node: cst.Call) -> None:
        name = self.ctx.qualified_name(node.func)
        if name not in CHECKPOINT_FUNCTIONS:
            return
        if semantics.keyword(node, "use_reentrant") is not None or semantics.has_star_kwargs(node):
            return
        passed_on = keywords_passed_on(node)
        if passed_on:
            if name == "torch.utils.checkpoint.checkpoint":
                self.report(node, self.keywords_message.format(names=",".join(passed_on)))
            return
        fix = None
        if node.args:
            # Insert just before the call's closing parenthesis, after any trailing comma.
            _, end = self.ctx.location(node)
            before_paren = Location(end.row, end.column - 1)
            separator = " " if isinstance(node.args[-1].comma, cst.Comma) else ", "
            edit = Edit(f"{separator}use_reentrant=False", before_paren, before_paren)
            fix = Fix.unsafe("Pass `use_reentrant=False`", edit)
        self.report(node, fix=fix)
