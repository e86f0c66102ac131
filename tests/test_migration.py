"""Old code on new torch: torchlint's fixes take pre-0.4 code to code that runs on the installed torch.

- `fixtures/migration/old_tutorial.py`, a training script in the style of 2017's tutorials, fails on
  torch 2.13; a copy fixed by `torchlint check --fix --unsafe-fixes` runs to the end.
- The fix fixtures of the old-code rules (`fixtures/fixes/TL61*.py`) run with a small emulation of the
  old torch between `# old-torch: begin` and `# old-torch: end` lines, which is how
  tests/test_fix_equivalence.py proves the fix keeps what the old torch computed. Here the emulation is
  taken out: the original must then raise the error its `# fixture-old-torch-raises:` line names (what
  torch 2.13 does to it), and the fixed program must leave exactly the state it left with the emulation.
"""

import builtins
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, run_cli
from test_fix_equivalence import FIX_FIXTURES, differences, read, run_program

TUTORIAL = FIXTURES / "migration" / "old_tutorial.py"
_EMULATION = re.compile(r"^# old-torch: begin\n.*?^# old-torch: end\n", re.MULTILINE | re.DOTALL)
EMULATED = sorted(path for path in FIX_FIXTURES.glob("*.py") if "# fixture-old-torch-raises:" in read(path))


def run_script(path):
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=path.parent)


def test_the_old_tutorial_fails_on_current_torch(tmp_path):
    copy = tmp_path / TUTORIAL.name
    shutil.copy(TUTORIAL, copy)
    completed = run_script(copy)
    assert completed.returncode != 0
    assert "AttributeError: '_SingleProcessDataLoaderIter' object has no attribute 'next'" in completed.stderr


@pytest.mark.parametrize("workers", [0, 2])
def test_the_next_method_finding_quotes_the_error_torch_raises(tmp_path, workers):
    pytest.importorskip("torch")
    script = tmp_path / "peek.py"
    script.write_text(
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        "if __name__ == '__main__':\n"
        f"    loader = DataLoader(list(range(8)), batch_size=2, num_workers={workers})\n"
        "    print(iter(loader).next())\n"
    )
    raised = run_script(script).stderr.strip().splitlines()[-1]
    _, stdout, _ = run_cli("check", "--isolated", "--no-cache", "--select", "TL610", "--output-format", "json", script)
    [finding] = json.loads(stdout)
    quoted = re.search(r"`(AttributeError: [^`]*)`", finding["message"]).group(1)
    assert quoted == raised


def test_the_fixed_tutorial_runs_on_current_torch(tmp_path):
    pytest.importorskip("torch")
    copy = tmp_path / TUTORIAL.name
    shutil.copy(TUTORIAL, copy)
    code, _, stderr = run_cli("check", "--fix", "--unsafe-fixes", "--no-cache", "--exit-zero", copy)
    assert code == 0, stderr
    fixed = copy.read_text()
    for old in (".next()", ".data[0]", "retain_variables", "size_average", "volatile"):
        assert old not in fixed, f"{old} left in the fixed script"
    completed = run_script(copy)
    assert completed.returncode == 0, completed.stderr
    assert "test loss" in completed.stdout


def test_every_old_code_fix_fixture_is_emulated():
    codes = {path.name.split("_")[0] for path in EMULATED}
    assert {"TL610", "TL611", "TL613", "TL614"} <= codes


@pytest.mark.parametrize("path", EMULATED, ids=lambda path: path.name)
def test_without_the_old_torch_the_original_raises_and_the_fix_runs_alike(path):
    original, fixed = read(path), read(path.with_name(path.name + ".fixed"))
    raised = re.search(r"^# fixture-old-torch-raises: (\w+)$", original, re.MULTILINE).group(1)
    current_original, current_fixed = _EMULATION.sub("", original), _EMULATION.sub("", fixed)
    assert current_original != original, "the fixture holds no old-torch emulation"
    with pytest.raises(getattr(builtins, raised)):
        run_program(current_original, path.name)
    assert differences(run_program(fixed, path.name), run_program(current_fixed, path.name), "") == {}
