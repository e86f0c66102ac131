"""`torchlint checkpoint`: real files written by torch.save in a temporary folder, read without running them."""

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchlint.cli import main

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


class Config:
    """A project class: its instances pickle by reference to `tests.test_checkpoint_command.Config`."""

    def __init__(self):
        self.lr = 0.1


@pytest.fixture
def files(tmp_path: Path):
    model = torch.nn.Linear(2, 2)
    made = {
        "good": {"model": model.state_dict(), "args": vars(argparse.Namespace(lr=0.1)), "best": float(np.mean([0.5])),
                 "order": collections.OrderedDict(a=1), "hist": np.zeros(3).tolist()},
        "namespace": {"model": model.state_dict(), "args": argparse.Namespace(lr=0.1)},
        "numpy": {"best_acc": np.mean([0.5, 0.25]), "confusion": np.zeros((2, 2))},
        "modules": [model, torch.nn.Linear(1, 1)],
        "custom": {"config": Config(), "counts": collections.defaultdict(int)},
        "path": {"root": Path("runs")},
    }
    paths = {}
    for name, value in made.items():
        paths[name] = tmp_path / f"{name}.pt"
        torch.save(value, paths[name])
    paths["legacy"] = tmp_path / "legacy.pt"
    torch.save({"args": argparse.Namespace(lr=0.1)}, paths["legacy"], _use_new_zipfile_serialization=False)
    paths["legacy_good"] = tmp_path / "legacy_good.pt"
    torch.save({"x": torch.zeros(2)}, paths["legacy_good"], _use_new_zipfile_serialization=False)
    paths["junk"] = tmp_path / "junk.pt"
    paths["junk"].write_bytes(b"not a checkpoint")
    data = paths["namespace"].read_bytes()
    paths["truncated"] = tmp_path / "truncated.pt"
    paths["truncated"].write_bytes(data[: len(data) // 2])
    paths["missing"] = tmp_path / "missing.pt"
    return paths


def run(capsys, *args):
    code = main(["checkpoint", *map(str, args)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", ["good", "legacy_good"])
def test_a_file_that_loads_exits_0(files, capsys, name):
    code, out, _ = run(capsys, files[name])
    assert code == 0 and "loads with weights_only=True" in out


@pytest.mark.parametrize(
    "name, refused, key",
    [
        ("namespace", "argparse.Namespace", '["args"]'),
        ("numpy", "numpy._core.multiarray.scalar", '["best_acc"]'),
        ("numpy", "numpy._core.multiarray._reconstruct", '["confusion"]'),
        ("modules", "torch.nn.modules.linear.Linear", "[0]"),
        ("custom", "test_checkpoint_command.Config", '["config"]'),
        ("custom", "collections.defaultdict", '["counts"]'),
        ("path", "pathlib.PosixPath", '["root"]'),
        ("legacy", "argparse.Namespace", '["args"]'),
    ],
)
def test_a_refused_file_exits_1_naming_the_global_and_its_key(files, capsys, name, refused, key):
    code, out, _ = run(capsys, "--output-format", "json", files[name])
    [inspection] = json.loads(out)
    assert code == 1 and inspection["status"] == "refused"
    assert refused in inspection["refused_globals"]
    assert key in inspection["keys"][refused]


@pytest.mark.parametrize("name", ["namespace", "numpy", "modules", "custom", "path", "legacy"])
def test_the_printed_allow_list_makes_the_file_load(files, capsys, name):
    # Run in a fresh interpreter, as a user would paste it; the project class comes from this module.
    code, out, _ = run(capsys, "--output-format", "json", files[name])
    [inspection] = json.loads(out)
    program = f"import sys, torch\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n{inspection['allow_list']}\ntorch.load({str(files[name])!r})\n"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("name, message", [
    ("junk", "not a checkpoint written by torch.save"),
    ("truncated", "damaged zip archive"),
    ("missing", "cannot read the file"),
])
def test_a_file_it_cannot_read_exits_2_with_one_line(files, capsys, name, message):
    code, out, _ = run(capsys, files[name])
    assert code == 2 and message in out


def test_several_files_exit_with_the_worst(files, capsys):
    assert run(capsys, files["good"], files["namespace"])[0] == 1
    assert run(capsys, files["good"], files["namespace"], files["junk"])[0] == 2


def test_reading_a_file_runs_none_of_its_code(tmp_path, capsys):
    marker = tmp_path / "marker.txt"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "payload.pt"
    torch.save({"weights": torch.zeros(2), "payload": Payload()}, path)
    code, out, _ = run(capsys, path)
    assert code == 1 and "io.open" in out
    assert not marker.exists()


def test_without_torch_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    code, out, err = run(capsys, "any.pt")
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "pip install" in err


def test_from_the_command_line_no_traceback(files):
    done = subprocess.run(
        [sys.executable, "-m", "torchlint", "checkpoint", str(files["truncated"]), str(files["junk"])],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr


def test_concise_output_is_one_line_a_file(files, capsys):
    code, out, _ = run(capsys, "--output-format", "concise", files["namespace"], files["good"])
    lines = out.splitlines()
    assert code == 1 and len(lines) == 3
    assert lines[0].endswith("refused by weights_only=True: argparse.Namespace")
