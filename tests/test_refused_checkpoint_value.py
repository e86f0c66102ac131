"""TL503 end to end: what the fix writes loads under weights_only=True, and `torchlint verify` confirms each finding."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")

FIX = FIXTURES / "fixes" / "TL503_plain_values.py"


def saved_loads(program, folder) -> bool:
    """Run `program` (which saves checkpoint.pt) in `folder`, then load the file the way torch 2.6 does by default."""
    (folder / "program.py").write_text(program)
    subprocess.run([sys.executable, "program.py"], cwd=folder, check=True, capture_output=True, timeout=120)
    try:
        torch.load(folder / "checkpoint.pt")
    except Exception as error:  # what torch raises is the point: UnpicklingError for a refused global
        assert type(error).__name__ == "UnpicklingError", error
        return False
    return True


def test_the_fixed_program_writes_a_checkpoint_the_default_load_reads(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    assert not saved_loads(FIX.read_text(), before)
    assert saved_loads(FIX.with_name(FIX.name + ".fixed").read_text(), after)


def test_verify_confirms_every_finding_on_torch(tmp_path):
    shutil.copy(FIXTURES / "serialization" / "TL503_refused_values.py", tmp_path / "train.py")
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\ntorch-version = "2.6"\n')
    done = subprocess.run(
        [sys.executable, "-m", "torchlint", "verify", "train.py", "--select", "TL503", "--device", "cpu", "--output-format", "json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    findings = json.loads(done.stdout)
    assert len(findings) == 15
    assert {finding["verification"]["status"] for finding in findings} == {"confirmed"}, [
        (finding["location"]["row"], finding["verification"]) for finding in findings
    ]


def test_an_argument_the_function_also_reads_is_reported_without_a_fix(tmp_path):
    """`train(opt)` saves `{"settings": opt}` and reads `opt.lr`: `vars(...)` at the call would break the function,
    so no fix edits the call; a value inside a dict passed only to be saved keeps its fix."""
    from conftest import make_config
    from torchlint.engine.runner import lint_file

    source = tmp_path / "train.py"
    source.write_text(
        "import argparse\nimport numpy as np\nimport torch\n\n\n"
        "def train(opt, state):\n"
        "    print(opt.lr)\n"
        "    torch.save({'settings': opt, 'epoch': 1}, 'model.chkpt')\n"
        "    torch.save(state, 'best.chkpt')\n\n\n"
        "parser = argparse.ArgumentParser()\n"
        "train(parser.parse_args(), {'best_acc': np.mean([0.5])})\n"
    )
    findings = lint_file(str(source), make_config(select=["TL503"], torch_version="2.6")).findings
    fixes = {finding.location.row: finding.fix for finding in findings}
    assert sorted(fixes) == [8, 9]
    # Now that the value model binds `opt` to what the call passes, the fix may change the save itself
    # (`{'settings': vars(opt)}` in the function); never the call, where `vars(...)` would break `opt.lr`.
    assert fixes[8] is None or {edit.location.row for edit in fixes[8].edits} == {8}
    assert fixes[9] is not None
