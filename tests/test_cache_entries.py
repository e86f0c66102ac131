"""Cache files that are not regular files: a FIFO must not hang a run, a link to /dev/zero must not fill the memory.
Each is a miss, and the next save puts a regular file in its place."""

import os
import subprocess
import sys

import pytest

from torchlint.cache import FOLDER

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"

# Run in a child process so that a read that hangs (a FIFO) ends the test by its timeout instead of hanging it.
READ_SUMMARY = """
import sys
from pathlib import Path
from torchlint.cache import SummaryStore
store = SummaryStore(Path(sys.argv[1]))
print(store.load(sys.argv[2], b"digest"))
"""


def check(project):
    completed = subprocess.run([sys.executable, "-m", "torchlint", "check", "bad.py"], cwd=project,
                               capture_output=True, text=True, timeout=60)
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.torchlint]\n")
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


def cache_files(project):
    return [path for path in (project / FOLDER).rglob("*.bin")]


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "folder"])
def test_a_cache_file_that_is_not_a_regular_file_is_a_miss_and_replaced(project, kind):
    assert check(project).returncode == 1
    [entry] = cache_files(project)
    entry.unlink()
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "folder":
        entry.mkdir()
    else:
        entry.symlink_to("/dev/zero")
    completed = check(project)
    assert completed.returncode == 1 and "TL303" in completed.stdout
    if kind != "folder":  # a rename cannot replace a folder with a file: that one stays a miss
        assert entry.is_file() and not entry.is_symlink()
        assert check(project).returncode == 1


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_a_summary_file_that_is_not_a_regular_file_is_a_miss(tmp_path, kind):
    from torchlint.cache import SummaryStore

    folder = tmp_path / FOLDER / "summaries"
    folder.mkdir(parents=True)
    store = SummaryStore(folder)
    model = str(tmp_path / "model.py")  # absolute: the child process runs elsewhere
    target = store._path(model)
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    completed = subprocess.run([sys.executable, "-c", READ_SUMMARY, str(folder), model], cwd=tmp_path,
                               capture_output=True, text=True, timeout=60)
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "None\n", "")
    store.save(model, b"digest", b"payload")
    assert target.is_file() and not target.is_symlink()
    assert store.load(model, b"digest") == b"payload"
