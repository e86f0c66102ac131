"""The package as users get it: `python -m build` makes an sdist and, from it, a wheel; the wheel installs in a clean
virtual environment and works there, away from the repository: `torchlint rule` prints the same page as
docs/rules/ (the rule classes hold the text, so nothing needs the docs folder), and `torchlint check` finds a bug.

Slow (about 15 s here: a build and an install; dependencies come from the configured index, PyPI in CI)."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"

pytestmark = pytest.mark.packaging


def run(*command, cwd):
    # No PYTHONPATH: the installed package, not the checkout, must answer.
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=300, env=environment)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The bin folder of a fresh virtual environment with the built wheel installed."""
    folder = tmp_path_factory.mktemp("packaging")
    # From a copy of what git holds (or would add): no build output of the checkout (a stale torchlint.egg-info
    # lists files the build would otherwise take) reaches the package.
    listed = run("git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=folder)
    assert listed.returncode == 0, listed.stderr
    source = folder / "source"
    for name in filter(None, listed.stdout.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = run(sys.executable, "-m", "build", "--no-isolation", "--outdir", folder / "dist", source, cwd=folder)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (folder / "dist").glob("*.whl")
    assert len(list((folder / "dist").glob("*.tar.gz"))) == 1
    made = run(sys.executable, "-m", "venv", folder / "venv", cwd=folder)
    assert made.returncode == 0, made.stderr
    bin_folder = folder / "venv" / ("Scripts" if os.name == "nt" else "bin")
    pip = run(bin_folder / "python", "-m", "pip", "install", "-q", wheel, cwd=folder)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return bin_folder


def test_rule_pages_come_with_the_package(installed, tmp_path):
    shown = run(installed / "torchlint", "rule", "TL101", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (ROOT / "docs" / "rules" / "TL101.md").read_text(encoding="utf-8")


def test_the_installed_command_finds_a_bug(installed, tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    checked = run(installed / "torchlint", "check", "--no-cache", "--output-format", "concise", "bad.py", cwd=tmp_path)
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.startswith("bad.py:2:25: TL303 ")
    located = run(installed / "python", "-c", "import torchlint; print(torchlint.__file__)", cwd=tmp_path)
    assert str(ROOT) not in located.stdout and "site-packages" in located.stdout
