import libcst as cst

from torchlint import semantics
from torchlint.engine.context import last_parts
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words


class PersistentWorkersWithoutWorkers(Rule):
    """
    ## What it does
    Flags `DataLoader(..., persistent_workers=True)` whose `num_workers` is absent
    or a literal `0`.

    ## Why is this bad?
    There are no worker processes to keep alive. DataLoader refuses the combination
    at construction with `ValueError: persistent_workers option needs num_workers > 0`,
    so the script dies before the first batch (observed on torch 2.13).

    ## Fix safety
    No fix: whether you want workers (`num_workers=2`, say) or no persistence is a
    choice only you can make.
    """

    code = "TL303"
    name = "persistent-workers-without-workers"
    # Only a call passing the `persistent_workers` keyword is ever reported.
    triggers = words("persistent_workers")
    call_parts = last_parts(semantics.DATALOADER)
    message = (
        "`persistent_workers=True` with no workers: DataLoader raises `ValueError: persistent_workers "
        "option needs num_workers > 0` at construction; set `num_workers > 0` or drop `persistent_workers`"
    )
    example = """
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, persistent_workers=True)  # expect: TL303:45
    """
    use_instead = """
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, num_workers=2, persistent_workers=True)
    """

    def visit_Call(self, node: cst.Call) -> None:
        if not semantics.is_dataloader_call(node, self.ctx) or not semantics.persistent_workers_requested(node):
            return
        workers = semantics.workers_of(node, self.ctx)
        if workers is None or workers == 0:
            self.report(semantics.keyword(node, "persistent_workers"))
