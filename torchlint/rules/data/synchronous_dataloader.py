import libcst as cst

from torchlint import semantics
from torchlint.rules.base import Rule
from torchlint.rules.data._dataset import is_tensor_dataset

TRAINING_FACTS = ("backward", "optimizer-step")


class SynchronousDataloader(Rule):
    """
    ## What it does
    Flags a `DataLoader` call without `num_workers` or with `num_workers=0` in a
    file that trains (it calls `.backward()` or an optimizer's `.step()`).

    Not flagged: loaders over a `TensorDataset` (the data is already in memory as
    tensors, so there is nothing to overlap), and calls that pass `**kwargs`, which
    may set `num_workers`.

    Not in the default selection, like TorchFix's TOR401: small datasets, notebooks
    and debugging sessions are often better off without worker processes.

    ## Why is this bad?
    With no workers, every batch is loaded, decoded and collated in the training
    process between two steps, so the model waits for the data each time. Worker
    processes prepare the next batches while the current step runs.

    ## Fix safety
    No fix: the right number of workers depends on the machine and on the dataset.
    """

    code = "TL306"
    name = "synchronous-dataloader"
    opt_in = True
    message = (
        "DataLoader without worker processes (`num_workers` absent or 0) in training code: every batch is loaded "
        "in the training process and each step waits for it; set `num_workers` > 0 to load batches in parallel"
    )
    example = """
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=64, shuffle=True)  # expect: TL306:10
    for images, labels in loader:
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
    """
    use_instead = """
    from torch.utils.data import DataLoader

    if __name__ == "__main__":
        loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)
        for images, labels in loader:
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.candidates = []

    def visit_Call(self, node: cst.Call) -> None:
        if not semantics.is_dataloader_call(node, self.ctx):
            return
        workers = semantics.workers_of(node)
        if (workers is None or workers == 0) and not is_tensor_dataset(node, self.ctx):
            self.candidates.append(node)

    def finish(self) -> None:
        if not self.candidates:
            return
        functions = self.ctx.callgraph.functions.values()
        if any(function.facts.get(fact) for function in functions for fact in TRAINING_FACTS):
            for node in self.candidates:
                self.report(node)
