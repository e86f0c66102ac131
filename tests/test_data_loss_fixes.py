"""The fixes of the loss and serialization rules are correct text edits: applied back to front,
they give exactly the corrected code, which still parses. Rules without a fix offer none."""

import textwrap

import libcst as cst
import pytest

from conftest import FIXTURES, lint
from test_fixtures import fixture_config
from torchlint.engine.runner import lint_file


def apply_edits(text, edits):
    """Apply edits (1-based rows and character columns) from the last to the first."""
    line_starts = [0]
    for line in text.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def offset(location):
        return line_starts[location.row - 1] + location.column - 1

    for edit in sorted(edits, key=lambda edit: (edit.location, edit.end_location), reverse=True):
        text = text[: offset(edit.location)] + edit.content + text[offset(edit.end_location):]
    return text


def fixed(code, rule, **config):
    """The snippet with the fix of its one finding of `rule` applied (None when that finding has no fix)."""
    code = textwrap.dedent(code)
    findings = [finding for finding in lint(code, select=[rule], **config) if finding.code == rule]
    assert len(findings) == 1, findings
    if findings[0].fix is None:
        return None
    assert findings[0].fix.applicability == "unsafe"
    result = apply_edits(code, findings[0].fix.edits)
    cst.parse_module(result)
    return result


FIXED = [
    # TL401: drop the softmax, directly or behind a variable read only by the loss.
    ("TL401", "loss = F.cross_entropy(F.softmax(logits, dim=1), y)\n", "loss = F.cross_entropy(logits, y)\n"),
    ("TL401", "loss = F.cross_entropy(logits.softmax(-1), y)\n", "loss = F.cross_entropy(logits, y)\n"),
    ("TL401", "loss = F.cross_entropy(nn.Softmax(dim=1)(logits), y)\n", "loss = F.cross_entropy(logits, y)\n"),
    ("TL401", "loss = F.cross_entropy(F.log_softmax(input=logits, dim=1), y)\n", "loss = F.cross_entropy(logits, y)\n"),
    (
        "TL401",
        "loss = F.cross_entropy(torch.softmax(a + b, 1).view(-1, 10), y)\n",
        "loss = F.cross_entropy((a + b).view(-1, 10), y)\n",
    ),
    (
        "TL401",
        "loss = F.cross_entropy(F.softmax((a + b), 1), y)\n",
        "loss = F.cross_entropy((a + b), y)\n",
    ),
    (
        "TL401",
        """
        def step(model, x, y):
            probabilities = F.softmax(
                model(x),
                dim=1,
            )
            return F.cross_entropy(probabilities, y)
        """,
        """
        def step(model, x, y):
            probabilities = model(x)
            return F.cross_entropy(probabilities, y)
        """,
    ),
    # TL402: drop the sigmoid.
    (
        "TL402",
        "loss = F.binary_cross_entropy_with_logits(torch.sigmoid(z), t)\n",
        "loss = F.binary_cross_entropy_with_logits(z, t)\n",
    ),
    ("TL402", "loss = nn.BCEWithLogitsLoss()(z.sigmoid(), t)\n", "loss = nn.BCEWithLogitsLoss()(z, t)\n"),
    # TL403: softmax -> log_softmax, in each spelling that has a log version.
    ("TL403", "loss = F.nll_loss(F.softmax(z, dim=1), y)\n", "loss = F.nll_loss(F.log_softmax(z, dim=1), y)\n"),
    ("TL403", "loss = F.nll_loss(torch.softmax(z, 1), y)\n", "loss = F.nll_loss(torch.log_softmax(z, 1), y)\n"),
    ("TL403", "loss = F.nll_loss(z.softmax(1), y)\n", "loss = F.nll_loss(z.log_softmax(1), y)\n"),
    ("TL403", "loss = nn.NLLLoss()(nn.Softmax(dim=1)(z), y)\n", "loss = nn.NLLLoss()(nn.LogSoftmax(dim=1)(z), y)\n"),
]

NO_FIX = [
    # The softmax feeds other code too, or lives in a model, or has no log version under that name.
    ("TL401", "probabilities = F.softmax(z, 1)\nloss = F.cross_entropy(probabilities, y)\nshow(probabilities)\n"),
    ("TL401", "model = nn.Sequential(nn.Linear(2, 3), nn.Softmax(dim=1))\nloss = F.cross_entropy(model(x), y)\n"),
    ("TL403", "from torch.nn.functional import softmax\nloss = F.nll_loss(softmax(z, 1), y)\n"),
    ("TL403", "activation = nn.Softmax(dim=1)\nloss = F.nll_loss(activation(z), y)\n"),
    ("TL403", "nn.Softmax2d()(z)\nloss = F.nll_loss(nn.Softmax2d()(z), y)\n"),
]

PREAMBLE = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


@pytest.mark.parametrize("rule, code, expected", FIXED)
def test_loss_fix_gives_the_corrected_code(rule, code, expected):
    code, expected = textwrap.dedent(code), textwrap.dedent(expected)
    assert fixed(PREAMBLE + code, rule) == PREAMBLE + expected


@pytest.mark.parametrize("rule, code", NO_FIX)
def test_loss_fix_is_not_offered_where_it_would_change_other_code(rule, code):
    assert fixed(PREAMBLE + code, rule) is None


