"""Runtime health check: `torchlint.health.check` and `torchlint doctor` on small real models on CPU."""

import json
import textwrap

import pytest
from conftest import run_cli

torch = pytest.importorskip("torch")
nn = torch.nn
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

from torchlint.health import CHECKS, ERROR, check, severity  # noqa: E402


class Squares(Dataset):
    """A map-style dataset that is not a TensorDataset: its items are made on access."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return torch.full((4,), float(index)), index % 3


def data(features=4, labels=None, n=8, dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=generator).to(dtype)
    y = torch.randint(0, 3, (n,), generator=generator) if labels is None else labels
    return TensorDataset(x, y)


def healthy():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    loader = DataLoader(data(), batch_size=4)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, loader, criterion, optimizer


def codes(findings):
    return sorted(finding.code for finding in findings)


def test_a_healthy_setup_has_no_findings():
    assert check(*healthy()) == []


def test_every_code_is_documented():
    from conftest import ROOT

    page = (ROOT / "docs" / "health.md").read_text()
    for code, entry in CHECKS.items():
        assert f"`{code}`" in page and entry.name in page, code


def test_the_check_leaves_the_model_as_it_was():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 3)).eval()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    rng = torch.get_rng_state()
    check(model, DataLoader(data(), batch_size=4), nn.CrossEntropyLoss())
    assert not model.training
    assert all(parameter.grad is None for parameter in model.parameters())
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())


def test_float_labels_into_cross_entropy_reuse_the_static_code():
    model, _, criterion, _ = healthy()
    loader = DataLoader(data(labels=torch.tensor([0.0, 1.0, 2.0, 1.0] * 2)), batch_size=4)
    [finding] = check(model, loader, criterion)
    assert finding.code == "TL203" and severity(finding) == ERROR
    assert "expected target dtype to be Long or Byte, but got Float" in finding.message


def test_int32_labels_fail_the_first_step():
    model, _, criterion, _ = healthy()
    loader = DataLoader(data(labels=torch.tensor([0, 1, 2, 1] * 2, dtype=torch.int32)), batch_size=4)
    [finding] = check(model, loader, criterion)
    assert finding.code == "TL905"
    assert "but got Int" in finding.message


def test_float64_parameters_mixed_dtypes_and_float64_inputs():
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8).double(), nn.Linear(8, 3))
    loader = DataLoader(data(dtype=torch.float64), batch_size=4)
    findings = check(model, loader, nn.CrossEntropyLoss())
    assert codes(findings) == ["TL902", "TL903", "TL904", "TL905"]
    mixed = next(f for f in findings if f.code == "TL902")
    assert "(4 float32, 2 float64)" in mixed.message
    # The rarest dtype's first parameter: the second layer's weight, third in named_parameters().
    assert mixed.location.row == 3
    assert next(f for f in findings if f.code == "TL903").message.startswith("2 float64 parameter(s) (`1.weight`, `1.bias`)")
    failed = next(f for f in findings if f.code == "TL905")
    assert "mat1 and mat2 must have the same dtype" in failed.message


def test_batch_on_another_device_stops_before_the_forward():
    model, loader, criterion, _ = healthy()
    model = model.to("meta")
    [finding] = check(model, loader, criterion)
    assert finding.code == "TL901"
    assert "the batch is on cpu, the model on meta" in finding.message


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.unused = nn.Linear(4, 3)
        self.frozen = nn.Linear(4, 3)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        return self.body(x) + self.frozen(x)


def test_a_head_neither_used_nor_optimized_is_one_finding_that_says_both():
    model = TwoHeads()
    optimizer = torch.optim.SGD(model.body.parameters(), lr=0.1)
    [finding] = check(model, DataLoader(data(), batch_size=4), nn.CrossEntropyLoss(), optimizer)
    assert finding.code == "TL906"
    assert "2 trainable parameter(s)" in finding.message and "`unused.weight`, `unused.bias`" in finding.message
    assert "not used by the forward" in finding.message and "not in the optimizer either" in finding.message
    assert "they get gradients" not in finding.message  # TL907's claim, false for these
    assert finding.location.row == 3  # unused.weight is the third named parameter


def test_parameters_without_gradient_and_parameters_not_optimized_are_two_findings():
    model = TwoHeads()
    optimizer = torch.optim.SGD(model.unused.parameters(), lr=0.1)
    findings = check(model, DataLoader(data(), batch_size=4), nn.CrossEntropyLoss(), optimizer)
    assert codes(findings) == ["TL906", "TL907"]
    no_gradient = next(f for f in findings if f.code == "TL906")
    assert "`unused.weight`, `unused.bias`" in no_gradient.message and "not in the optimizer" not in no_gradient.message
    not_optimized = next(f for f in findings if f.code == "TL907")
    assert "`body.weight`, `body.bias`" in not_optimized.message and "they get gradients but never change" in not_optimized.message


def test_unused_parameters_partly_optimized_say_which_are_not():
    model = TwoHeads()
    optimizer = torch.optim.SGD([*model.body.parameters(), model.unused.weight], lr=0.1)
    [finding] = check(model, DataLoader(data(), batch_size=4), nn.CrossEntropyLoss(), optimizer)
    assert finding.code == "TL906"
    assert finding.message.endswith("1 of them (`unused.bias`) are not in the optimizer either")


def test_a_frozen_model_cannot_backward():
    model, loader, criterion, _ = healthy()
    model.requires_grad_(False)
    [finding] = check(model, loader, criterion)
    assert finding.code == "TL905" and "does not require grad" in finding.message


def test_dataloader_settings():
    model, _, criterion, _ = healthy()
    loader = DataLoader(Squares(), batch_size=4, pin_memory=True)
    findings = check(model, loader, criterion)
    # torch's own pin_memory warning at the first batch is not repeated as TL916.
    assert codes(findings) == (["TL306"] if torch.cuda.is_available() else ["TL306", "TL908"])


def test_workers_not_persistent_and_more_workers_than_cores(monkeypatch):
    import os

    model, _, criterion, _ = healthy()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    loader = DataLoader(data(), batch_size=4, num_workers=2)
    findings = check(model, loader, criterion)
    assert codes(findings) == ["TL909", "TL910"]
    assert "`num_workers=2` on 1 available core(s)" in findings[0].message + findings[1].message


def test_criterion_configuration():
    model, loader, _, _ = healthy()
    findings = check(model, loader, nn.CrossEntropyLoss(reduction="sum", label_smoothing=-0.1, ignore_index=1))
    assert codes(findings) == ["TL911", "TL912", "TL913"]
    assert [severity(f) for f in sorted(findings, key=lambda f: f.code)] == ["warning", "error", "warning"]


def test_negative_class_weights_and_all_ignored_labels():
    model, _, _, _ = healthy()
    weights = nn.CrossEntropyLoss(weight=torch.tensor([1.0, -1.0, 0.5]))
    assert codes(check(model, DataLoader(data(), batch_size=4), weights)) == ["TL914"]
    ignored = DataLoader(data(labels=torch.full((8,), -100)), batch_size=4)
    [finding] = check(model, ignored, nn.CrossEntropyLoss())
    assert finding.code == "TL915" and "every label equals ignore_index=-100" in finding.message


def test_broadcasting_warning_of_the_loss_is_reported():
    model = nn.Linear(4, 1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8)), batch_size=4)
    [finding] = check(model, loader, nn.MSELoss())
    assert finding.code == "TL916"
    assert "Using a target size (torch.Size([4])) that is different to the input size" in finding.message


FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset


    def data():
        return TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,)))


    def good():
        return nn.Linear(4, 3), DataLoader(data(), batch_size=4), nn.CrossEntropyLoss()


    def float_labels():
        dataset = TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,)).float())
        return {"model": nn.Linear(4, 3), "loader": DataLoader(dataset, batch_size=4), "criterion": nn.CrossEntropyLoss()}


    def only_warnings():
        return nn.Linear(4, 3), DataLoader(data(), batch_size=4), nn.CrossEntropyLoss(reduction="sum")


    def nothing():
        return 42
    """
)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "setup_for_doctor.py").write_text(FACTORIES)
    return tmp_path


