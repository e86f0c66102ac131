"""A notebook cell that writes a `.py` file (`%%writefile train.py`, `%%file`, `-a`) is linted as that file: apart from
the notebook's own script, with the kind its name gives it, its findings, noqa comments and fixes placed in the cell."""

import json

import nbformat
import pytest

from conftest import make_config
from torchlint.cli import main
from torchlint.fixes.files import fix_notebook_bytes
from torchlint.notebook import lint_notebook_bytes

TYPO = "import torch\nweight = torch.zeros(3)\nweight.require_grad = True\n"
TYPO_COLUMN = 1
# TL311: a script's training step with no seed anywhere; a test file is not held to it, nor (here) a library.
UNSEEDED = (
    "import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()\noptimizer.step()\n"
)


def notebook(*cells) -> bytes:
    made = nbformat.v4.new_notebook()
    made.metadata["kernelspec"] = {"name": "k", "display_name": "K", "language": "python"}
    made.cells += [nbformat.v4.new_code_cell(cell) for cell in cells]
    return nbformat.writes(made).encode("utf-8")


def placed(data: bytes, filename: str = "explore.ipynb", **table):
    table.setdefault("select", ["ALL"])
    found = lint_notebook_bytes(data, filename, make_config(**table)).findings
    return [(f.cell, f.location.row, f.location.column, f.code) for f in found]


def cell_sources(data: bytes):
    return [cell.source for cell in nbformat.reads(data.decode("utf-8"), as_version=4).cells]


@pytest.mark.parametrize("magic", ["%%writefile train.py", "%%file train.py", "%%writefile 'train.py'", "%%writefile  train.py  "])
def test_a_written_file_is_linted_and_its_findings_placed_in_the_cell(magic):
    assert placed(notebook("x = 1", magic + "\n" + TYPO), select=["TL603"]) == [(2, 4, TYPO_COLUMN, "TL603")]


def test_an_indented_cell_is_dedented_before_its_body_is_written():
    # IPython takes the indent all of a cell's lines share off before it reads the magic, so the file has none.
    cell = "".join("    " + line for line in ("%%writefile train.py\n" + TYPO).splitlines(keepends=True))
    assert placed(notebook(cell), select=["TL603"]) == [(1, 4, TYPO_COLUMN + 4, "TL603")]


@pytest.mark.parametrize("magic", ["%%writefile config.yaml", "%%writefile train.pyc", "%%writefile", "%%writefile -a",
                                   "%%writefile a.py b.py", "%%writefile 'train.py", "%%writefile -h train.py", "%%bash"])
def test_other_targets_and_arguments_ipython_refuses_are_not_linted(magic):
    # The second cell, a file that is linted, shows the first one's typo would be found if its file were.
    assert placed(notebook(magic + "\n" + TYPO, "%%writefile ok.py\n" + TYPO), select=["TL603"]) == [(2, 4, TYPO_COLUMN, "TL603")]


def test_the_written_files_kind_comes_from_its_name():
    names = ["train.py", "tests/test_training.py", "test_training.py", "conftest.py"]
    data = notebook(*(f"%%writefile {name}\n" + UNSEEDED for name in names))
    assert placed(data, select=["TL311"]) == [(1, 8, 1, "TL311")]


def test_a_relative_name_lands_in_the_notebooks_folder():
    # The kernel starts beside the notebook: `train.py` written by tests/explore.ipynb is tests/train.py, a test file.
    assert placed(notebook("%%writefile train.py\n" + UNSEEDED), "tests/explore.ipynb", select=["TL311"]) == []
    assert placed(notebook("%%writefile train.py\n" + UNSEEDED), "notebooks/explore.ipynb", select=["TL311"]) == [(1, 8, 1, "TL311")]


def test_the_notebook_does_not_see_the_written_files_names_nor_the_file_the_notebooks():
    # TL606 needs `log` to be torch's: the file's import binds it in the file only, the notebook's in the notebook only.
    file_imports = notebook("%%writefile train.py\nfrom torch import log\ny = log(1 + x)\n", "y = log(1 + x)\n")
    assert placed(file_imports, select=["TL606"]) == [(1, 3, 5, "TL606")]
    notebook_imports = notebook("from torch import log\n", "%%writefile train.py\ny = log(1 + x)\n")
    assert placed(notebook_imports, select=["TL606"]) == []


def test_a_written_file_that_does_not_parse_is_a_parse_error_of_its_cell():
    data = notebook("%%writefile train.py\nimport torch\ndef broken(:\n    pass", "x = 1")
    assert placed(data) == [(1, 3, 12, "TL000")]


