"""Every entry point ends with a message and an exit code, never a traceback: a closed or full standard output,
a report file on a full disk, a reader that stops reading, `--fix` leftovers and hard links."""

import os
import subprocess
import sys

import pytest

from torchlint.atomic import SUFFIX, remove_stale

BAD_LINE = "loader = DataLoader(ds, persistent_workers=True)\n"
BAD = "from torch.utils.data import DataLoader\n" + BAD_LINE


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


def shell(command: str, cwd):
    """`command` run by sh, with `torchlint` meaning this interpreter's torchlint; (exit code, stderr)."""
    completed = subprocess.run(
        ["sh", "-c", command.replace("torchlint", '"$0" -m torchlint'), sys.executable],
        cwd=cwd, capture_output=True, timeout=120,
    )
    return completed.returncode, completed.stderr.decode()


def assert_one_line_error(code: int, err: str, *words: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchlint: error: "), err
    for word in words:
        assert word in lines[0], err


def test_closed_standard_output_is_one_line(project):
    assert_one_line_error(*shell("torchlint check --no-cache bad.py >&-", project), "standard output is closed")


def test_closed_standard_output_does_not_matter_with_an_output_file(project):
    code, err = shell("torchlint check --no-cache bad.py -o report.txt >&-", project)
    assert (code, err) == (1, "")
    assert "TL303" in (project / "report.txt").read_text()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command", [
    "torchlint check --no-cache bad.py > /dev/full",
    "torchlint check --no-cache --output-format json bad.py > /dev/full",
    "torchlint rule TL303 > /dev/full",
    "torchlint rule --all > /dev/full",
])
def test_full_standard_output_is_one_line(project, command):
    assert_one_line_error(*shell(command, project), "No space left on device")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_output_file_on_a_full_disk_is_one_line(project):
    assert_one_line_error(*shell("torchlint check --no-cache bad.py -o /dev/full", project), "/dev/full", "No space left")


def test_output_file_is_replaced_whole_or_not_at_all(project):
    (project / "report.txt").write_text("the previous report\n")
    code, err = shell("torchlint check --no-cache --select NOSUCH bad.py -o report.txt", project)
    assert code == 2 and "Traceback" not in err
    assert (project / "report.txt").read_text() == "the previous report\n"
    code, _ = shell("torchlint check --no-cache bad.py -o report.txt", project)
    assert code == 1 and "TL303" in (project / "report.txt").read_text()
    assert [path.name for path in project.iterdir() if path.name.endswith(SUFFIX)] == []


def test_output_file_to_a_device_is_written_into_it(project):
    """`-o /dev/stdout` must write to standard output, not rename a file over the device."""
    completed = subprocess.run([sys.executable, "-m", "torchlint", "check", "--no-cache", "bad.py", "-o", "/dev/stdout"],
                               cwd=project, capture_output=True, timeout=120)
    assert completed.returncode == 1 and b"TL303" in completed.stdout, completed.stderr


