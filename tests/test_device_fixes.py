"""The device/dtype rules' fixes, applied: each gives the expected code, and never code that fails to parse."""

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from conftest import FIXTURES, lint
from test_fixtures import fixture_config
from torchlint.engine.runner import lint_file


def apply_edits(text: str, edits) -> str:
    """Replace each edit's range (1-based rows and columns, end exclusive), back to front."""
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def offset(location):
        return line_starts[location.row - 1] + location.column - 1

    spans = sorted(((offset(edit.location), offset(edit.end_location), edit.content) for edit in edits), reverse=True)
    for (start, _, _), (_, previous_end, _) in zip(spans, spans[1:]):
        assert previous_end <= start, "a fix's edits overlap"
    for start, end, content in spans:
        text = text[:start] + content + text[end:]
    return text


def only_finding(code: str, source: str, **config):
    findings = [finding for finding in lint(source, select=[code], **config) if finding.code == code]
    assert len(findings) == 1, findings
    return findings[0]


def check_fix(code: str, source: str, expected: str, applicability: str, **config) -> None:
    source, expected = textwrap.dedent(source), textwrap.dedent(expected)
    finding = only_finding(code, source, **config)
    assert finding.fix is not None, finding.message
    assert finding.fix.applicability == applicability
    fixed = apply_edits(source, finding.fix.edits)
    cst.parse_module(fixed)
    assert fixed == expected


def check_no_fix(code: str, source: str, **config) -> None:
    assert only_finding(code, textwrap.dedent(source), **config).fix is None


# ---------------------------------------------------------------- TL201

MIXED = "import torch\nmodel = model.to(torch.device('cpu'))\n"
# The moved `x` meets the `.to(...)`-moved model: what TL201 reports.
MEETS = "out = model(x)\n"


@pytest.mark.parametrize("before, after", [
    ("device = 'cuda'\nx = x.cuda()\n", "device = 'cuda'\nx = x.to(device)\n"),
    ("x = x.cuda()\ndevice = 'cuda'\n", "x = x.to(\"cuda\")\ndevice = 'cuda'\n"),
    ("x = x.cuda(1)\n", 'x = x.to("cuda:1")\n'),
    ("x = x.cuda('cuda:2')\n", 'x = x.to("cuda:2")\n'),
    ("x = x.cuda(0, non_blocking=True)\n", 'x = x.to("cuda:0", non_blocking=True)\n'),
    ("device = 'cuda'\nx = (x).cuda(non_blocking=True)\n", "device = 'cuda'\nx = (x).to(device, non_blocking=True)\n"),
    ("def f(x, device):\n    return model(x.cuda())\n", "def f(x, device):\n    return model(x.to(device))\n"),
    (
        "def f(x):\n    y = x.cuda()\n    device = y.device\n    return model(y)\n",
        'def f(x):\n    y = x.to("cuda")\n    device = y.device\n    return model(y)\n',
    ),
])
def test_tl201_moves_to_the_device_variable_or_cuda(before, after):
    check_fix("TL201", MIXED + before + MEETS, MIXED + after + MEETS, "safe")


def test_tl201_device_name_option():
    before, after = "dev = 'cuda'\nx = x.cuda()\n", "dev = 'cuda'\nx = x.to(dev)\n"
    check_fix("TL201", MIXED + before + MEETS, MIXED + after + MEETS, "safe", device_name="dev")


def test_tl201_does_not_take_torch_device_for_a_variable():
    source = "from torch import device\nimport torch\nmodel = model.to(torch.device('cpu'))\nx = x.cuda()\n" + MEETS
    check_fix("TL201", source, source.replace("x.cuda()", 'x.to("cuda")'), "safe")


@pytest.mark.parametrize("before, after", [
    ("def f(x, y):\n    return x.cuda(y.device)\n", "def f(x, y):\n    return x.to(y.device)\n"),
    (
        "def f(x, t):\n    device = t.device\n    return x.cuda(device, non_blocking=True)\n",
        "def f(x, t):\n    device = t.device\n    return x.to(device, non_blocking=True)\n",
    ),
])
def test_tl201_moves_to_the_device_of_another_value(before, after):
    # `.cuda(cpu_device)` raises `Invalid device, must be cuda device`, in any file: no `.to(...)` needed.
    check_fix("TL201", "import torch\n" + before, "import torch\n" + after, "safe")
    assert "Invalid device, must be cuda device" in only_finding("TL201", "import torch\n" + before).message


