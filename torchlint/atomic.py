"""Writing a file so that readers see the old bytes or the new ones, never half of either.

The new bytes go to a temporary file beside the target, named `.NAME.PID.TOKEN.torchlint-tmp`,
which then replaces the target in one rename. A run killed between the two leaves that file
behind; the next fix of the same file removes it once its process is gone (`remove_stale`),
and discovery never lints it (its name ends in `.torchlint-tmp`, no source suffix).

A file with other hard links is the exception: a rename would give this name a new inode and
leave the other names with the old bytes. Its new bytes are first written in full to the
temporary file (so a full disk is found before the file is touched), then copied into the file
itself, which keeps its inode, links, owner, mode and extended attributes; a reader may see a
half-written file for that moment. When that copy fails, the temporary file is renamed over the
target after all: the file is whole, and only that one link is broken.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from typing import Optional

SUFFIX = ".torchlint-tmp"
# A temporary file of a process that is gone, untouched this long, is left over from a killed run. The age guards
# a live writer on another machine sharing the folder, whose process id means nothing here.
STALE_AFTER_SECONDS = 60
# Older temporary files had no process id in their name (`.NAME.RANDOM.torchlint-tmp`): only their age tells.
UNOWNED_STALE_AFTER_SECONDS = 3600
_OWNED = re.compile(r"\.(\d+)\.[0-9a-f]+" + re.escape(SUFFIX))


def replace_atomically(target: str, data: bytes, status: Optional[os.stat_result] = None) -> None:
    """Write `data` to a temporary file beside `target`, then rename it over `target`.

    With `status` (the original file's), the new file keeps its permissions and, where
    allowed, its owner; a file with other hard links (`status.st_nlink > 1`) is rewritten
    in place instead, after the temporary file holds all of `data` (the module says why).
    """
    folder, name = os.path.split(target)
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}{SUFFIX}")
    # O_EXCL: never write through a file or link someone else put there.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if status is not None else 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if status is not None:
                os.fchmod(handle.fileno(), stat.S_IMODE(status.st_mode))
                if (status.st_uid, status.st_gid) != (os.getuid(), os.getgid()):
                    try:
                        os.fchown(handle.fileno(), status.st_uid, status.st_gid)
                    except PermissionError:
                        pass  # only root may give a file away; the file then belongs to whoever fixed it
        if status is not None and status.st_nlink > 1 and _rewrite_in_place(target, data):
            os.unlink(temporary)
            return
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _rewrite_in_place(target: str, data: bytes) -> bool:
    """Overwrite `target`'s bytes through its own inode; False when that failed (the caller renames instead)."""
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.truncate()
            handle.flush()
            os.fsync(handle.fileno())
    except OSError:
        return False
    return True


def write_file(target: str, data: bytes) -> None:
    """Write a whole file (a report): atomically where `target` is a regular file or does not exist yet, straight
    into it where it is something else (`/dev/stdout`, a pipe, a device), which a rename would replace."""
    try:
        status = os.stat(target)
    except FileNotFoundError:
        status = None
    if status is not None and not stat.S_ISREG(status.st_mode):
        with open(target, "wb") as handle:
            handle.write(data)
        return
    real = os.path.realpath(target)  # a link to the report stays a link
    remove_stale(*os.path.split(real))
    replace_atomically(real, data, status)


def remove_stale(folder: str, name: str) -> None:
    """Remove the temporary files of `name` in `folder` that a killed run left: never one a live process may still write."""
    prefix = f".{name}."
    try:
        entries = [entry for entry in os.scandir(folder) if entry.name.startswith(prefix) and entry.name.endswith(SUFFIX)]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        owned = _OWNED.fullmatch(entry.name[len(prefix) - 1:])
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
            if owned is not None:
                stale = age > STALE_AFTER_SECONDS and not _alive(int(owned.group(1)))
            else:
                stale = age > UNOWNED_STALE_AFTER_SECONDS
            if stale:
                os.unlink(entry.path)
        except OSError:
            continue  # gone already, or not ours to remove


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OverflowError:
        return False  # a number no process can have
    except PermissionError:
        return True  # another user's process
    return True
