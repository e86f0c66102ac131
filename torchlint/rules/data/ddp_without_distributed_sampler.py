from typing import List, Set

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import items_iterated, loaders_iterated
from torchlint.analysis.loops import LoopIndex, iteration
from torchlint.analysis.values import Origin, Values
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...)
_SAMPLER_POSITIONS = {"sampler": 3, "batch_sampler": 4}
_ITERABLE_BASES = frozenset({"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"})
# Frameworks that give each rank its share of a plain DataLoader themselves.
_FRAMEWORKS = ("lightning", "pytorch_lightning", "accelerate")


class DdpWithoutDistributedSampler(Rule):
    """
    ## What it does
    Flags a `DataLoader(...)` with no `sampler=` and no `batch_sampler=` that a
    training loop of the file iterates (a loop that runs backward and an optimizer
    step), in a file that wraps a model in `DistributedDataParallel` and builds no
    `DistributedSampler` anywhere.

    Not flagged: a loader given any sampler or batch sampler (a `DistributedSampler`
    or a custom one), a file that builds a `DistributedSampler` at all (it may be
    attached elsewhere), datasets that are `IterableDataset`s of the file (they
    split their stream themselves), loaders handed to a framework that shards them
    (`accelerator.prepare(...)`, Lightning: a file importing `accelerate`,
    `lightning` or `pytorch_lightning`, or calling `.prepare(...)`), and loaders only
    iterated for evaluation. Given up for that precision: a loader iterated in a
    function it is passed to (`train(model, loader)`), which torchlint does not
    follow back to the construction, stays quiet.

    ## Why is this bad?
    `DistributedDataParallel` averages gradients across processes; it does not split
    the data. A plain DataLoader in each process iterates the whole dataset, so
    with N ranks every sample is seen N times per epoch (in the same order in every
    rank when not shuffled: identical batches, so N GPUs do the work of one).
    Observed on torch 2.13 with two simulated ranks: without a sampler both see all
    of `0..11`; with `DistributedSampler(ds, num_replicas=2, rank=r)` each sees a
    disjoint half.

    ## Fix safety
    No fix: pass `sampler=DistributedSampler(dataset)` (and drop `shuffle=True`,
    which the sampler takes over), then call `sampler.set_epoch(epoch)` each epoch.
    """

    code = "TL308"
    name = "ddp-without-distributed-sampler"
    uses_callgraph = True
    # Reported only in a file that wraps a model in DDP and builds the DataLoader it reports.
    triggers = words("DistributedDataParallel") & words("DataLoader")
    message = (
        "the model is wrapped in DistributedDataParallel, but this DataLoader has no DistributedSampler: every rank "
        "trains on the whole dataset (N ranks see each sample N times per epoch); pass "
        "`sampler=DistributedSampler(dataset)`"
    )
    example = """
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    def train(rank, dataset, criterion, optimizer):
        model = DistributedDataParallel(Net().to(rank), device_ids=[rank])
        loader = DataLoader(dataset, batch_size=32, num_workers=4)  # expect: TL308:14
        for epoch in range(10):
            for images, labels in loader:
                optimizer.zero_grad()
                criterion(model(images), labels).backward()
                optimizer.step()
    """
    use_instead = """
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    def train(rank, dataset, criterion, optimizer):
        model = DistributedDataParallel(Net().to(rank), device_ids=[rank])
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, num_workers=4, sampler=sampler)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for images, labels in loader:
                optimizer.zero_grad()
                criterion(model(images), labels).backward()
                optimizer.step()
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loops = ctx.shared(LoopIndex)
        self.wraps_in_ddp = False
        self.shards = False
        # Each `for` over DataLoader constructions: the loop node, and the loaders.
        self.iterations: List[tuple] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.loops.observe(node)
        if self.ctx.qualified_name_in(node.func, DDP):
            self.wraps_in_ddp = True
        elif semantics.method_name(node) == "prepare":
            self.shards = True

    def visit_Assign(self, node: cst.Assign) -> None:
        self.loops.observe(node)

    def visit_For(self, node: cst.For) -> None:
        self._loop(node)

    def visit_While(self, node: cst.While) -> None:
        self._loop(node)

    def _loop(self, node: cst.CSTNode) -> None:
        found = iteration(self.ctx, node, self.ctx.stack)
        if found is None:
            return
        iterated, _ = items_iterated(found.iterable, (), self.ctx, found.evaluated_at)
        loaders = loaders_iterated(iterated, found.evaluated_at, self.ctx)
        if loaders:
            self.iterations.append((node, loaders))

    def finish(self) -> None:
        text = self.ctx.file_text
        if not self.wraps_in_ddp or self.shards or "DistributedSampler" in text.words:
            return
        if any(module.split(".")[0] in _FRAMEWORKS for module in text.imported_modules):
            return
        reported: Set[int] = set()
        for loop_node, loaders in self.iterations:
            loop = self.loops.loops.get(id(loop_node))
            if loop is None or not self.loops.trains(loop):
                continue
            for loader in loaders:
                if loader.place.context is self.ctx and id(loader.node) not in reported and _unsharded(loader):
                    reported.add(id(loader.node))
                    self.report(loader.node)


def _unsharded(loader: Origin) -> bool:
    """A DataLoader call with no sampler of its own over a dataset that is not an IterableDataset of the file."""
    call, place = loader.node, loader.place
    if semantics.has_star_kwargs(call):
        return False
    if any(semantics.keyword(call, name) or semantics.positional(call, index) for name, index in _SAMPLER_POSITIONS.items()):
        return False
    dataset = semantics.keyword(call, "dataset") or semantics.positional(call, 0)
    if dataset is None:
        return False
    ctx = place.context
    for origin in Values.of(ctx).origins(dataset.value, place.stack):
        if type(origin.node) is not cst.Call or origin.applied:
            continue
        for built in Values.of(ctx).origins(origin.node.func, origin.place.stack):
            if type(built.node) is cst.ClassDef and _iterable(built, ctx):
                return False
    return True


def _iterable(dataset_class: Origin, ctx) -> bool:
    return any(
        ctx.qualified_name(base.value, dataset_class.place.stack) in _ITERABLE_BASES for base in dataset_class.node.bases
    )