# ---------------------------------------------------------------- TL202


@pytest.mark.parametrize("before, after, applicability", [
    ("x = x.float().cuda()", 'x = x.to("cuda", torch.float32)', "safe"),
    ("x = x.half().to(device, copy=True)", "x = x.to(device, torch.float16, copy=True)", "safe"),
    ("x = x.to(torch.bfloat16).to(device=device)", "x = x.to(device, torch.bfloat16)", "safe"),
    ("x = x.type(torch.FloatTensor).cuda(1)", 'x = x.to("cuda:1", torch.float32)', "safe"),
    ("y = y.to(device).half()", "y = y.to(device, torch.float16)", "unsafe"),
    ("y = y.cuda(1).bool()", 'y = y.to("cuda:1", torch.bool)', "unsafe"),
    ("y = (y.cuda()).to(torch.bfloat16)", 'y = y.to("cuda", torch.bfloat16)', "unsafe"),
    ("y = y.to(dev).to(dev)", "y = y.to(dev)", "safe"),
    # A run of repeated moves is one finding, fixed in one round (check_fix asserts exactly one finding).
    ("y = y.cuda().cuda().cuda()", "y = y.cuda()", "safe"),
    ("y = y.to(dev).to(dev).to(dev).to(dev)", "y = y.to(dev)", "safe"),
])
def test_tl202_merges_into_one_to(before, after, applicability):
    check_fix("TL202", f"import torch\n{before}\n", f"import torch\n{after}\n", applicability)


@pytest.mark.parametrize("source", [
    "x = x.half().to(device, non_blocking=True)",  # a non-blocking copy converts on the GPU either way
    "x = x.to(device, non_blocking=True).float()",
    "x = x.cuda(None, True).float()",
    "y = y.cpu().double()",  # a copy to the host lands in the source dtype and converts there either way
    "y = y.byte().cpu()",  # cast on the GPU, a quarter of the bytes copied: one call would copy them all
    "y = y.float().to('cpu')",
    "y = y.float().to(torch.device('cpu'))",
])
def test_tl202_leaves_chains_whose_merge_does_the_same_work_or_more(source):
    assert not lint(f"import torch\n{source}\n", select=["TL202"])


def test_tl202_keeps_the_torch_alias():
    source = "import torch as T\nx = x.float().to(device)\n"
    check_fix("TL202", source, "import torch as T\nx = x.to(device, T.float32)\n", "safe")


def test_tl202_multiline_chain():
    source = "import torch\nx = (\n    x.float()\n    .to(device)\n)\n"
    check_fix("TL202", source, "import torch\nx = (\n    x.to(device, torch.float32)\n)\n", "safe")


@pytest.mark.parametrize("source", [
    "from torch import nn\nx = x.float().to(device)\n",  # no name for torch: `torch.float32` would be a NameError
    "import torch\ndef f(x, torch):\n    return x.float().to(device)\n",  # `torch` here is a parameter
    "import torch\nx = x.float(memory_format=a).to(device, memory_format=b)\n",  # a duplicate keyword
    "import torch\nx = x.cuda().cuda(1)\n",  # two different moves: which one was meant?
])
def test_tl202_offers_no_fix_it_cannot_make_right(source):
    check_no_fix("TL202", source)


# ---------------------------------------------------------------- TL203

LOSS = "import torch\nimport torch.nn.functional as F\n"


@pytest.mark.parametrize("before, after", [
    ("F.cross_entropy(logits, labels.float())", "F.cross_entropy(logits, labels)"),
    ("F.cross_entropy(logits, (y).double())", "F.cross_entropy(logits, (y))"),
    ("F.nll_loss(logits, gt.to(device, torch.float32))", "F.nll_loss(logits, gt.to(device))"),
    ("F.nll_loss(logits, target.to(device).float().to(device))", "F.nll_loss(logits, target.to(device).to(device))"),
])
def test_tl203_drops_the_cast(before, after):
    check_fix("TL203", LOSS + before + "\n", LOSS + after + "\n", "unsafe")


