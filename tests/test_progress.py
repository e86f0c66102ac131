"""A long run shows a progress line on standard error when it is a terminal (a pseudo-terminal here), overwritten in
place and blanked out at the end; never on a pipe, never with a JSON format, never before `progress.DELAY`."""

import io
import os
import sys

import pytest

from torchlint import progress
from torchlint.cli import main

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for index in range(3):
        (tmp_path / f"m{index}.py").write_text(BAD)
    return tmp_path


@pytest.fixture
def terminal(monkeypatch):
    """Standard error on a pseudo-terminal; yields a function that reads what was written to it. Standard error is
    replaced when the test is called: capsys replaces it again after the fixtures are set up."""
    leader, follower = os.openpty()
    stream = open(follower, "w", encoding="utf-8", closefd=True)
    os.set_blocking(leader, False)

    def written() -> str:
        stream.flush()
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode().replace("\r\n", "\n")

    written.stream = stream
    yield written
    stream.close()
    os.close(leader)


def check(capsys, *args, stderr=None):
    if stderr is not None:
        sys.stderr = stderr  # restored by capsys at the end of the test
    code = main(["check", "--no-cache", "-j", "1", *args])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("args, verb", [(["--output-format", "concise"], "checking"), (["--fix", "--unsafe-fixes"], "fixing")])
def test_a_slow_run_shows_a_progress_line_and_clears_it(project, capsys, terminal, monkeypatch, args, verb):
    monkeypatch.setattr(progress, "DELAY", 0)  # every run is "slow": the line must not depend on timing
    code, out = check(capsys, *args, ".", stderr=terminal.stream)
    shown = terminal()
    assert code == 1 and "Found 3 findings" in out
    assert shown.startswith(f"\rtorchlint: {verb} ") and " 3 files... " in shown
    width = len(shown.split("\r")[1])
    assert shown.endswith("\r" + " " * width + "\r")  # blanked out, the cursor back at the line's start
    assert "\n" not in shown


def test_a_quick_run_shows_nothing(project, capsys, terminal, monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 3600)
    check(capsys, "--output-format", "concise", ".", stderr=terminal.stream)
    assert terminal() == ""


@pytest.mark.parametrize("args", [["--output-format", "json"], ["--output-format", "sarif"], ["--quiet"], ["--statistics"]])
def test_nothing_with_a_machine_format_or_quiet(project, capsys, terminal, monkeypatch, args):
    monkeypatch.setattr(progress, "DELAY", 0)
    check(capsys, *args, ".", stderr=terminal.stream)
    assert terminal() == ""


def test_nothing_on_a_pipe(project, capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0)
    piped = io.StringIO()
    check(capsys, "--output-format", "concise", ".", stderr=piped)
    assert piped.getvalue() == ""
