"""How close `torchlint doctor --memory` comes to the memory a training step really takes.

    python benchmarks/memory_check.py                 # CPU: the table for docs/health.md
    python benchmarks/memory_check.py --device cuda   # GPU: against torch.cuda.max_memory_allocated()

For three models (an MLP, a small CNN, a small transformer, each with Adam) and three batch
sizes (the loader's, and 4 and 16 times it, which doctor projects from the loader's), every
number comes from a fresh process, so that one measurement's heap does not serve the next:

- projected: `torchlint.health.memory.measure` on the factory, `peak(batch size)`;
- measured on CPU: one step (zero_grad, forward, loss, backward, optimizer.step) to create the
  optimizer state, then a second step with the process's peak resident memory reset before it
  (`/proc/self/clear_refs`, Linux); the step's peak is the tensors live before it (parameters,
  buffers, optimizer state, batch: their storages) plus how far the resident set rose above
  where it stood (`VmHWM` minus `VmRSS`). Twice: with glibc's default allocator settings, and
  with `MALLOC_MMAP_THRESHOLD_=65536`, where every allocation above 64 KiB is returned to the
  system when freed, so that the resident set follows the live bytes;
- measured on CUDA: `torch.cuda.max_memory_allocated()` over the second step, the model on the GPU,
  against doctor's projection made on the GPU and the one made on the CPU.

Exits 1 when a CPU projection is off by more than TOLERANCE against the MMAP column, or a CUDA
projection against the allocator.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import re
import subprocess
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

TOLERANCE = 0.10
MODELS = ("mlp", "cnn", "transformer")
LOADER_BATCH = {"mlp": 256, "cnn": 32, "transformer": 8}
SCALES = (1, 4, 16)
VOCABULARY, SEQUENCE = 1000, 128


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCABULARY, 256)
        layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(256, VOCABULARY)

    def forward(self, tokens):
        # (batch, vocabulary, sequence): CrossEntropyLoss's layout for one label per position.
        return self.head(self.encoder(self.embedding(tokens))).transpose(1, 2)


def make(name: str, batch_size: int, device: str = "cpu"):
    torch.manual_seed(0)
    samples = batch_size * 2
    if name == "mlp":
        model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
        data = TensorDataset(torch.randn(samples, 1024), torch.randint(0, 10, (samples,)))
    elif name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 16 * 16, 10),
        )
        data = TensorDataset(torch.randn(samples, 3, 64, 64), torch.randint(0, 10, (samples,)))
    else:
        model = Transformer()
        data = TensorDataset(torch.randint(0, VOCABULARY, (samples, SEQUENCE)), torch.randint(0, VOCABULARY, (samples, SEQUENCE)))
    model = model.to(device)
    if device != "cpu":
        data = TensorDataset(*(tensor.to(device) for tensor in data.tensors))
    loader = DataLoader(data, batch_size=batch_size)
    return model, loader, nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters())


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        return int(re.search(key + r":\s+(\d+)", status.read()).group(1)) * 1024


def _storage_bytes(tensors) -> int:
    return sum({tensor.untyped_storage().data_ptr(): tensor.untyped_storage().nbytes() for tensor in tensors}.values())


def measure_step(name: str, batch_size: int, device: str) -> int:
    """The peak bytes of the second training step, in this process."""
    model, loader, criterion, optimizer = make(name, batch_size, device)
    inputs, labels = next(iter(loader))

    def step():
        optimizer.zero_grad(set_to_none=True)
        criterion(model(inputs), labels).backward()
        optimizer.step()

    step()
    optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        # The whole dataset sits on the GPU too (doctor needs the batch on the model's device): not the step's.
        return torch.cuda.max_memory_allocated() - _storage_bytes(loader.dataset.tensors)
    state = [value for values in optimizer.state.values() for value in values.values() if isinstance(value, torch.Tensor)]
    live = _storage_bytes([*model.parameters(), *model.buffers(), *state, inputs, labels])
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak resident set starts again from the current one
    step()
    return live + _status("VmHWM") - before


def project(name: str, sizes, device: str) -> dict:
    from torchlint.health.memory import measure

    report = measure(*make(name, LOADER_BATCH[name], device))
    return {size: report.peak(size).bytes for size in sizes}


def _child(*arguments, env=None) -> str:
    completed = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True,
                               env={**os.environ, **(env or {})}, timeout=600)
    if completed.returncode:
        raise SystemExit(f"{' '.join(arguments)} failed:\n{completed.stderr}")
    return completed.stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--measure", nargs=2, metavar=("MODEL", "BATCH"), help=argparse.SUPPRESS)
    parser.add_argument("--project", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(measure_step(args.measure[0], int(args.measure[1]), args.device))
        return 0
    if args.project:
        sizes = [scale * LOADER_BATCH[args.project] for scale in SCALES]
        print(json.dumps(project(args.project, sizes, args.device)))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 0
    return _table(args.device)


def _table(device: str) -> int:
    mib = 2 ** 20
    worst = 0.0
    if device == "cpu":
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ratio = projected / measured\n")
        print("| model | batch | projected | measured (mmap above 64 KiB) | ratio | measured (glibc defaults) | ratio |")
        print("|---|---|---|---|---|---|---|")
    else:
        print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; ratio = projected / measured\n")
        print("| model | batch | projected on cuda | projected on cpu | max_memory_allocated | ratio (cuda) | ratio (cpu) |")
        print("|---|---|---|---|---|---|---|")
    for name in MODELS:
        projected = {int(k): v for k, v in json.loads(_child("--project", name, "--device", device)).items()}
        if device == "cuda":
            from_cpu = {int(k): v for k, v in json.loads(_child("--project", name, "--device", "cpu")).items()}
        for size, peak in projected.items():
            how = "measured" if size == LOADER_BATCH[name] else "projected"
            if device == "cpu":
                mapped = int(_child("--measure", name, str(size), env={"MALLOC_MMAP_THRESHOLD_": "65536"}))
                default = int(_child("--measure", name, str(size)))
                worst = max(worst, abs(peak / mapped - 1))
                print(f"| {name} | {size} ({how}) | {peak / mib:,.1f} MiB | {mapped / mib:,.1f} MiB | {peak / mapped:.3f} "
                      f"| {default / mib:,.1f} MiB | {peak / default:.3f} |")
            else:
                allocated = int(_child("--measure", name, str(size), "--device", "cuda"))
                worst = max(worst, abs(peak / allocated - 1))
                print(f"| {name} | {size} ({how}) | {peak / mib:,.1f} MiB | {from_cpu[size] / mib:,.1f} MiB "
                      f"| {allocated / mib:,.1f} MiB | {peak / allocated:.3f} | {from_cpu[size] / allocated:.3f} |")
    print(f"\nlargest deviation {worst:.1%} (tolerance {TOLERANCE:.0%})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
