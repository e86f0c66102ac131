"""File kinds: notebook, test, script or library, from the name and the top-level statements only."""

import libcst as cst
import pytest

from conftest import make_config
from torchlint.analysis.file_kind import FileKind, source_file_kind
from torchlint.engine.context import FileContext

GUARDED = 'def main():\n    pass\n\n\nif __name__ == "__main__":\n    main()\n'
PLAIN = "import torch\n\n\ndef main():\n    pass\n"


def kind(filename: str, text: str = PLAIN) -> FileKind:
    return source_file_kind(filename, text, cst.parse_module(text))


@pytest.mark.parametrize("filename", [
    "test_model.py", "model_test.py", "conftest.py", "tests/helpers.py", "pkg/test/data.py", "src\\tests\\data.py",
])
def test_tests_follow_pytest_naming_and_folders(filename):
    assert kind(filename) is FileKind.TEST


def test_a_test_with_a_main_guard_is_still_a_test():
    assert kind("tests/test_loader.py", GUARDED) is FileKind.TEST


@pytest.mark.parametrize("filename, text", [
    ("train.py", GUARDED),
    ("train.py", GUARDED.replace('__name__ == "__main__"', "'__main__' == __name__")),
    ("train.py", "#!/usr/bin/env python\n" + PLAIN),
    ("pkg/__main__.py", PLAIN),
    ("train-resnet.py", PLAIN),
    ("scripts/01_prepare.py", PLAIN),
])
def test_scripts_are_files_that_are_run_rather_than_imported(filename, text):
    assert kind(filename, text) is FileKind.SCRIPT


@pytest.mark.parametrize("text", ["# %%\n" + PLAIN, "# %% [markdown]\n# Notes\n\n# %%\n" + GUARDED, "#%%\n" + PLAIN])
def test_a_py_file_in_percent_format_is_a_notebook(text):
    assert kind("tutorial.py", text) is FileKind.NOTEBOOK
    assert kind("tests/test_tutorial.py", text) is FileKind.TEST


@pytest.mark.parametrize("text", [
    PLAIN,
    # A cell marker must start its line; this is a comment about one.
    "x = 1  # %% not a cell\n",
    # A guard inside a function is not the module's.
    'def main():\n    if __name__ == "__main__":\n        pass\n',
    # Code that runs on import does not make a script: libraries run code on import too.
    "for epoch in range(3):\n    train(epoch)\n",
])
def test_anything_else_is_a_library(text):
    assert kind("pkg/model.py", text) is FileKind.LIBRARY


def test_the_context_decides_the_kind_on_first_use_unless_an_adapter_said_it():
    module = cst.parse_module(GUARDED)
    assert FileContext("train.py", GUARDED, module, make_config()).file_kind is FileKind.SCRIPT
    given = FileContext("explore.ipynb", GUARDED, module, make_config(), file_kind=FileKind.NOTEBOOK)
    assert given.file_kind is FileKind.NOTEBOOK
