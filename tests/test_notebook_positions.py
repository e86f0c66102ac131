"""Notebook findings outside the terminal: SARIF regions and GitHub annotations point at the line of the notebook's JSON
that holds the cell's line (neither can name a cell), and `--diff` shows one unified diff per changed cell, as ruff."""

import json
import re

import pytest

from torchlint.cli import main

# The flagged code comes after escapes (`\"`, `\t`, `é`), which shift its column in the JSON text.
CELL_2 = 'import torch\nfrom torch.utils.data import DataLoader\nx = "é\\t"; loader = DataLoader(ds, persistent_workers=True)\n'
CELL_3 = "y = 1\nweight = torch.zeros(3)\nweight.require_grad = True\n"
FLAGGED = {"TL303": "persistent_workers=True", "TL603": "weight.require_grad"}


def notebook(as_lists: bool, ascii_only: bool) -> str:
    def source(text):
        return text.splitlines(keepends=True) if as_lists else text

    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": source('# "Training"\n')},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source(CELL_2)},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source(CELL_3)},
    ]
    document = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(document, indent=1, ensure_ascii=ascii_only) + "\n"


LAYOUTS = [(True, False), (True, True), (False, False)]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *args):
    code = main(["check", "--no-cache", "--select", "TL303,TL603", *args])
    return code, capsys.readouterr().out


def at(text: str, row: int, column: int) -> str:
    """The notebook's JSON text from a 1-based row and column to the end of that line (the flagged code has no escapes)."""
    return text.splitlines()[row - 1][column - 1:]


@pytest.mark.parametrize("as_lists, ascii_only", LAYOUTS)
def test_sarif_regions_point_into_the_notebook_file(project, capsys, as_lists, ascii_only):
    text = notebook(as_lists, ascii_only)
    (project / "nb.ipynb").write_text(text, encoding="utf-8")
    code, out = run(capsys, "--output-format", "sarif", "nb.ipynb")
    results = json.loads(out)["runs"][0]["results"]
    assert code == 1 and sorted(result["ruleId"] for result in results) == ["TL303", "TL603"]
    for result in results:
        region = result["locations"][0]["physicalLocation"]["region"]
        flagged = FLAGGED[result["ruleId"]]
        assert at(text, region["startLine"], region["startColumn"]).startswith(flagged), region
        assert region["endLine"] == region["startLine"] and region["endColumn"] > region["startColumn"]
        assert set(result["properties"]) == {"cell", "cellRow", "cellColumn"}
        assert result["message"]["text"].startswith(f"cell {result['properties']['cell']}:{result['properties']['cellRow']}:")


@pytest.mark.parametrize("as_lists, ascii_only", LAYOUTS)
def test_github_annotations_point_at_the_notebook_line(project, capsys, as_lists, ascii_only):
    text = notebook(as_lists, ascii_only)
    (project / "nb.ipynb").write_text(text, encoding="utf-8")
    code, out = run(capsys, "--output-format", "github", "nb.ipynb")
    annotations = [dict(re.findall(r"(\w+)=([^,:]+)", line.split("::")[1])) for line in out.splitlines()]
    assert code == 1 and len(annotations) == 2
    for annotation in annotations:
        flagged = FLAGGED[annotation["title"]]
        assert at(text, int(annotation["line"]), int(annotation["col"])).startswith(flagged), annotation


def test_diff_of_a_notebook_is_one_diff_per_cell(project, capsys):
    (project / "nb.ipynb").write_text(notebook(True, False), encoding="utf-8")
    code, out = run(capsys, "--diff", "nb.ipynb")
    assert code == 1
    assert out == (
        "--- nb.ipynb:cell 3\n+++ nb.ipynb:cell 3\n@@ -1,3 +1,3 @@\n y = 1\n weight = torch.zeros(3)\n"
        "-weight.require_grad = True\n+weight.requires_grad = True\n"
    )
