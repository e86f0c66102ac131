"""Module summaries of imported project files, kept with the cached findings (torchlint/analysis/summaries.py).

Each lint here runs as a fresh process would (`fresh_process`): nothing of the project in memory, so what one
lint leaves for the next is only what the summary store on disk holds. A summary may only spare work: every
finding is the one the parsed files give.
"""

import shutil
from pathlib import Path
from typing import Optional

import pytest

from conftest import FIXTURES
from torchlint.analysis import project, summaries
from torchlint.config import build
from torchlint.engine import parallel, parsing
from torchlint.engine.expectations import actual_findings, expected_findings

PROJECTS = FIXTURES / "projects"
PROJECT_FILES = sorted(path for path in PROJECTS.rglob("*.py") if not path.parent.name.startswith("settings_"))


def fresh_process(monkeypatch) -> list:
    """Forget every project file and summary this process holds; the paths the next lint parses are listed in
    the returned list."""
    project.PROJECT.__init__()
    summaries.SUMMARIES.__init__()
    parsing.TREES.__init__()
    parsed = []
    parse = project._parse

    def recording_parse(path, *rest):
        parsed.append(Path(path).name)
        return parse(path, *rest)

    monkeypatch.setattr(project, "_parse", recording_parse)
    return parsed


def lint(path: Path, root: Path, cached: bool = True, requirement_from: Optional[Path] = None):
    config = build(
        {"select": ["ALL"], "preview": True}, root=root, path=None, where="test",
        torch_requirement_from=requirement_from or path.parent,
    )
    return parallel._lint_one(str(path), str(path), config, cached, True)[1]


@pytest.mark.parametrize("path", PROJECT_FILES, ids=lambda path: str(path.relative_to(PROJECTS)))
def test_project_files_find_the_same_with_summaries_built_and_stored(path: Path, tmp_path, monkeypatch):
    # A copy of the project, linted from its root as tests/test_projects.py lints it: the cache lives at the root.
    relative = path.relative_to(PROJECTS)
    root = tmp_path / relative.parts[0]
    shutil.copytree(PROJECTS / relative.parts[0], root)
    for _ in ("built", "stored"):
        fresh_process(monkeypatch)
        assert actual_findings(lint(tmp_path / relative, root, requirement_from=path.parent).findings) == expected_findings(path.read_text())


def write(folder: Path, files: dict) -> None:
    for name, text in files.items():
        (folder / name).write_text(text)


PROJECT = {
    "base.py": (
        "import torch.nn as nn\n\n\nclass BaseDataset:\n    def __len__(self):\n        return 0\n\n\n"
        "class BaseNet(nn.Module):\n    pass\n"
    ),
    "helpers.py": "def run(dataset):\n    return sorted(dataset)\n",
    "train.py": (
        "import torch\nfrom base import BaseDataset, BaseNet\nfrom helpers import run\n\n\n"
        "class Data(BaseDataset):\n    def __getitem__(self, index):\n        return index\n\n\n"
        "class Net(BaseNet):\n    def forward(self, x):\n        return torch.nn.Linear(4, 2)(x)\n\n\n"
        "run(Data())\n"
    ),
}


def test_a_stored_summary_answers_without_parsing_the_file(tmp_path, monkeypatch):
    write(tmp_path, PROJECT)
    parsed = fresh_process(monkeypatch)
    without = actual_findings(lint(tmp_path / "train.py", tmp_path, cached=False).findings)
    assert sorted(parsed) == ["base.py", "helpers.py"]
    assert any(finding[2] == "TL702" for finding in without)  # `Net` is a Module through base.py: its layer is seen

    parsed = fresh_process(monkeypatch)
    assert actual_findings(lint(tmp_path / "train.py", tmp_path).findings) == without
    assert sorted(parsed) == ["base.py", "helpers.py"]  # each parsed once, to build its summary

    parsed = fresh_process(monkeypatch)
    result = lint(tmp_path / "train.py", tmp_path)
    assert actual_findings(result.findings) == without
    # `BaseDataset` is no Module and `run` starts no workers, which the summaries tell; `BaseNet` is one, and
    # what `Net` inherits from it is read from the tree.
    assert parsed == ["base.py"]
    assert sorted(Path(name).name for name, _ in result.dependencies) == ["base.py", "helpers.py"]


LOADERS = {
    "settings.py": "WORKERS = 0\n",
    "helpers.py": (
        "from torch.utils.data import DataLoader\nfrom settings import WORKERS\n\n\ndef run(dataset):\n"
        "    for batch in DataLoader(dataset, num_workers=WORKERS):\n        print(batch)\n"
    ),
    "train.py": "from helpers import run\n\nrun(range(10))\n",
}


