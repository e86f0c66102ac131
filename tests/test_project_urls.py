"""Where reports point: every URL comes from `torchlint.PROJECT_URLS`, which says what `[project.urls]` in
pyproject.toml says, every rule URL names a page that exists in docs/rules/, and every anchor `torchlint doctor`
links to is a heading of docs/health.md."""

import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from torchlint import PROJECT_URLS
from torchlint.finding import Finding, Location, documentation_url, project_url
from torchlint.health.checks import CHECKS, check_url

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

URLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_package_says_what_pyproject_says():
    # The package writes the URLs down itself (reading them from its installed metadata cost every JSON run 20 ms):
    # a URL changed in one place and not in the other fails here.
    assert PROJECT_URLS == URLS
    assert project_url("Documentation") == URLS["Documentation"].rstrip("/")
    assert project_url("Repository") == URLS["Repository"].rstrip("/")


def test_a_finding_points_at_its_rule_page_under_the_documentation():
    finding = Finding("TL303", "persistent-workers-without-workers", "m", "a.py", Location(1, 1), Location(1, 2))
    assert finding.url == URLS["Documentation"].rstrip("/") + "/rules/TL303.md"
    from torchlint.finding import DOCS_URL

    assert DOCS_URL.format(code="TL303") == finding.url


def test_every_rule_url_names_a_page_in_docs():
    from torchlint.rules import all_rules

    prefix = documentation_url("")
    for rule in all_rules():
        page = Finding(rule.code, rule.name, "m", "a.py", Location(1, 1), Location(1, 2)).url[len(prefix):]
        assert (ROOT / "docs" / page).is_file(), page


@pytest.mark.parametrize("code", sorted(CHECKS))
def test_every_doctor_anchor_is_a_heading_of_health_md(code):
    url = check_url(code)
    page, _, anchor = url[len(documentation_url("")):].partition("#")
    headings = re.findall(r"^#{1,6} (.+)$", (ROOT / "docs" / page).read_text(), flags=re.MULTILINE)
    assert anchor in {github_anchor(heading) for heading in headings}, url


def test_no_url_of_the_project_is_written_anywhere_else_in_the_package():
    home = URLS["Repository"].split("://", 1)[1]
    found = [str(path) for path in Path(ROOT / "torchlint").rglob("*.py") if home in path.read_text(encoding="utf-8")]
    assert found == [str(ROOT / "torchlint" / "__init__.py")]
