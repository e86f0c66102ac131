import libcst as cst

from torchlint import semantics
from torchlint.finding import Edit, Fix, Location
from torchlint.engine.context import last_parts
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

CHECKPOINT_FUNCTIONS = frozenset({"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"})
# The keywords the two functions take themselves (torch 2.13). The reentrant variant, the default, refuses any other
# with `ValueError: Unexpected keyword arguments`, and the other variant hands it to the checkpointed function.
_OWN_KEYWORDS = frozenset({
    "use_reentrant", "preserve_rng_state", "context_fn", "determinism_check", "debug", "early_stop",
    "functions", "segments", "input",
})


class CheckpointWithoutUseReentrant(Rule):
    """
    ## What it does
    Flags `torch.utils.checkpoint.checkpoint(...)` and `checkpoint_sequential(...)` calls that
    do not pass `use_reentrant=`.

    ## Why is this bad?
    Without it, torch 2.13 warns on every call (`UserWarning: torch.utils.checkpoint: the
    use_reentrant parameter should be passed explicitly. Starting in PyTorch 2.9, calling
    checkpoint without use_reentrant will raise an exception. use_reentrant=False is
    recommended, ...`) and runs the legacy reentrant variant, which returns no gradients for
    the checkpointed parameters when none of the inputs requires grad, and does not support
    `torch.autograd.grad`. The default has been announced to become an error.

    Not flagged: a call that passes a keyword the function does not take itself
    (`checkpoint(custom_forward, hidden, mask, mode=mode)`): the default variant raises
    `ValueError: Unexpected keyword arguments: mode` before anything runs, and with
    `use_reentrant=False` the keyword goes to the checkpointed function, so the call fails or
    changes whatever `use_reentrant` says, and adding it is not the fix the message offers.

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
        "`checkpoint` without `use_reentrant=`: torch warns on every call and runs the legacy reentrant "
        "variant (no parameter gradients when no input requires grad); pass `use_reentrant=False`"
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
        if self.ctx.qualified_name(node.func) not in CHECKPOINT_FUNCTIONS:
            return
        if semantics.keyword(node, "use_reentrant") is not None or semantics.has_star_kwargs(node):
            return
        if any(arg.keyword is not None and arg.keyword.value not in _OWN_KEYWORDS for arg in node.args):
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