def test_a_summary_is_built_again_when_a_file_its_facts_came_from_changes(tmp_path, monkeypatch):
    """`run` starts workers or not depending on settings.py, which helpers.py's summary was built from."""
    write(tmp_path, LOADERS)
    for _ in range(2):
        fresh_process(monkeypatch)
        assert actual_findings(lint(tmp_path / "train.py", tmp_path).findings) == []
    write(tmp_path, {"settings.py": "WORKERS = 4\n"})
    fresh_process(monkeypatch)
    assert [finding[2] for finding in actual_findings(lint(tmp_path / "train.py", tmp_path).findings)] == ["TL302"]


def test_a_damaged_summary_is_built_again(tmp_path, monkeypatch):
    write(tmp_path, PROJECT)
    fresh_process(monkeypatch)
    expected = actual_findings(lint(tmp_path / "train.py", tmp_path).findings)
    stored = sorted((tmp_path / ".torchlint_cache").rglob("*.summaries/*.bin"))
    assert len(stored) == 2
    for path in stored:
        path.write_bytes(path.read_bytes()[:-3] + b"xyz")
    parsed = fresh_process(monkeypatch)
    assert actual_findings(lint(tmp_path / "train.py", tmp_path).findings) == expected
    assert sorted(parsed) == ["base.py", "helpers.py"]


def test_no_summary_is_written_without_a_cache(tmp_path, monkeypatch):
    write(tmp_path, PROJECT)
    fresh_process(monkeypatch)
    lint(tmp_path / "train.py", tmp_path, cached=False)
    assert not (tmp_path / ".torchlint_cache").exists()


def test_an_edited_file_replaces_its_summary(tmp_path, monkeypatch):
    """While `BaseNet` is a plain class, `Net` is no Module and its layer built in `forward` is no TL702."""
    write(tmp_path, {**PROJECT, "base.py": PROJECT["base.py"].replace("class BaseNet(nn.Module):", "class BaseNet:")})
    for _ in range(2):
        fresh_process(monkeypatch)
        assert "TL702" not in [finding[2] for finding in actual_findings(lint(tmp_path / "train.py", tmp_path).findings)]
    write(tmp_path, {"base.py": PROJECT["base.py"]})
    fresh_process(monkeypatch)
    assert "TL702" in [finding[2] for finding in actual_findings(lint(tmp_path / "train.py", tmp_path).findings)]
    assert len(list((tmp_path / ".torchlint_cache").rglob("*.summaries/*.bin"))) == 2


ALIASED = {
    **LOADERS,
    "alias.py": "import helpers\n\nrun = helpers.run\n",
    "first.py": "from alias import run\nfrom helpers import run as run_again\n\nrun(range(10))\nrun_again(range(10))\n",
}


def test_a_summary_built_after_the_tree_read_its_facts_still_lists_the_files_they_came_from(tmp_path, monkeypatch):
    """first.py follows `alias.run`, a value, through the tree, which builds helpers.py's facts before its summary is
    asked for: the summary must still depend on settings.py, where the worker count is."""
    write(tmp_path, ALIASED)
    fresh_process(monkeypatch)
    assert actual_findings(lint(tmp_path / "first.py", tmp_path).findings) == []
    write(tmp_path, {"settings.py": "WORKERS = 4\n"})
    fresh_process(monkeypatch)
    result = lint(tmp_path / "train.py", tmp_path)
    assert [finding[2] for finding in actual_findings(result.findings)] == ["TL302"]
    assert "settings.py" in {Path(name).name for name, _ in result.dependencies}


def test_a_stored_summary_of_another_shape_is_built_again(tmp_path, monkeypatch):
    import marshal

    write(tmp_path, PROJECT)
    fresh_process(monkeypatch)
    expected = actual_findings(lint(tmp_path / "train.py", tmp_path).findings)
    store = summaries.SUMMARIES._store
    for name in ("base.py", "helpers.py"):
        path = str(tmp_path / name)
        digest = project.PROJECT.read(path)[1]
        store.save(path, digest, marshal.dumps(("names", ("definitions",), {}, ())))
    parsed = fresh_process(monkeypatch)
    assert actual_findings(lint(tmp_path / "train.py", tmp_path).findings) == expected
    assert sorted(parsed) == ["base.py", "helpers.py"]


