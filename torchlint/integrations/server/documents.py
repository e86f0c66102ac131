"""What an open document lints as, under which config, and what the lint read.

A snapshot of a document (or of a notebook and its cells) is taken on the server's
event loop and linted on its one lint thread, by the functions `check` uses: the
engine's `lint_text` for Python source (the editor's text is already decoded), the
notebook adapter for a notebook (its cells written as the `.ipynb` the adapter
reads). The config is the one `check` finds from the document's folder (the
nearest torchlint.toml or pyproject.toml with `[tool.torchlint]`); without a config
file, globs are relative to the workspace folder that holds the document, where a
command line run from that folder would put them.

The project files a lint reads through imports (`analysis/project.py`) are kept with
its result: saving one of them re-lints the open documents that read it. Those
files are read from disk, so an unsaved edit to `model.py` reaches `train.py` when
it is saved.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

from torchlint.analysis.project import PROJECT
from torchlint.config import Config, ConfigError, build, find_config_file, load
from torchlint.engine.runner import lint_text, parse_error
from torchlint.finding import Finding
from torchlint.integrations.server.coordinates import Lines, Units
from torchlint.notebook import lint_notebook_bytes
from torchlint.project_settings import NBDEV_SETTINGS, PROJECT_FILES, REQUIREMENTS_GLOB

PYTHON_SUFFIXES = (".py", ".pyi")
CONFIG_FILES = ("torchlint.toml",)

CODE, MARKDOWN, RAW = "code", "markdown", "raw"


def normalised(path: str) -> str:
    """A path as the project index records it (absolute), comparable across spellings of the same file."""
    return os.path.normcase(os.path.abspath(path))


def changes_settings(path: str) -> bool:
    """A file whose change can change a config: a config file, or one the torch requirement is read from."""
    name = os.path.basename(path)
    return name in CONFIG_FILES or name in PROJECT_FILES or name == NBDEV_SETTINGS or fnmatch.fnmatch(name, REQUIREMENTS_GLOB)


@dataclass(frozen=True)
class Cell:
    uri: str
    kind: str  # CODE, MARKDOWN or RAW (a code cell in another language than Python)
    text: str
    version: Optional[int]


@dataclass(frozen=True)
class Snapshot:
    """One state of an open document: `version` counts the server's own changes, `lsp_version` is the client's."""

    uri: str
    version: int
    path: str
    text: str = ""
    lsp_version: Optional[int] = None
    # For a notebook: its cells in order (markdown included, as the engine numbers them from 1).
    cells: Optional[Tuple[Cell, ...]] = None

    @property
    def is_notebook(self) -> bool:
        return self.cells is not None

    def notebook_bytes(self) -> bytes:
        """The cells as the `.ipynb` file the notebook adapter reads."""
        cells = []
        for cell in self.cells or ():
            entry = {"cell_type": cell.kind, "metadata": {}, "source": cell.text}
            if cell.kind == CODE:
                entry.update(outputs=[], execution_count=None)
            cells.append(entry)
        notebook = {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 4}
        return json.dumps(notebook, ensure_ascii=False).encode("utf-8")

    def texts(self) -> Dict[str, str]:
        """The text of each document a finding can be in: the document, or each cell."""
        if self.cells is None:
            return {self.uri: self.text}
        return {cell.uri: cell.text for cell in self.cells}

    def versions(self) -> Dict[str, Optional[int]]:
        if self.cells is None:
            return {self.uri: self.lsp_version}
        return {cell.uri: cell.version for cell in self.cells}

    def uri_of(self, finding: Finding) -> str:
        """The document a finding is reported in: a notebook's finding without a cell goes to its first cell."""
        if not self.cells:
            return self.uri
        index = (finding.cell or 1) - 1
        return self.cells[index].uri if 0 <= index < len(self.cells) else self.cells[0].uri


@dataclass
class Linted:
    snapshot: Snapshot
    findings: List[Finding]
    config: Optional[Config] = None
    # The project files the lint read, normalised.
    dependencies: FrozenSet[str] = frozenset()
    _lines: Dict[str, Lines] = field(default_factory=dict)

    def lines(self, uri: str, units: Units) -> Lines:
        found = self._lines.get(uri)
        if found is None:
            found = self._lines[uri] = Lines(self.snapshot.texts().get(uri, ""), units)
        return found

    def by_uri(self) -> Dict[str, List[Finding]]:
        """The findings of each document, every document present (an empty list clears its diagnostics)."""
        found: Dict[str, List[Finding]] = {uri: [] for uri in self.snapshot.texts()}
        for finding in self.findings:
            found.setdefault(self.snapshot.uri_of(finding), []).append(finding)
        return found


class Configs:
    """The config of each folder, or why it cannot be loaded; loaded again once a settings file above the
    folder appears, changes or goes (a few directory listings a lint, so no editor event is needed)."""

    def __init__(self):
        self._by_folder: Dict[Tuple[str, Tuple[str, ...]], Tuple[tuple, Union[Config, str]]] = {}

    def for_file(self, path: str, workspace_folders: Sequence[str]) -> Union[Config, str]:
        folder = os.path.dirname(os.path.abspath(path))
        key = (folder, tuple(workspace_folders))
        fingerprint = _settings_files(Path(folder))
        cached = self._by_folder.get(key)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        try:
            found: Union[Config, str] = _load(Path(folder), _holding_folder(folder, workspace_folders))
        except ConfigError as error:
            found = str(error)
        self._by_folder[key] = (fingerprint, found)
        return found


def _settings_files(folder: Path) -> tuple:
    """Every file at or above `folder` that a config can be read from, with its size and modification time."""
    found = []
    for directory in [folder, *folder.parents]:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if changes_settings(entry.name):
                try:
                    status = entry.stat()
                except OSError:
                    continue
                found.append((entry.path, status.st_mtime_ns, status.st_size))
    return tuple(sorted(found))


def _load(folder: Path, workspace_folder: Path) -> Config:
    config_file = find_config_file(folder)
    if config_file is not None:
        return load(config_file, folder)
    return build({}, root=workspace_folder, path=None, where="defaults", torch_requirement_from=folder)


def _holding_folder(folder: str, workspace_folders: Sequence[str]) -> Path:
    """The innermost workspace folder holding `folder`; `folder` itself outside them all."""
    holding = [root for root in workspace_folders if folder == root or folder.startswith(root.rstrip(os.sep) + os.sep)]
    return Path(max(holding, key=len) if holding else folder).resolve()


def lint(snapshot: Snapshot, configs: Configs, workspace_folders: Sequence[str]) -> Linted:
    """The snapshot's findings as `check` reports them for the same text, with the project files read."""
    config = configs.for_file(snapshot.path, workspace_folders)
    if isinstance(config, str):
        # As the flake8 plugin says it: the document is not linted, and the reason is where it is seen.
        return Linted(snapshot, [parse_error(snapshot.path, f"torchlint cannot run: {config}")])
    if config.is_excluded(snapshot.path):
        return Linted(snapshot, [], config)
    PROJECT.start_recording()
    if snapshot.is_notebook:
        findings = lint_notebook_bytes(snapshot.notebook_bytes(), snapshot.path, config).findings
    else:
        findings = lint_text(snapshot.text, snapshot.path, config)
    dependencies = frozenset(normalised(path) for path in PROJECT.consulted)
    return Linted(snapshot, findings, config, dependencies)
