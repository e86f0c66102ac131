"""Where the server's lints run: two lanes, so that no document holds another back.

- Documents of ordinary size are linted on one thread of the server's process. It
  keeps the engine's trees (`engine/parsing.TREES`), so an edit is parsed by
  reparsing only the top-level statements it touched (`engine/reparse.py`), and the
  project index (`analysis/project.PROJECT`) is used by one lint at a time. A lint
  whose document changed before it starts is skipped (the caller passes
  `is_current`), so a burst of edits costs one lint of the latest text.
- A document of `LARGE_DOCUMENT_CHARS` or more is linted in a worker process of its
  own. Its lint can take seconds and gigabytes, and libcst's parser holds the
  interpreter lock while it runs, so in the server's process it would stall the
  protocol loop and every other document. In its own process it does neither: a
  lint gone stale (its document changed or closed) is cancelled by ending the
  process, the memory it held goes back to the system when the last large
  document closes, and `exit` never waits for it.

The threshold is in characters, the size the engine's own file budget counts in, so
the two can be tied together.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence

from torchlint.analysis.project import PROJECT
from torchlint.engine.runner import parse_error
from torchlint.integrations.server.documents import Configs, Linted, Snapshot, lint

# About 3,000 lines of Python: a lint of a few hundred milliseconds on the server's thread.
LARGE_DOCUMENT_CHARS = 120_000
# How long a large document's change waits for a further one before its lint starts: each change ends the lint
# under way, and a worker process costs about a second to start.
LARGE_SETTLE_SECONDS = 0.5
# How long a killed worker process is waited for.
STOP_SECONDS = 2.0

logger = logging.getLogger(__name__)


def size_of(snapshot: Snapshot) -> int:
    return sum(len(text) for text in snapshot.texts().values())


def lint_or_report(snapshot: Snapshot, configs: Configs, folders: Sequence[str]) -> Linted:
    """The snapshot's lint; an exception (a torchlint bug: the engine turns bad input into findings) becomes a
    TL000 diagnostic that asks for a report, and its traceback goes to the log."""
    try:
        return lint(snapshot, configs, folders)
    except Exception as error:
        logger.exception("linting %s failed", snapshot.path)
        message = f"internal error in torchlint: {type(error).__name__}: {error}; please report this bug"
        return Linted(snapshot, [parse_error(snapshot.path, message)])


# The worker process's configs (each process keeps its own).
_worker_configs: Optional[Configs] = None


def _lint_in_worker(snapshot: Snapshot, folders: Sequence[str]) -> Linted:
    global _worker_configs
    if _worker_configs is None:
        _worker_configs = Configs()
    return lint_or_report(snapshot, _worker_configs, folders)


def _serve(connection) -> None:
    """The worker process: run each call sent (a lint, or code actions over one), until the server closes its end."""
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):
            return
        try:
            result = function(*args)
        except Exception:  # a torchlint bug: the request gets no answer, the worker goes on
            logger.exception("%s failed in the large documents' worker", getattr(function, "__name__", function))
            result = None
        connection.send(result)


class _Worker:
    """One process for large documents: their lints and code actions, one at a time."""

    def __init__(self):
        # Spawned, not forked: the server's process has threads, and a fork copies their locks as they are.
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), name="torchlint-large-documents", daemon=True)
        self.process.start()
        child.close()

    def call(self, function, *args):
        """`function(*args)` in the process (both picklable), waited for on the calling thread; None when the
        process was stopped meanwhile."""
        try:
            self._connection.send((function, args))
            return self._connection.recv()
        except (EOFError, OSError):
            return None

    def stop(self) -> None:
        self.process.kill()
        self.process.join(STOP_SECONDS)
        self._connection.close()


class Lanes:
    def __init__(self, configs: Configs, large_chars: int = LARGE_DOCUMENT_CHARS):
        self.configs = configs
        self.large_chars = large_chars
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchlint-lint")
        # Waits on the worker process, so that large lints queue behind each other and not behind small ones.
        self._waiter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchlint-large")
        self._worker: Optional[_Worker] = None
        self._worker_lock = threading.Lock()
        # The document whose lint the worker process is running, if any.
        self._linting_large: Optional[str] = None

    def is_large(self, snapshot: Snapshot) -> bool:
        return size_of(snapshot) >= self.large_chars

    def settle_seconds(self, snapshot: Snapshot) -> float:
        """How long an edit of the document waits before its lint starts (none, unless it is large)."""
        return LARGE_SETTLE_SECONDS if self.is_large(snapshot) else 0.0

    async def lint(self, snapshot: Snapshot, folders: List[str], is_current: Callable[[Snapshot], bool]) -> Optional[Linted]:
        """The snapshot's lint, in its lane; None when it went stale before it ran or while it ran in the worker."""
        large = self.is_large(snapshot)
        lane, executor = (self._lint_large, self._waiter) if large else (self._lint_small, self._thread)
        return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(lane, snapshot, folders, is_current))

    async def run(self, function, *args, large: bool = False):
        """`function(*args)` where the document's lints run (code actions and fixes use the engine, and fix-all
        lints again): on the lint thread, or for a large document in the worker process."""
        if large:
            call = functools.partial(self._in_worker, None, function, *args)
            return await asyncio.get_running_loop().run_in_executor(self._waiter, call)
        return await asyncio.get_running_loop().run_in_executor(self._thread, functools.partial(function, *args))

    def forget_project_layout(self) -> None:
        """A project file appeared: the project index forgets which modules exist, in this process and in the
        worker's (which ends, so its next lint starts with none of it)."""
        self._thread.submit(PROJECT.forget_layout)
        self.release()

    def _lint_small(self, snapshot: Snapshot, folders: List[str], is_current) -> Optional[Linted]:
        if not is_current(snapshot):
            return None
        return lint_or_report(snapshot, self.configs, folders)

    def _lint_large(self, snapshot: Snapshot, folders: List[str], is_current) -> Optional[Linted]:
        if not is_current(snapshot):
            return None
        return self._in_worker(snapshot.uri, _lint_in_worker, snapshot, list(folders))

    def _in_worker(self, linting: Optional[str], function, *args):
        """`function(*args)` in the worker process, started if need be; `linting`: the document whose lint it is,
        which a change of that document stops."""
        with self._worker_lock:
            if self._worker is None:
                self._worker = _Worker()
            worker = self._worker
            self._linting_large = linting
        try:
            return worker.call(function, *args)
        finally:
            with self._worker_lock:
                self._linting_large = None

    def cancel(self, key: str) -> None:
        """The document changed or closed: a lint of it running in the worker is stopped (its result would be
        dropped), the worker with it; the next large lint starts another."""
        with self._worker_lock:
            if self._linting_large == key and self._worker is not None:
                logger.info("stopping the stale lint of %s", key)
                self._worker.stop()
                self._worker = None

    def release(self) -> None:
        """No large document is open: the worker process ends, and the memory it held with it."""
        with self._worker_lock:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None

    def close(self) -> None:
        """Stop at once: the worker process ends, queued lints are dropped, a lint under way is not waited for."""
        self.release()
        self._thread.shutdown(wait=False, cancel_futures=True)
        self._waiter.shutdown(wait=False, cancel_futures=True)