def test_a_summary_that_cannot_be_built_leaves_the_question_to_the_tree(tmp_path, monkeypatch):
    """Building a.py's summary walks every function's facts, into an import cycle the lint itself never follows."""
    write(tmp_path, {
        "a.py": "from torch.utils.data import DataLoader\nfrom b import loader\n\n\ndef f():\n    for x in loader:\n        print(x)\n",
        "b.py": "from c import loader\n",
        "c.py": "from b import loader\n",
        "x.py": "import torch\nfrom a import Base\n\n\nclass Net(Base):\n    pass\n\n\nmodel = torch.nn.Linear(2, 2).cuda()\n",
    })
    fresh_process(monkeypatch)
    expected = actual_findings(lint(tmp_path / "x.py", tmp_path, cached=False).findings)
    assert [finding[2] for finding in expected] == ["TL205"]
    for _ in ("built", "stored"):
        fresh_process(monkeypatch)
        assert actual_findings(lint(tmp_path / "x.py", tmp_path).findings) == expected


STARS = {
    "base.py": "from torch.cuda.amp import autocast\n",
    "common.py": "import torch\nfrom base import *\n",
    "train.py": "from common import *\n\nwith autocast():\n    y = torch.ones(2)\n",
}


def test_what_a_star_import_binds_is_read_from_the_stored_summary(tmp_path, monkeypatch):
    """`autocast` in train.py comes from base.py through two star imports: the names common.py exports are kept in
    its summary, so a later process parses neither file, and an edit to base.py is seen through the chain."""
    write(tmp_path, STARS)
    codes = []
    for _ in ("built", "stored"):
        parsed = fresh_process(monkeypatch)
        codes.append([finding[2] for finding in actual_findings(lint(tmp_path / "train.py", tmp_path).findings)])
    assert codes == [["TL602"], ["TL602"]]
    assert parsed == []
    write(tmp_path, {"base.py": "from contextlib import nullcontext as autocast\n"})
    fresh_process(monkeypatch)
    assert actual_findings(lint(tmp_path / "train.py", tmp_path).findings) == []


def test_a_cycle_of_star_imports_binds_what_each_file_imports(tmp_path, monkeypatch):
    write(tmp_path, {
        "first.py": "from second import *\nimport torch\n\nwith autocast():\n    y = torch.ones(2)\n",
        "second.py": "from first import *\nfrom torch.cuda.amp import autocast\n",
    })
    for cached in (False, True):
        fresh_process(monkeypatch)
        found = actual_findings(lint(tmp_path / "first.py", tmp_path, cached).findings)
        assert [finding[2] for finding in found] == ["TL602"]
        found = actual_findings(lint(tmp_path / "second.py", tmp_path, cached).findings)
        assert [finding[2] for finding in found] == ["TL602"]


NO_GRAD_BACKWARD = (
    "\nmodel = torch.nn.Linear(4, 2)\nwith torch.no_grad():\n    out = model(torch.randn(1, 4))\nout.sum().backward()\n"
)


@pytest.mark.parametrize("files, reported", [
    # An installed package's star import (not a file of the project) and torch's names written on `torch`.
    ({"notebook.py": "from torch_snippets import *\n" + NO_GRAD_BACKWARD}, True),
    # An import from torch that binds no `torch` (Modern-CV's `from torch.utils.data import DataLoader`): the name
    # `torch` the file reads is still the star import's.
    ({"notebook.py": "from torch_snippets import *\nfrom torch.utils.data import DataLoader\n" + NO_GRAD_BACKWARD}, True),
    # The module binds `torch` itself, to something else: that binding wins.
    ({"notebook.py": "from torch_snippets import *\nimport numpy as torch\n" + NO_GRAD_BACKWARD}, False),
    # The star-imported module is a file of the project, which does not export torch.
    ({"snippets.py": "import numpy as np\n", "notebook.py": "from snippets import *\n" + NO_GRAD_BACKWARD}, False),
], ids=["installed", "imports-from-torch", "binds-torch-itself", "project-module"])
def test_a_star_import_of_an_installed_package_binds_torch_only_where_nothing_else_can(tmp_path, monkeypatch, files, reported):
    """`torch` after `from torch_snippets import *` is torch's in a file that binds no `torch` itself and star-imports
    a module that is no file of the project (analysis/summaries.py, `_torch_from_installed_star`)."""
    write(tmp_path, files)
    fresh_process(monkeypatch)
    codes = [finding[2] for finding in actual_findings(lint(tmp_path / "notebook.py", tmp_path, cached=False).findings)]
    assert codes == (["TL101"] if reported else [])
