"""Fuzzing: generated and mutated programs never crash torchlint and its fixes never corrupt code.

Three sources of input, each bounded so that this module runs in a minute or two:

- hypothesmith's programs, valid Python from the grammar: every rule and every fix
  (unsafe ones included) must run without an internal error;
- torch-flavoured programs built from fragments (training loops, no_grad blocks,
  DataLoader calls, .cuda()/.to() chains, rule examples, fixture statements) in
  random nestings and layouts, so that the rules and their fixes really run;
- every fixture file mutated (truncated, lines deleted, duplicated or re-indented,
  NUL, invalid UTF-8, a BOM in the middle, CR-only line endings) through the CLI.

A fixed program must still parse and compile (as far as the original did), and
fixing the fixed program again must change nothing. `benchmarks/reliability.py`
runs the same checks for longer and on real code (docs/reliability.md).
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import io
import os
import random
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import hypothesmith
import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, make_config
from torchlint.cli import main
from torchlint.engine.runner import lint_text
from torchlint.fixes import fix_text
from torchlint.rules import all_rules

FILENAME = "fuzz.py"
CONFIGS = {version: make_config(select=["ALL"], torch_version=version) for version in ("1.13", "2.1", "2.6")}
CONFIG = CONFIGS["2.6"]
# Generated programs are slow to shrink and to produce; a fixed seed database is not wanted in CI.
FUZZ = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


# ---------------------------------------------------------------- the properties


def compiles(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def internal_errors(findings) -> List[str]:
    return [f"{finding.code}: {finding.message}" for finding in findings if "internal error" in finding.message]


def check_program(text: str, unsafe: bool = True, config=CONFIG) -> Tuple[int, int]:
    """Lint and fix `text` with every rule; (findings, fixes applied). Fails on any crash or corruption."""

    def lint(code: str):
        findings = lint_text(code, FILENAME, config)
        assert internal_errors(findings) == [], code
        return findings

    findings = lint(text)
    result = fix_text(text, lint, unsafe, FILENAME)
    assert (result.problems, result.broken) == ([], False), text
    if result.changed:
        cst.parse_module(result.text)
        ast.parse(result.text)
        assert compiles(result.text) or not compiles(text), f"the fixes made this compile no longer:\n{text}\n---\n{result.text}"
        again = fix_text(result.text, lint, unsafe, FILENAME)
        assert (again.text, again.fixed, again.problems) == (result.text, [], []), f"fixing twice differs:\n{result.text}"
    return len(findings), len(result.fixed)


# ---------------------------------------------------------------- hypothesmith: any Python


@settings(max_examples=100, **FUZZ)
@given(hypothesmith.from_grammar(), st.booleans())
def test_grammar_generated_programs(code, unsafe):
    check_program(code, unsafe)


@settings(max_examples=20, **FUZZ)
@given(hypothesmith.from_node(), st.booleans())
def test_libcst_generated_programs(code, unsafe):
    check_program(code, unsafe)


# ---------------------------------------------------------------- torch-flavoured programs

# Most rules resolve names through the imports: every program has these, and some of the others.
BASE_IMPORTS = [
    "import torch",
    "import torch.nn as nn",
    "import torch.nn.functional as F",
    "from torch.utils.data import DataLoader, Dataset",
    "import numpy as np",
]
IMPORTS = [
    "from torch import nn, optim",
    "from torch.utils.data import DataLoader as DL",
    "from torch.utils import data",
    "from torch.utils.checkpoint import checkpoint",
    "from torchvision import models",
    "from torchvision.transforms import v2",
    "import pytorch_lightning as pl",
    "from torch.cuda.amp import autocast, GradScaler",
    "import functools",
]
TENSORS = [
    "x", "y", "images", "labels", "out", "probs", "model(x)", "self.model(batch)", "batch[0]",
    "torch.zeros(3)", "torch.ones(64, 64)", "torch.arange(8)", "torch.randn(2, 2, requires_grad=True)",
    "torch.ones(3, requires_grad=True)", "torch.tensor([1.0, 2.0])", "torch.tensor(grid)",
    "torch.from_numpy(np.random.randn(4))", "torch.zeros(2, dtype=torch.float64)",
    "torch.empty(3, device='cuda')", "torch.full((2,), 1.0, device=device)", "F.softmax(model(x), dim=1)",
    "torch.sigmoid(out)", "torch.log(1 + probs)", "torch.log(probs + 1)", "torch.exp(rate)",
    "torch.ger(a, b)", "torch.solve(b, A).solution", "checkpoint(block, hidden)", "np.linspace(0, 1, 8)",
]
# Operands that need parentheses before a method call is chained onto them.
BINARY_TENSORS = ["torch.exp(rate) - 1", "1 + probs", "x * 2", "-torch.log(1 + probs)", "loss / steps"]
MOVES = [
    ".cuda()", ".cpu()", ".to(device)", ".to('cuda')", ".to(device, torch.float32)", ".to(device, non_blocking=True)",
    ".half()", ".float()", ".long()", ".double()", ".detach()", ".requires_grad_()", ".to(torch.float16)",
    ".cuda(non_blocking=True)", ".to(dtype=torch.float64)", ".item()", ".mean()", ".backward()", ".type(torch.float64)",
    ".to(device=device)", ".bfloat16()", ".to(args.device)", ".cuda(0)",
]
LOSSES = [
    "criterion", "F.cross_entropy", "nn.CrossEntropyLoss()", "F.nll_loss", "nn.NLLLoss()", "nn.BCEWithLogitsLoss()",
    "F.binary_cross_entropy_with_logits", "loss_fn", "nn.MSELoss()", "self.criterion",
]
LABELS = ["labels", "y", "labels.float()", "targets.long()", "y.to(device)", "target.float().cuda()", "labels.half()"]
LOADER_KEYWORDS = [
    "batch_size=32", "shuffle=True", "num_workers=0", "num_workers=4", "num_workers=n_workers", "persistent_workers=True",
    "persistent_workers=False", "persistent_workers=keep", "pin_memory=True", "collate_fn=lambda batch: batch",
    "collate_fn=collate", "collate_fn=functools.partial(collate, pad=0)", "worker_init_fn=lambda i: None",
    "drop_last=True", "**loader_kwargs", "multiprocessing_context='spawn'", "prefetch_factor=2",
]
CALLS = [
    "torch.load('model.pt')", "torch.load(path, weights_only=False)", "torch.load(path, map_location='cpu')",
    "torch.load(f, weights_only=True)", "torch.load(path, weights_only=flag)", "torch.load(path, **kwargs)",
    "torch.cuda.amp.autocast()", "torch.cuda.amp.GradScaler()", "torch.cuda.amp.autocast(dtype=torch.bfloat16)",
    "checkpoint(block, hidden, use_reentrant=False)", "models.resnet50(pretrained=True)", "models.vgg16(pretrained=False)",
    "v2.Compose([v2.RandomHorizontalFlip(), v2.ToTensor()])", "v2.ToTensor()",
    "torch.utils.data._utils.collate.default_collate(samples)", "torch._C._get_tracing_state()",
    "torch.device('cuda' if torch.cuda.is_available() else 'cpu')", "torch.device('cuda')",
    "torch.optim.SGD(model.parameters(), lr=0.1)", "optim.Adam(params)",
    "torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)", "np.random.default_rng(0)", "np.random.RandomState(1)",
    "nn.Linear(4, 4)", "Net().cuda()", "build_model().to(device)", "torch.nn.DataParallel(model)",
    "torch.set_default_dtype(torch.float64)", "torch.get_default_dtype()",
]
STATEMENTS = [
    "loss.backward()", "optimizer.step()", "optimizer.zero_grad()", "optimizer.zero_grad(set_to_none=True)",
    "model.zero_grad()", "scheduler.step()", "model.eval()", "model.train()", "model.train(False)", "self.eval()",
    "running_loss += loss", "running_loss += loss.item()", "total = total + loss", "losses.append(loss)",
    "param.require_grad = False", "param.requires_grad = True", "w.require_grad = True",
    "torch.set_grad_enabled(False)", "torch.backends.cudnn.benchmark = True", "pass", "train()",
    "evaluate(model, loader)", "print(loss)", "del out", "import torch", "from torch.utils.data import DataLoader",
    "self.rng = np.random.default_rng(0)", "self.images = images", "scaler.scale(loss).backward()",
    "scaler.step(optimizer)", "torch.manual_seed(0)", "correct += (logits.argmax(1) == y).sum().item()",
    "collate = lambda batch: torch.stack(batch)", "global model",
]
TARGETS = ["x", "y", "out", "loss", "model", "loader", "device", "optimizer", "scheduler", "criterion", "w", "self.model", "probs", "x, y"]
FOR_HEADS = [
    "x, y in loader", "batch in loader", "epoch in range(10)", "param in model.parameters()", "i, (x, y) in enumerate(loader)",
    "images, labels in train_loader", "step in range(steps)", "batch in self.train_dataloader()",
]
CONTEXTS = [
    "torch.no_grad()", "torch.enable_grad()", "torch.inference_mode()", "torch.set_grad_enabled(False)",
    "torch.set_grad_enabled(training)", "torch.cuda.amp.autocast()", "torch.autocast('cuda')", "torch.no_grad(), autocast()",
    "open(path) as handle", "torch.inference_mode(mode=False)", "torch.random.fork_rng()",
]
CONDITIONS = ["__name__ == '__main__'", "torch.cuda.is_available()", "training", "not weights_only", "epoch % 2 == 0", "model.training"]
FUNCTIONS = [
    "train(model, loader)", "evaluate(model, loader)", "collate(batch)", "training_step(self, batch, batch_idx)",
    "validation_step(self, batch, batch_idx)", "__getitem__(self, index)", "forward(self, x)", "__init__(self, images)",
    "main()", "helper(*args, **kwargs)", "train_dataloader(self)", "load(path, weights_only=False)",
]
DECORATORS = ["@torch.no_grad()", "@torch.inference_mode()", "@torch.enable_grad()", "@staticmethod", "@functools.lru_cache()"]
BASES = ["Dataset", "nn.Module", "torch.utils.data.IterableDataset", "pl.LightningModule", "object", "data.Dataset"]
COMMENTS = ["  # noqa", "  # noqa: TL303", "  # noqa: TL2", "  # note", "  # type: ignore", "  # expect: TL101:1"]
INDENTS = ["    ", "    ", "  ", "\t"]


def _compiles_everywhere(fragment: str) -> bool:
    """Usable at module level and inside a function body (no `import *`, `return` or `__future__`)."""
    return compiles(fragment) and compiles("def _fragment():\n" + textwrap.indent(fragment, "    ") + "\n    pass\n")


def _fragments() -> List[str]:
    """Rule examples and corrections, and every top-level statement of the fixtures: real shapes the rules look for."""
    pieces = []
    for rule in all_rules():
        for text in (rule.example, getattr(rule, "use_instead", "")):
            pieces.append(textwrap.dedent(text or "").strip("\n"))
    for path in sorted(FIXTURES.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        pieces += [ast.get_source_segment(text, node, padded=False) or "" for node in tree.body]
    return sorted({piece for piece in pieces if piece.strip() and _compiles_everywhere(piece)})


FRAGMENTS = _fragments()


@st.composite
def tensors(draw) -> str:
    moves = draw(st.lists(st.sampled_from(MOVES), max_size=3))
    if draw(st.integers(0, 4)) == 0:
        operand = draw(st.sampled_from(BINARY_TENSORS))
        return f"({operand})" + "".join(moves) if moves else operand
    return draw(st.sampled_from(TENSORS)) + "".join(moves)


@st.composite
def calls(draw, callee: str, arguments: Sequence[str]) -> str:
    """A call in one of the layouts people write: one line, one argument per line, comments, trailing commas."""
    layout = draw(st.integers(0, 3))
    if not arguments or layout == 0:
        return f"{callee}({', '.join(arguments)})"
    if layout == 1:
        return f"{callee}(\n" + "".join(f"    {argument},\n" for argument in arguments) + ")"
    if layout == 2:
        comments = [draw(st.sampled_from(["", "  # why", "  # noqa"])) for _ in arguments]
        return f"{callee}(\n" + "".join(f"        {argument},{comment}\n" for argument, comment in zip(arguments, comments)) + "    )"
    return f"{callee}({arguments[0]},\n" + "".join(f"  {argument}" + (",\n" if index < len(arguments) - 2 else "") for index, argument in enumerate(arguments[1:])) + ")"


@st.composite
def loaders(draw) -> str:
    callee = draw(st.sampled_from(["DataLoader", "torch.utils.data.DataLoader", "data.DataLoader", "DL"]))
    dataset = draw(st.sampled_from(["dataset", "ds", "NoisyDataset(images)", "train_set", "self.train_set"]))
    keywords = draw(st.lists(st.sampled_from(LOADER_KEYWORDS), max_size=5, unique_by=lambda keyword: keyword.split("=")[0]))
    keywords.sort(key=lambda keyword: keyword.startswith("**"))
    return draw(calls(callee, [dataset, *keywords]))


@st.composite
def losses(draw) -> str:
    return draw(calls(draw(st.sampled_from(LOSSES)), [draw(tensors()), draw(st.sampled_from(LABELS))]))


def expressions() -> st.SearchStrategy[str]:
    return st.one_of(tensors(), loaders(), losses(), st.sampled_from(CALLS))


@st.composite
def simple_statements(draw, in_function: bool, in_loop: bool) -> List[str]:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        line = f"{draw(st.sampled_from(TARGETS))} = {draw(expressions())}"
    elif kind == 1:
        line = draw(expressions())
    elif kind == 2 and in_function:
        line = f"return {draw(expressions())}"
    elif kind == 3 and in_loop:
        line = draw(st.sampled_from(["break", "continue"]))
    elif kind == 4:
        line = f"{draw(st.sampled_from(['loss', 'running_loss', 'total']))} += {draw(losses())}"
    else:
        line = draw(st.sampled_from(STATEMENTS))
        if line == "global model" and not in_function:
            line = "pass"
    return (line + draw(st.sampled_from([""] * 6 + COMMENTS))).split("\n")


@st.composite
def blocks(draw, depth: int, in_function: bool = False, in_loop: bool = False, in_class: bool = False) -> List[str]:
    lines: List[str] = []
    for _ in range(draw(st.integers(1, 3))):
        lines += draw(statements(depth, in_function, in_loop, in_class))
        if draw(st.integers(0, 6)) == 0:
            lines.append("")
    return lines


@st.composite
def statements(draw, depth: int, in_function: bool, in_loop: bool, in_class: bool = False) -> List[str]:
    kind = draw(st.integers(0, 9 if depth > 0 else 3))
    if kind <= 1 or (in_class and kind <= 3):
        return draw(simple_statements(in_function and not in_class, in_loop))
    if kind <= 3:
        return draw(st.sampled_from(FRAGMENTS)).split("\n")
    indent = draw(st.sampled_from(INDENTS))

    def body(**context) -> List[str]:
        lines = draw(blocks(depth - 1, **{"in_function": in_function, "in_loop": in_loop, **context}))
        return [indent + line if line else line for line in lines]

    if kind == 4:
        header = draw(st.sampled_from(FOR_HEADS))
        if draw(st.booleans()):
            header = header.rsplit(" in ", 1)[0] + " in " + draw(loaders())
        return [f"for {header}:"] + body(in_loop=True)
    if kind == 5:
        return [f"with {draw(st.sampled_from(CONTEXTS))}:"] + body()
    if kind == 6:
        decorators = draw(st.lists(st.sampled_from(DECORATORS), max_size=2, unique=True))
        return decorators + [f"def {draw(st.sampled_from(FUNCTIONS))}:"] + body(in_function=True, in_loop=False, in_class=False)
    if kind == 7:
        lines = [f"class {draw(st.sampled_from(['NoisyDataset', 'Net', 'Model', 'Loop']))}({draw(st.sampled_from(BASES))}):"]
        return lines + body(in_function=False, in_loop=False, in_class=True)
    if kind == 8:
        lines = [f"if {draw(st.sampled_from(CONDITIONS))}:"] + body()
        if draw(st.booleans()):
            lines += ["else:"] + body()
        return lines
    return ["try:"] + body() + ["except Exception:"] + body() + (["finally:"] + body() if draw(st.booleans()) else [])


@st.composite
def torch_programs(draw) -> str:
    imports = BASE_IMPORTS + draw(st.lists(st.sampled_from(IMPORTS), max_size=5, unique=True))
    lines = imports + [""] + draw(blocks(depth=2)) + draw(blocks(depth=1))
    newline = draw(st.sampled_from(["\n", "\n", "\n", "\r\n"]))
    return newline.join(lines) + draw(st.sampled_from([newline, newline, ""]))


def test_the_generator_reaches_the_rules_and_their_fixes():
    """The strategy is only worth its time if it makes the rules report and the fixes apply."""
    reported, fixed = set(), set()

    @settings(max_examples=150, derandomize=True, **FUZZ)
    @given(torch_programs())
    def collect(code):
        assert compiles(code), code
        result = fix_text(code, lambda text: lint_text(text, FILENAME, CONFIG), True, FILENAME)
        reported.update(finding.code for finding in result.original_findings)
        fixed.update(finding.code for finding in result.fixed)

    collect()
    # The examples drawn shift whenever a fixture or rule example changes (fragments are drawn from them): with 100,
    # once the device rules reported only where it costs, 18 rules reported; 150 keep a margin above 20.
    assert len(reported) >= 20, sorted(reported)
    assert len(fixed) >= 10, sorted(fixed)


@settings(max_examples=150, **FUZZ)
@given(torch_programs(), st.booleans(), st.sampled_from(sorted(CONFIGS)))
def test_torch_flavoured_programs(code, unsafe, version):
    check_program(code, unsafe, CONFIGS[version])


# ---------------------------------------------------------------- mutations through the CLI

NUL, BOM = b"\x00", codecs.BOM_UTF8
JUNK = [
    NUL, BOM, b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe9", b"\x0c", b"\t", b"\r", b"(", b")", b"[", b":", b"\\",
    b'"""', b"'", b"#", b" if ", b"lambda", b"\\\n", b"\xef\xbb", b"\x1b[31m", b"\xf0\x9f\x94\xa5", b"\xe2\x80\x8b",
]
COOKIES = [b"# -*- coding: latin-1 -*-\n", b"# coding: utf-16\n", b"# coding: bogus\n", b"# vim: set fileencoding=ascii :\n", BOM]


