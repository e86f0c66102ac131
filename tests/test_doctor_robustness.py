"""`torchlint doctor` on user code that never returns, or raises what no `except Exception` catches: a report
or one line, never a hang or a traceback."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

MODULE = '''
import threading

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def loader():
    return DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)


def never():
    threading.Event().wait()


class Stuck(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x):
        threading.Event().wait()


def forward_never_returns():
    return Stuck(), loader()


def good():
    return nn.Linear(4, 2), loader(), nn.CrossEntropyLoss()


class Boom(BaseException):
    pass


def base_exception():
    raise Boom("boom")


class Unprintable(Exception):
    def __str__(self):
        raise ValueError("no message")


def unprintable():
    raise Unprintable()


class Exits(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x):
        raise Boom("in forward")


def forward_raises_base_exception():
    return Exits(), loader()


def interrupted():
    raise KeyboardInterrupt
'''

# Long enough for the factories above on a busy machine (they build a 8x4 tensor); the hangs never end, so the
# outcome does not depend on the figure, only how long the test waits does.
TIMEOUT = "10"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "setup_hang.py").write_text(MODULE)
    return tmp_path


def doctor(project, factory, *options):
    completed = subprocess.run([sys.executable, "-m", "torchlint", "doctor", f"setup_hang:{factory}", *options],
                               cwd=project, capture_output=True, text=True, timeout=240)
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.returncode, completed.stdout, completed.stderr


def test_a_factory_that_never_returns_is_one_line(project):
    code, out, err = doctor(project, "never", "--timeout", TIMEOUT)
    assert code == 2 and out == ""
    assert err == f"torchlint: error: setup_hang:never did not finish within {TIMEOUT} s (--timeout) (stuck at setup_hang.py:14, in never)\n"


def test_a_forward_that_never_returns_is_a_finding(project):
    code, out, err = doctor(project, "forward_never_returns", "--timeout", TIMEOUT, "--memory", "--output-format", "concise")
    assert code == 1
    assert out.splitlines()[0].startswith(
        f"setup_hang:forward_never_returns:1:1: TL905 the first training step did not finish within {TIMEOUT} s (--timeout) "
        "(stuck at setup_hang.py:23, in forward)")
    assert "Memory: not measured, the step does not finish (TL905)." in out


def test_a_forward_that_never_returns_keeps_json_one_document(project):
    code, out, _ = doctor(project, "forward_never_returns", "--timeout", TIMEOUT, "--output-format", "json")
    assert code == 1
    assert [finding["code"] for finding in json.loads(out)] == ["TL905"]


def test_timeout_must_be_seconds(project):
    code, _, err = doctor(project, "good", "--timeout", "soon")
    assert code == 2 and "expected a number of seconds" in err


def test_a_base_exception_of_the_factory_is_one_line(project):
    code, out, err = doctor(project, "base_exception")
    assert code == 2
    assert err.startswith("torchlint: error: setup_hang:base_exception raised Boom: boom (setup_hang.py:")
    assert len(err.splitlines()) == 1


def test_an_exception_whose_str_raises_is_one_line(project):
    code, _, err = doctor(project, "unprintable")
    assert code == 2
    assert err.startswith("torchlint: error: setup_hang:unprintable raised Unprintable: "
                          "<the message cannot be shown: its __str__ raised ValueError>")


def test_a_base_exception_in_the_forward_is_one_line(project):
    code, _, err = doctor(project, "forward_raises_base_exception")
    assert code == 2
    assert err.startswith("torchlint: error: the health check of setup_hang:forward_raises_base_exception stopped: "
                          "Boom: in forward (setup_hang.py:")


def test_an_interrupt_exits_130_quietly(project):
    assert doctor(project, "interrupted") == (130, "", "")


@pytest.mark.parametrize("options", [["--memory"], ["--memory", "--target-memory", "100B"]])
def test_memory_in_json_is_one_document_on_standard_output(project, options):
    """The memory report is for people: with a JSON format it goes to standard error, the JSON alone to standard output."""
    code, out, err = doctor(project, "good", "--output-format", "json", *options)
    findings = json.loads(out)  # one JSON document, nothing after it
    assert "Memory of one training step" in err
    assert [finding["code"] for finding in findings] == (["TL917"] if "--target-memory" in options else [])
