"""`torchlint doctor --memory`: the bytes of one training step, on small models whose sizes are known exactly."""

import json
import textwrap

import pytest
from conftest import run_cli

torch = pytest.importorskip("torch")
nn = torch.nn
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from torchlint.health.command import parse_target  # noqa: E402
from torchlint.health.memory import Autocast, measure  # noqa: E402

FLOAT = 4
# Linear(8, 16) and Linear(16, 4): weights and biases.
MLP_PARAMETERS = (8 * 16 + 16 + 16 * 4 + 4) * FLOAT


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def loader(batch_size=8, samples=16, features=8, classes=4):
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(samples, features, generator=generator),
                         torch.randint(0, classes, (samples,), generator=generator))
    return DataLoader(data, batch_size=batch_size)


def test_parameters_gradients_and_adam_state_are_exact():
    model = mlp()
    report = measure(model, loader(), nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()))
    assert report.parameters == report.gradients == MLP_PARAMETERS
    # Two moments per parameter, and one float32 step counter per parameter tensor (4 tensors).
    assert report.optimizer_state == 2 * MLP_PARAMETERS + 4 * FLOAT
    assert report.optimizer == "Adam" and "meta" in report.optimizer_how
    assert report.batch(8) == 8 * 8 * FLOAT + 8 * 8  # float32 inputs and int64 labels


def test_activations_are_the_tensors_saved_for_backward():
    model = mlp()
    report = measure(model, loader(), nn.CrossEntropyLoss())
    # Per sample: ReLU's output (16 floats, which the second Linear saves too: one storage) and
    # log_softmax's output (4 floats). The inputs, labels and weights are counted on their own lines.
    assert report.activations(8) - report.activations(4) == 4 * (16 + 4) * FLOAT
    assert [step.batch_size for step in report.steps] == [8, 4, 2]
    assert report.linearity() is None and report.linearity_checked()


def test_optimizer_state_follows_the_optimizer():
    model = mlp()
    plain = measure(model, loader(), nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1))
    momentum = measure(model, loader(), nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    amsgrad = measure(model, loader(), nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters(), amsgrad=True))
    assert (plain.optimizer_state, momentum.optimizer_state) == (0, MLP_PARAMETERS)
    assert amsgrad.optimizer_state == 3 * MLP_PARAMETERS + 4 * FLOAT


