"""Every figure a rule's message states as observed is the one its canonical witness observes on this torch.

A number in a message is either an observation (a count, a size, a ratio, a loss), which
`torchlint rule CODE --verify` must show in its evidence, or a stated fact the message
does not claim to have measured: a torch or Python version, a dtype's width, a formula,
an argument in code. The second kind is named below, per rule; every other number is an
observation: a new number in a message fails until its witness shows it or it is named
here as a fact. A figure from another experiment than the witness runs (the rule's page
may cite one) does not belong in the message.
"""

import os
import re

import pytest

from torchlint.rules import all_rules

pytest.importorskip("torch")

_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?")
# What no witness measures, in any message: code, versions, dtype widths, powers, placeholders.
_NOT_OBSERVED = [
    re.compile(pattern)
    for pattern in (
        r"`[^`]*`", r"\b(?:torch|Python|torchvision) \d+(?:\.\d+)*", r"\b(?:b?float|u?int|complex)\d+\b",
        r"\d+\*\*\d+", r"\{\w+\}", r"\b\d-D\b", r"\b0-dim\b",
    )
]
# Stated facts, per rule: the phrases that hold them.
FACTS = {
    "TL203": ["16777217 -> 16777216"],  # float32's 24-bit mantissa, arithmetic rather than a measurement
    "TL306": ["absent or 0", "> 0"],
    "TL401": ["log(C-1+e)-1 instead of 0"],
    "TL402": ["log(1+e^-1)"],
    "TL403": ["(between -1 and 0)"],
    "TL404": ["can never both reach 1"],
    "TL611": ["1-element"],
    "TL614": ["has 4 fields"],
    "TL615": ["dim 0", "dim 1"],
}


def observed_numbers(code: str, message: str) -> list:
    for pattern in _NOT_OBSERVED:
        message = pattern.sub(" ", message)
    for phrase in FACTS.get(code, []):
        message = message.replace(phrase, " ")
    return [number.rstrip(",") for number in _NUMBER.findall(message)]


def _value(number: str) -> float:
    return float(number.replace(",", ""))


def shows(evidence: str, number: str) -> bool:
    """Whether the evidence states `number`, to the precision the message gives it."""
    decimals = len(number.split(".")[1]) if "." in number and "e" not in number else 0
    wanted = _value(number)
    for found in _NUMBER.findall(evidence):
        value = _value(found.rstrip(","))
        if value == wanted or ("e" not in number and round(value, decimals) == wanted):
            return True
    return False


CLAIMING = sorted(rule.code for rule in all_rules() if observed_numbers(rule.code, rule.message))


@pytest.fixture(scope="module")
def evidence():
    from torchlint.verify import sandbox
    from torchlint.verify.run import canonical, judge
    from torchlint.verify.witnesses import load_all

    codes = [code for code in CLAIMING if code in load_all()]
    witnesses = [canonical(code, "cpu") for code in codes]
    outcomes = sandbox.run_all([sandbox.Job(w.program, "cpu", w.timeout, w.env) for w in witnesses], os.cpu_count() or 2)
    return {code: judge(w, outcome, "cpu", "") for code, w, outcome in zip(codes, witnesses, outcomes)}


@pytest.mark.parametrize("code", CLAIMING)
def test_the_figures_a_message_states_are_what_its_witness_observes(code, evidence):
    from torchlint.rules import rules_by_code

    if code not in evidence:
        pytest.fail(f"{code} states observed figures and has no canonical witness")
    result = evidence[code]
    assert result.status == "confirmed", (code, result.status, result.evidence)
    numbers = observed_numbers(code, rules_by_code()[code].message)
    assert [number for number in numbers if not shows(result.evidence, number)] == [], result.evidence


def test_the_check_catches_the_figure_tl103_used_to_state():
    old = "it grows 8 nodes per iteration"
    assert observed_numbers("TL103", old) == ["8"]
    assert not shows("grad_fn nodes reachable from the accumulated losses per iteration: [11, 18, 25] (+7 per iteration)", "8")
