"""Fixing files: read once, fix the decoded text, write back only what is safe to write.

A file is written only if it still holds the bytes that were linted (an editor or
another tool may have saved it meanwhile) and is writable; the new bytes go to a
temporary file in the same folder that then replaces the original in one rename,
with the original's permissions, encoding, BOM and line endings (a file with other hard
links is rewritten in place instead: `atomic.py`). A temporary file a killed run left beside
the file is removed then.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional

from torchlint import source as sources
from torchlint.atomic import remove_stale, replace_atomically
from torchlint.engine.runner import lint_bytes, lint_file, lint_text
from torchlint.finding import Finding
from torchlint.fixes.rounds import FixResult, fix_text

if TYPE_CHECKING:
    from torchlint.config import Config
    from torchlint.notebook import Part

# Python source is fixed as text; notebooks through their code cells; other files are only linted.
FIXABLE_SUFFIXES = (".py", ".pyi")
_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


@dataclass
class FileFix:
    filename: str
    # Where to write; None for standard input.
    path: Optional[str]
    # The bytes linted; None when the file could not be read.
    data: Optional[bytes]
    # The decoded file; None when it could not be decoded (its findings then say why).
    source: Optional[sources.Source]
    result: FixResult

    @property
    def findings(self) -> List[Finding]:
        return self.result.findings

    @property
    def changed(self) -> bool:
        return self.source is not None and self.result.changed

    def output(self) -> bytes:
        """The file's new bytes: fixed text in the file's own encoding and BOM."""
        if self.source is None:
            return self.data or b""
        return self.source.encode(self.result.text)


def unfixable(filename: str, path: Optional[str], data: Optional[bytes], findings: List[Finding]) -> FileFix:
    return FileFix(filename, path, data, None, FixResult("", "", findings=findings, original_findings=findings))


def fix_bytes(data: bytes, filename: str, config: "Config", unsafe: bool, path: Optional[str] = None) -> FileFix:
    try:
        source = sources.decode(data)
    except sources.SourceError:
        return unfixable(filename, path, data, lint_bytes(data, filename, config).findings)
    result = fix_text(source.text, lambda text: lint_text(text, filename, config), unsafe, filename)
    return FileFix(filename, path, data, source, result)


def fix_notebook_bytes(data: bytes, filename: str, config: "Config", unsafe: bool, path: Optional[str] = None) -> FileFix:
    """Fix a notebook's code cells as one script (and each `.py` file a cell writes as that file); only the changed
    cells' sources are rewritten."""
    from torchlint.notebook import fix_notebook, lint_notebook_bytes

    original_findings = lint_notebook_bytes(data, filename, config).findings
    try:
        source = sources.decode(data)
    except sources.SourceError:
        return unfixable(filename, path, data, original_findings)
    parts: List[FixResult] = []

    def fix_part(text: str, part: "Part") -> str:
        parts.append(fix_text(text, lambda fixed: part.lint(fixed, filename, config), unsafe, filename))
        return parts[-1].text

    text = sources.decode(fix_notebook(data, fix_part)).text
    findings = lint_notebook_bytes(source.encode(text), filename, config).findings if text != source.text else original_findings
    fixed = [finding for part in parts for finding in part.fixed]
    problems = [problem for part in parts for problem in part.problems]
    result = FixResult(source.text, text, fixed, findings, original_findings, problems, any(part.broken for part in parts))
    return FileFix(filename, path, data, source, result)


def fix_file(path: str, filename: str, config: "Config", unsafe: bool) -> FileFix:
    if path.endswith(".ipynb"):
        try:
            return fix_notebook_bytes(sources.read_bytes(path), filename, config, unsafe, path)
        except OSError:
            return unfixable(filename, path, None, lint_file(path, config, filename).findings)
    if not path.endswith(FIXABLE_SUFFIXES):
        return unfixable(filename, path, None, lint_file(path, config, filename).findings)
    try:
        data = sources.read_bytes(path)
    except OSError:
        # lint_file turns the same failure into the file's TL000 finding.
        return unfixable(filename, path, None, lint_file(path, config, filename).findings)
    return fix_bytes(data, filename, config, unsafe, path)


def write(fix: FileFix) -> Optional[str]:
    """Write a changed file in place; the reason it was not written, for the user, or None."""
    target = os.path.realpath(fix.path)
    try:
        status = os.stat(target)
        # Root passes os.access whatever the mode says: a file nobody may write is read-only for us too.
        if not status.st_mode & _WRITE_BITS or not os.access(target, os.W_OK):
            return f"{fix.filename}: the file is read-only; its fixes were not written"
        on_disk = sources.read_bytes(target)
        if on_disk != fix.data:
            return f"{fix.filename}: the file changed on disk during the run; its fixes were not written (run again)"
        data = fix.output()
        remove_stale(*os.path.split(target))
        replace_atomically(target, data, status)
    except UnicodeEncodeError as error:
        return f"{fix.filename}: the fixed text cannot be written in the file's encoding ({error.encoding}); its fixes were not written"
    except OSError as error:
        return f"{fix.filename}: cannot write the fixes: {error.strerror or error}"
    return None


