"""Findings remembered between runs, so that unchanged files are not parsed again.

An entry is found by the file's reported name and is valid only for the same bytes
linted with the same rules: its key digests the file's content and the codes
selected for it (per-file ignores included). It also lists the project files the
lint read through imports (`analysis/project.py`) with their digests, and is valid
only while each still has the same bytes: editing `model.py` re-lints `train.py`. Everything else that can change a
finding names the cache file itself: torchlint's version, its own code (an edited
rule must not serve stale findings), and the config's settings. So two settings
keep two caches and switching back and forth stays warm.

Summaries of imported project files (`analysis/summaries.py`) are kept beside the findings of
the same settings, one file each (`SummaryStore`).

The cache lives in `.torchlint_cache/` at the config root, next to a `.gitignore`
that keeps it out of version control. It is an optimisation only: a cache that is
missing, corrupt, from another version or unwritable is ignored silently and the
run lints every file, so the cache never changes what a run reports.
"""

from __future__ import annotations

import dataclasses
import hashlib
import marshal
import os
import stat
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple

import torchlint
from torchlint.atomic import replace_atomically
from torchlint.source import content_digest, read_bytes
from torchlint.finding import Edit, Finding, Fix, Location

FOLDER = ".torchlint_cache"
_MAGIC = b"torchlint-cache-2\n"
_CHECKSUM_SIZE = 16
# A cache file larger than this is not one torchlint wrote (a large project's findings take a few MiB): it is a
# miss, not a read that fills the memory.
_MOST_BYTES = 1 << 30
# Config fields that never change a finding: where files are looked for and what is done with findings.
_NOT_AFFECTING_FINDINGS = frozenset({"exclude", "per_file_ignores", "fix", "unsafe_fixes", "output_format", "root", "path"})

# filename -> (key, encoded findings, ((path of a project file the lint read, its digest), ...))
Entries = Dict[str, Tuple[bytes, tuple, tuple]]
Dependencies = Tuple[Tuple[str, bytes], ...]


class Cache:
    def __init__(self, path: Optional[Path], entries: Optional[Entries] = None):
        # None: nowhere to save (the folder could not be made); lookups still work for this run.
        self.path = path
        self._entries: Entries = entries if entries is not None else {}
        self._changed = False
        # path -> digest of a project file as this run found it (None: unreadable): many files import the same one.
        self._digests: Dict[str, Optional[bytes]] = {}

    @classmethod
    def load(cls, config) -> "Cache":
        """The cache for `config`'s settings under its root; empty when there is none or it cannot be read."""
        path = Path(config.root) / FOLDER / torchlint.__version__ / f"{settings_digest(config)}.bin"
        return cls(path, _read(path))

    def __contains__(self, filename: str) -> bool:
        return filename in self._entries

    @staticmethod
    def key(data: bytes, codes: FrozenSet[str]) -> bytes:
        digest = hashlib.blake2b(data, digest_size=20)
        digest.update(b"\0" + ",".join(sorted(codes)).encode())
        return digest.digest()

    def lookup(self, filename: str, key: bytes) -> Optional[List[Finding]]:
        entry = self._entries.get(filename)
        if entry is None or entry[0] != key or not self._unchanged(entry[2]):
            return None
        try:
            return [_decode(item) for item in entry[1]]
        except (TypeError, ValueError, IndexError):  # a damaged entry is a miss
            return None

    def _unchanged(self, dependencies: tuple) -> bool:
        """Every project file the cached lint read still has the bytes it had then."""
        for dependency in dependencies:
            try:
                path, digest = dependency
                if path not in self._digests:
                    try:
                        self._digests[path] = content_digest(read_bytes(path))
                    except OSError:
                        self._digests[path] = None
                if self._digests[path] != digest:
                    return False
            except (TypeError, ValueError):
                return False
        return True

    def store(self, filename: str, key: bytes, findings: List[Finding], dependencies: Dependencies = ()) -> None:
        encoded = tuple(_encode(finding) for finding in findings)
        if any(finding.extra for finding in findings):
            try:  # reporters may attach any value to `extra`; what marshal cannot keep is not cached
                marshal.dumps(encoded)
            except ValueError:
                return
        entry = (key, encoded, tuple(dependencies))
        if self._entries.get(filename) != entry:
            self._entries[filename] = entry
            self._changed = True

    def save(self) -> None:
        """Write the cache if anything changed; any failure leaves the run unaffected."""
        if not self._changed or self.path is None:
            return
        try:
            _write(self.path, self._entries)
            self._changed = False
        except (OSError, ValueError):
            pass


def settings_digest(config) -> str:
    """A digest of everything besides the file and its codes that can change a finding."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(torchlint.__version__.encode())
    digest.update(_code_fingerprint().encode())
    for field in dataclasses.fields(config):
        if field.name not in _NOT_AFFECTING_FINDINGS:
            digest.update(f"{field.name}={_stable(getattr(config, field.name))}\n".encode())
    return digest.hexdigest()


_fingerprint: Optional[str] = None


def _code_fingerprint() -> str:
    """Names, sizes and modification times of torchlint's own files (an editable install changes under the version)."""
    global _fingerprint
    if _fingerprint is None:
        package = Path(torchlint.__file__).parent
        parts = []
        for directory, folders, names in os.walk(package):
            folders[:] = sorted(folder for folder in folders if folder != "__pycache__")
            for name in sorted(names):
                if name.endswith((".py", ".toml", ".json")):
                    stat = os.stat(os.path.join(directory, name))
                    parts.append(f"{os.path.relpath(os.path.join(directory, name), package)}:{stat.st_size}:{stat.st_mtime_ns}")
        _fingerprint = "\n".join(parts)
    return _fingerprint


