"""DataLoader witnesses (TL3xx): construction errors, worker processes and the spawn start method.

Builders rebuild the flagged `DataLoader(...)` call from its literal arguments with a
stand-in dataset; non-literal keyword arguments are dropped and named in the note.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint import semantics
from torchlint.verify.witness import FROM_FINDING, SPAWN_TIMEOUT, Code, witness


def _loader_call(site) -> Optional[cst.Call]:
    node = site.node
    if isinstance(node, cst.Call) and semantics.is_dataloader_call(node, site.ctx, site.stack(node)):
        return node
    call = site.enclosing(node, cst.Call)
    if call is not None and semantics.is_dataloader_call(call, site.ctx, site.stack(call)):
        return call
    return None


def _rebuilt_arguments(site, call, drop=()):
    """(argument source after the dataset, note) or (None, why) when the call cannot be rebuilt."""
    if call is None:
        return None, "the flagged code is not a DataLoader call"
    kept, dropped = site.literal_arguments(call, skip_first=True)
    if kept is None:
        return None, "the DataLoader call has a non-literal positional argument or **kwargs"
    kept = [argument for argument in kept if argument.partition("=")[0] not in drop]
    note = f"non-literal {', '.join(dropped)} dropped" if dropped else ""
    return ", ".join(kept), note


@witness(
    "TL303",
    """
    import torch
    from torch.utils.data import DataLoader

    dataset = torch.utils.data.TensorDataset(torch.arange(8.0))
    error = raised(lambda: DataLoader(dataset, $arguments))
    if isinstance(error, ValueError) and "persistent_workers" in str(error):
        confirmed(describe(error) + " (at construction of `DataLoader(dataset, $arguments)`)")
    not_reproduced("`DataLoader(dataset, $arguments)` constructed: " + describe(error))
    """,
    arguments=Code("persistent_workers=True"),
)
def persistent_workers_without_workers(site, entry):
    arguments, note = _rebuilt_arguments(site, _loader_call(site))
    if arguments is None:
        return entry.canonical(note, site.device)
    return entry.witness(FROM_FINDING, note, site.device, arguments=Code(arguments))


@witness(
    "TL301",
    """
    import os
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Pids(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return os.getpid()


    def children():
        try:
            import psutil
        except ImportError:
            return None
        return len(psutil.Process().children(recursive=True))


    def run(rebuild, epochs=3):
        pids, alive = set(), []
        loader = None
        for epoch in range(epochs):
            if rebuild or loader is None:
                loader = DataLoader(Pids(), $arguments)
            for batch in loader:
                pids.update(int(pid) for pid in batch)
            alive.append(children())
        del loader
        return len(pids), alive


    if __name__ == "__main__":
        rebuilt, alive = run(rebuild=True)
        once, _ = run(rebuild=False)
        if rebuilt > once:
            confirmed(f"3 epochs: {rebuilt} worker processes started with the DataLoader built inside the loop, {once} when built once (children alive after each epoch: {alive})")
        not_reproduced(f"3 epochs: {rebuilt} worker processes rebuilt per epoch, {once} built once")
    """,
    arguments=Code("batch_size=2, num_workers=2, persistent_workers=True"),
)
def persistent_dataloader_in_loop(site, entry):
    arguments, note = _rebuilt_arguments(site, _loader_call(site), drop=("multiprocessing_context",))
    if arguments is None:
        return entry.canonical(note, site.device)
    if "num_workers=" not in arguments:
        # The rule flags loaders whose worker count is not a literal 0; two workers stand in for it.
        arguments = ", ".join(part for part in (arguments, "num_workers=2") if part)
    return entry.witness(FROM_FINDING, note, site.device, arguments=Code(arguments))


@witness(
    "TL302",
    """
    import re
    import subprocess
    import sys

    # The unguarded module, written as a file: a spawn child re-imports the main module from its path.
    UNGUARDED = '''
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(list(range(8)), batch_size=2, num_workers=$workers, multiprocessing_context="spawn")
    for batch in loader:
        pass
    print("done")
    '''
    with open("unguarded.py", "w") as handle:
        handle.write(UNGUARDED)
    run = subprocess.run([sys.executable, "-I", "unguarded.py"], capture_output=True, text=True, timeout=$seconds)
    flat = " ".join(run.stderr.split())
    child = re.search(r"An attempt has been made to start a new process before the current process has finished its bootstrapping phase[.]", flat)
    parent = [line for line in run.stderr.splitlines() if "exited unexpectedly" in line]
    if run.returncode != 0 and child:
        confirmed(f"exit code {run.returncode}; worker: RuntimeError: {child.group(0)}; parent: {parent[-1] if parent else '(no parent message)'}")
    not_reproduced(f"exit code {run.returncode}; stdout {run.stdout.strip()[-80:]!r}")
    """,
    workers=1,
    seconds=int(SPAWN_TIMEOUT) - 10,
    timeout=SPAWN_TIMEOUT,
)
def workers_without_main_guard(site, entry):
    # The failure needs only an unguarded module that starts one spawn worker; the file itself is never run.
    return entry.canonical("an unguarded module iterating a one-worker DataLoader under spawn", site.device)


@witness(
    "TL304",
    """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Items(Dataset):
        def __init__(self, transform=None):
            self.transform = transform

        def __len__(self):
            return 8

        def __getitem__(self, index):
            return index if self.transform is None else self.transform(index)


    def main():
        callable_ = $callable
        if $keyword == "transform":
            loader = DataLoader(Items(transform=callable_), batch_size=2, num_workers=2, multiprocessing_context="spawn")
        else:
            loader = DataLoader(Items(), batch_size=2, num_workers=2, multiprocessing_context="spawn", **{$keyword: callable_})
        error = raised(lambda: next(iter(loader)))
        if error is not None and "pickle" in str(error).lower():
            confirmed(describe(error) + f" (`{$keyword}={$shown}` with spawn workers)")
        not_reproduced(f"`{$keyword}={$shown}` with spawn workers: " + describe(error))


    if __name__ == "__main__":
        main()
    """,
    callable=Code("lambda batch: batch"),
    keyword="collate_fn",
    shown="lambda batch: batch",
    timeout=SPAWN_TIMEOUT,
)
def unpicklable_worker_callable(site, entry):
    node = site.node
    argument = node if isinstance(node, cst.Arg) else site.enclosing(node, cst.Arg)
    keyword = argument.keyword.value if argument is not None and argument.keyword is not None else "transform"
    if keyword not in ("collate_fn", "worker_init_fn"):
        keyword = "transform"
    value = argument.value if argument is not None else node
    if isinstance(value, cst.Lambda):
        blocked = site.blocked_call(value)
        if blocked is None:
            shown = site.code(value)
            return entry.witness(FROM_FINDING, "", site.device, callable=Code(f"({shown})"), keyword=keyword, shown=shown)
        return entry.canonical(f"the lambda calls `{blocked}`, which is not on the allow-list", site.device, keyword=keyword)
    return entry.canonical("a lambda stands in for the locally defined callable", site.device, keyword=keyword)


@witness(
    "TL305",
    """
    import random

    import torch
    from torch.utils.data import DataLoader, Dataset

    require($requires)


    class Noisy(Dataset):
        def __init__(self):
            self.rng = $make

        def __len__(self):
            return 16

        def __getitem__(self, index):
            return float($draw)


    if __name__ == "__main__":
        values = [float(v) for batch in DataLoader(Noisy(), batch_size=1, num_workers=$workers) for v in batch]
        if len(set(values)) < len(values):
            confirmed(f"{$workers} workers drew {len(set(values))} unique values of {len(values)} from `{$shown}`: every worker replays the same stream")
        not_reproduced(f"{len(set(values))} unique values of {len(values)}")
    """,
    make=Code("random.Random(0)"),
    draw=Code("self.rng.random()"),
    shown="random.Random(0)",
    workers=4,
    requires="random",
)
def rng_object_in_dataset(site, entry):
    name = site.qualified_name(site.node.func) if isinstance(site.node, cst.Call) else None
    kinds = {
        "random.Random": ("random.Random(0)", "self.rng.random()"),
        "numpy.random.default_rng": ("__import__('numpy').random.default_rng(0)", "self.rng.random()"),
        "numpy.random.RandomState": ("__import__('numpy').random.RandomState(0)", "self.rng.rand()"),
        "torch.Generator": ("torch.Generator().manual_seed(0)", "torch.rand(1, generator=self.rng).item()"),
    }
    if name not in kinds:
        return entry.canonical("the RNG is the canonical random.Random", site.device)
    make, draw = kinds[name]
    return entry.canonical(
        f"RNG type {name} taken from the file", site.device,
        make=Code(make), draw=Code(draw), shown=name + "(0)", requires=name.partition(".")[0],
    )


@witness(
    "TL306",
    """
    import os
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Where(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            info = torch.utils.data.get_worker_info()
            return os.getpid(), info is None


    pids = {int(pid) for pid, _ in DataLoader(Where(), batch_size=1, $arguments)}
    if pids == {os.getpid()}:
        confirmed("every __getitem__ ran in the training process itself (get_worker_info() is None): loading blocks the training step")
    not_reproduced(f"items loaded by processes {sorted(pids)}, training process {os.getpid()}")
    """,
    arguments=Code("num_workers=0"),
)
def synchronous_dataloader(site, entry):
    arguments, note = _rebuilt_arguments(site, _loader_call(site), drop=("batch_size",))
    if arguments is None:
        return entry.canonical(note, site.device)
    return entry.witness(FROM_FINDING, note, site.device, arguments=Code(arguments or "num_workers=0"))


@witness(
    "TL307",
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    dataset = TensorDataset(torch.arange(12))

    def orders(set_epoch):
        sampler = DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True)
        loader = DataLoader(dataset, batch_size=6, sampler=sampler)
        seen = []
        for epoch in range(3):
            if set_epoch:
                sampler.set_epoch(epoch)
            seen.append([int(i) for (batch,) in loader for i in batch])
        return seen

    without, with_epoch = orders(False), orders(True)
    if len({tuple(order) for order in without}) == 1 and len({tuple(order) for order in with_epoch}) > 1:
        confirmed(f"rank 0 of 2, 3 epochs without set_epoch: {without[0]} every epoch; with set_epoch(epoch): {with_epoch}")
    not_reproduced(f"without set_epoch: {without}; with it: {with_epoch}")
    """,
)
def distributed_sampler_without_set_epoch(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL308",
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    dataset = TensorDataset(torch.arange(12))
    world = 2

    def seen(rank, sharded):
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False) if sharded else None
        return sorted(int(i) for (batch,) in DataLoader(dataset, batch_size=4, sampler=sampler) for i in batch)

    plain = [seen(rank, False) for rank in range(world)]
    sharded = [seen(rank, True) for rank in range(world)]
    if all(items == list(range(12)) for items in plain) and not set(sharded[0]) & set(sharded[1]):
        confirmed(f"2 ranks, a DataLoader without a sampler: each rank sees all of {plain[0]} (every sample twice per epoch); with DistributedSampler: {sharded[0]} and {sharded[1]}")
    not_reproduced(f"without a sampler the ranks see {plain}; with DistributedSampler {sharded}")
    """,
)
def ddp_without_distributed_sampler(site, entry):
    return entry.canonical("", site.device)


# A dispatch mode that counts the calls of one aten op: the per-step witnesses count host reads and copies with it.
_OP_COUNT = Code("""
class OpCount(TorchDispatchMode):
    def __init__(self, op):
        super().__init__()
        self.op, self.count = op, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is self.op:
            self.count += 1
        return func(*args, **(kwargs or {}))
""")


@witness(
    "TL309",
    """
    import contextlib
    import io
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    STEPS = 20
    kind = $kind
    device = "cuda" if DEVICE == "cuda" else "cpu"


    $op_count


    def read(loss):
        if kind == "item":
            return loss.item()
        if kind == "float":
            return float(loss)
        if kind == "print":
            return print(loss)
        if kind == "cpu":
            return loss.detach().cpu()
        return loss.detach().cpu().numpy()


    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(STEPS, 4, 8, device=device), torch.randn(STEPS, 4, 1, device=device)
    # `aten._local_scalar_dense` is the read of a value on the host: on a GPU it waits for the queued kernels.
    reads = OpCount(torch.ops.aten._local_scalar_dense.default)
    calls = 0
    with reads, contextlib.redirect_stdout(io.StringIO()):
        for step in range(STEPS):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs[step]), targets[step])
            loss.backward()
            optimizer.step()
            read(loss)
            calls += 1
    shown = $shown
    if kind in ("item", "float") and reads.count == STEPS:
        confirmed(f"{STEPS} training steps: {reads.count} host reads of a value (aten._local_scalar_dense) from `{shown}`, one per step; on {device} there is no kernel queue to wait for, so what each costs can only be measured on a GPU")
    if kind == "print" and calls == STEPS:
        confirmed(f"{STEPS} training steps: `{shown}` ran {calls} times, once per step, each formatting the tensor's values on the host; on {device} there is no kernel queue to wait for, so what that synchronisation costs can only be measured on a GPU")
    if kind in ("cpu", "numpy") and calls == STEPS:
        confirmed(f"{STEPS} training steps: `{shown}` ran {calls} times, once per step; on {device} it copies nothing to wait for, so the synchronisation it forces on a GPU can only be measured there")
    not_reproduced(f"{STEPS} steps: {reads.count} host reads, {calls} calls of `{shown}`")
    """,
    kind="item",
    shown="loss.item()",
    op_count=_OP_COUNT,
)
def host_sync_in_step(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    if call is None:
        return entry.canonical("the flagged code is not a call", site.device)
    kind = semantics.method_name(call) or (call.func.value if isinstance(call.func, cst.Name) else None)
    if kind not in ("item", "float", "print", "cpu", "numpy"):
        return entry.canonical("the flagged call is not one the witness knows", site.device)
    return entry.witness(FROM_FINDING, "a small training loop stands in for the file's", site.device, kind=kind, shown=site.code(call))


@witness(
    "TL310",
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    # Without a GPU the `meta` device stands in: a move there is a copy op (`aten._to_copy`), as a transfer is.
    device = "cuda" if DEVICE == "cuda" else "meta"
    ITERATIONS = 10


    $op_count


    weights = torch.rand(1000)
    with OpCount(torch.ops.aten._to_copy.default) as in_loop:
        for step in range(ITERATIONS):
            moved = weights.to(device)
    with OpCount(torch.ops.aten._to_copy.default) as hoisted:
        moved = weights.to(device)
        for step in range(ITERATIONS):
            used = moved
    if in_loop.count == ITERATIONS and hoisted.count == 1:
        confirmed(f"{ITERATIONS} iterations: the same tensor copied to {device} {in_loop.count} times (aten._to_copy), {hoisted.count} when moved before the loop; the time each transfer takes can only be measured on a GPU")
    not_reproduced(f"{ITERATIONS} iterations: {in_loop.count} copies in the loop, {hoisted.count} moved once")
    """,
    op_count=_OP_COUNT,
)
def loop_invariant_transfer(site, entry):
    return entry.canonical("", site.device)


@witness(
    "TL311",
    """
    import subprocess
    import sys

    import torch

    RUN = '''
    import torch
    SEED
    model = torch.nn.Linear(3, 1)
    order = torch.randperm(6).tolist()
    print(round(float(model.weight.sum()), 6), order)
    '''


    def run(seeded):
        program = RUN.replace("SEED", "torch.manual_seed(0)" if seeded else "pass")
        done = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, text=True, timeout=60)
        return done.stdout.strip() or done.stderr.strip()[-200:]


    unseeded = [run(False), run(False)]
    seeded = [run(True), run(True)]
    if unseeded[0] != unseeded[1] and seeded[0] == seeded[1]:
        confirmed(f"two runs without a seed: weight sum and shuffle {unseeded[0]} vs {unseeded[1]}; with torch.manual_seed(0) both {seeded[0]}")
    not_reproduced(f"unseeded runs {unseeded}, seeded runs {seeded}")
    """,
    timeout=SPAWN_TIMEOUT,
)
def unseeded_training(site, entry):
    return entry.canonical("", site.device)
