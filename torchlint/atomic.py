"""Writing a file so that readers see the old bytes or the new ones, never half of either."""

from __future__ import annotations

import os
import stat
from typing import Optional


def replace_atomically(target: str, data: bytes, status: Optional[os.stat_result] = None) -> None:
    """Write `data` to a temporary file beside `target`, then rename it over `target`.

    With `status` (the original file's), the new file keeps its permissions and, where
    allowed, its owner.
    """
    # Imported here: with what it imports (random, shutil), some 5 ms that a lint writing nothing need not pay.
    import tempfile

    folder, name = os.path.split(target)
    descriptor, temporary = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".torchlint-tmp")
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
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
