"""Every fixture file states its own findings with `# expect: CODE:COLUMN` comments.

A fixture may set config keys on its first lines: `# fixture-config: torch-version = "2.1"`.
"""

import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, make_config
from torchlint.engine.expectations import actual_findings, expected_findings
from torchlint.engine.runner import lint_file

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

# Project fixtures import each other, so tests/test_projects.py lints them with their real paths.
FIXTURE_FILES = sorted(path for path in FIXTURES.rglob("*.py") if "examples" not in path.parts and "projects" not in path.parts)


def fixture_config(text: str):
    lines = [line.split("fixture-config:", 1)[1] for line in text.splitlines() if line.startswith("# fixture-config:")]
    table = tomllib.loads("\n".join(lines))
    table.setdefault("select", ["ALL"])
    return make_config(**table)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda path: str(path.relative_to(FIXTURES)))
def test_fixture_findings_are_exactly_the_expected_ones(path: Path):
    text = path.read_bytes().decode("utf-8", errors="replace")
    result = lint_file(str(path), fixture_config(text), filename=path.name)
    assert actual_findings(result.findings) == expected_findings(text)


def test_there_are_fixtures_for_every_rule():
    from torchlint.rules import all_rules

    covered = {code for path in FIXTURE_FILES for _, _, code in expected_findings(path.read_text(errors="replace"))}
    missing = [rule.code for rule in all_rules() if rule.code not in covered]
    assert missing == []
