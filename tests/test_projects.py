"""Multi-file project fixtures: each folder under fixtures/projects/ is linted as a user would lint it, and every
file's findings must be exactly its `# expect: CODE:COLUMN` comments.

What a file imports from the project is followed into the other files (torchlint/analysis/project.py), so the
folders are linted from disk with their real paths, whole and one file at a time (as pre-commit and editors do).
"""

from pathlib import Path

import pytest

from conftest import FIXTURES
from torchlint.engine.expectations import actual_findings, expected_findings
from torchlint.engine.runner import lint_file

PROJECTS = FIXTURES / "projects"
PROJECT_FILES = sorted(path for path in PROJECTS.rglob("*.py") if not path.parent.name.startswith("settings_"))


def project_config(path: Path):
    """The fixtures' config, rooted at the project's own folder, as a user lints a project from its root (its torch
    requirement read from there): the root bounds the folders a dotted import is looked up from, and the files that
    may import a module."""
    from torchlint.config import build

    root = PROJECTS / path.relative_to(PROJECTS).parts[0]
    return build({"select": ["ALL"], "preview": True}, root=root, path=None, where="test", torch_requirement_from=root)


@pytest.mark.parametrize("path", PROJECT_FILES, ids=lambda path: str(path.relative_to(PROJECTS)))
def test_project_file_findings_are_exactly_the_expected_ones(path: Path):
    result = lint_file(str(path), project_config(path))
    assert actual_findings(result.findings) == expected_findings(path.read_text())


def test_the_cli_finds_the_same_across_the_folder(tmp_path, monkeypatch):
    from torchlint.cli import main

    folder = PROJECTS / "model_in_another_file"
    monkeypatch.chdir(folder)
    assert main(["check", "--no-cache", "--select", "TL401", "--output-format", "concise", "."]) == 1


def test_editing_an_imported_file_relints_its_importer(tmp_path, monkeypatch):
    """The cache keeps a file's findings with the digests of the project files its lint read."""
    from torchlint.cli import main

    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Net(nn.Module):\n"
        "    def forward(self, x):\n        return F.softmax(x, dim=1)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch.nn as nn\nfrom model import Net\n\ncriterion = nn.CrossEntropyLoss()\n"
        "loss = criterion(Net()(images), labels)\n"
    )
    monkeypatch.chdir(tmp_path)
    arguments = ["check", "--select", "TL401", "--output-format", "concise", "train.py"]
    assert main(arguments) == 1
    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    assert main(arguments) == 0  # the cached finding of train.py is stale: model.py changed
    assert main(arguments) == 0


def test_a_file_next_to_the_linted_one_is_a_dependency_of_its_cached_result(tmp_path, monkeypatch):
    """TL502 reads the files next to a whole-object save for an allow-listed load: they are recorded like imports."""
    from torchlint.cli import main

    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(4, 2)\ntorch.save(model, 'model.pth')\n"
    )
    (tmp_path / "infer.py").write_text("import torch\n\nmodel = torch.load('model.pth', weights_only=False)\n")
    monkeypatch.chdir(tmp_path)
    arguments = ["check", "--select", "TL502", "--output-format", "concise", "train.py"]
    assert main(arguments) == 1
    (tmp_path / "infer.py").write_text(
        "import torch\nimport torch.nn as nn\n\nwith torch.serialization.safe_globals([nn.Linear]):\n"
        "    model = torch.load('model.pth')\n"
    )
    assert main(arguments) == 0  # the cached finding of train.py is stale: infer.py changed
    assert main(arguments) == 0


def test_a_notebook_on_standard_input_is_linted_as_a_notebook(tmp_path, monkeypatch, capsys):
    import io
    import json
    import sys

    from torchlint.cli import main

    notebook = {
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                   "source": ["import torch\n", "x = torch.ones(2)\n", "x.require_grad = True\n"]}],
    }
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(notebook).encode())))
    assert main(["check", "--stdin-filename", "explore.ipynb", "--output-format", "concise", "-"]) == 1
    assert "explore.ipynb:cell 1:3:1: TL603" in capsys.readouterr().out


