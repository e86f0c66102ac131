"""The time and size a file may take to lint (`max-file-seconds`, `max-file-bytes`), and what happens when it takes more.

A file over the size budget is never read whole: its size is the file system's
(`source.read_bytes`), and the engine's memory grows with it (about 210 bytes a source
byte on real code, docs/performance.md). A file that takes longer than the time budget is
stopped where it is, in whichever rule or analysis is running: `time_limit` raises
`TimeBudgetExceeded` into the linting thread, with a timer signal (SIGALRM) in a main
thread, where Python runs signal handlers, and elsewhere (the language server's lint
thread) with an exception a timer thread sends to it (`PyThreadState_SetAsyncExc`). Both
arrive between two steps of Python code: a call into native code (libcst's parser) is
stopped when it returns, which is why the parse front refuses the shapes of code that make
that parser slow before calling it (engine/parsing.py).

Either way the file becomes one TL000 finding that names the budget, and the run goes
on. What the process keeps between files and may have been in the middle of changing
when the time ran out (the parsed trees, the project index) is dropped
(`forget_process_state`): the next file starts as in a fresh process.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

SECONDS_KEY = "max-file-seconds"
BYTES_KEY = "max-file-bytes"
# Far above what real code takes: a 4 MB file of real code (torch's own modules repeated) lints in 19 s and peaks
# at 840 MB on the 2-core test machine, and files of 10 MB are generated ones, mostly literals, which take much
# less (docs/performance.md). At about 210 bytes a byte of dense code, 20 MB is 4 GB. 0 turns a budget off.
DEFAULT_SECONDS = 60.0
DEFAULT_BYTES = 20_000_000


class TimeBudgetExceeded(BaseException):
    """Raised into the linting thread when its file's time is up.

    A BaseException: the walker turns a rule's `Exception` into that rule's internal-error finding, and the
    analyses catch `Exception` where a file they read does not parse; neither may take the budget for that.
    """


def time_message(seconds: float) -> str:
    return f"not linted: linting took longer than the per-file time budget of {seconds:g} s (`{SECONDS_KEY}`)"


def size_message(size: int, limit: int) -> str:
    return f"not linted: the file is {size:,} bytes, over the per-file size budget of {limit:,} bytes (`{BYTES_KEY}`)"


class _Deadline:
    """The one budget running in this process, if any: a lint that starts while it runs (nested in it; torchlint
    lints on one thread at a time) shares it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.armed = False
        # How many lints this process stopped: a caller that keeps results (the cache) keeps none of a stopped one,
        # which a less busy machine, or a larger budget, may finish.
        self.overruns = 0


_DEADLINE = _Deadline()


@contextmanager
def time_limit(seconds: Optional[float]) -> Iterator[None]:
    """Raise `TimeBudgetExceeded` in this thread if the block runs longer than `seconds` (None or 0: no limit)."""
    if not seconds or _DEADLINE.armed:
        yield
        return
    if _can_use_alarm():
        with _alarm(seconds):
            yield
    else:
        with _watchdog(seconds):
            yield


def _can_use_alarm() -> bool:
    # A timer already armed belongs to someone else (pytest-timeout, an embedding program): it is left alone.
    return (
        hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    )


def _on_alarm(signum, frame) -> None:
    # A signal delivered just before the block ended runs its handler just after: it must not raise then.
    if _DEADLINE.armed:
        raise TimeBudgetExceeded()


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    _DEADLINE.armed = True
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        _DEADLINE.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    """A timer thread that raises the exception in this one: where signals cannot be used (a thread other than the
    main one, a platform without `setitimer`). Without CPython's C API (another Python) there is no limit."""
    import ctypes  # here: most processes use the alarm, and the command line's start is kept short

    set_async_exc = getattr(getattr(ctypes, "pythonapi", None), "PyThreadState_SetAsyncExc", None)
    if set_async_exc is None:
        yield
        return
    target = threading.get_ident()

    def expire() -> None:
        # Under the lock: once the block has ended (`armed` is off) nothing is sent.
        with _DEADLINE.lock:
            if _DEADLINE.armed:
                set_async_exc(ctypes.c_ulong(target), ctypes.py_object(TimeBudgetExceeded))

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    _DEADLINE.armed = True
    try:
        timer.start()
        yield
    finally:
        with _DEADLINE.lock:
            _DEADLINE.armed = False
        timer.cancel()


def overruns() -> int:
    """How many lints this process has stopped for time so far."""
    return _DEADLINE.overruns


def forget_process_state() -> None:
    """Drop what this process keeps between files, after a lint stopped at an arbitrary point: a tree, a project
    module or one of its analyses may have been half made."""
    # Imported here: the project index builds on the engine.
    from torchlint.analysis.project import PROJECT
    from torchlint.engine import parsing

    _DEADLINE.overruns += 1
    parsing.forget_trees()
    # The project index has no reset of its own; a fresh one is what a new process would hold.
    PROJECT.__init__()
