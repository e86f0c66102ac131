import re
from pathlib import PurePath
from typing import Dict, List, NamedTuple, Optional, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.engine.context import last_parts
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words
from torchlint.rules.data._dataset import construction, holds_items, indexing_dataset, loader_argument, unwrapped

TRAINING_FACTS = ("backward", "optimizer-step")
# The file names pytest collects by default.
TEST_FILE = re.compile(r"(test_.*|.*_test|conftest)\.py")


class SynchronousDataloader(Rule):
    """
    ## What it does
    Flags a `DataLoader` call without `num_workers` or with `num_workers=0` in a
    file that trains (it calls `.backward()` or an optimizer's `.step()`) and is
    not a test file (`test_*.py`, `*_test.py`, `conftest.py`: the names pytest
    collects). Tests train for correctness, not speed, and often keep loading in
    one process on purpose (deterministic, quick to start); what this gives up is
    a training script named like a test (`test_performance.py`), which is not
    flagged even where its loader would be worth parallelising.

    Not flagged: calls that pass `**kwargs`, which may set `num_workers` (a
    helper's `**kwargs` that no call of the helper fills, every call being known,
    sets nothing: that loader is flagged), and loaders over data already in memory, where workers would only add start-up
    cost: a `TensorDataset`, a tensor or array built by torch or numpy, a Python
    sequence (`range(n)`, a list), an instance of a class in the same file
    whose `__getitem__` only indexes attributes holding such data (a tensor built
    in `__init__`, or the list it was given), and a `Subset` of any of these. A
    dataset class from another module cannot be seen from one file: one that is
    in memory is still flagged.

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
    uses_callgraph = True
    # Only DataLoader calls are reported (the training facts it also needs are far more common words).
    triggers = words("DataLoader")
    call_parts = last_parts(semantics.DATALOADER)
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
        optimizer.step()  # expect: TL311:5
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
        # (loader, the same-file class its dataset is built from, or None, and what its arguments hold)
        self.candidates: List[Tuple[cst.Call, Optional[str], _Arguments]] = []
        # class name -> for each class of that name, what `indexing_dataset` says of it
        self.classes: Dict[str, List[Optional[Tuple[Tuple[int, str], ...]]]] = {}

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        summary = indexing_dataset(node, self.ctx, self.ctx.stack[:-1])
        self.classes.setdefault(node.name.value, []).append(summary)

    def visit_Call(self, node: cst.Call) -> None:
        if not semantics.is_dataloader_call(node, self.ctx):
            return
        workers = semantics.workers_of(node, self.ctx)
        if workers is not None and workers != 0:
            return
        dataset = loader_argument(node, "dataset")
        if dataset is not None and holds_items(dataset.value, self.ctx):
            return
        built = construction(unwrapped(dataset.value, self.ctx), self.ctx) if dataset is not None else None
        if built is not None and isinstance(built.func, cst.Name) and self.ctx.qualified_name(built.func) is None:
            # Possibly a class defined further down: judged once the whole file is read.
            self.candidates.append((node, built.func.value, self._arguments(built)))
        else:
            self.candidates.append((node, None, _Arguments((), {})))

    def _arguments(self, call: cst.Call) -> "_Arguments":
        positional = tuple(holds_items(arg.value, self.ctx) for arg in call.args if arg.keyword is None and not arg.star)
        keywords = {arg.keyword.value: holds_items(arg.value, self.ctx) for arg in call.args if arg.keyword is not None}
        return _Arguments(positional, keywords)

    def finish(self) -> None:
        if not self.candidates or TEST_FILE.fullmatch(PurePath(self.ctx.filename).name):
            return
        functions = self.ctx.callgraph.functions.values()
        if not any(function.facts.get(fact) for function in functions for fact in TRAINING_FACTS):
            return
        for node, class_name, arguments in self.candidates:
            if class_name is None or not self._in_memory_class(class_name, arguments):
                self.report(node)

    def _in_memory_class(self, name: str, arguments: "_Arguments") -> bool:
        summaries = self.classes.get(name)
        return bool(summaries) and all(
            summary is not None and all(arguments.holds_items(position, parameter) for position, parameter in summary)
            for summary in summaries
        )


class _Arguments(NamedTuple):
    """Which arguments of a dataset's construction hold their items in memory."""

    positional: Tuple[bool, ...]
    keywords: Dict[str, bool]

    def holds_items(self, position: int, name: str) -> bool:
        if name in self.keywords:
            return self.keywords[name]
        return position < len(self.positional) and self.positional[position]