class Normalized(torch.optim.Optimizer):
    """Reads a gradient's norm as a Python number: its step cannot run on meta tensors."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for parameter in group["params"]:
                if parameter.grad is not None:
                    norm = parameter.grad.norm().item()
                    self.state[parameter].setdefault("previous", torch.zeros_like(parameter)).copy_(parameter)
                    parameter.add_(parameter.grad, alpha=-group["lr"] / max(norm, 1e-12))


def test_an_optimizer_that_needs_real_values_steps_a_copy_of_the_parameters():
    model = mlp()
    optimizer = Normalized(model.parameters())
    before = [parameter.clone() for parameter in model.parameters()]
    report = measure(model, loader(), nn.CrossEntropyLoss(), optimizer)
    assert report.optimizer_how == "one step of a copy of the parameters"
    assert report.optimizer_state == MLP_PARAMETERS
    assert len(optimizer.state) == 0
    assert all(torch.equal(old, new) for old, new in zip(before, model.parameters()))


def test_parameters_without_gradient_get_neither_gradient_nor_state():
    model = mlp()
    model[0].requires_grad_(False)
    report = measure(model, loader(), nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()))
    trained = (16 * 4 + 4) * FLOAT
    assert report.gradients == trained
    assert report.optimizer_state == 2 * trained + 2 * FLOAT


def test_tied_weights_are_counted_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(10, 6)
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.embedding.weight

        def forward(self, tokens):
            return self.head(self.embedding(tokens))

    tokens = TensorDataset(torch.randint(0, 10, (8,)), torch.randint(0, 10, (8,)))
    report = measure(Tied(), DataLoader(tokens, batch_size=4), nn.CrossEntropyLoss())
    assert report.parameters == report.gradients == 10 * 6 * FLOAT


def test_nothing_is_left_changed():
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 4)).eval()
    optimizer = torch.optim.Adam(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    model[0].weight.grad = torch.ones_like(model[0].weight)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    rng = torch.get_rng_state()
    measure(model, loader(), nn.CrossEntropyLoss(), optimizer)
    assert not model.training
    assert torch.equal(model[0].weight.grad, torch.ones_like(model[0].weight))
    assert all(parameter.grad is None for parameter in list(model.parameters())[1:])
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())
    assert len(optimizer.state) == 0 and scheduler.last_epoch == 0 and optimizer.param_groups[0]["lr"] == 0.001


def test_the_peak_covers_the_backward_and_the_optimizer_step():
    model = mlp()
    report = measure(model, loader(), nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()))
    for size in (8, 100_000):
        peak = report.peak(size).bytes
        assert peak >= report.parameters + report.gradients + report.optimizer_state
        # When the backward begins every activation is still held: far beyond the measured sizes, that is the peak,
        # at another moment of the step than at the measured ones (where the gradients weigh more).
        assert peak >= report.parameters + report.optimizer_state + report.activations(size) + report.batch(size)
    assert report.peak(100_000).phase == "backward"


def test_a_projection_is_what_that_batch_size_measures():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 4))
    optimizer = torch.optim.Adam(model.parameters())
    small = measure(model, loader(batch_size=16, samples=16, features=64), nn.CrossEntropyLoss(), optimizer)
    large = measure(model, loader(batch_size=1024, samples=1024, features=64), nn.CrossEntropyLoss(), optimizer)
    # At 16 the peak is when the gradients are allocated, at 1024 when the backward begins; a line through
    # the peaks measured at 4, 8 and 16 misses the second by a quarter; the line of each moment does not.
    assert small.peak(1024) == large.peak(1024)
    assert small.activations(1024) == large.activations(1024)


def test_a_batch_dependent_fixed_part_is_not_linear():
    class Pairwise(nn.Module):
        """Saves a batch-by-batch matrix: quadratic in the batch size."""

        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(8, 4)

        def forward(self, x):
            features = self.linear(x)
            return (features @ features.T) @ features

    # 512 x 512 floats at the loader's batch size: beyond the noise that the check allows for.
    report = measure(Pairwise(), loader(batch_size=512, samples=512), nn.CrossEntropyLoss())
    assert report.linearity() is not None and "not linear in the batch size" in report.linearity()


def test_autocast_saves_the_low_precision_copies():
    model = mlp()
    full = measure(model, loader(), nn.CrossEntropyLoss())
    mixed = measure(model, loader(), nn.CrossEntropyLoss(), autocast=Autocast("cpu", "bfloat16"))
    assert mixed.autocast == "bfloat16 on cpu" and full.autocast is None
    # bfloat16 per sample: the first Linear's input copy (8), ReLU's output (16); log_softmax stays float32 (4).
    assert mixed.activations(8) - mixed.activations(4) == 4 * ((8 + 16) * 2 + 4 * FLOAT)
    # and, whatever the batch, the second Linear's bfloat16 weight, which its backward needs.
    assert mixed.activations(8) - 8 * ((8 + 16) * 2 + 4 * FLOAT) >= 16 * 4 * 2


def test_a_grad_scaler_means_float16_autocast():
    scaler = torch.amp.GradScaler("cpu")
    assert Autocast.from_factory(None, scaler) == Autocast("cpu", "float16")
    assert Autocast.from_factory(torch.autocast("cpu", dtype=torch.bfloat16), None) == Autocast("cpu", "bfloat16")
    assert Autocast.from_factory(torch.float16, None) == Autocast("", "float16")
    assert Autocast.from_factory(None, None) is None


@pytest.mark.parametrize("text, expected", [
    ("24GiB", 24 * 2 ** 30), ("16GB", 16 * 10 ** 9), ("512 MiB", 512 * 2 ** 20), ("1.5TiB", int(1.5 * 2 ** 40)),
    ("1000", 1000), ("RTX 4090", 24 * 2 ** 30), ("nvidia-a100-80gb", 80 * 2 ** 30), ("t4", 16 * 2 ** 30),
])
def test_target_sizes_and_gpu_names(text, expected):
    assert parse_target(text)[0] == expected


FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset


    def mlp():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        data = TensorDataset(torch.randn(16, 8), torch.randint(0, 4, (16,)))
        return model, DataLoader(data, batch_size=8), nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters())


    def mixed():
        model, loader, criterion, optimizer = mlp()
        return {"model": model, "loader": loader, "criterion": criterion, "optimizer": optimizer,
                "autocast": torch.autocast("cpu", dtype=torch.bfloat16)}


    def float_labels():
        data = TensorDataset(torch.randn(8, 8), torch.randint(0, 4, (8,)).float())
        return nn.Linear(8, 4), DataLoader(data, batch_size=4), nn.CrossEntropyLoss()
    """
)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "memory_setup.py").write_text(FACTORIES)
    return tmp_path