def test_an_appended_fragment_is_linted_only_if_it_parses_and_offers_no_fix():
    data = notebook("%%writefile train.py\nfor batch in loader:", "%%writefile -a train.py\n    step(batch)",
                    "%%writefile --append train.py\n" + TYPO)
    found = lint_notebook_bytes(data, "explore.ipynb", make_config(select=["ALL"])).findings
    assert [(f.cell, f.location.row, f.code, f.fix) for f in found] == [(1, 2, "TL000", None), (3, 4, "TL603", None)]


def test_noqa_in_a_written_file_works_on_its_cell_line():
    data = notebook("%%writefile train.py\n" + TYPO.replace("= True\n", "= True  # noqa: TL603\n"),
                    "%%writefile eval.py\n" + TYPO.replace("= True\n", "= True  # noqa: TL101\n"))
    unused = len("weight.require_grad = True") + 3
    assert placed(data) == [(2, 4, 1, "TL603"), (2, 4, unused, "TL001")]


def test_fix_rewrites_the_written_files_body_and_keeps_the_magic_and_the_indent():
    indented = "".join("  " + line for line in ("%%writefile train.py\n" + TYPO).splitlines(keepends=True))
    data = notebook("%%writefile train.py\n" + TYPO, indented, TYPO, "%%writefile -a train.py\n" + TYPO)
    fixed = fix_notebook_bytes(data, "explore.ipynb", make_config(select=["TL603"]), unsafe=False)
    fixed_typo = TYPO.replace("require_grad", "requires_grad")
    assert cell_sources(fixed.output()) == [
        "%%writefile train.py\n" + fixed_typo,
        indented.replace("require_grad", "requires_grad"),
        fixed_typo,
        "%%writefile -a train.py\n" + TYPO,  # a fragment: no fix offered, none applied
    ]
    assert len(fixed.result.fixed) == 3  # two written files and the notebook's own cell
    assert [(f.cell, f.code, f.fix) for f in fixed.findings] == [(4, "TL603", None)]


def test_an_import_a_fix_adds_goes_at_the_top_of_the_written_file():
    # TL606 writes `torch.log1p` and imports torch where it is missing: the file's top, below the magic, not the notebook's.
    data = notebook("import numpy as np", "%%writefile train.py\nfrom torch import log\ny = log(1 + x)\n")
    fixed = fix_notebook_bytes(data, "explore.ipynb", make_config(select=["TL606"]), unsafe=True)
    assert cell_sources(fixed.output()) == [
        "import numpy as np", "%%writefile train.py\nimport torch\nfrom torch import log\ny = torch.log1p(x)\n",
    ]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_sarif_and_json_place_a_written_files_finding_in_the_notebook(project, capsys):
    text = notebook("import os", "%%writefile train.py\n" + TYPO).decode()
    (project / "nb.ipynb").write_text(text, encoding="utf-8")
    main(["check", "--no-cache", "--select", "TL603", "--output-format", "sarif", "nb.ipynb"])
    [result] = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert text.splitlines()[region["startLine"] - 1][region["startColumn"] - 1:].startswith("weight.require_grad")
    assert result["properties"] == {"cell": 2, "cellRow": 4, "cellColumn": 1}
    main(["check", "--no-cache", "--select", "TL603", "--output-format", "json", "nb.ipynb"])
    [finding] = json.loads(capsys.readouterr().out)
    assert (finding["cell"], finding["location"]) == (2, {"row": 4, "column": 1})


def test_the_language_servers_quick_fix_edits_the_written_cell():
    pytest.importorskip("lsprotocol")
    from lsprotocol import types

    from torchlint.integrations.server.actions import code_actions
    from torchlint.integrations.server.documents import CODE, Cell, Configs, Snapshot, lint

    uri = "file:///work/explore.ipynb"
    texts = {f"{uri}#a": TYPO, f"{uri}#b": "%%writefile train.py\n" + TYPO}
    cells = tuple(Cell(cell_uri, CODE, text, 1) for cell_uri, text in texts.items())
    linted = lint(Snapshot(uri, 1, "/work/explore.ipynb", cells=cells), Configs(), [])
    assert sorted((f.cell, f.location.row, f.code) for f in linted.findings if f.code == "TL603") == [(1, 3, "TL603"), (2, 4, "TL603")]
    line = types.Range(start=types.Position(line=3, character=0), end=types.Position(line=3, character=99))
    actions = code_actions(linted, f"{uri}#b", line, types.CodeActionContext(diagnostics=[]), lambda text: len(text), None)
    [fix] = [action for action in actions if action.title.startswith("Fix TL603")]
    [change] = fix.edit.document_changes
    assert change.text_document.uri == f"{uri}#b"
    assert [edit.new_text for edit in change.edits] == ["weight.requires_grad = True\n"]
