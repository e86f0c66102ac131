"""A sample of benchmarks/scaling.py, small enough for every CI run: cost grows linearly with the file.

The cost is counted, not timed (Python function calls and built-in calls while the file is linted,
`sys.setprofile`), so the test does not depend on the machine. Each case is linted at 1x, 4x and
16x its size; with the overhead of a two-line file subtracted, the cost at 16x must stay within
16 x 1.5 the cost at 1x, and the step from 4x to 16x within 1.5 times four times the step from 1x
to 4x (that second figure is immune to costs a file pays once). Why 1.5: a linear rule's cost per
repetition still varies a little (a set or scope that grows, a lookup over a longer list of
bindings: the benchmark's cases measure 1.00-1.29 on the marginal figure, docs/performance.md), while a cost that grows
with the square of the file measures 2-4 at these sizes (TL205 before its fix: many `.cuda()` lines
cost a walk of the module per finding). The counts themselves vary by a few calls from one process
to another (string hashing orders some sets), far inside that margin.
"""

import importlib.util
import sys

import pytest

from conftest import ROOT

_SPEC = importlib.util.spec_from_file_location("scaling_benchmark", ROOT / "benchmarks" / "scaling.py")
scaling = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = scaling  # dataclasses look their module up there
_SPEC.loader.exec_module(scaling)

# Rules whose trigger is a file of training loops, modules or datasets, reporting from `finish`: the families whose
# shared analyses (loops, module classes, datasets) and after-walk reports were quadratic.
SAMPLE_RULES = ("TL101", "TL205", "TL305", "TL706")
# The shapes' 1x size, smaller than the benchmark's: the test must stay fast, and 16 lines already show a square.
SHAPE_UNIT = 16


@pytest.fixture(scope="module")
def overhead():
    return scaling.overhead()


def _assert_linear(growth) -> None:
    costs = " / ".join(str(cost.calls) for cost in growth.costs)
    assert not growth.superlinear, (
        f"{growth.case}: calls at 1x/4x/16x {costs} (overhead {growth.overhead}): ratio {growth.ratio:.1f} "
        f"(at most {scaling.SIZES[-1] * scaling.SLACK:g}), marginal {growth.marginal:.2f} (at most {scaling.SLACK:g})"
    )


@pytest.mark.parametrize("shape", ["many .cuda() lines", "notebook, one .cuda() per cell"])
def test_adversarial_shapes_cost_linear_time(shape, overhead):
    growth = scaling.shape_growth(shape, overhead, SHAPE_UNIT)
    assert [cost.findings for cost in growth.costs] == [SHAPE_UNIT * times for times in scaling.SIZES]
    _assert_linear(growth)


@pytest.mark.xfail(
    strict=True,
    reason="torchlint/engine/runner.py's callee_names walks the whole chain at each of its calls (the engine is "
    "outside this sample's files); the rules and the analysis follow the chain once",
)
def test_a_long_chain_of_calls_costs_linear_time(overhead):
    _assert_linear(scaling.shape_growth("chain of .float() calls", overhead, SHAPE_UNIT))


@pytest.mark.parametrize("code", SAMPLE_RULES)
def test_repeated_triggers_cost_linear_time(code, overhead):
    from torchlint.rules import rules_by_code

    growth = scaling.rule_growth(rules_by_code()[code], overhead)
    # Each copy of the trigger is found again: the renaming kept the repetitions independent and triggering.
    first = growth.costs[0].findings
    assert first > 0 and [cost.findings for cost in growth.costs] == [first * times for times in scaling.SIZES]
    _assert_linear(growth)


def test_repetitions_rename_module_level_names_only():
    text = "import torch\nmodel = torch.nn.Linear(2, 2)\nmodel.train()\ndef train(model):\n    return model\n"
    twice = scaling.repeated(text, 2)
    # `model` is also a parameter, `train` also an attribute: renaming them would change what the copy means.
    assert twice == text + "\n" + text
    assert scaling.repeated("from __future__ import annotations\nx = 1\n", 2) == (
        "from __future__ import annotations\nx = 1\n\nx_r1 = 1\n"
    )
