"""Faults around the linted files: each has one exact outcome, and no file is ever left half-written.

The tests run as root, where permissions stop nothing: unreadable files and folders
are simulated by making `open` and `os.scandir` refuse them, a full disk by making
the write raise ENOSPC. The CLI runs in this process, so a traceback fails the test.
"""

import errno
import json
import os
import re
import stat
import subprocess
import sys
import threading

import pytest

from torchlint import atomic, cli
from torchlint.cli import main
from torchlint.fixes import files as fix_files
from torchlint.rules import rules_by_code

FIXABLE = "import torch\nfor param in model.parameters():\n    param.require_grad = False\n"
FIXED = FIXABLE.replace("require_grad", "requires_grad")
UNFIXABLE = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"
TL603 = f"3:5: TL603 [*] {rules_by_code()['TL603'].message}"
TL303 = f"2:25: TL303 {rules_by_code()['TL303'].message}"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.torchlint]\n")
    return tmp_path


def check(capsys, *args):
    code = main(["check", "--quiet", "--output-format", "concise", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def refuse(monkeypatch, function_owner, name: str, refused: str, error: int = errno.EACCES):
    """Make `function_owner.name(path, ...)` raise for paths ending in `refused`, as a permission or disk problem would."""
    real = getattr(function_owner, name)

    def refusing(path, *args, **kwargs):
        # `open` also takes file descriptors (multiprocessing's workers reopen stdin by one).
        if isinstance(path, (str, bytes, os.PathLike)) and os.fsdecode(path).endswith(refused):
            raise OSError(error, os.strerror(error), os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(function_owner, name, refusing)


def leftovers(folder):
    """Temporary files a write may leave behind."""
    return sorted(path.name for path in folder.rglob("*") if "torchlint-tmp" in path.name)


# ---------------------------------------------------------------- unreadable input


def test_an_unreadable_file_is_its_tl000_and_the_others_run(project, capsys, monkeypatch):
    (project / "secret.py").write_text(UNFIXABLE)
    (project / "other.py").write_text(UNFIXABLE)
    refuse(monkeypatch, os, "open", "secret.py")
    expected = f"other.py:{TL303}\nsecret.py:1:1: TL000 cannot read file: Permission denied\n"
    assert check(capsys, ".") == (1, expected, "")


def test_an_unreadable_file_under_fix_is_reported_and_untouched(project, capsys, monkeypatch):
    (project / "secret.py").write_text(FIXABLE)
    (project / "other.py").write_text(FIXABLE)
    refuse(monkeypatch, os, "open", "secret.py")
    code, out, err = check(capsys, "--fix", ".")
    assert (code, out, err) == (1, "secret.py:1:1: TL000 cannot read file: Permission denied\n", "")
    assert (project / "secret.py").read_text() == FIXABLE
    assert (project / "other.py").read_text() == FIXED


def test_an_unreadable_folder_is_reported_not_skipped_silently(project, capsys, monkeypatch):
    (project / "locked").mkdir()
    (project / "locked" / "model.py").write_text(UNFIXABLE)
    (project / "other.py").write_text(UNFIXABLE)
    refuse(monkeypatch, os, "scandir", "locked")
    expected = f"locked:1:1: TL000 cannot read folder: Permission denied\nother.py:{TL303}\n"
    assert check(capsys, ".") == (1, expected, "")


def test_an_unreadable_folder_does_not_stop_the_walk(project, capsys, monkeypatch):
    for folder in ("a", "locked", "z"):
        (project / folder).mkdir()
        (project / folder / "m.py").write_text(UNFIXABLE)
    refuse(monkeypatch, os, "scandir", "locked")
    code, out, err = check(capsys, ".")
    assert (code, err) == (1, "")
    assert [line for line in out.splitlines() if "TL303" in line] == [f"a/m.py:{TL303}", f"z/m.py:{TL303}"]


def test_an_unreadable_folder_named_twice_is_reported_once_and_never_cached(project, capsys, monkeypatch):
    (project / "locked").mkdir()
    (project / "other.py").write_text(UNFIXABLE)
    refuse(monkeypatch, os, "scandir", "locked")
    expected = f"locked:1:1: TL000 cannot read folder: Permission denied\nother.py:{TL303}\n"
    # The second run answers other.py from the cache; the folder is listed again, and refused again.
    assert check(capsys, "locked", ".", "locked/") == (1, expected, "")
    assert check(capsys, "locked", ".", "locked/") == (1, expected, "")
    assert check(capsys, "--ignore", "TL000", ".") == (1, f"other.py:{TL303}\n", "")


def test_an_unreadable_folder_under_fix_and_diff(project, capsys, monkeypatch):
    (project / "locked").mkdir()
    (project / "locked" / "model.py").write_text(FIXABLE)
    (project / "other.py").write_text(FIXABLE)
    refuse(monkeypatch, os, "scandir", "locked")
    folder = "locked:1:1: TL000 cannot read folder: Permission denied\n"
    assert check(capsys, "--diff", "--unsafe-fixes", "locked") == (0, "", "")
    assert check(capsys, "--fix", ".") == (1, folder, "")
    assert (project / "other.py").read_text() == FIXED
    assert (project / "locked" / "model.py").read_text() == FIXABLE


@pytest.mark.parametrize("output_format", ["full", "json", "sarif", "github"])
def test_an_unreadable_folder_in_every_output_format(project, capsys, monkeypatch, output_format):
    (project / "locked").mkdir()
    refuse(monkeypatch, os, "scandir", "locked")
    code = main(["check", "--quiet", "--output-format", output_format, "."])
    out, err = capsys.readouterr()
    assert (code, err) == (1, "")
    message = "cannot read folder: Permission denied"
    if output_format == "full":
        assert out == f"locked:1:1: TL000 {message}\n"
    elif output_format == "json":
        [finding] = json.loads(out)
        assert (finding["filename"], finding["code"], finding["message"], finding["location"]) == ("locked", "TL000", message, {"row": 1, "column": 1})
    elif output_format == "sarif":
        [result] = json.loads(out)["runs"][0]["results"]
        assert (result["ruleId"], result["message"]["text"]) == ("TL000", message)
        assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "locked"
    else:
        assert out == f"::warning file=locked,line=1,col=1,endLine=1,endColumn=1,title=TL000::{message}\n"


def test_discover_hands_back_the_folders_it_cannot_list(tmp_path, monkeypatch):
    from conftest import make_config
    from torchlint.discovery import UnreadableFolder, discover

    for folder in ("a", "a/locked", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text(UNFIXABLE)
    refuse(monkeypatch, os, "scandir", "locked")
    config = make_config(select=["ALL"])
    unreadable = []
    found = [name for _, name in discover([str(tmp_path), str(tmp_path / "a")], config, unreadable=unreadable)]
    assert found == [str(tmp_path / "a" / "m.py"), str(tmp_path / "b" / "m.py")]
    assert unreadable == [UnreadableFolder(str(tmp_path / "a" / "locked"), str(tmp_path / "a" / "locked"), "Permission denied")]
    # Without a list to fill, the walk still goes on (callers that only want files, such as the benchmarks).
    assert [name for _, name in discover([str(tmp_path)], config)] == found


def test_dangling_symlinks(project, capsys):
    (project / "gone.py").symlink_to(project / "missing.py")
    (project / "pkg").mkdir()
    (project / "pkg" / "gone.py").symlink_to(project / "missing.py")
    (project / "pkg" / "m.py").write_text(UNFIXABLE)
    # Named, it is an error of that file; met in a walk, it is not a Python file at all (as for ruff and flake8).
    assert check(capsys, "gone.py", "pkg") == (1, f"gone.py:1:1: TL000 cannot read file: No such file or directory\npkg/m.py:{TL303}\n", "")
    assert check(capsys, "--fix", "gone.py") == (1, "gone.py:1:1: TL000 cannot read file: No such file or directory\n", "")
    assert not (project / "missing.py").exists()


def test_symlink_loops(project, capsys):
    (project / "loop").mkdir()
    (project / "loop" / "back").symlink_to(project)
    (project / "one.py").symlink_to(project / "two.py")
    (project / "two.py").symlink_to(project / "one.py")
    (project / "m.py").write_text(UNFIXABLE)
    assert check(capsys, ".") == (1, f"m.py:{TL303}\n", "")
    loop = "one.py:1:1: TL000 cannot read file: Too many levels of symbolic links\n"
    assert check(capsys, "one.py") == (1, loop, "")
    assert check(capsys, "--fix", "one.py") == (1, loop, "")


def test_a_fifo_named_on_the_command_line_is_refused_not_waited_on(project):
    os.mkfifo(project / "pipe.py")
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "torchlint", "check", "--quiet", "--output-format", "concise", "pipe.py"],
            capture_output=True, cwd=project, timeout=15,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("torchlint waited on the FIFO")
    assert (completed.returncode, completed.stdout, completed.stderr) == (1, b"pipe.py:1:1: TL000 cannot read file: not a regular file\n", b"")


def test_a_fifo_in_a_folder_is_not_a_python_file(project, capsys):
    os.mkfifo(project / "pipe.py")
    (project / "m.py").write_text(UNFIXABLE)
    assert check(capsys, ".") == (1, f"m.py:{TL303}\n", "")


# ---------------------------------------------------------------- files that change under the run


def _after_discovery(monkeypatch, action):
    """Run `action` once the files are found and before any is read: another program acting mid-run."""
    real = cli.discover

    def discover(*args, **kwargs):
        found = list(real(*args, **kwargs))
        action()
        return iter(found)

    monkeypatch.setattr(cli, "discover", discover)


def test_a_file_deleted_during_the_run(project, capsys, monkeypatch):
    (project / "gone.py").write_text(UNFIXABLE)
    (project / "kept.py").write_text(UNFIXABLE)
    _after_discovery(monkeypatch, (project / "gone.py").unlink)
    expected = f"gone.py:1:1: TL000 cannot read file: No such file or directory\nkept.py:{TL303}\n"
    assert check(capsys, ".") == (1, expected, "")


def test_a_file_deleted_between_its_fix_and_its_write_stays_deleted(project, capsys, monkeypatch):
    (project / "gone.py").write_text(FIXABLE)
    (project / "kept.py").write_text(FIXABLE)
    real_fix_file = fix_files.fix_file

    def fix_then_delete(path, *args, **kwargs):
        fixed = real_fix_file(path, *args, **kwargs)
        if path.endswith("gone.py"):
            os.unlink(path)
        return fixed

    monkeypatch.setattr("torchlint.fixes.fix_file", fix_then_delete)
    code, out, err = check(capsys, "--fix", ".")
    assert (code, out, err) == (1, f"gone.py:{TL603}\n", "torchlint: gone.py: cannot write the fixes: No such file or directory\n")
    assert sorted(path.name for path in project.iterdir()) == ["kept.py", "pyproject.toml"]
    assert (project / "kept.py").read_text() == FIXED


def test_a_file_rewritten_between_its_fix_and_its_write_keeps_the_new_text(project, capsys, monkeypatch):
    (project / "edited.py").write_text(FIXABLE)
    edit = FIXABLE + "# saved by an editor meanwhile\n"
    real_fix_file = fix_files.fix_file

    def fix_then_edit(path, *args, **kwargs):
        fixed = real_fix_file(path, *args, **kwargs)
        (project / "edited.py").write_text(edit)
        return fixed

    monkeypatch.setattr("torchlint.fixes.fix_file", fix_then_edit)
    code, out, err = check(capsys, "--fix", "edited.py")
    assert (code, out) == (1, f"edited.py:{TL603}\n")
    assert err == "torchlint: edited.py: the file changed on disk during the run; its fixes were not written (run again)\n"
    assert (project / "edited.py").read_text() == edit
    assert leftovers(project) == []


# ---------------------------------------------------------------- writing fixes


def test_a_read_only_file_is_not_written(project, capsys):
    path = project / "frozen.py"
    path.write_text(FIXABLE)
    path.chmod(0o444)
    code, out, err = check(capsys, "--fix", "frozen.py")
    assert (code, out, err) == (1, f"frozen.py:{TL603}\n", "torchlint: frozen.py: the file is read-only; its fixes were not written\n")
    assert path.read_text() == FIXABLE and stat.S_IMODE(path.stat().st_mode) == 0o444


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_a_full_disk_leaves_the_file_whole_and_no_temporary_file(project, capsys, monkeypatch, where):
    (project / "a.py").write_text(FIXABLE)
    (project / "b.py").write_text(FIXABLE)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    class HalfWrites:
        """A file object whose data stops halfway: what a disk filling up mid-write does."""

        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            self.handle.flush()
            raise full

        def __getattr__(self, name):
            return getattr(self.handle, name)

    real_fdopen, real_fsync, real_replace = os.fdopen, os.fsync, os.replace
    if where == "write":
        monkeypatch.setattr(fix_files.os, "fdopen", lambda *args, **kwargs: HalfWrites(real_fdopen(*args, **kwargs)))
    elif where == "fsync":
        monkeypatch.setattr(fix_files.os, "fsync", lambda descriptor: (_ for _ in ()).throw(full))
    else:
        monkeypatch.setattr(fix_files.os, "replace", lambda *args: (_ for _ in ()).throw(full))
    code, out, err = check(capsys, "--fix", "a.py", "b.py")
    assert (code, out) == (1, f"a.py:{TL603}\nb.py:{TL603}\n")
    assert err == "".join(f"torchlint: {name}: cannot write the fixes: No space left on device\n" for name in ("a.py", "b.py"))
    assert (project / "a.py").read_text() == (project / "b.py").read_text() == FIXABLE
    assert leftovers(project) == []
    monkeypatch.setattr(fix_files.os, "fdopen", real_fdopen)
    monkeypatch.setattr(fix_files.os, "fsync", real_fsync)
    monkeypatch.setattr(fix_files.os, "replace", real_replace)
    assert check(capsys, "--fix", "a.py", "b.py") == (0, "", "")
    assert (project / "a.py").read_text() == FIXED


def test_a_folder_where_no_temporary_file_can_be_made(project, capsys, monkeypatch):
    (project / "a.py").write_text(FIXABLE)

    real_open = os.open

    def no_room(path, *args, **kwargs):
        if str(path).endswith(atomic.SUFFIX):  # the temporary file torchlint/atomic.py writes first
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(project))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(atomic.os, "open", no_room)
    code, out, err = check(capsys, "--fix", "a.py")
    assert (code, out, err) == (1, f"a.py:{TL603}\n", "torchlint: a.py: cannot write the fixes: Permission denied\n")
    assert (project / "a.py").read_text() == FIXABLE


def test_an_interrupted_write_leaves_the_file_whole(project, capsys, monkeypatch):
    """Ctrl-C during the write: the original stays, the temporary file goes, and the run stops."""
    (project / "a.py").write_text(FIXABLE)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(fix_files.os, "fsync", interrupted)
    assert main(["check", "--quiet", "--fix", "a.py"]) == 130
    assert (project / "a.py").read_text() == FIXABLE
    assert leftovers(project) == []


# ---------------------------------------------------------------- big and deep input


def test_a_ten_megabyte_generated_file(project, capsys):
    # The shape of real generated modules (protobuf descriptors, embedded data): a few statements, huge literals.
    blob = "\\x00\\x7f" * 1_000_000
    table = "".join(f"{index:08x} {index * 0.001:.6f}\n" for index in range(200_000))
    text = f"import torch\nDESCRIPTOR = b'{blob}'\nTABLE = \"\"\"\n{table}\"\"\"\n" + FIXABLE.split("\n", 1)[1]
    assert len(text) > 10_000_000
    (project / "generated.py").write_text(text)
    assert check(capsys, "generated.py") == (1, f"generated.py:200006:5: {TL603.split(': ', 1)[1]}\n", "")
    assert check(capsys, "--fix", "generated.py") == (0, "", "")
    assert (project / "generated.py").read_text() == text.replace("require_grad", "requires_grad")


DEEP = {
    "nested calls": ("x = " + "f(" * 1000 + "1" + ")" * 1000, "1:406: TL000 SyntaxError: too many nested parentheses"),
    "nested lists": ("x = " + "[" * 1000 + "]" * 1000, "1:205: TL000 SyntaxError: too many nested parentheses"),
    "nested blocks": ("".join(" " * depth + "if x:\n" for depth in range(1000)) + " " * 1000 + "pass", "101:1: TL000 SyntaxError: too many levels of indentation"),
    "unary minus": ("x = " + "-" * 1000 + "1", None),
    "chained attribute": ("x = y" + ".a" * 1000, None),
    "chained moves": ("import torch\nx = torch.zeros(2)" + ".to(device)" * 1000, None),
    "conditional expression": ("x = " + "a if b else " * 1000 + "c", None),
    "nested lambdas": ("f = " + "lambda: " * 1000 + "0", None),
    "sum of 1,000 terms": ("import torch\nx = torch.log(1 + p)" + " + p" * 998 + " + torch.log(1 + p)", None),
    "99 nested functions": ("".join(" " * depth + "def f():\n" for depth in range(99)) + " " * 99 + "pass", None),
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deeply_nested_code(project, capsys, name):
    text, refused = DEEP[name]
    (project / "deep.py").write_text(text + "\n")
    (project / "other.py").write_text(UNFIXABLE)
    for args in ([], ["--fix", "--unsafe-fixes"]):
        code, out, err = check(capsys, "--select", "ALL", *args, "deep.py", "other.py")
        lines = out.splitlines()
        assert err == "" and code == 1 and lines[-1] == f"other.py:{TL303}", (args, out, err)
        if refused:
            assert lines == [f"deep.py:{refused}", f"other.py:{TL303}"]
        assert not any("internal error" in line or "nested too deeply" in line for line in lines), lines
    if not refused:
        compile((project / "deep.py").read_text(), "deep.py", "exec")


# ---------------------------------------------------------------- the cache


def _cache_wired(project, capsys) -> bool:
    (project / "probe.py").write_text(UNFIXABLE)
    check(capsys, "probe.py")
    (project / "probe.py").unlink()
    return (project / ".torchlint_cache").is_dir()


@pytest.fixture
def cached_project(project, capsys):
    if not _cache_wired(project, capsys):
        pytest.skip("the cache (torchlint/cache.py) is not wired into the CLI yet: cli.collect never calls Cache.load/save")
    (project / "a.py").write_text(UNFIXABLE)
    (project / "b.py").write_text(FIXABLE)
    return project


EXPECTED = f"a.py:{TL303}\nb.py:{TL603}\n"


def test_a_corrupt_cache_is_ignored(cached_project, capsys):
    assert check(capsys, ".") == (1, EXPECTED, "")
    entries = [path for path in (cached_project / ".torchlint_cache").rglob("*") if path.is_file() and path.name != ".gitignore"]
    assert entries
    for garbage in (b"", b"\x00" * 64, b"torchlint-cache-1\n" + b"\xff" * 100):
        for entry in entries:
            entry.write_bytes(garbage)
        assert check(capsys, ".") == (1, EXPECTED, "")


def test_a_cache_that_cannot_be_written_is_ignored(cached_project, capsys, monkeypatch):
    import shutil

    shutil.rmtree(cached_project / ".torchlint_cache")
    (cached_project / ".torchlint_cache").write_text("a file where the cache folder should be")
    assert check(capsys, ".") == (1, EXPECTED, "")
    (cached_project / ".torchlint_cache").unlink()
    refuse(monkeypatch, os, "replace", ".bin", errno.ENOSPC)
    assert check(capsys, ".") == (1, EXPECTED, "")
    assert check(capsys, "--fix", ".") == (1, f"a.py:{TL303}\n", "")


# ---------------------------------------------------------------- two fixers at once


def test_two_processes_fixing_the_same_tree_at_once(tmp_path):
    """Each file ends fully fixed, never half-written, and no temporary file is left behind."""
    (tmp_path / "pyproject.toml").write_text("[tool.torchlint]\n")
    for index in range(40):
        folder = tmp_path / f"pkg{index % 4}"
        folder.mkdir(exist_ok=True)
        (folder / f"m{index}.py").write_text(FIXABLE * (1 + index % 3) + f"value = {index}\n")
    command = [sys.executable, "-m", "torchlint", "check", "--quiet", "--no-cache", "--fix", "--output-format", "concise", "."]
    start = threading.Barrier(2)

    def fixer(outcomes):
        start.wait()
        outcomes.append(subprocess.run(command, capture_output=True, cwd=tmp_path, timeout=300))

    outcomes = []
    threads = [threading.Thread(target=fixer, args=(outcomes,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for completed in outcomes:
        # A file the other process fixed first is left alone and its findings, as read, are reported: exit 1.
        skipped = re.findall(r"^torchlint: (.+): the file changed on disk during the run; its fixes were not written \(run again\)$",
                             completed.stderr.decode(), re.MULTILINE)
        assert len(skipped) == completed.stderr.decode().count("\n"), completed.stderr
        assert completed.returncode == (1 if skipped else 0)
        assert sorted({line.split(":")[0] for line in completed.stdout.decode().splitlines()}) == sorted(skipped)
    for index in range(40):
        text = (tmp_path / f"pkg{index % 4}" / f"m{index}.py").read_text()
        assert text == FIXED * (1 + index % 3) + f"value = {index}\n"
    assert leftovers(tmp_path) == []