# ---------------------------------------------------------------- TL204

NUMPY = "import numpy as np\nimport torch\n"


def test_tl204_appends_float_unsafely():
    model = "out = torch.nn.Linear(3, 1)(t)\n"
    source = NUMPY + "t = torch.from_numpy(np.zeros(3))\n" + model
    check_fix("TL204", source, NUMPY + "t = torch.from_numpy(np.zeros(3)).float()\n" + model, "unsafe")


def test_tl204_moves_a_later_cast_up_safely():
    # Cast after the move, the tensor is still moved as float64: reported where that happens every step.
    step = "def training_step(device):\n    return "
    check_fix(
        "TL204",
        NUMPY + step + "torch.tensor(np.random.rand(3)).to(device, non_blocking=True).float()\n",
        NUMPY + step + "torch.tensor(np.random.rand(3)).float().to(device, non_blocking=True)\n",
        "safe",
    )


# ---------------------------------------------------------------- TL206

# TL206 reports code that runs every step: each snippet sits in a loop body or a per-step function.
IN_A_LOOP = "import torch\nfor batch in loader:\n    t = "
VARIABLE_IN_A_LOOP = "import torch\nfrom torch.autograd import Variable\nfor batch in loader:\n    t = "


@pytest.mark.parametrize("before, after, applicability", [
    ("torch.zeros(n).to(device)", "torch.zeros(n, device=device)", "safe"),
    ("torch.zeros(n).to(device, torch.float16)", "torch.zeros(n, device=device, dtype=torch.float16)", "safe"),
    ("torch.ones(2, 2).cuda(1)", 'torch.ones(2, 2, device="cuda:1")', "safe"),
    ("torch.zeros(n, dtype=torch.long).to(device, non_blocking=True)", "torch.zeros(n, dtype=torch.long, device=device)", "safe"),
    ("torch.randn(n).to(device)", "torch.randn(n, device=device)", "unsafe"),
    ("torch.full((2,), 0.1).to(device, dtype=torch.float64)", "torch.full((2,), 0.1, device=device, dtype=torch.float64)", "unsafe"),
    ("(torch.zeros(\n    n,\n)).to(device)", "(torch.zeros(\n    n,\n    device=device,\n))", "safe"),
])
def test_tl206_passes_device_to_the_factory(before, after, applicability):
    check_fix("TL206", f"{IN_A_LOOP}{before}\n", f"{IN_A_LOOP}{after}\n", applicability)


def test_tl206_passes_device_to_the_factory_inside_variable():
    before, after = "Variable(torch.ones(n)).cuda()\n", 'Variable(torch.ones(n, device="cuda"))\n'
    check_fix("TL206", VARIABLE_IN_A_LOOP + before, VARIABLE_IN_A_LOOP + after, "safe")


@pytest.mark.parametrize("source", [
    IN_A_LOOP + "torch.zeros(n, dtype=torch.long).to(device, torch.float16)\n",  # dtype= twice
    IN_A_LOOP + "torch.zeros(n, requires_grad=flag).to(device)\n",  # would turn a non-leaf into a leaf
    VARIABLE_IN_A_LOOP + "Variable(torch.zeros(n), requires_grad=True).to(device)\n",  # so would this
    "import torch as T\nfor batch in loader:\n    t = T.zeros(n).to(device, memory_format=T.channels_last)\n",
])
def test_tl206_offers_no_fix_it_cannot_make_right(source):
    check_no_fix("TL206", source)


@pytest.mark.parametrize("source", [
    # `.to(tensor)` moves to the tensor's device and casts to its dtype; `device=tensor` raises TypeError.
    "import torch\ndevice = t_value\nfor batch in loader:\n    t = torch.zeros(1).to(device)\n",
    "import torch\ndef forward(reference):\n    return torch.zeros(3).to(reference_device)\n",
    "import torch\ndef forward(device):\n    device = pick(device)\n    return torch.zeros(3).to(device)\n",
])
def test_tl206_no_fix_when_the_target_may_be_a_tensor(source):
    check_no_fix("TL206", source)


