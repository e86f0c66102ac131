"""Multi-file project fixtures: each folder under fixtures/projects/ is linted as a user would lint it, and every
file's findings must be exactly its `# expect: CODE:COLUMN` comments.

What a file imports from the project is followed into the other files (torchlint/analysis/project.py), so the
folders are linted from disk with their real paths, whole and one file at a time (as pre-commit and editors do).
"""

from pathlib import Path

import pytest

from conftest import FIXTURES, make_config
from torchlint.engine.expectations import actual_findings, expected_findings
from torchlint.engine.runner import lint_file

PROJECTS = FIXTURES / "projects"
PROJECT_FILES = sorted(path for path in PROJECTS.rglob("*.py") if not path.parent.name.startswith("settings_"))


@pytest.mark.parametrize("path", PROJECT_FILES, ids=lambda path: str(path.relative_to(PROJECTS)))
def test_project_file_findings_are_exactly_the_expected_ones(path: Path):
    result = lint_file(str(path), make_config(select=["ALL"]))
    assert actual_findings(result.findings) == expected_findings(path.read_text())


def test_the_cli_finds_the_same_across_the_folder(tmp_path, monkeypatch):
    from torchlint.cli import main

    folder = PROJECTS / "model_in_another_file"
    monkeypatch.chdir(folder)
    assert main(["check", "--no-cache", "--select", "TL401", "--output-format", "concise", "."]) == 1
