"""Trigger evidence: whole words, names after a dot, parts of words in any case; `&` and `|`."""

import pytest

from torchlint.analysis.grad_mode import names_an_evaluation
from torchlint.rules.triggers import FileText, attributes, fragments, functions, words


def matches(trigger, text):
    return trigger.matches(FileText(text))


@pytest.mark.parametrize("text, expected", [
    ("loss.backward()", True),
    ("# call backward here", True),  # comments and strings count: a superset of what rules read
    ('name = "backward"', True),
    ("backwards = 1", False),
    ("not_backward()", False),
])
def test_words_are_whole_words_anywhere(text, expected):
    assert matches(words("backward"), text) is expected


@pytest.mark.parametrize("text, expected", [
    ("x = y.to(device)", True),
    ("x = y . to(device)", True),
    ("x = (y.\n     to(device))", True),
    ("x = (y.  # move it\n     to(device))", True),
    ("x = y.\\\n    to(device)", True),
    ("# how to do it", False),
    ("to(device)", False),
])
def test_attributes_are_names_right_after_a_dot(text, expected):
    assert matches(attributes("to"), text) is expected


@pytest.mark.parametrize("text, expected", [
    ("lr_Scheduler.step()", True),
    ("SCHEDULE = 1", True),
    ("schedule_free = 1", True),
    ("steps = 1", False),
])
def test_fragments_are_parts_of_words_in_any_case(text, expected):
    assert matches(fragments("sched"), text) is expected


def test_all_of_and_any_of():
    both = words("backward") & words("step")
    either = words("backward") | words("step")
    assert matches(both, "loss.backward()\nopt.step()")
    assert not matches(both, "loss.backward()")
    assert matches(either, "opt.step()")
    assert not matches(either, "opt.zero_grad()")


def test_triggers_say_what_they_need():
    trigger = words("for", "while") & (words("torch") | fragments("Loss"))
    assert repr(trigger) == "(words('for', 'while') & (words('torch') | fragments('loss')))"
    assert repr(attributes("to", "cuda")) == "attributes('cuda', 'to')"


@pytest.mark.parametrize("text, expected", [
    ("def evaluate(model):\n    pass\n", True),
    ("async  def run_validation():\n    pass\n", True),
    ("def \\\n    predict_step():\n    pass\n", True),
    ("evaluate(model)\n", False),  # called, not defined
    ("define evaluate\n", False),
    ("def train(model):\n    pass\n", False),
])
def test_functions_are_names_after_def_the_predicate_accepts(text, expected):
    assert matches(functions(names_an_evaluation), text) is expected
    assert repr(functions(names_an_evaluation)) == "functions(names_an_evaluation)"