def test_a_notebook_imports_through_the_folder_it_puts_on_sys_path(tmp_path, monkeypatch):
    """A notebook's kernel starts in its folder: `sys.path.append("../lib")` in a cell adds lib/ beside that folder."""
    import nbformat

    from torchlint.cli import main

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "models.py").write_text(
        "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    (tmp_path / "notebooks").mkdir()
    cells = [
        "import sys\nsys.path.append('../lib')", "import torch\nfrom models import Net", "torch.save(Net(), 'net.pt')",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    nbformat.write(notebook, str(tmp_path / "notebooks" / "train.ipynb"))
    monkeypatch.chdir(tmp_path)
    arguments = ["check", "--no-cache", "--preview", "--select", "TL502", "--output-format", "concise", "notebooks"]
    assert main(arguments) == 1


def test_one_lint_reads_an_imported_project_file_once(tmp_path, monkeypatch):
    """Every name a lint follows into a project file used to read and digest the file again to check its parse
    (`Project.one_lint`): one lint now reads it once, however many names it follows there; the next lint reads it
    again, so an edit between lints is seen (test_editing_an_imported_file_relints_its_importer)."""
    from torchlint.analysis import project
    from torchlint.config import build

    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass Net(nn.Module):\n"
        "    def forward(self, x):\n        return F.softmax(x, dim=1)\n\n\ndef make_model():\n    return Net()\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch.nn as nn\nfrom model import Net, make_model\n\ncriterion = nn.CrossEntropyLoss()\nmodel = make_model()\n"
        "loss = criterion(model(images), labels)\nother = criterion(Net()(images), labels)\n"
    )
    model = str(tmp_path / "model.py")
    reads = []
    real = project.Project.read
    monkeypatch.setattr(project.Project, "read", lambda self, path: (reads.append(path), real(self, path))[1])
    config = build({"select": ["TL401"]}, root=tmp_path, path=None, where="test", torch_requirement_from=tmp_path)
    for lint in range(2):
        reads.clear()
        findings = lint_file(str(tmp_path / "train.py"), config).findings
        assert [finding.code for finding in findings] == ["TL401", "TL401"]
        assert reads.count(model) == 1, lint


def test_a_lint_leaves_no_cycle_holding_its_file(tmp_path, monkeypatch):
    """`check` runs with the cycle collector off, so a linted file's context and tree must be freed by reference
    counting when its lint returns: anything left in a cycle with the context stays until a collection every thousand
    files (on the benchmark sample, a third of a one-process run's memory). Here the value model follows a base class
    into another file (a recursive closure over the context), TL302 keeps a loop for its deferred check (a closure in
    the call graph), the scopes read star imports through the context, and TL106 keeps each `eval()` and `train()`
    call for a question it asks later."""
    import gc
    import weakref

    from torchlint.config import build
    from torchlint.engine import runner

    (tmp_path / "layers.py").write_text("import torch.nn as nn\n\n\nclass Block(nn.Module):\n    pass\n")
    (tmp_path / "common.py").write_text("from torch.utils.data import DataLoader\n")
    (tmp_path / "train.py").write_text(
        "import torch.nn as nn\nfrom common import *\nfrom layers import Block\n\n\nclass Net(Block):\n"
        "    def train(self, loader, epochs=1):\n        self.epochs = epochs\n\n\ndef run(loader):\n    for batch in loader:\n        pass\n\n\n"
        "loader = DataLoader(range(4), num_workers=2)\nrun(loader)\n\n\n"
        "def evaluate(model, loader):\n    model.eval()\n    for batch in loader:\n        model(batch)\n    model.train()\n"
    )
    made = []
    real = runner.FileContext

    def recorded(*args, **kwargs):
        made.append(weakref.ref(real(*args, **kwargs)))
        return made[-1]()

    monkeypatch.setattr(runner, "FileContext", recorded)
    config = build({"select": ["ALL"]}, root=tmp_path, path=None, where="test", torch_requirement_from=tmp_path)
    enabled = gc.isenabled()
    gc.disable()
    try:
        findings = lint_file(str(tmp_path / "train.py"), config).findings
        assert {finding.code for finding in findings} >= {"TL302", "TL703"}
        assert made and all(context() is None for context in made)
    finally:
        if enabled:
            gc.enable()
