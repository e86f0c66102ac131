"""What kind of file is linted: a notebook, a test, a script or a library module (`ctx.file_kind`).

Some problems depend on how the code runs: a DataLoader started at module level
crashes spawn workers when a script is run, not when a notebook cell is. The kind is
decided once per file, on first use, from the file's name and its top-level
statements only (never a walk), in this order:

- NOTEBOOK: said by the notebook adapter (torchlint/notebook.py), which turned the
  cells into the script the engine lints; or a `.py` notebook in percent format
  (jupytext's and VS Code's): a line that starts with `# %%`, which marks a cell
  (Lightning's tutorials, for one, are kept so and run as notebooks). Such a file
  can be run as a script too; torchlint takes it for what its cells say it is (a
  test file stays a test).
- TEST: pytest's and unittest's conventions: `test_*.py`, `*_test.py`,
  `conftest.py`, or any file under a folder named `tests` or `test` (in the path as
  given). A test with `unittest.main()` under a `__main__` guard is still a test.
- SCRIPT: a file that is run rather than imported: it has a module-level
  `if __name__ == "__main__":`, starts with a `#!` line, is a package's
  `__main__.py`, or has a name `import` cannot spell (`train-resnet.py`,
  `01_prepare.py`).
- LIBRARY: anything else.

Code that runs at import (a module-level training loop) does not make a file a
script: libraries run code on import too (registries, `for name in ...:` loops),
and telling training apart would need the walk. Such a file is exactly what TL302
reports, whatever its kind.
"""

from __future__ import annotations

import enum
import re
from typing import Optional

import libcst as cst

_SEPARATORS = re.compile(r"[\\/]")
_TEST_FOLDERS = frozenset({"tests", "test"})
# A cell marker of a notebook kept as a .py file: `# %%` or `# %% [markdown]` at the start of a line.
_PERCENT_CELL = re.compile(r"^# ?%%", re.MULTILINE)


class FileKind(enum.Enum):
    SCRIPT = "script"
    NOTEBOOK = "notebook"
    TEST = "test"
    LIBRARY = "library"


def source_file_kind(filename: str, text: str, module: cst.Module) -> FileKind:
    """The kind of a Python source file (a notebook is never one: its adapter says so)."""
    *folders, name = _SEPARATORS.split(filename)
    stem = name.rpartition(".")[0] or name
    if stem.startswith("test_") or stem.endswith("_test") or stem == "conftest" or not _TEST_FOLDERS.isdisjoint(folders):
        return FileKind.TEST
    # The pattern is tried at every position of the text: a plain search for `%%` rules out most files first.
    if "%%" in text and _PERCENT_CELL.search(text):
        return FileKind.NOTEBOOK
    if text.startswith("#!") or stem == "__main__" or not stem.isidentifier() or _has_main_guard(module):
        return FileKind.SCRIPT
    return FileKind.LIBRARY


def _has_main_guard(module: cst.Module) -> bool:
    return any(isinstance(statement, cst.If) and is_main_guard(statement.test) for statement in module.body)


def is_main_guard(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    comparison = test.comparisons[0]
    if not isinstance(comparison.operator, cst.Equal):
        return False
    sides = {_name_or_string(test.left), _name_or_string(comparison.comparator)}
    return sides == {"__name__", "'__main__'"}


def _name_or_string(expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.SimpleString):
        return "'" + expr.evaluated_value + "'" if isinstance(expr.evaluated_value, str) else None
    return None
