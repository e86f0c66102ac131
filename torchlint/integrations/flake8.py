"""The flake8 plugin: `flake8 --select TL` reports what `torchlint check` reports.

flake8 has already read and decoded the file; the plugin joins its lines and
hands them to the engine, which parses them once with libcst. flake8's own AST
(`tree`) is only the price of being a tree plugin. Options come from the
`[tool.torchlint]` table nearest to the file, loaded once per folder.

Syntax errors never reach the plugin: flake8 reports them itself as E999
before running tree plugins, so TL000 has no flake8 counterpart.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Iterator, List, Tuple, Union

from torchlint import __version__
from torchlint.config import Config, ConfigError, load
from torchlint.engine.runner import lint_text
from torchlint.rules.syntax.parse_error import ParseError

Report = Tuple[int, int, str, type]


@lru_cache(maxsize=None)
def _config_for(directory: Path) -> Union[Config, str]:
    """The config that governs files in `directory`, or why it cannot be loaded."""
    try:
        return load(None, directory)
    except ConfigError as error:
        return str(error)


class TorchlintChecker:
    name = "torchlint"
    version = __version__

    def __init__(self, tree: ast.AST, lines: List[str], filename: str):
        self.lines = lines
        self.filename = filename

    def run(self) -> Iterator[Report]:
        try:
            reports = list(self._reports())
        except Exception as error:  # flake8 must go on with its other plugins and files
            reports = [self._problem(f"internal error in torchlint: {type(error).__name__}: {error}; please report this bug")]
        yield from reports

    def _reports(self) -> Iterator[Report]:
        config = _config_for(Path(self.filename).parent.resolve())
        if isinstance(config, str):
            yield self._problem(f"torchlint cannot run: {config}")
            return
        if config.is_excluded(self.filename):
            return
        for finding in lint_text("".join(self.lines), self.filename, config):
            # flake8 counts columns from 0 and adds 1 when it prints them.
            yield finding.location.row, finding.location.column - 1, f"{finding.code} {finding.message}", type(self)

    def _problem(self, message: str) -> Report:
        return 1, 0, f"{ParseError.code} {message}", type(self)
