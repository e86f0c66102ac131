from typing import List, Optional, Set, Tuple

import libcst as cst

from torchlint import semantics
from torchlint.analysis.facts import items_iterated, loaders_iterated, project_call_shows
from torchlint.analysis.grad_mode import grad_enabled_at
from torchlint.analysis.loops import Iteration, Loop, LoopIndex, iteration, loop_nodes
from torchlint.analysis.values import Origin, Values
from torchlint.engine.scopes import scope_nodes_of
from torchlint.rules.base import Rule
from torchlint.rules.data import _facts  # noqa: F401  (registers "sets-epoch")
from torchlint.rules.triggers import project_imports, words

DISTRIBUTED_SAMPLER = frozenset({
    "torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler",
})
# DataLoader(dataset, batch_size, shuffle, sampler, ...); DistributedSampler(dataset, num_replicas, rank, shuffle, ...)
_SAMPLER_POSITION = 3
_SHUFFLE_POSITION = 3
# How many calls below the epoch loop a `set_epoch` is looked for (`train_one_epoch()` that calls it).
_HELPER_DEPTH = 2


class DistributedSamplerWithoutSetEpoch(Rule):
    """
    ## What it does
    Flags a `DistributedSampler(...)` that shuffles (`shuffle=True`, the default)
    given to a DataLoader that is iterated in an epoch loop of the same file with no
    `set_epoch(...)` call in that loop: neither `sampler.set_epoch(epoch)` nor
    `loader.sampler.set_epoch(epoch)`, directly or in a function the loop calls (of
    the module, or of another project file: `loader.shuffle_dataset(train_loader,
    epoch)`, SlowFast). The loop over the loader may sit in the epoch loop's body or in a
    function of the file called from it (`for epoch in ...: train_one_epoch(loader)`),
    where a `set_epoch` counts too. A sampler or loader a function of the project makes and
    returns (`sampler=data_sampler(dataset, shuffle=True, distributed=...)`,
    `train_loader = loader.construct_loader(cfg)`) is followed into the function's
    `return`s, and its `shuffle=shuffle` to what every call of the function passes.

    Not flagged: `shuffle=False` (or a shuffle flag not known to be `True`: neither
    a literal nor a parameter that every call of its function in the file passes
    `True`; a helper of another file whose shuffle is its parameter stays quiet), a
    `set_epoch` anywhere in the epoch loop or the functions it calls, a loop over the
    loader that runs without gradients (`@torch.no_grad()`, `with torch.no_grad():`:
    an evaluation, whose result the order does not change), and loaders
    whose epoch loop is in another file (the rule does not guess across files); a
    loader torchlint cannot trace to its `DataLoader(...)` call (a parameter no call
    in the project shows) stays quiet.

    ## Why is this bad?
    A `DistributedSampler` draws its permutation from `seed + epoch`, and the epoch
    only changes through `set_epoch`. Without it every epoch visits the data in the
    same order: observed on torch 2.13, `DistributedSampler(ds, 2, 0, shuffle=True)`
    yields `[8, 5, 7, 2, 3, 11]` in each of 3 epochs, and three different orders
    with `set_epoch(e)`. Nothing warns; the run silently trains without reshuffling.

    ## Fix safety
    No fix: call `sampler.set_epoch(epoch)` at the top of each epoch, before the
    loader is iterated.
    """

    code = "TL307"
    name = "distributed-sampler-without-set-epoch"
    uses_callgraph = True
    # The finding is the sampler's construction, or the loop over its loader when the sampler (or the loader) is
    # made in a project file this one imports.
    triggers = words("DistributedSampler") | project_imports()
    message = (
        "this DistributedSampler shuffles, but no `set_epoch()` runs in the epoch loop that iterates its loader: "
        "every epoch sees the same order (its permutation is seeded by seed + epoch); call "
        "`sampler.set_epoch(epoch)` at the top of each epoch"
    )
    example = """
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset)  # expect: TL307:11
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    for epoch in range(10):
        for images, labels in loader:
            train_step(images, labels)
    """
    use_instead = """
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    for epoch in range(10):
        sampler.set_epoch(epoch)
        for images, labels in loader:
            train_step(images, labels)
    """

    def __init__(self, ctx):
        super().__init__(ctx)
        self.loops = ctx.shared(LoopIndex)
        # Each loop with an iterable: its stack and how it iterates. What it iterates is followed in `finish`, and
        # only for the loops that run in an epoch loop without `set_epoch()`, which the call graph tells first.
        self.iterations: List[Tuple[Tuple[cst.CSTNode, ...], Iteration]] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.loops.observe(node)

    def visit_For(self, node: cst.For) -> None:
        self._loop(node)

    def visit_While(self, node: cst.While) -> None:
        self._loop(node)

    def _loop(self, node: cst.CSTNode) -> None:
        stack = tuple(self.ctx.stack)
        found = iteration(self.ctx, node, stack)
        if found is not None:
            self.iterations.append((stack, found))

    def finish(self) -> None:
        reported: Set[int] = set()
        for stack, found in self.iterations:
            epoch_loops = self._epoch_loops_without_set_epoch(stack)
            # A loop without gradients evaluates: its order changes no result (SlowFast's `@torch.no_grad()
            # eval_epoch` over a validation loader whose sampler shuffles).
            if not epoch_loops or grad_enabled_at(stack, self.ctx) is False:
                continue
            iterated, _ = items_iterated(found.iterable, (), self.ctx, found.evaluated_at)
            loaders = loaders_iterated(iterated, found.evaluated_at, self.ctx)
            samplers = [sampler for loader in loaders for sampler in _shuffling_samplers(loader)]
            # Last, as it reads other files: a function of another project file the loop calls may set the epoch.
            if not samplers or any(self._project_call_sets_epoch(loop) for loop in epoch_loops):
                continue
            for sampler in samplers:
                here = sampler.place.context is self.ctx
                node = sampler.node if here else found.iterable
                if id(node) not in reported:
                    reported.add(id(node))
                    self.report(node)

    def _epoch_loops_without_set_epoch(self, stack: Tuple[cst.CSTNode, ...]) -> List[Optional[Loop]]:
        """The epoch loops of this file the `for` at the end of `stack` runs in (around it, or around a call of its
        function), when no `set_epoch` of this file runs in them; [] when one does, or when there is none."""
        epoch_loops = loop_nodes(stack)
        if epoch_loops:
            loop = self.loops.loops.get(id(epoch_loops[0]))
            return [] if self._sets_epoch(loop) else [loop]
        function = _innermost_function(stack)
        if function is None:
            return []
        callgraph = self.ctx.callgraph
        key = callgraph.key_of(function[0], scope_nodes_of(stack[: function[1] + 1]))
        if callgraph.facts_of(key, "sets-epoch", _HELPER_DEPTH):
            return []
        loops = [
            self.loops.loops.get(id(loop_nodes(site.stack)[0])) for site in callgraph.call_sites(key) if loop_nodes(site.stack)
        ]
        return [] if any(self._sets_epoch(loop) for loop in loops) else loops

    def _sets_epoch(self, loop: Optional[Loop]) -> bool:
        return loop is not None and bool(self.loops.sites(loop, "sets-epoch", _HELPER_DEPTH))

    def _project_call_sets_epoch(self, loop: Optional[Loop]) -> bool:
        """The loop calls a function of another project file that sets the epoch there (SlowFast's
        `loader.shuffle_dataset(train_loader, cur_epoch)`)."""
        return loop is not None and any(
            project_call_shows(node, self.ctx, "sets-epoch")
            for _, nodes in self.loops.sites(loop, "calls-project-function", _HELPER_DEPTH) for node in nodes
        )


def _innermost_function(stack) -> Optional[Tuple[cst.FunctionDef, int]]:
    for index in range(len(stack) - 2, -1, -1):
        if type(stack[index]) is cst.FunctionDef:
            return stack[index], index
    return None


def _shuffling_samplers(loader: Origin) -> List[Origin]:
    """The `DistributedSampler(...)` constructions with shuffling on that the DataLoader call `loader` is given."""
    call, place = loader.node, loader.place
    ctx = place.context
    sampler = semantics.keyword(call, "sampler") or semantics.positional(call, _SAMPLER_POSITION)
    if sampler is None:
        return []
    found = []
    for origin in Values.of(ctx).origins(sampler.value, place.stack):
        node = origin.node
        if type(node) is not cst.Call or origin.applied:
            continue
        there = origin.place.context
        if there.qualified_name_in(node.func, DISTRIBUTED_SAMPLER, origin.place.stack):
            shuffle = semantics.keyword(node, "shuffle") or semantics.positional(node, _SHUFFLE_POSITION)
            # A helper's `shuffle=shuffle` is what every call of the helper passes it.
            if shuffle is None or Values.of(there).constant(shuffle.value, origin.place.stack) is True:
                found.append(origin)
    return found
