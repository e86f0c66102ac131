"""The prefilter: a file is left unparsed only when no selected rule could report in it."""

import re

import pytest

from conftest import FIXTURES, lint
from torchlint.engine import prefilter
from torchlint.engine.expectations import expected_findings
from torchlint.rules import all_rules

DEFAULT = frozenset(rule.code for rule in all_rules() if rule.code in prefilter.TRIGGERS) | {"TL000"}
PLAIN = "import json\n\n\ndef load(path):\n    with open(path) as handle:\n        return json.load(handle)\n"


def test_a_file_without_any_trigger_is_skipped():
    assert prefilter.skippable(PLAIN, DEFAULT)


@pytest.mark.parametrize("text", [
    "import torch as T\n",
    "from torchvision import models\n",
    "x = batch.cuda()\n",
    "for x in data:\n    loss.backward()\n    opt.step()\n",
    "lr_Scheduler.step()\n",  # scheduler receivers are matched whatever their case
])
def test_a_file_with_a_trigger_is_parsed(text):
    assert not prefilter.skippable(text, DEFAULT)


def test_a_file_python_cannot_compile_is_parsed_so_the_engine_reports_tl000():
    broken = "def f(:\n    pass\n"
    assert not prefilter.skippable(broken, DEFAULT)
    assert [finding.code for finding in lint(broken)] == ["TL000"]


def test_without_tl000_a_broken_file_without_triggers_is_skipped():
    assert prefilter.skippable("def f(:\n", DEFAULT - {"TL000"})


def test_a_selected_rule_without_a_trigger_makes_every_file_parsed():
    assert not prefilter.skippable(PLAIN, DEFAULT | {"TL999"})


def test_compile_warnings_are_not_shown(recwarn):
    assert prefilter.skippable('pattern = "\\d+"\n', DEFAULT)
    assert not recwarn.list


def rule_texts():
    """(code, text) for every rule's example and every fixture line that expects a finding."""
    for rule in all_rules():
        if rule.example and rule.code in prefilter.TRIGGERS:
            yield pytest.param(rule.code, rule.example, id=f"{rule.code}-example")
    for path in sorted(FIXTURES.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for code in sorted({code for _, _, code in expected_findings(text)} & set(prefilter.TRIGGERS)):
            yield pytest.param(code, text, id=f"{code}-{path.name}")


@pytest.mark.parametrize("code, text", list(rule_texts()))
def test_every_flagged_example_and_fixture_matches_its_rule_trigger(code, text):
    assert prefilter.may_report(text, frozenset({code}))


def test_every_trigger_is_a_valid_pattern_for_a_known_code_shape():
    for code, pattern in prefilter.TRIGGERS.items():
        assert re.fullmatch(r"TL\d{3}", code)
        re.compile(pattern)
