"""Reading a file once and decoding it the way Python would (PEP 263, BOM).

The decoded text keeps the file's own line endings so that positions and fixes
refer to the bytes on disk; what is needed to write it back unchanged (encoding,
BOM) travels with it.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import io
import os
import re
import stat
import tokenize
from dataclasses import dataclass


class SourceError(Exception):
    """The file cannot be turned into text; carries a 1-based row and column."""

    def __init__(self, message: str, row: int = 1, column: int = 1):
        super().__init__(message)
        self.message = message
        self.row = row
        self.column = column


@dataclass(frozen=True)
class Source:
    text: str
    encoding: str
    bom: bool

    def encode(self, text: str) -> bytes:
        data = text.encode(self.encoding)
        return codecs.BOM_UTF8 + data if self.bom else data


class TooLarge(Exception):
    """The file is larger than the bytes its reader allows; it was not read."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"{size} bytes, over {limit}")
        self.size = size
        self.limit = limit


def read_bytes(path: str, max_bytes: int = 0) -> bytes:
    """A file's bytes; OSError for anything but a regular file (reading a FIFO would wait forever), TooLarge for one
    over `max_bytes` (0: any size), told by its size before anything is read."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if not max_bytes:
            return handle.read()
        if status.st_size > max_bytes:
            raise TooLarge(status.st_size, max_bytes)
        # No more than the budget even when the file grows while it is read.
        data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise TooLarge(len(data), max_bytes)
        return data


def decode(data: bytes) -> Source:
    """Decode source bytes per PEP 263; raise SourceError with the offending position."""
    if b"\x00" in data:
        row, column = _position_of(data, data.index(b"\x00"))
        raise SourceError("source contains a NUL byte", row, column)
    declared = _declares_encoding(data)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        if not declared:
            # tokenize blames a missing declaration when the first two lines are not UTF-8: say what is wrong, and where.
            _raise_undecodable(data, "utf-8", declared)
        raise SourceError(f"invalid encoding declaration: {error}", 1, 1) from None
    bom = encoding == "utf-8-sig"
    if bom:
        data = data[len(codecs.BOM_UTF8):]
        encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        _raise_undecodable(data, encoding, declared)
    return Source(text=text, encoding=encoding, bom=bom)


# PEP 263: a comment in the first two lines matching `coding[:=]\s*([-\w.]+)`.
_DECLARATION = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+", re.MULTILINE)


def _declares_encoding(data: bytes) -> bool:
    return any(_DECLARATION.match(line) for line in data.splitlines()[:2])


def _raise_undecodable(data: bytes, encoding: str, declared: bool) -> None:
    """Raise the SourceError for bytes that are not text in `encoding`, at the first offending byte."""
    try:
        data.decode(encoding)
    except UnicodeDecodeError as error:
        row, column = _position_of(data, error.start)
        problem = f"{error.reason} (byte 0x{data[error.start]:02x})"
        if declared:
            raise SourceError(f"not valid {encoding} text: {problem}", row, column) from None
        raise SourceError(f"the bytes are not valid UTF-8 (and the file declares no other encoding): {problem}", row, column) from None
    raise SourceError("invalid or missing encoding declaration", 1, 1)


def _position_of(data: bytes, offset: int) -> tuple:
    lines = data[:offset].splitlines(keepends=True) or [b""]
    if lines[-1].endswith((b"\n", b"\r")):
        lines.append(b"")
    return len(lines), len(lines[-1]) + 1


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list:
    """Lines as Python and libcst count them (str.splitlines also breaks on form feeds and others)."""
    return _LINE_BREAK.split(text)


def content_digest(data: bytes) -> bytes:
    """A file's identity by content: what the cache compares to know a project file is unchanged."""
    return hashlib.blake2b(data, digest_size=16).digest()
