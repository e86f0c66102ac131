"""The model-definition rules (TL701-TL707) across files, their near-miss names, and their witnesses.

A Module class defined in `model.py` and subclassed, built or frozen in `train.py` must get the findings it
gets when both sit in one file: the project fixture fixtures/projects/model_rules_subclass is linted from disk,
then pasted into one file (the import line blanked, so lines keep their numbers after the paste).
"""

import json
import re

import pytest

from conftest import FIXTURES, make_config, run_cli
from torchlint.engine.expectations import actual_findings
from torchlint.engine.runner import lint_file, lint_text
from torchlint.rules.model.module_api_shadowed import typo_of

PROJECT = FIXTURES / "projects" / "model_rules_subclass"
MODEL_CODES = ["TL701", "TL702", "TL703", "TL704", "TL705", "TL706", "TL707"]


def _findings(result):
    return [finding for finding in actual_findings(result) if finding[2] in MODEL_CODES]


@pytest.mark.parametrize("importer", ["train.py", "finetune.py"])
def test_a_model_file_and_its_importer_give_the_findings_of_one_file(importer):
    config = make_config(select=MODEL_CODES)
    model = (PROJECT / "model.py").read_text()
    text = (PROJECT / importer).read_text()
    across = _findings(lint_file(str(PROJECT / importer), config).findings)
    blanked = "\n".join("" if line.startswith("from model import") else line for line in text.splitlines()) + "\n"
    offset = len(model.splitlines())
    together = _findings(lint_text(model + blanked, "together.py", config))
    assert across, "the importer must have findings of its own"
    assert [(row - offset, column, code) for row, column, code in together if row > offset] == across
    assert [finding for finding in together if finding[0] <= offset] == _findings(lint_file(str(PROJECT / "model.py"), config).findings)


def test_without_the_model_file_nothing_is_known_of_its_classes(tmp_path):
    (tmp_path / "train.py").write_text((PROJECT / "finetune.py").read_text())
    assert _findings(lint_file(str(tmp_path / "train.py"), make_config(select=MODEL_CODES)).findings) == []


@pytest.mark.parametrize("name, meant", [
    ("foward", "forward"), ("forwad", "forward"), ("farward", "forward"), ("fowrard", "forward"),
    ("__int__", "__init__"), ("_init_", "__init__"), ("___init___", "__init__"), ("__init", "__init__"),
    ("__inti__", "__init__"),
])
def test_near_misses_of_init_and_forward_are_recognised(name, meant):
    assert typo_of(name) == meant


@pytest.mark.parametrize("name", ["forward", "_forward", "forwards", "__init__", "_init", "init", "_init_weights", "__iter__", "reward"])
def test_real_names_and_private_helpers_are_not_near_misses(name):
    assert typo_of(name) is None


def test_every_model_fixture_finding_is_confirmed_by_its_witness():
    code, out, err = run_cli("verify", "--preview", "--device", "cpu", "--select", ",".join(MODEL_CODES), "--output-format", "json", FIXTURES / "model")
    results = json.loads(out)
    assert {result["code"] for result in results} == set(MODEL_CODES)
    assert [result for result in results if result["verification"]["status"] != "confirmed"] == []


STAND_IN = '''
import torch


class StandIn(torch.nn.Module):
    """As accelerate's tests build one: a stand-in for hooks, whose values do not matter."""

    def __init__(self):
        super().__init__()
        self.indices = torch.nn.Parameter(torch.empty((1, 2, 2)))

    def forward(self, x):
        return x + self.indices
'''


def test_an_uninitialised_parameter_is_not_reported_in_a_test_file():
    config = make_config(select=["TL704"])
    assert [finding.code for finding in lint_text(STAND_IN, "hooks.py", config)] == ["TL704"]
    assert lint_text(STAND_IN, "tests/test_hooks.py", config) == []


def test_a_misspelt_super_init_call_is_named_with_the_error_it_raises():
    findings = lint_file(str(FIXTURES / "model" / "TL703_no_super.py"), make_config(select=["TL703"])).findings
    messages = [finding.message for finding in findings]
    assert "construction raises `AttributeError: 'super' object has no attribute '_init_'`" in messages[-1]
    assert all("cannot assign module before Module.__init__() call" in message for message in messages[:-1])


@pytest.mark.parametrize("made", ["torch.randn(3, requires_grad=True)", "torch.randn(3).requires_grad_()", "torch.zeros(3).float().requires_grad_(True)"])
def test_a_tensor_attribute_meant_as_a_parameter_is_told_to_be_one_without_a_fix(made):
    code = (
        "import torch\nimport torch.nn as nn\n\n\nclass Linear(nn.Module):\n    def __init__(self):\n"
        f"        super().__init__()\n        self.w = {made}\n\n    def forward(self, x):\n        return x @ self.w\n"
    )
    [finding] = lint_text(code, "model.py", make_config(select=["TL707"]))
    assert "not an `nn.Parameter`" in finding.message and finding.fix is None


DROPOUT_AT_RATE = """
import torch.nn as nn
import torch.nn.functional as F


class Head(nn.Module):
    def forward(self, x):
        return F.dropout(x, {rate})
"""


@pytest.mark.parametrize("rate", ["0.3", "0.5", "0.8"])
def test_dropout_message_states_what_the_call_does_in_eval(rate):
    # What the message states is run here: eval mode changes nothing for functional dropout, so the share zeroed is
    # the rate and the kept values are scaled by 1/(1-p). 200,000 draws: the share's standard deviation is at most
    # 0.0012, so 0.01 is over eight of them (and over the message's rounding to a whole percent); the message gives the
    # scale to three significant digits, so 1% covers its rounding.
    import torch
    import torch.nn.functional as F

    [finding] = lint_text(DROPOUT_AT_RATE.format(rate=rate), "head.py", make_config(select=["TL705"], preview=True))
    share, scale = re.search(r"about (\d+)% of the outputs zeroed at p=[\d.]+, the rest scaled by ([\d.]+)", finding.message).groups()
    torch.manual_seed(0)
    out = F.dropout(torch.ones(200_000), float(rate))  # `training` left at its default, as in the flagged call
    assert abs((out == 0).float().mean().item() - int(share) / 100) < 0.01
    assert out.max().item() == pytest.approx(float(scale), rel=1e-2)


def test_an_override_that_extends_the_modules_method_is_told_to_keep_its_signature_not_to_be_renamed():
    """Renaming DINOv2's `train()`, which calls `super().train()` and then puts its teacher in eval mode, would drop
    that from `model.train()`: the message says to keep the signature; a training loop named `train` is told both."""
    path = FIXTURES / "model" / "TL703_train_signature.py"
    findings = {finding.location.row: finding.message for finding in lint_file(str(path), make_config(select=["TL703"])).findings}
    extending = next(row for row, line in enumerate(path.read_text().splitlines(), 1) if "def train(self):" in line)
    assert "keep the Module signature and pass its arguments on" in findings[extending]
    assert "rename it" not in findings[extending]
    assert all("rename it" in message for row, message in findings.items() if row != extending)