@pytest.fixture
def doctor(project, monkeypatch, capsys):
    """`torchlint doctor ...` in this process (torch is imported once): (exit code, stdout, stderr)."""
    import sys

    from torchlint.cli import main

    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "memory_setup", raising=False)

    def run(*args):
        code = main(["doctor", *args])
        out, err = capsys.readouterr()
        return code, out, err

    yield run
    sys.modules.pop("memory_setup", None)


def test_doctor_memory_prints_every_part_in_bytes(doctor):
    code, out, err = doctor("memory_setup:mlp", "--memory", "--output-format", "concise")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Memory of one training step at batch size 8 (the loader's), on cpu, parameters float32")
    assert [line.split("  ")[1] for line in lines[1:8]] == [
        "parameters", "buffers", "gradients", "optimizer state", "batch", "activations", "projected peak"]
    row = {line.split("  ")[1]: line for line in lines[1:8]}
    assert f"{MLP_PARAMETERS:,} B" in row["parameters"] and f"{MLP_PARAMETERS:,} B" in row["gradients"]
    assert f"{2 * MLP_PARAMETERS + 16:,} B" in row["optimizer state"] and "Adam" in row["optimizer state"]
    assert "saved for backward" in row["activations"] and "in the " in row["projected peak"]
    assert "measured at batch 2, 4, 8; linear in the batch size" in out
    assert lines[-1] == "All checks passed!"


def test_doctor_projects_to_another_batch_size(doctor):
    code, out, err = doctor("memory_setup:mlp", "--batch-size", "800", "--output-format", "concise")
    assert code == 0, err
    assert "at batch size 800 (projected from the loader's 8)" in out
    activations = next(line for line in out.splitlines() if line.strip().startswith("activations "))
    assert f"{800 * (16 + 4) * FLOAT + 4:,} B" in activations  # the line through 4 and 8, and the 4-byte total weight


def test_doctor_fails_when_the_projection_does_not_fit(project, doctor):
    code, out, err = run_cli("doctor", "memory_setup:mlp", "--batch-size", "100000", "--target-memory", "4MiB",
                             "--output-format", "json", cwd=project)
    assert code == 1, err
    [finding] = json.loads(out)
    assert finding["code"] == "TL917" and finding["severity"] == "error"
    assert "does not fit in 4MiB" in finding["message"] and "batch size" in finding["message"]
    assert finding["memory"]["batch_size"] == 100000 and finding["memory"]["peak"] > finding["target_memory"] == 4 * 2 ** 20
    # The largest batch that fits, by the same projection.
    fits = int(finding["message"].rsplit("batch size ", 1)[1].split()[0])
    code, out, _ = doctor("memory_setup:mlp", "--batch-size", str(fits), "--target-memory", "4MiB", "--output-format", "concise")
    assert code == 0 and "fits in 4MiB" in out
    code, _, _ = doctor("memory_setup:mlp", "--batch-size", str(fits + 1), "--target-memory", "4MiB")
    assert code == 1


def test_doctor_names_a_gpu_and_rejects_an_unknown_size(doctor):
    code, out, _ = doctor("memory_setup:mlp", "--target-memory", "T4", "--output-format", "concise")
    assert code == 0 and "fits in T4 (16 GiB)" in out
    code, _, err = doctor("memory_setup:mlp", "--target-memory", "big")
    assert code == 2 and "--target-memory: expected a size such as 24GiB" in err


def test_doctor_memory_with_the_factorys_autocast(doctor):
    code, out, err = doctor("memory_setup:mixed", "--memory", "--output-format", "concise")
    assert code == 0, err
    assert "autocast bfloat16 on cpu" in out.splitlines()[0]


def test_doctor_does_not_measure_a_step_that_fails(doctor):
    code, out, _ = doctor("memory_setup:float_labels", "--memory", "--output-format", "concise")
    assert code == 1
    assert "Memory: not measured, the step does not run (TL203)." in out