def test_doctor_passes_a_healthy_factory(project):
    code, out, err = run_cli("doctor", "setup_for_doctor:good", "--output-format", "concise", cwd=project)
    assert (code, out) == (0, "All checks passed!\n"), err


def test_doctor_fails_on_an_error_and_reports_in_json(project):
    code, out, err = run_cli("doctor", "setup_for_doctor:float_labels", "--output-format", "json", cwd=project)
    assert code == 1, err
    [finding] = json.loads(out)
    assert finding["code"] == "TL203" and finding["severity"] == "error"
    assert finding["filename"] == "setup_for_doctor:float_labels"
    assert finding["location"] == {"row": 1, "column": 1}
    assert finding["url"].endswith("docs/health.md#tl203-label-cast-to-float")
    assert err.strip() == "Found 1 problem(s): 1 error(s) (TL203), 0 warning(s)."


def test_doctor_warnings_alone_exit_zero(project):
    code, out, _ = run_cli("doctor", "setup_for_doctor:only_warnings", "--output-format", "concise", cwd=project)
    assert code == 0
    assert out.splitlines()[0].startswith("setup_for_doctor:only_warnings:1:1: TL911 ")
    assert out.splitlines()[-1] == "Found 1 problem(s): 0 error(s), 1 warning(s)."


