"""Where in the user's code something happened: the innermost frame that is theirs, and its path as they know it.

Used for what the module or the factory raised (`command.py`) and for where a phase was stuck (`deadline.py`).
"""

from __future__ import annotations

import os
import sysconfig
from traceback import FrameSummary
from typing import List, Optional


def innermost_user_frame(frames: List[FrameSummary]) -> Optional[FrameSummary]:
    """The last of `frames` in the user's code; the last of all when none is theirs; None when there are none."""
    theirs = [frame for frame in frames if not is_library(frame.filename)]
    return (theirs or frames or [None])[-1]


def is_library(path: str) -> bool:
    """torchlint itself, importlib's frozen frames, the standard library and installed packages."""
    if path.startswith("<"):
        return True
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = [here] + [sysconfig.get_paths()[name] for name in ("stdlib", "purelib", "platlib")]
    absolute = os.path.abspath(path)
    return any(absolute.startswith(os.path.abspath(root) + os.sep) for root in roots)


def shown_path(path: str) -> str:
    relative = os.path.relpath(path) if os.path.isabs(path) else path
    return path if relative.startswith("..") else relative