def _lines(data: bytes) -> List[bytes]:
    return data.splitlines(keepends=True) or [b""]


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randint(0, len(data))]


def delete_line(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    del lines[rng.randrange(len(lines))]
    return b"".join(lines)


def duplicate_line(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    index = rng.randrange(len(lines))
    lines.insert(rng.randrange(len(lines) + 1), lines[index])
    return b"".join(lines)


def swap_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    first, second = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[first], lines[second] = lines[second], lines[first]
    return b"".join(lines)


def reindent_line(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    index = rng.randrange(len(lines))
    body = lines[index].lstrip(b" \t")
    lines[index] = rng.choice([b"", b" ", b"  ", b"    ", b"\t", b"        ", b" \t"]) + body
    return b"".join(lines)


def insert_junk(data: bytes, rng: random.Random) -> bytes:
    offset = rng.randint(0, len(data))
    return data[:offset] + rng.choice(JUNK) + data[offset:]


def flip_byte(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    offset = rng.randrange(len(data))
    return data[:offset] + bytes([rng.randrange(256)]) + data[offset + 1:]


def line_endings(data: bytes, rng: random.Random) -> bytes:
    ending = rng.choice([b"\r", b"\r\n", b"\n"])
    if rng.random() < 0.5:
        return re.sub(rb"\r\n|\r|\n", ending, data)
    return b"".join(line.rstrip(b"\r\n") + rng.choice([b"\r", b"\r\n", b"\n"]) for line in _lines(data))


def declare_encoding(data: bytes, rng: random.Random) -> bytes:
    return rng.choice(COOKIES) + data


MUTATIONS: Dict[str, Callable[[bytes, random.Random], bytes]] = {
    function.__name__: function
    for function in (truncate, delete_line, duplicate_line, swap_lines, reindent_line, insert_junk, flip_byte, line_endings, declare_encoding)
}


def mutate(data: bytes, rng: random.Random) -> Tuple[bytes, List[str]]:
    """One to three mutations applied in turn; their names, to say what broke."""
    applied = rng.choices(sorted(MUTATIONS), k=rng.randint(1, 3))
    for name in applied:
        data = MUTATIONS[name](data, rng)
    return data, applied


FIXTURE_FILES = sorted(path for path in FIXTURES.rglob("*.py"))
FINDING_LINE = re.compile(r"^(?P<file>.+):\d+:\d+: (?P<code>TL\d{3}) (?P<message>.+)$")


def run_in_process(*args: str) -> Tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", "--quiet", "--output-format", "concise", "--no-cache", *args])
    return code, out.getvalue(), err.getvalue()


def assert_reports_cleanly(code: int, out: str, err: str, what: str) -> None:
    """Exit 0 or 1, nothing on stderr, only finding lines, no internal error: what a mutated file may give."""
    assert err == "" and code in (0, 1), f"{what}: exit {code}\n{err}"
    lines = out.splitlines()
    assert (code == 1) == bool(lines), f"{what}: exit {code} with output {out!r}"
    for line in lines:
        match = FINDING_LINE.match(line)
        assert match and "internal error" not in line, f"{what}: {line}"


def check_mutant(folder: Path, data: bytes, what: str) -> None:
    """Lint, then fix (unsafe fixes too), one mutated file through the CLI; the file ends fully fixed or untouched."""
    path = folder / "mutant.py"
    path.write_bytes(data)
    assert_reports_cleanly(*run_in_process(str(path)), what)
    assert_reports_cleanly(*run_in_process("--fix", "--unsafe-fixes", str(path)), what + " (--fix)")
    after = path.read_bytes()
    if after != data:
        text = after.decode("utf-8-sig", errors="surrogateescape")
        was = data.decode("utf-8-sig", errors="surrogateescape")
        assert compiles(text) or not compiles(was), f"{what}: --fix broke the file"


@pytest.fixture
def mutants_folder(tmp_path):
    # Select every rule explicitly, whatever config lies above the temporary folder.
    (tmp_path / "torchlint.toml").write_text('select = ["ALL"]\n')
    return tmp_path


@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=lambda path: str(path.relative_to(FIXTURES)))
def test_mutated_fixtures_through_the_cli(fixture, mutants_folder):
    original = fixture.read_bytes()
    rng = random.Random(fixture.name)
    for attempt in range(2):
        data, applied = mutate(original, rng)
        check_mutant(mutants_folder, data, f"{fixture.name} after {applied} (attempt {attempt})")


@pytest.mark.parametrize(
    "name, data",
    [
        ("NUL", b"import torch\nx = torch.zeros(3)\x00\n"),
        ("invalid UTF-8", b"import torch\nx = '\xff\xfe'\n"),
        ("BOM in the middle", b"import torch\n" + BOM + b"x = 1\n"),
        ("CR-only", b"import torch\rnll = -torch.log(1 + probs)\rx = 1\r"),
        ("mixed endings", b"import torch\r\nnll = -torch.log(1 + probs)\rx = 1\n"),
        ("truncated string", b"import torch\nx = '''abc"),
        ("lone continuation", b"import torch\nx = 1 \\"),
        ("form feed indent", b"import torch\n\x0c\nif x:\n\x0c    y = torch.log(1 + p)\n"),
        ("tab and spaces", b"if x:\n\ty = 1\n        z = 2\n"),
        ("BOM then cookie", BOM + b"# coding: latin-1\nx = 1\n"),
        ("only a BOM", BOM),
        ("only CR", b"\r\r\r"),
    ],
)
def test_named_byte_level_damage(name, data, mutants_folder):
    check_mutant(mutants_folder, data, name)


def test_mutants_through_a_subprocess(tmp_path):
    """The real entry point, many mutants at once: no traceback, exit 0 or 1, every file reported or clean."""
    (tmp_path / "torchlint.toml").write_text('select = ["ALL"]\n')
    rng = random.Random(8)
    for index, fixture in enumerate(rng.sample(FIXTURE_FILES, 25)):
        (tmp_path / f"m{index:02}.py").write_bytes(mutate(fixture.read_bytes(), rng)[0])
    for extra in ([], ["--fix", "--unsafe-fixes"]):
        completed = subprocess.run(
            [sys.executable, "-m", "torchlint", "check", "--quiet", "--no-cache", "--output-format", "concise", *extra, "."],
            capture_output=True, cwd=tmp_path, timeout=300, env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        )
        assert_reports_cleanly(completed.returncode, completed.stdout.decode(), completed.stderr.decode(), f"subprocess {extra}")


# ---------------------------------------------------------------- regressions the fuzzers found
