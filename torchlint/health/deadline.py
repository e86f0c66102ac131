"""A time limit for each phase of `doctor` that runs the user's code: one that never returns ends the run with
a report saying which phase and where it was stuck, instead of a hang.

The user's code runs in the main thread, as it would in their script (`signal.signal` at import works there,
and only there); a timer thread watches it. Python cannot stop a thread, so when the time is up the timer thread
writes the report itself and ends the process (`os._exit`), without waiting for the stuck code.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from typing import Callable, Iterator, NoReturn, Optional

from torchlint.health.user_code import innermost_user_frame, shown_path

# Long enough for a first step of a large model on a CPU, or an import that builds a dataset; a hang still ends.
DEFAULT_SECONDS = 300.0


class Deadline:
    def __init__(self, seconds: Optional[float]):
        # None or 0: no limit.
        self.seconds = seconds or None

    @contextlib.contextmanager
    def phase(self, expired: Callable[[str], NoReturn]) -> Iterator[None]:
        """Run the block; when it has not finished within the limit, `expired(where)` runs in the timer thread and
        ends the process. `where` is ` (stuck at FILE:LINE, in FUNCTION)`, the innermost frame of the user's code
        (else of any code) the main thread was in, or "" when none can be found."""
        if self.seconds is None:
            yield
            return
        main = threading.get_ident()
        # Held by whichever side settles the phase first: the block finishing, or the timer expiring. The timer
        # never lets go of it (the process ends), so a block that finishes at that moment waits for the end.
        settled = threading.Lock()
        finished = False

        def expire() -> None:
            with settled:
                if not finished:
                    expired(_where(main))

        timer = threading.Timer(self.seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            with settled:
                finished = True
            timer.cancel()


def _where(thread: int) -> str:
    frame = sys._current_frames().get(thread)
    chosen = innermost_user_frame(traceback.extract_stack(frame)) if frame is not None else None
    if chosen is None:
        return ""
    return f" (stuck at {shown_path(chosen.filename)}:{chosen.lineno}, in {chosen.name})"


def end_process(code: int) -> NoReturn:
    """Flush what was written and end now: the stuck main thread would keep an ordinary exit waiting."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