@pytest.mark.parametrize("target, message", [
    ("setup_for_doctor", "expected MODULE:FACTORY"),
    ("no_such_module:good", "cannot import 'no_such_module'"),
    ("setup_for_doctor:missing", "has no function 'missing'"),
    ("setup_for_doctor:nothing", "must return (model, loader"),
])
def test_doctor_usage_errors(project, target, message):
    code, _, err = run_cli("doctor", target, cwd=project)
    assert code == 2
    assert message in err


BROKEN = {
    "raises_at_import.py": "import math\n\nSCALE = math.log(0)\n",
    "bad_syntax.py": "def make(:\n    pass\n",
    "exits_at_import.py": "import sys\n\nsys.exit(3)\n",
    "missing_dependency.py": "import no_such_dependency_of_the_user\n",
    "argparse_at_import.py": textwrap.dedent(
        """
        import argparse

        from setup_for_doctor import good

        OPTIONS = argparse.ArgumentParser().parse_args()  # would see doctor's own options
        """
    ),
    "broken_factories.py": textwrap.dedent(
        """
        def read(path):
            return open(path).read()


        def raises():
            return read("/no/such/data.csv")


        def needs_arguments(size, depth=2):
            return size
        """
    ),
}


@pytest.fixture
def broken(project):
    for name, text in BROKEN.items():
        (project / name).write_text(text)
    return project


@pytest.mark.parametrize("target, line", [
    ("raises_at_import:make",
     "cannot import 'raises_at_import': ValueError: math domain error (raises_at_import.py:3, in <module>)"),
    ("bad_syntax:make", "cannot import 'bad_syntax': SyntaxError: invalid syntax (bad_syntax.py:1)"),
    ("exits_at_import:make", "cannot import 'exits_at_import': SystemExit: 3 (exits_at_import.py:3, in <module>)"),
    ("missing_dependency:make", "cannot import 'missing_dependency': ModuleNotFoundError: No module named "
                                "'no_such_dependency_of_the_user' (missing_dependency.py:1, in <module>)"),
    ("broken_factories:raises", "broken_factories:raises raised FileNotFoundError: [Errno 2] No such file or directory: "
                                "'/no/such/data.csv' (broken_factories.py:3, in read)"),
    ("broken_factories:needs_arguments", "broken_factories:needs_arguments needs arguments, and doctor calls it with none "
                                         "(TypeError: missing a required argument: 'size') (broken_factories.py:10, in needs_arguments)"),
])
def test_the_users_failure_is_one_line_and_exit_2(broken, target, line):
    code, out, err = run_cli("doctor", target, cwd=broken)
    assert (code, out) == (2, "")
    assert err == f"torchlint: error: {line}; --traceback shows the full traceback\n"


def test_traceback_shows_the_whole_traceback_before_the_line(broken):
    code, _, err = run_cli("doctor", "broken_factories:raises", "--traceback", cwd=broken)
    assert code == 2
    assert err.startswith("Traceback (most recent call last):\n")
    assert 'broken_factories.py", line 7, in raises' in err and 'broken_factories.py", line 3, in read' in err
    assert err.splitlines()[-1].startswith("torchlint: error: broken_factories:raises raised FileNotFoundError")


def test_a_module_parsing_its_command_line_at_import_sees_none_of_doctors(broken):
    code, out, err = run_cli("doctor", "argparse_at_import:good", "--output-format", "concise", cwd=broken)
    assert (code, out) == (0, "All checks passed!\n"), err
