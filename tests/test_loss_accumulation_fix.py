"""TL103's fix keeps the script running: `.detach()` where the accumulator is later used as a tensor, else `.item()`.

Each script is run with torch before and after the unsafe fix; both must succeed and
print the same numbers.
"""

import json
import math
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import make_config
from torchlint.engine.runner import lint_text
from torchlint.fixes import fix_text

pytest.importorskip("torch")

TRAINING = """
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.MSELoss()
x, y = torch.randn(8, 4), torch.randn(8, 1)
"""

LOOP = """
for step in range(3):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""

SHAPES = {
    # The accumulator used as a tensor afterwards: `.item()` on a float would raise AttributeError.
    "item-afterwards": ("running_loss = 0.0" + LOOP + "    running_loss += loss\nprint(f'{running_loss.item():.6f}')\n", ".detach()"),
    "detach-afterwards": ("total = 0" + LOOP + "    total = total + loss\nprint(f'{total.detach().numpy():.6f}')\n", ".detach()"),
    "stacked-list": ("losses = []" + LOOP + "    losses.append(loss)\nprint(f'{torch.stack(losses).mean().item():.6f}')\n", ".detach()"),
    "element-as-tensor": ("losses = []" + LOOP + "    losses.append(loss)\nprint(f'{losses[-1].item():.6f}')\n", ".detach()"),
    "loop-over-elements": ("losses = []" + LOOP + "    losses.append(loss)\nfor value in losses:\n    print(f'{value.item():.6f}')\n", ".detach()"),
    "comprehension-over-elements": ("losses = []" + LOOP + "    losses.append(loss)\nprint([round(value.item(), 6) for value in losses])\n", ".detach()"),
    "returned": (
        "def epoch():\n    running_loss = 0.0\n" + textwrap.indent(LOOP, "    ") + "        running_loss += loss\n"
        "    return running_loss\n\nprint(f'{epoch().item():.6f}')\n",
        ".detach()",
    ),
    # Used only as a number: `.item()`, which holds no device memory and prints as a number.
    "float-afterwards": ("running_loss = 0.0" + LOOP + "    running_loss += loss\nprint(f'{float(running_loss) / 3:.6f}')\n", ".item()"),
    "summed-list": ("losses = []" + LOOP + "    losses.append(loss)\nprint(f'{float(sum(losses)) / len(losses):.6f}')\n", ".item()"),
}


# Runs each script of a JSON list as its own `__main__` in one process (torch is imported once), and prints, for
# each, what it printed or the exception that stopped it.
RUNNER = """
import contextlib, io, json, sys
results = []
for script in json.load(sys.stdin):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(script, "train.py", "exec"), {"__name__": "__main__"})
        results.append(out.getvalue())
    except Exception as error:
        results.append(f"raised {type(error).__name__}: {error}")
print(json.dumps(results))
"""


def fixed(script: str):
    config = make_config(select=["TL103"], **{"unsafe-fixes": True})
    return fix_text(script, lambda text: lint_text(text, "train.py", config), unsafe=True)


@pytest.fixture(scope="module")
def runs():
    """shape -> (what the original printed, what the fixed script printed)."""
    shapes = sorted(SHAPES)
    scripts = [TRAINING + SHAPES[shape][0] for shape in shapes]
    programs = scripts + [fixed(script).text for script in scripts]
    completed = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(programs), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    printed = json.loads(completed.stdout)
    return {shape: (printed[index], printed[index + len(shapes)]) for index, shape in enumerate(shapes)}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_fixed_script_runs_and_prints_what_the_original_printed(shape, runs):
    body, method = SHAPES[shape]
    result = fixed(TRAINING + body)
    assert [finding.code for finding in result.fixed] == ["TL103"], result.findings
    assert f"loss{method}" in result.text
    before, after = runs[shape]
    assert not before.startswith("raised"), before
    assert_same_output(after, before)


NUMBER = re.compile(r"-?\d+\.\d+")
# The fix is unsafe because it changes the arithmetic: `.item()` sums Python floats (float64) where the original
# summed float32 tensors. Three float32 additions of values near 2 differ from the float64 sum by at most a few
# float32 ulps (2**-22 each, about 2.4e-7), and printing to 6 decimals rounds either result by up to 5e-7, so
# the printed figures may differ in their last digit on another CPU: 2e-6 absolute covers both with margin.
PRINTED_TOLERANCE = 2e-6


def assert_same_output(after: str, before: str) -> None:
    """The same text, with each printed number equal within PRINTED_TOLERANCE."""
    assert NUMBER.sub("#", after) == NUMBER.sub("#", before), (after, before)
    for got, expected in zip(NUMBER.findall(after), NUMBER.findall(before)):
        assert math.isclose(float(got), float(expected), rel_tol=0, abs_tol=PRINTED_TOLERANCE), (after, before)


@pytest.mark.parametrize(
    "after, before, same",
    [("2.264783\n", "2.264782\n", True), ("2.264800\n", "2.264782\n", False), ("[1.5, 2.0]\n", "[1.5]\n", False)],
)
def test_the_comparison_allows_the_last_digit_and_nothing_more(after, before, same):
    if same:
        assert_same_output(after, before)
    else:
        with pytest.raises(AssertionError):
            assert_same_output(after, before)
