"""How long the editor waits: `python benchmarks/server_latency.py` (docs/performance.md shows a run).

Starts `torchlint server` and, for each of two training scripts, opens it, lets it
warm up, then makes one-character edits in the training loop of its `Trainer`, one
at a time, and times each from the `didChange` sent to the `publishDiagnostics` for
that version received: what a user waits for after typing. The scripts: "classes",
about 300 lines (a config dataclass, a dataset, residual and attention blocks, a
model, EMA weights, a Trainer with training, evaluation and checkpoints, a main), with
five findings (TL103, TL106, TL109, TL602, TL603); "trainer", the same grown to about
1,000 lines with further dataset, block and callback classes, as a long training
script is. It prints the median and p95 over the edits, and for comparison the engine
alone on the same texts (`lint_text` in this process), so the server's own share
shows. On a machine other jobs load, wall times say more about the load than about
torchlint, so it also gives the CPU time the server process spent per edit (with
psutil, in 10 ms ticks) and the engine's CPU time: what a quiet machine's wall time
comes close to. `--neovim` also makes the same edits in Neovim (headless, the
`start_client` set-up of docs/editors.md), timed inside it. The targets are a median
under 100 ms and a p95 under 150 ms with a warm server; this is a measurement, not a
test: it never fails on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from lsprotocol import types
from pygls.lsp.client import LanguageClient

TARGET_MEDIAN_MS = 100
TARGET_P95_MS = 150

HEADER = '''\
"""Train an image classifier with mixed precision, EMA weights and checkpoints."""

import argparse
import json
import logging
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

logger = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    data_dir: str = "data"
    output_dir: str = "runs/default"
    epochs: int = 90
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_epochs: int = 5
    ema_decay: float = 0.999
    grad_clip: float = 1.0
    accumulate: int = 1
    workers: int = 4
    seed: int = 0
    amp: bool = True
    log_every: int = 50
    milestones: List[int] = field(default_factory=lambda: [30, 60, 80])


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class AverageMeter:
    def __init__(self, name):
        self.name = name
        self.reset()

    def reset(self):
        self.total = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.total += value * n
        self.count += n

    @property
    def average(self):
        return self.total / max(self.count, 1)

'''

DATASET = '''
class Folder{index}(Dataset):
    """Images stored as arrays under a folder, split {index}."""

    def __init__(self, root, train=True, size={size}):
        self.root = Path(root)
        self.train = train
        self.size = size
        self.files = sorted(self.root.glob("*.npy"))
        self.labels = [int(path.stem.split("_")[-1]) for path in self.files]

    def __len__(self):
        return len(self.files)

    def augment(self, image):
        if self.train and random.random() < 0.5:
            image = torch.flip(image, dims=[2])
        if self.train:
            shift = random.randint(-4, 4)
            image = torch.roll(image, shifts=shift, dims=1)
        return image

    def __getitem__(self, index):
        array = np.load(self.files[index])
        image = torch.from_numpy(array).float().div(255)
        image = F.interpolate(image.unsqueeze(0), size=(self.size, self.size)).squeeze(0)
        image = self.augment(image)
        mean = image.mean(dim=(1, 2), keepdim=True)
        std = image.std(dim=(1, 2), keepdim=True) + 1e-6
        return (image - mean) / std, self.labels[index]

'''

BLOCK = '''
class Block{index}(nn.Module):
    """A residual block with {width} channels."""

    def __init__(self, channels={width}, stride=1, dropout=0.1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.dropout = nn.Dropout(dropout)
        self.shortcut = nn.Identity()
        if stride != 1:
            self.shortcut = nn.Sequential(nn.Conv2d(channels, channels, 1, stride=stride, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.dropout(out)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Attention{index}(nn.Module):
    def __init__(self, dim={width}, heads=4):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        weights = (q @ k.transpose(-2, -1)) * self.scale
        weights = weights.softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(batch, tokens, dim)
        return self.proj(out)

'''

MODEL = '''
class Net(nn.Module):
    def __init__(self, classes=10, width=64, depth=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.Sequential(*[Block0(width) for _ in range(depth)])
        self.attention = Attention0(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        tokens = x.flatten(2).transpose(1, 2)
        tokens = tokens + self.attention(tokens)
        return self.head(tokens.mean(dim=1))


class ModelEma:
    def __init__(self, model, decay=0.999):
        self.decay = decay
        self.shadow = {name: value.detach().clone() for name, value in model.state_dict().items()}

    def update(self, model):
        with torch.no_grad():
            for name, value in model.state_dict().items():
                if value.dtype.is_floating_point:
                    self.shadow[name].mul_(self.decay).add_(value.detach(), alpha=1 - self.decay)

    def copy_to(self, model):
        model.load_state_dict(self.shadow)


def freeze_stem(model):
    for param in model.stem.parameters():
        param.require_grad = False


def warmup_cosine(step, total, warmup, base):
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    return base * 0.5 * (1 + math.cos(math.pi * progress))

'''

TRAINER = '''
class Trainer:
    def __init__(self, config: TrainConfig):
        self.config = config
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = Net().to(self.device)
        self.ema = ModelEma(self.model, config.ema_decay)
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=config.milestones)
        self.scaler = torch.cuda.amp.GradScaler(enabled=config.amp)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        self.history: Dict[str, List[float]] = {"loss": [], "accuracy": []}
        self.best = 0.0
        self.step = 0

    def loaders(self):
        train = Folder0(Path(self.config.data_dir) / "train", train=True)
        test = Folder0(Path(self.config.data_dir) / "test", train=False)
        return (
            DataLoader(train, batch_size=self.config.batch_size, shuffle=True, num_workers=self.config.workers),
            DataLoader(test, batch_size=self.config.batch_size, num_workers=self.config.workers),
        )

    def train_epoch(self, loader, epoch):
        self.model.train()
        meter = AverageMeter("loss")
        total_loss = 0
        started = time.time()
        for index, (images, labels) in enumerate(loader):
            images, labels = images.to(self.device), labels.to(self.device)
            with torch.autocast(self.device.type, enabled=self.config.amp):
                logits = self.model(images)
                loss = self.criterion(logits, labels) / self.config.accumulate
            self.scaler.scale(loss).backward()
            if (index + 1) % self.config.accumulate == 0:
                self.scaler.unscale_(self.optimizer)
                nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer.zero_grad()
                self.ema.update(self.model)
            total_loss += loss
            meter.update(loss.item(), images.size(0))
            self.step += 1
            if index % self.config.log_every == 0:
                logger.info("epoch %d step %d loss %.4f (%.1fs)", epoch, index, meter.average, time.time() - started)
        self.history["loss"].append(meter.average)
        return total_loss / len(loader)

    def evaluate(self, loader):
        self.model.eval()
        correct = 0
        seen = 0
        for images, labels in loader:
            outputs = self.model(images.to(self.device))
            correct += (outputs.argmax(dim=1).cpu() == labels).sum().item()
            seen += labels.numel()
        accuracy = correct / max(seen, 1)
        self.history["accuracy"].append(accuracy)
        return accuracy

    def save(self, path, epoch):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save({
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "ema": self.ema.shadow,
            "epoch": epoch,
        }, path)

    def load(self, path):
        state = torch.load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.ema.shadow = state["ema"]
        return state["epoch"]

    def fit(self):
        train_loader, test_loader = self.loaders()
        for epoch in range(self.config.epochs):
            self.scheduler.step()
            loss = self.train_epoch(train_loader, epoch)
            accuracy = self.evaluate(test_loader)
            logger.info("epoch %d loss %.4f accuracy %.4f", epoch, loss, accuracy)
            if accuracy > self.best:
                self.best = accuracy
                self.save(os.path.join(self.config.output_dir, "best.pt"), epoch)
        with open(os.path.join(self.config.output_dir, "history.json"), "w") as handle:
            json.dump(self.history, handle)

'''

CALLBACK = '''
class Callback{index}:
    """Hooks called by a training loop: logging, early stopping and gradient statistics ({index})."""

    def __init__(self, patience={patience}, path="runs/callback_{index}.jsonl"):
        self.patience = patience
        self.path = path
        self.best = -math.inf
        self.waited = 0
        self.norms: List[float] = []

    def on_batch_end(self, model, loss):
        norm = 0.0
        for param in model.parameters():
            if param.grad is not None:
                norm += param.grad.detach().norm().item() ** 2
        self.norms.append(math.sqrt(norm))

    def on_epoch_end(self, epoch, metrics):
        with open(self.path, "a") as handle:
            handle.write(json.dumps({{"epoch": epoch, **metrics}}) + "\\n")
        score = metrics.get("accuracy", 0.0)
        if score > self.best:
            self.best = score
            self.waited = 0
            return False
        self.waited += 1
        return self.waited >= self.patience


def smooth_{index}(values, window={window}):
    if not values:
        return 0.0
    recent = values[-window:]
    return sum(float(value) for value in recent) / len(recent)

'''

MAIN = '''
def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=str, default=None)
    parser.add_argument("--resume", type=str, default=None)
    return parser.parse_args()


def main():
    args = parse_args()
    config = TrainConfig()
    if args.config:
        with open(args.config) as handle:
            config = TrainConfig(**json.load(handle))
    seed_everything(config.seed)
    trainer = Trainer(config)
    if args.resume:
        trainer.load(args.resume)
    trainer.fit()


if __name__ == "__main__":
    main()
'''

# The line each timed edit changes (its last character, a digit), in the Trainer's training loop.
EDITED_LINE = "            self.step += 1"


def training_script(lines: int) -> str:
    """A training script of about `lines` lines: a config, a dataset, a model, EMA, a Trainer class and a
    main, then more dataset, block and callback classes until it is long enough; five findings (TL103,
    TL106, TL109, TL602, TL603) in the fixed parts."""
    parts = [HEADER, DATASET.format(index=0, size=32), BLOCK.format(index=0, width=64), MODEL, TRAINER]
    index = 1
    extra = []
    while ("".join(parts + extra) + MAIN).count("\n") < lines:
        kind = index % 3
        if kind == 0:
            extra.append(DATASET.format(index=index, size=32 + index))
        elif kind == 1:
            extra.append(BLOCK.format(index=index, width=32 * (1 + index % 4)))
        else:
            extra.append(CALLBACK.format(index=index, patience=3 + index % 5, window=5 + index % 7))
        index += 1
    return "".join(parts[:4] + extra + parts[4:]) + MAIN


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def edit_site(text: str) -> Tuple[int, int, Callable[[int], str]]:
    """Where the timed edits go and what each writes: in a generated script, the last digit of `EDITED_LINE`, cycled;
    in any other file (`--file`), a space added at the end of the code line inside a function nearest the middle of
    the file, then taken away again: a one-character edit that keeps the file as it was."""
    lines = text.splitlines()
    if EDITED_LINE in lines:
        return lines.index(EDITED_LINE), len(EDITED_LINE) - 1, lambda version: str(version % 9 + 1)
    body = [
        row for row, line in enumerate(lines)
        if line.startswith("        ") and line.strip()[:1].isalpha() and not line.rstrip().endswith(("\\", ",", "(", "[", "{"))
    ]
    if not body:
        raise SystemExit("no line inside a function to edit")
    row = min(body, key=lambda row: abs(row - len(lines) // 2))
    return row, len(lines[row].rstrip()), lambda version: " " if version % 2 == 0 else ""


async def measure(text: str, edits: int, warmup: int, folder: Path) -> Dict[str, object]:
    path = folder / "train.py"
    path.write_text(text)
    uri = path.as_uri()
    client = LanguageClient("server-latency", "1")
    arrived: Dict[int, float] = {}
    waiting: Dict[int, asyncio.Event] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def published(params: types.PublishDiagnosticsParams) -> None:
        if params.uri == uri and params.version is not None:
            arrived[params.version] = time.perf_counter()
            waiting.setdefault(params.version, asyncio.Event()).set()

    await client.start_io(sys.executable, "-m", "torchlint", "server")
    await client.initialize_async(types.InitializeParams(
        process_id=os.getpid(), capabilities=types.ClientCapabilities(),
        workspace_folders=[types.WorkspaceFolder(uri=folder.as_uri(), name="bench")],
    ))
    client.initialized(types.InitializedParams())
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text),
    ))
    await asyncio.wait_for(waiting.setdefault(1, asyncio.Event()).wait(), 120)

    row, column, written = edit_site(text)
    generated = EDITED_LINE in text.splitlines()
    server = _process(client)
    latencies, cpu = [], []
    for version in range(2, 2 + warmup + edits):
        # A generated script's digit is replaced; a real file's added space is removed by the next edit.
        replaced = 1 if generated or version % 2 == 1 else 0
        position_end = types.Position(line=row, character=column + replaced)
        change = types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=row, character=column), end=position_end), text=written(version),
        )
        cpu_before = _cpu_seconds(server)
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[change],
        ))
        await asyncio.wait_for(waiting.setdefault(version, asyncio.Event()).wait(), 120)
        if version >= 2 + warmup:
            latencies.append((arrived[version] - sent) * 1000)
            if server is not None:
                cpu.append((_cpu_seconds(server) - cpu_before) * 1000)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {"latencies_ms": latencies, "cpu_ms": cpu}


NEOVIM_INIT = """
vim.api.nvim_create_autocmd("FileType", {
  pattern = "python",
  callback = function(args)
    vim.lsp.buf_attach_client(args.buf, vim.lsp.start_client({ name = "torchlint", cmd = CMD, root_dir = vim.fn.getcwd() }))
  end,
})
"""

# Times each edit from the buffer change (Neovim sends its didChange at once) to the diagnostics of that version.
NEOVIM_EDITS = """
local out = assert(io.open("latencies.txt", "w"))
local ok, problem = pcall(function()
  local arrived = {}
  local default = vim.lsp.handlers["textDocument/publishDiagnostics"]
  vim.lsp.handlers["textDocument/publishDiagnostics"] = function(err, result, ctx, config)
    if result and result.version then arrived[result.version] = vim.loop.hrtime() end
    return default(err, result, ctx, config)
  end
  local buffer = vim.api.nvim_get_current_buf()
  assert(vim.wait(120000, function() return #vim.diagnostic.get(buffer) > 0 end, 10), "no diagnostics")
  for index = 1, EDITS do
    local line = vim.api.nvim_buf_get_lines(buffer, ROW, ROW + 1, false)[1]
    local sent = vim.loop.hrtime()
    vim.api.nvim_buf_set_text(buffer, ROW, #line - 1, ROW, #line, { tostring(index % 9 + 1) })
    local version = vim.lsp.util.buf_versions[buffer]
    assert(vim.wait(120000, function() return arrived[version] ~= nil end, 1), "no diagnostics for an edit")
    out:write(((arrived[version] - sent) / 1e6) .. "\\n")
    vim.wait(200, function() return false end, 10)
  end
end)
if not ok then out:write("error " .. tostring(problem) .. "\\n") end
out:close()
vim.cmd("qa!")
"""


def measure_in_neovim(text: str, edits: int, warmup: int, folder: Path) -> List[float]:
    """The same edits made in Neovim (0.7 or later, headless), timed inside it: what its user waits for."""
    (folder / "train.py").write_text(text)
    command = "{" + ", ".join(json.dumps(part) for part in (sys.executable, "-m", "torchlint", "server")) + "}"
    (folder / "init.lua").write_text(NEOVIM_INIT.replace("CMD", command))
    row = text.splitlines().index(EDITED_LINE)
    (folder / "edits.lua").write_text(NEOVIM_EDITS.replace("EDITS", str(warmup + edits)).replace("ROW", str(row)))
    subprocess.run(["nvim", "--headless", "--clean", "-u", "init.lua", "-c", "luafile edits.lua", "train.py"],
                   cwd=folder, stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    lines = (folder / "latencies.txt").read_text().splitlines()
    if lines and lines[-1].startswith("error"):
        raise RuntimeError(f"Neovim: {lines[-1]}")
    return [float(line) for line in lines][warmup:]


def _process(client: LanguageClient):
    """The server's process, for its CPU times; None without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process(client._server.pid)


def _cpu_seconds(process) -> float:
    if process is None:
        return 0.0
    times = process.cpu_times()
    return times.user + times.system


def engine_alone(text: str, path: Path, repeats: int) -> List[float]:
    """The same text linted in this process, as the server's lint thread does, without the protocol."""
    from torchlint.config import load
    from torchlint.engine.runner import lint_text

    config = load(None, path.parent)
    lint_text(text, str(path), config)
    wall, cpu = [], []
    lines = text.splitlines(keepends=True)
    row, column, written = edit_site(text)
    generated = EDITED_LINE in text.splitlines()
    for index in range(repeats):
        line = lines[row]
        edited_line = line[:column] + written(index) + line[column + 1:] if generated else line[:column] + " " * (index % 2) + line[column:]
        edited = "".join(lines[:row] + [edited_line] + lines[row + 1:])
        started, started_cpu = time.perf_counter(), time.process_time()
        lint_text(edited, str(path), config)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return wall, cpu


def summarise(
    name: str, text: str, result: Dict[str, List[float]], engine: List[float], engine_cpu: List[float], neovim: List[float],
) -> dict:
    latencies, cpu = result["latencies_ms"], result["cpu_ms"]
    return {
        "file": name,
        "lines": text.count("\n"),
        "edits": len(latencies),
        "median_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(percentile(latencies, 0.95), 1),
        "min_ms": round(min(latencies), 1),
        "max_ms": round(max(latencies), 1),
        "server_cpu_median_ms": round(statistics.median(cpu), 1) if cpu else None,
        "server_cpu_p95_ms": round(percentile(cpu, 0.95), 1) if cpu else None,
        "engine_median_ms": round(statistics.median(engine), 1),
        "engine_p95_ms": round(percentile(engine, 0.95), 1),
        "engine_cpu_median_ms": round(statistics.median(engine_cpu), 1),
        "neovim_median_ms": round(statistics.median(neovim), 1) if neovim else None,
        "neovim_p95_ms": round(percentile(neovim, 0.95), 1) if neovim else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1000, help="length of the long training script")
    parser.add_argument("--edits", type=int, default=50, help="edits timed per file")
    parser.add_argument("--warmup", type=int, default=5, help="edits made first and not timed")
    parser.add_argument("--neovim", action="store_true", help="also make the edits in Neovim (nvim on PATH), timed there")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument(
        "--file", type=Path, action="append", default=[],
        help="also time edits of this file (repeatable), e.g. a training script of the corpus: "
        "benchmarks/.cache/training/karpathy+llm.c/train_gpt2.py",
    )
    args = parser.parse_args()
    if args.neovim and shutil.which("nvim") is None:
        parser.error("--neovim needs nvim on PATH")
    # The fixed parts alone (a file of several classes and findings), and the long script.
    texts = {"classes": training_script(0), "trainer": training_script(args.lines)}
    for path in args.file:
        texts[str(path)] = path.read_text(encoding="utf-8")
    summaries = []
    for name, text in texts.items():
        with tempfile.TemporaryDirectory() as folder:
            result = asyncio.run(measure(text, args.edits, args.warmup, Path(folder)))
            engine, engine_cpu = engine_alone(text, Path(folder) / "train.py", args.edits)
        neovim = []
        if args.neovim and EDITED_LINE in text.splitlines():  # the Neovim edits are the generated scripts'
            with tempfile.TemporaryDirectory() as folder:
                neovim = measure_in_neovim(text, args.edits, args.warmup, Path(folder))
        summaries.append(summarise(name, text, result, engine, engine_cpu, neovim))
    machine = {
        "targets_ms": {"median": TARGET_MEDIAN_MS, "p95": TARGET_P95_MS},
        "cpus": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    if args.json:
        print(json.dumps({"files": summaries, **machine}, indent=2))
        return 0
    print(f"torchlint server: diagnostics after a one-character edit (targets: median under {TARGET_MEDIAN_MS} ms, "
          f"p95 under {TARGET_P95_MS} ms)")
    for summary in summaries:
        print(textwrap.dedent(f"""\
            {summary['file']}: {summary['lines']} lines, {summary['edits']} edits timed (after {args.warmup} warm-up edits)
              median          {summary['median_ms']} ms
              p95             {summary['p95_ms']} ms
              min / max       {summary['min_ms']} / {summary['max_ms']} ms
              server CPU      median {summary['server_cpu_median_ms']} ms, p95 {summary['server_cpu_p95_ms']} ms per edit
              engine alone    median {summary['engine_median_ms']} ms, p95 {summary['engine_p95_ms']} ms wall,
                              median {summary['engine_cpu_median_ms']} ms CPU (lint_text in-process)"""))
        if summary["neovim_median_ms"] is not None:
            print(f"  in Neovim       median {summary['neovim_median_ms']} ms, p95 {summary['neovim_p95_ms']} ms")
    print(f"machine: {machine['cpus']} CPUs, load average {machine['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