@pytest.mark.parametrize(
    "code, expected",
    [
        ('torch.load("m.pt", weights_only=False)\n', 'torch.load("m.pt", weights_only=True)\n'),
        (
            'torch.load("m.pt", weights_only=False, map_location="cpu")\n',
            'torch.load("m.pt", weights_only=True, map_location="cpu")\n',
        ),
        # weights_only=False with **kwargs: setting the literal never duplicates a keyword
        ('torch.load("m.pt", weights_only=False, **options)\n', 'torch.load("m.pt", weights_only=True, **options)\n'),
    ],
)
def test_weights_only_false_becomes_true(code, expected):
    assert fixed("import torch\n" + code, "TL501", torch_version="2.6") == "import torch\n" + expected


@pytest.mark.parametrize(
    "code, expected",
    [
        ('torch.load("m.pt")\n', 'torch.load("m.pt", weights_only=True)\n'),
        ('torch.load("m.pt",)\n', 'torch.load("m.pt", weights_only=True,)\n'),
        (
            'torch.load(\n    "m.pt",\n    map_location="cpu",\n)\n',
            'torch.load(\n    "m.pt",\n    map_location="cpu", weights_only=True,\n)\n',
        ),
        (
            'torch.load("m.pt", map_location=lambda s, l: s)\n',
            'torch.load("m.pt", map_location=lambda s, l: s, weights_only=True)\n',
        ),
    ],
)
def test_missing_weights_only_is_added_before_torch_2_6(code, expected):
    assert fixed("import torch\n" + code, "TL501", torch_version="2.1") == "import torch\n" + expected


@pytest.mark.parametrize(
    "code",
    [
        'torch.load("m.pt", pickle_module=dill)\n',  # torch refuses weights_only=True with a pickle_module
        'torch.load("m.pt", None, dill, weights_only=False)\n',
        'def load(path, weights_only):\n    if not weights_only:\n        return torch.load(path, weights_only=False)\n',
        'def load(path, trusted):\n    return torch.load(path, weights_only=False) if trusted else None\n',
        'try:\n    torch.load("m.pt", weights_only=True)\nexcept Exception:\n    torch.load("m.pt", weights_only=False)\n',
    ],
)
def test_torch_load_fix_is_not_offered_where_it_could_be_wrong(code):
    assert fixed("import torch\n" + code, "TL501", torch_version="2.1") is None


@pytest.mark.parametrize("version", ["0.4", "1.12"])
def test_weights_only_is_not_added_for_torch_without_the_keyword(version):
    # torch.load has taken weights_only since 1.13: the keyword would raise TypeError on what the project supports.
    assert fixed('import torch\ntorch.load("m.pt")\n', "TL501", torch_version=version) is None
    assert fixed('import torch\ntorch.load("m.pt")\n', "TL501", torch_version="1.13") is not None


@pytest.mark.parametrize("version, advice_waits", [("0.4", True), ("1.12", True), ("1.13", False), ("2.1", False)])
def test_the_advice_waits_for_a_torch_with_the_keyword(version, advice_waits):
    [finding] = lint('import torch\ntorch.load("m.pt")\n', select=["TL501"], torch_version=version)
    assert ("once the project requires torch 1.13" in finding.message) is advice_waits


@pytest.mark.parametrize("version", ["1.8", "2.1"])
@pytest.mark.parametrize(
    "code",
    [
        'model = torch.load("m.pt")\nmodel.eval()\n',
        'model = torch.load("m.pt", weights_only=False)\nmodel.eval()\n',
        'def resume(path):\n    ckpt = torch.load(path)\n    return ckpt["model"].float().state_dict()\n',
    ],
)
def test_a_load_used_as_a_whole_module_gets_no_weights_only_fix(code, version):
    """`weights_only=True` refuses a pickled module (run below), so for a load whose result the code uses as one the
    message says to save a state dict, and the fix that would break the load is not offered."""
    assert fixed("import torch\n" + code, "TL501", torch_version=version) is None
    [finding] = lint("import torch\n" + code, select=["TL501"], torch_version=version)
    assert "this file holds a whole module" in finding.message and "pass `weights_only=True`" not in finding.message


def test_a_whole_module_load_is_refused_under_weights_only(tmp_path):
    import pickle

    import torch

    torch.save(torch.nn.Linear(2, 2), tmp_path / "m.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(tmp_path / "m.pt", weights_only=True)
    assert torch.load(tmp_path / "m.pt", weights_only=False).eval().training is False
    [finding] = lint('import torch\nmodel = torch.load("m.pt")\nmodel.eval()\n', select=["TL502"], torch_version="2.6")
    assert "`UnpicklingError: Weights only load failed`" in finding.message


FAMILY_FIXTURES = sorted(
    path for family in ("data", "loss", "serialization") for path in (FIXTURES / family).glob("*.py")
)


@pytest.mark.parametrize("path", FAMILY_FIXTURES, ids=lambda path: path.name)
def test_every_fix_in_the_fixtures_keeps_the_file_parseable(path):
    text = path.read_text(encoding="utf-8")
    for finding in lint_file(str(path), fixture_config(text)).findings:
        if finding.fix is not None:
            cst.parse_module(apply_edits(text, finding.fix.edits))


# TL306 offers no fix; its test-file exemption depends on the file name, which fixtures cannot vary.
TRAINING_LOOP = """
from torch.utils.data import DataLoader

for batch in DataLoader(dataset):
    model(batch).sum().backward()
    optimizer.step()
"""


@pytest.mark.parametrize("filename, flagged", [
    ("train.py", True),
    ("src/tests/helpers.py", True),
    ("latest_results.py", True),
    ("test_training.py", False),
    ("tests/engine_test.py", False),
    ("conftest.py", False),
])
def test_synchronous_dataloader_skips_test_files(filename, flagged):
    findings = lint(TRAINING_LOOP, filename=filename, select=["TL306"])
    assert [finding.code for finding in findings] == (["TL306"] if flagged else [])
