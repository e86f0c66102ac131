"""The progress line of a long run: on standard error, only on a terminal, overwritten in place, gone at the end.

A run that takes more than `DELAY` seconds (a first run on a large folder, with nothing cached, can take a
minute) says what it is doing and for how long, instead of staying silent until the report; a quick run, a
pipe, a file and the JSON formats never see it. The line is redrawn by a thread every `INTERVAL` seconds
with `\\r`, and blanked out before the report is written.
"""

from __future__ import annotations

import threading
import time
from typing import Optional, TextIO

DELAY = 0.5
INTERVAL = 0.25


class Progress:
    """`with Progress(sys.stderr, "checking", 348):` shows `torchlint: checking 348 files... 3 s` while the block runs
    (`advance()` after each file, where the caller sees them one by one, shows `12/348`)."""

    def __init__(self, stream: TextIO, verb: str, total: int, enabled: bool = True):
        self.stream = stream
        self.verb = verb
        self.total = total
        self.done: Optional[int] = None
        self.enabled = enabled and _is_terminal(stream)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._width = 0
        self._started = 0.0

    def advance(self) -> None:
        self.done = (self.done or 0) + 1

    def __enter__(self) -> "Progress":
        if self.enabled:
            self._started = time.monotonic()
            if DELAY <= 0:
                self._show()
            self._thread = threading.Thread(target=self._run, name="torchlint-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()

    def _run(self) -> None:
        if self._stop.wait(DELAY):
            return
        while not self._stop.is_set():
            self._show()
            self._stop.wait(INTERVAL)

    def _show(self) -> None:
        count = f"{self.done}/{self.total}" if self.done is not None else str(self.total)
        line = f"torchlint: {self.verb} {count} {'file' if self.total == 1 else 'files'}... {time.monotonic() - self._started:.0f} s"
        # Padded to the longest line so far, so that a shorter one leaves nothing of the last behind it.
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = max(self._width, len(line))


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a stand-in without isatty, or a closed stream
        return False
