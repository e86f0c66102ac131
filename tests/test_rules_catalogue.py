"""Each rule's own examples are tests, and its docs page is generated from the rule."""

import pytest

from conftest import ROOT, lint
from torchlint.engine.expectations import actual_findings, expected_findings
from torchlint.rules import all_rules

RULES = all_rules()


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_example_produces_exactly_the_expected_findings(rule):
    assert rule.example, f"{rule.code} has no example"
    assert actual_findings(lint(rule.example)) == expected_findings(rule.example)
    assert any(code == rule.code for _, _, code in expected_findings(rule.example))


@pytest.mark.parametrize("rule", [rule for rule in RULES if rule.use_instead], ids=lambda rule: rule.code)
def test_use_instead_is_clean_for_the_rule(rule):
    assert [finding for finding in lint(rule.use_instead) if finding.code == rule.code] == []


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_rule_has_the_documented_shape(rule):
    import re

    assert re.fullmatch(r"TL\d{3}", rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    sections = rule.sections()
    for heading in ("What it does", "Why is this bad?", "Example", "Fix safety"):
        assert heading in sections, f"{rule.code} misses '{heading}'"


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_docs_page_is_generated_from_the_rule(rule):
    page = ROOT / "docs" / "rules" / f"{rule.code}.md"
    assert page.read_text(encoding="utf-8") == rule.documentation(), "run `python -m torchlint.docs` to regenerate"


def test_codes_and_names_are_unique():
    assert len({rule.code for rule in RULES}) == len(RULES)
    assert len({rule.name for rule in RULES}) == len(RULES)


def test_readme_lists_every_rule():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for rule in RULES:
        assert f"[{rule.code}](docs/rules/{rule.code}.md)" in readme


def test_the_catalogue_is_generated_from_the_rules():
    # Configuration reads torchlint/catalogue.py instead of importing the rules: it must say what they say.
    from torchlint.catalogue import RULES
    from torchlint.docs import catalogue

    assert [(entry.code, entry.name, entry.opt_in) for entry in RULES] == [(rule.code, rule.name, rule.opt_in) for rule in all_rules()]
    assert (ROOT / "torchlint" / "catalogue.py").read_text(encoding="utf-8") == catalogue()
