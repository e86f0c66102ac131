"""`torchlint check --watch`: lint, then lint again whenever a file that can change the findings changes.

What is watched: the linted paths' Python files, stubs and notebooks, and the config
files (`pyproject.toml`, `torchlint.toml`), through `watchfiles` (the `watch` extra).
Each run is the caller's: a whole `check` run with the same options. As in ruff, a
terminal is cleared before each run, so that what it shows is the latest run alone.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Sequence

# Erase the screen, then put the cursor in its top left corner.
CLEAR_SCREEN = "\x1b[2J\x1b[H"
# Besides watchfiles' Python suffixes (.py, .pyx, .pyd).
_EXTRA_SUFFIXES = (".pyi", ".ipynb", ".toml")


def watch(paths: Sequence[str], run: Callable[[], None]) -> int:
    """Call `run` now and after every change under `paths`, until interrupted; needs watchfiles."""
    import watchfiles

    _announce("Starting linter in watch mode...")
    run()
    for changes in watchfiles.watch(*paths, watch_filter=watchfiles.PythonFilter(extra_extensions=_EXTRA_SUFFIXES)):
        _announce(f"File change detected ({len(changes)} {'path' if len(changes) == 1 else 'paths'}), linting again...")
        run()
    return 0


def _announce(why: str) -> None:
    # The report goes to standard output: that is the screen to clear (a pipe or a file is left as it is).
    if sys.stdout.isatty():
        sys.stdout.write(CLEAR_SCREEN)
        sys.stdout.flush()
    print(f"[{time.strftime('%H:%M:%S')}] {why}", file=sys.stderr, flush=True)
