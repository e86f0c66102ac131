"""The project's pages stand alone and hold only install and set-up lines that were run.

Every link in README.md and docs/ resolves inside the repository; every install line
(`pip install ...`) and pre-commit `rev:` is one that docs/ci.md's table says how it was
checked, and a `rev:` names a commit or tag this repository has.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The pages whose set-up lines this project answers for (the others document their own tools' set-up).
INSTALL_PAGES = [ROOT / "README.md", ROOT / "docs" / "ci.md", ROOT / "docs" / "configuration.md"]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_INSTALL = re.compile(r"pip install [^`\n|]*")
_REV = re.compile(r"^\s*rev:\s*(\S+)", re.MULTILINE)


def _checked_table() -> str:
    ci = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    return ci.split("## How the install lines were checked", 1)[1]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_resolves_inside_the_repository(page):
    text = page.read_text(encoding="utf-8")
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name} links {target}, outside the repository"
        assert path.exists(), f"{page.name} links {target}, which does not exist"
    assert "shared/spec" not in text and "observed-torch-2.13.md" not in text


@pytest.mark.parametrize("page", INSTALL_PAGES, ids=lambda page: page.name)
def test_every_install_line_is_one_that_was_checked(page):
    table = _checked_table()
    text = page.read_text(encoding="utf-8")
    if page.name == "ci.md":
        text = text.split("## How the install lines were checked", 1)[0]
    for line in _INSTALL.findall(text):
        command = line.strip().rstrip("`").strip()
        packages = command.split("&&")[0].strip()
        assert packages in table or command in table, f"{page.name}: `{command}` is not in docs/ci.md's table of checked lines"


def test_the_ci_line_is_what_ci_runs():
    ci_script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install torch==2.13.0 && pip install -e ".[dev,verify]" && python -m pytest -q' in ci_script


@pytest.mark.parametrize("page", INSTALL_PAGES, ids=lambda page: page.name)
def test_every_pre_commit_rev_is_a_commit_or_tag_of_this_repository(page):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for rev in _REV.findall(page.read_text(encoding="utf-8")):
        found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True)
        assert found.returncode == 0, f"{page.name}: rev {rev} is no commit or tag of this repository"


def test_pip_builds_torchlint_from_a_git_url_of_this_repository(tmp_path):
    """What `pip install "git+<URL>"` does, offline: clone by git, build with setuptools, install (no dependencies)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    target = tmp_path / "site"
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), f"git+{Path(ROOT).as_uri()}"],
        capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    assert (target / "torchlint" / "cli.py").is_file()
    assert list(target.glob("torchlint-*.dist-info/entry_points.txt"))