@pytest.mark.parametrize("setup, target", [
    ("def forward(device):\n    return ", "device"),  # a parameter named by the device-name option
    ("def forward(x):\n    return ", "x.device"),
    ("dev = torch.device('cuda', 1)\ndef forward():\n    return ", "dev"),
    ("target_device = x.device if on_x else 'cpu'\ndef forward():\n    return ", "target_device"),
    ("def forward(rank):\n    return ", "f'cuda:{rank}'"),
])
def test_tl206_fix_when_the_target_is_provably_a_device(setup, target):
    source = f"import torch\n{setup}torch.zeros(3).to({target})\n"
    check_fix("TL206", source, source.replace(f"zeros(3).to({target})", f"zeros(3, device={target})"), "safe")


def test_tl206_leaves_star_kwargs_alone():
    assert lint(IN_A_LOOP + "torch.zeros(n, **options).to(device)\n", select=["TL206"]) == []


def test_tl206_loops_in_a_test_file_repeat_the_test_not_a_step():
    # A fixture cannot be named like a test file, hence this check here.
    source = "import torch\ndef test_metric(devices):\n    for device in devices:\n        t = torch.zeros(3).to(device)\n"
    assert lint(source, filename="tests/test_metric.py", select=["TL206"]) == []
    assert [finding.code for finding in lint(source, filename="metric.py", select=["TL206"])] == ["TL206"]


# ---------------------------------------------------------------- TL207


@pytest.mark.parametrize("before, after", [
    ("import torch\nx = x.double()\n", "import torch\nx = x.float()\n"),
    ("import torch\nx = torch.zeros(3, dtype=torch.float64)\n", "import torch\nx = torch.zeros(3, dtype=torch.float32)\n"),
    ("import torch as T\nx = x.to(T.double)\n", "import torch as T\nx = x.to(T.float32)\n"),
    ("import torch\nx = x.type(torch.DoubleTensor)\n", "import torch\nx = x.type(torch.FloatTensor)\n"),
    (
        "import torch\nfrom torch import float64\nx = torch.ones(3, dtype=float64)\n",
        "import torch\nfrom torch import float64\nx = torch.ones(3, dtype=torch.float32)\n",
    ),
])
def test_tl207_writes_float32(before, after):
    check_fix("TL207", before, after, "unsafe")


def test_tl207_imported_tensor_type():
    source = "import torch\nfrom torch import DoubleTensor\nx = x.type(DoubleTensor)\n"
    check_fix("TL207", source, source.replace("type(DoubleTensor)", "type(torch.FloatTensor)"), "unsafe")


def test_tl207_no_fix_without_a_name_for_torch():
    check_no_fix("TL207", "from torch import float64, ones\nx = ones(3, dtype=float64)\n")


# ---------------------------------------------------------------- every fix on every device fixture

DEVICE_FIXTURES = sorted((FIXTURES / "device").glob("*.py"))


@pytest.mark.parametrize("path", DEVICE_FIXTURES, ids=lambda path: path.name)
def test_every_device_fix_keeps_the_fixture_valid_python(path: Path):
    text = path.read_text(encoding="utf-8")
    for finding in lint_file(str(path), fixture_config(text), filename=path.name).findings:
        if finding.fix is not None and finding.code.startswith("TL2"):
            fixed = apply_edits(text, finding.fix.edits)
            cst.parse_module(fixed)
            compile(fixed, path.name, "exec")


def test_tl206_moves_a_multiline_device_expression_as_is():
    source = IN_A_LOOP + "torch.zeros(n).to(\n    torch.device('cuda')\n    if use_gpu else 'cpu'\n)\n"
    expected = IN_A_LOOP + "torch.zeros(n, device=torch.device('cuda')\n    if use_gpu else 'cpu')\n"
    check_fix("TL206", source, expected, "safe")