def _stable(value) -> str:
    """A rendering of a config value that is the same in every run (no object addresses, no set order)."""
    if isinstance(value, (frozenset, set)):
        return "{" + ",".join(sorted(_stable(item) for item in value)) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_stable(item) for item in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_stable(key)}:{_stable(item)}" for key, item in sorted(value.items(), key=lambda pair: repr(pair[0]))) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value).__name__ + _stable({field.name: getattr(value, field.name) for field in dataclasses.fields(value)})
    patterns = getattr(value, "patterns", None)
    if patterns is not None:  # a pathspec: its patterns as written
        return "spec(" + ",".join(_stable(getattr(pattern, "pattern", repr(pattern))) for pattern in patterns) + ")"
    return repr(value)


# ---------------------------------------------------------------- encoding


def _location(location: Location) -> tuple:
    return (location.row, location.column)


def _encode(finding: Finding) -> tuple:
    fix = None
    if finding.fix is not None:
        edits = tuple((edit.content, _location(edit.location), _location(edit.end_location)) for edit in finding.fix.edits)
        fix = (finding.fix.applicability, finding.fix.message, edits)
    return (
        finding.code, finding.name, finding.message, finding.filename,
        _location(finding.location), _location(finding.end_location), fix, finding.cell, finding.extra,
    )


def _decode(item: tuple) -> Finding:
    code, name, message, filename, location, end_location, fix, cell, extra = item
    if fix is not None:
        applicability, fix_message, edits = fix
        fix = Fix(applicability, fix_message, tuple(Edit(content, Location(*start), Location(*end)) for content, start, end in edits))
    return Finding(code, name, message, filename, Location(*location), Location(*end_location), fix, cell, dict(extra))


def read_regular(path: Path) -> Optional[bytes]:
    """The bytes of the regular file at `path`, or None: anything else there (a FIFO, whose read would wait for a
    writer forever; a link to `/dev/zero`, which never ends; a folder) or a file over `_MOST_BYTES` is a miss. The
    next save renames a new file over whatever it was."""
    try:
        # O_NOFOLLOW: a link is never read through; O_NONBLOCK: opening a FIFO does not wait for a writer.
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_size > _MOST_BYTES:
            os.close(descriptor)
            return None
    except OSError:
        os.close(descriptor)
        return None
    with os.fdopen(descriptor, "rb") as handle:
        try:
            data = handle.read(_MOST_BYTES + 1)
        except OSError:
            return None
    return data if len(data) <= _MOST_BYTES else None


def _read(path: Path) -> Entries:
    data = read_regular(path)
    if data is None:
        return {}
    payload = data[len(_MAGIC) + _CHECKSUM_SIZE:]
    if not data.startswith(_MAGIC) or data[len(_MAGIC):len(_MAGIC) + _CHECKSUM_SIZE] != _checksum(payload):
        return {}
    try:
        entries = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {
        name: entry for name, entry in entries.items()
        if isinstance(name, str) and isinstance(entry, tuple) and len(entry) == 3
        and isinstance(entry[0], bytes) and isinstance(entry[1], tuple) and isinstance(entry[2], tuple)
    }


def _checksum(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=_CHECKSUM_SIZE).digest()


def _write(path: Path, entries: Entries) -> None:
    _make_folder(path.parent)
    payload = marshal.dumps(entries)
    # Written aside and renamed, so a concurrent run reads the old cache or the new one, never half of one.
    replace_atomically(str(path), _MAGIC + _checksum(payload) + payload)


def _make_folder(folder: Path) -> None:
    """`folder`, inside the cache folder, made with the cache folder's `.gitignore` when missing."""
    top = next(parent for parent in (folder, *folder.parents) if parent.name == FOLDER)
    top.mkdir(parents=True, exist_ok=True)
    ignore = top / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Created by torchlint: the cache is not part of the project.\n*\n")
    folder.mkdir(parents=True, exist_ok=True)


class SummaryStore:
    """Summaries of project files (`analysis/summaries.py`), one file each, next to the findings of the same settings.

    A summary is found by the file's path and holds the content digest it was built from: an edited file's summary
    is built again and replaces the old one, so the store holds one summary per imported file. Reads and writes
    that fail are ignored, as for the findings: a summary that cannot be read is built again from the file.
    """

    _MAGIC = b"torchlint-summary-1\n"

    def __init__(self, folder: Path):
        self.folder = folder

    @classmethod
    def for_config(cls, config) -> "SummaryStore":
        return cls(Path(config.root) / FOLDER / torchlint.__version__ / f"{settings_digest(config)}.summaries")

    def _path(self, path: str) -> Path:
        return self.folder / f"{hashlib.blake2b(os.path.abspath(path).encode(), digest_size=16).hexdigest()}.bin"

    def load(self, path: str, digest: bytes) -> Optional[bytes]:
        """The payload saved for `path` when it was saved for the bytes of this digest."""
        data = read_regular(self._path(path))
        if data is None:
            return None
        header = len(self._MAGIC) + _CHECKSUM_SIZE
        body = data[header:]
        if not data.startswith(self._MAGIC) or data[len(self._MAGIC):header] != _checksum(body):
            return None
        try:
            saved_digest, payload = marshal.loads(body)
        except (EOFError, ValueError, TypeError):
            return None
        return payload if saved_digest == digest and isinstance(payload, bytes) else None

    def save(self, path: str, digest: bytes, payload: bytes) -> None:
        body = marshal.dumps((digest, payload))
        try:
            _make_folder(self.folder)
            replace_atomically(str(self._path(path)), self._MAGIC + _checksum(body) + body)
        except OSError:
            pass