def test_a_reader_that_stops_reading_is_no_error_message(project):
    """`torchlint check . | head -1`: more than a pipe holds (64 KiB), and the reader leaves after one line."""
    (project / "many.py").write_text("from torch.utils.data import DataLoader\n" + BAD_LINE * 3000)
    process = subprocess.Popen([sys.executable, "-m", "torchlint", "check", "--no-cache", "many.py"],
                               cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read().decode()
    process.wait(timeout=120)
    assert b"TL303" in first
    assert err == ""
    assert process.returncode == 2


# ---------------------------------------------------------------- --fix leftovers and hard links

FIXABLE = "import torch.nn.functional as F\nloss = F.cross_entropy(F.softmax(logits, dim=1), y)\n"
FIXED = "F.cross_entropy(logits, y)"


def _fixable_source(tmp_path):
    """A file `--fix --unsafe-fixes` changes (TL401 drops the softmax)."""
    path = tmp_path / "fixme.py"
    path.write_text(FIXABLE)
    return path


def _fix(project, *paths):
    completed = subprocess.run([sys.executable, "-m", "torchlint", "check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "TL401",
                                *map(str, paths)], cwd=project, capture_output=True, timeout=120)
    assert "Traceback" not in completed.stderr.decode(), completed.stderr.decode()
    return completed


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_leftover_temporary_files_are_not_linted_and_are_removed_by_the_next_fix(project):
    source = _fixable_source(project)
    old = 10 ** 9  # 2001: long before any run, so the age guard does not keep them
    dead = project / f".fixme.py.{_dead_pid()}.0a1b2c3d{SUFFIX}"
    unowned = project / f".fixme.py.k2j4l5m6{SUFFIX}"  # the names of earlier versions (mkstemp's)
    live = project / f".fixme.py.{os.getpid()}.0a1b2c3d{SUFFIX}"  # this test's process is alive
    for leftover in (dead, unowned, live):
        leftover.write_text("x = torch.load('half')")
        os.utime(leftover, (old, old))
    listed = subprocess.run([sys.executable, "-m", "torchlint", "check", "--show-files", "."],
                            cwd=project, capture_output=True, text=True, timeout=120).stdout.split()
    assert sorted(listed) == ["bad.py", "fixme.py"]
    _fix(project, source)
    assert FIXED in source.read_text()
    assert not dead.exists() and not unowned.exists()
    assert live.exists()


def test_fresh_temporary_files_of_gone_processes_are_kept(tmp_path):
    """A writer on another machine sharing the folder has a process id that means nothing here: age guards it."""
    fresh = tmp_path / f".fixme.py.{_dead_pid()}.0a1b2c3d{SUFFIX}"
    fresh.write_text("")
    remove_stale(str(tmp_path), "fixme.py")
    assert fresh.exists()


def test_fix_keeps_hard_links_mode_and_inode(project):
    source = _fixable_source(project)
    os.chmod(source, 0o640)
    link = project / "linked.py"
    os.link(source, link)
    inode = source.stat().st_ino
    _fix(project, source)
    assert FIXED in link.read_text()
    assert source.stat().st_ino == inode and source.stat().st_nlink == 2
    assert source.stat().st_mode & 0o777 == 0o640
    assert [path.name for path in project.iterdir() if path.name.endswith(SUFFIX)] == []


def test_fix_of_a_file_without_other_links_replaces_it_atomically(project):
    source = _fixable_source(project)
    os.chmod(source, 0o640)
    _fix(project, source)
    assert FIXED in source.read_text()
    assert source.stat().st_mode & 0o777 == 0o640


# ---------------------------------------------------------------- the flake8 plugin


def test_flake8_plugin_reports_what_torchlint_refuses_as_tl000(tmp_path, monkeypatch):
    """flake8 runs the plugin only on files Python parses (it reports the others as E999 itself); a file that
    Python parses and torchlint's parser refuses (here: a parse that exhausts the recursion limit) is TL000."""
    from torchlint.engine import parsing
    from torchlint.integrations import flake8 as plugin

    def refuse(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(parsing.TREES, "parse", refuse)
    (tmp_path / "torchlint.toml").write_text('select = ["ALL"]\n')
    found = list(plugin.TorchlintChecker(None, [BAD], str(tmp_path / "deep.py")).run())
    assert [(row, column, message.split(" ", 1)[0]) for row, column, message, _ in found] == [(1, 0, "TL000")]
    assert "nested too deeply to parse" in found[0][2]


# ---------------------------------------------------------------- Ctrl-C, --watch without its extra

# Ctrl-C arriving while the command's modules load, made deterministic: the import of the config module raises it.
INTERRUPTED_WHILE_LOADING = """
import builtins, runpy, sys
real_import = builtins.__import__
def interrupting_import(name, *args, **kwargs):
    if name == "torchlint.config":
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting_import
sys.argv = ["torchlint", "check", "."]
runpy.run_module("torchlint", run_name="__main__")
"""


def test_an_interrupt_while_loading_exits_130_without_a_traceback(project):
    completed = subprocess.run([sys.executable, "-c", INTERRUPTED_WHILE_LOADING], cwd=project,
                               capture_output=True, text=True, timeout=120)
    assert (completed.returncode, completed.stderr) == (130, "")


def test_the_console_script_entry_point_is_the_guarded_one():
    from importlib.metadata import entry_points

    [script] = [entry for entry in entry_points(group="console_scripts") if entry.name == "torchlint"]
    assert script.value == "torchlint.__main__:run"


WATCH_WITHOUT_WATCHFILES = """
import sys
sys.modules["watchfiles"] = None  # as if the `watch` extra were not installed
from torchlint.cli import main
sys.exit(main(["check", "--watch", "."]))
"""


def test_watch_without_its_extra_is_one_line(project):
    completed = subprocess.run([sys.executable, "-c", WATCH_WITHOUT_WATCHFILES], cwd=project,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert completed.stderr == "torchlint: error: --watch needs watchfiles: pip install 'torchlint[watch]'\n"


@pytest.mark.parametrize("fix", [[], ["--fix"]])
def test_closed_standard_input_is_one_line(project, fix):
    assert_one_line_error(*shell(f"torchlint check --no-cache {' '.join(fix)} - <&-", project), "standard input, which is closed")
