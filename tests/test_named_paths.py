"""Paths named on the command line are linted, files and folders alike, unless --force-exclude: excludes apply to
what a walk finds below a named folder, never to the folder's own path (ruff's behaviour)."""

import subprocess

import pytest

from torchlint.cli import main

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("build/pkg/train.py", "build/pkg/build/copy.py", "build/pkg/__pycache__/stale.py", "src/build/gen.py", "src/ok.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(BAD)
    return tmp_path


def listed(capsys, *args):
    code = main(["check", "--no-cache", "--show-files", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out.splitlines()


def test_a_named_folder_under_an_excluded_name_is_linted(project, capsys):
    code = main(["check", "--no-cache", "--output-format", "concise", "build/pkg"])
    out, _ = capsys.readouterr()
    assert code == 1 and out.startswith("build/pkg/train.py:2:"), out


@pytest.mark.parametrize("named", ["build/pkg", "build/pkg/", "./build/pkg"])
def test_excludes_still_apply_below_the_named_folder(project, capsys, named):
    # `build` and `__pycache__` below the named folder are excluded as anywhere else; the folder's own `build` is not.
    assert listed(capsys, named) == ["build/pkg/train.py"]


def test_a_named_excluded_folder_is_linted(project, capsys):
    assert listed(capsys, "src/build") == ["src/build/gen.py"]
    assert listed(capsys, ".") == ["src/ok.py"]


def test_force_exclude_applies_excludes_to_named_paths_and_their_ancestors(project, capsys):
    assert listed(capsys, "--force-exclude", "build/pkg", "build/pkg/train.py", "src") == ["src/ok.py"]


def test_a_gitignored_ancestor_does_not_hide_a_named_folder(project, capsys):
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".gitignore").write_text("src/\n*.tmp.py\n")
    (project / "src" / "scratch.tmp.py").write_text(BAD)
    assert listed(capsys, "src") == ["src/ok.py"]
    assert listed(capsys, ".") == []
