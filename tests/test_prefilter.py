"""The prefilter: a rule runs only on files holding one of its trigger words, and a file no rule runs on is not parsed."""

import pytest

from conftest import FIXTURES, lint
from torchlint.engine import prefilter
from torchlint.engine.expectations import expected_findings
from torchlint.rules import all_rules, rules_by_code
from torchlint.rules.base import Rule
from torchlint.rules.triggers import Trigger

DEFAULT = frozenset(rule.code for rule in all_rules() if rule.triggers is not None) | {"TL000"}
PLAIN = "import json\n\n\ndef read(path):\n    with open(path) as handle:\n        return json.loads(handle.read())\n"


def test_a_file_without_any_trigger_is_skipped():
    assert prefilter.skippable(PLAIN, DEFAULT)


@pytest.mark.parametrize("text", [
    "import torch as T\nx = T.autograd.Variable(y)\n",
    "x = batch.cuda()\n",
    "for x in data:\n    loss.backward()\n    opt.step()\n",
])
def test_a_file_with_a_trigger_is_parsed(text):
    assert not prefilter.skippable(text, DEFAULT)


def test_a_rule_runs_only_where_its_trigger_matches():
    backward_under_no_grad = rules_by_code()["TL101"]
    assert prefilter.runnable("with torch.no_grad():\n    loss.backward()\n", [backward_under_no_grad]) == [backward_under_no_grad]
    assert prefilter.runnable("loss.backward()\n", [backward_under_no_grad]) == []


def test_a_file_python_cannot_compile_is_parsed_so_the_engine_reports_tl000():
    broken = "def f(:\n    pass\n"
    assert not prefilter.skippable(broken, DEFAULT)
    assert [finding.code for finding in lint(broken)] == ["TL000"]


def test_without_tl000_a_broken_file_without_triggers_is_skipped():
    assert prefilter.skippable("def f(:\n", DEFAULT - {"TL000"})


def test_a_rule_without_triggers_runs_on_every_file(monkeypatch):
    class Untriggered(Rule):
        code = "TL998"
        name = "untriggered"

    assert prefilter.runnable(PLAIN, [Untriggered]) == [Untriggered]
    monkeypatch.setattr(prefilter, "rules_by_code", lambda: {"TL998": Untriggered})
    assert not prefilter.skippable(PLAIN, frozenset({"TL998"}))


def test_unknown_codes_never_run():
    assert prefilter.skippable(PLAIN, frozenset({"TL999"}))


def test_compile_warnings_are_not_shown(recwarn):
    assert prefilter.skippable('pattern = "\\d+"\n', DEFAULT)
    assert not recwarn.list


def rule_texts():
    """(code, text) for every rule's example and every fixture file that expects one of its findings."""
    for rule in all_rules():
        if rule.example and rule.code != "TL000":
            yield pytest.param(rule.code, rule.example, id=f"{rule.code}-example")
    for path in sorted(FIXTURES.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for code in sorted({code for _, _, code in expected_findings(text)} - {"TL000"}):
            yield pytest.param(code, text, id=f"{code}-{path.name}")


@pytest.mark.parametrize("code, text", list(rule_texts()))
def test_every_flagged_example_and_fixture_holds_a_trigger_of_its_rule(code, text):
    assert prefilter.runnable(text, [rules_by_code()[code]]) == [rules_by_code()[code]]


def test_every_trigger_is_a_trigger():
    for rule in all_rules():
        assert rule.triggers is None or isinstance(rule.triggers, Trigger), rule.code
