"""Every fix a notebook finding announces is applied by `--fix`: after fixing, no finding is left whose fix
`--fix --unsafe-fixes` would have applied. Checked on every notebook fixture, as written (format 4) and
written in format 3 (worksheets, `input`), which nbformat reads and torchlint lints but does not rewrite."""

import json
from collections import Counter

import pytest

from conftest import FIXTURES, make_config
from torchlint.fixes.files import fix_notebook_bytes
from torchlint.notebook import lint_notebook_bytes

NOTEBOOK_FIXTURES = sorted(FIXTURES.rglob("*.ipynb"))
# Whatever the fixtures' rules need: a torch old enough that the API rules' replacements exist is the default.
CONFIG = make_config(select=["ALL"])


def as_format_3(data: bytes) -> bytes:
    notebook = json.loads(data)
    cells = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cells.append({"cell_type": "code", "collapsed": False, "input": cell["source"], "language": "python",
                          "metadata": {}, "outputs": [], "prompt_number": None})
        else:
            cells.append({"cell_type": cell["cell_type"], "metadata": {}, "source": cell["source"]})
    return json.dumps({"metadata": {"name": "", "language": "python"}, "nbformat": 3, "nbformat_minor": 0,
                       "worksheets": [{"cells": cells, "metadata": {}}]}, indent=1).encode()


def announced(findings):
    return [finding for finding in findings if finding.fix is not None]


@pytest.mark.parametrize("path", NOTEBOOK_FIXTURES, ids=lambda path: path.name)
@pytest.mark.parametrize("written", ["format 4", "format 3"])
def test_every_announced_fix_is_applied(path, written):
    data = path.read_bytes()
    if written == "format 3":
        data = as_format_3(data)
    before = lint_notebook_bytes(data, path.name, CONFIG).findings
    fixed = fix_notebook_bytes(data, path.name, CONFIG, unsafe=True)
    assert announced(fixed.findings) == [], [finding.code for finding in announced(fixed.findings)]
    # Each announced fix was applied (later rounds may fix findings that the first round's fixes revealed).
    assert not Counter(finding.code for finding in announced(before)) - Counter(finding.code for finding in fixed.result.fixed)


def test_a_format_3_notebook_is_linted_without_fixes():
    data = as_format_3((FIXTURES / "api" / "TL603_notebook_indented_cells.ipynb").read_bytes())
    findings = lint_notebook_bytes(data, "old.ipynb", CONFIG).findings
    assert findings and announced(findings) == []
