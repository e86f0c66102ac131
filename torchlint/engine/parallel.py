"""Lint many files: answers from the cache first, the rest in a pool of worker processes.

The run's `Config` is resolved once, in the parent, and handed to each worker once
by the pool's initializer, with the files to lint, cut into one run of neighbouring
files per worker (`_Lanes`). Results come back in the order the files were given, so
a run's output is the same with one process or many. `jobs=1` lints in this process,
without a pool.

A result keeps the file's decoded source only when it has findings (the reporters
quote those lines): a run's memory then grows with its findings, not its files.

The kind of file is chosen here, above the per-file linter (`lint_file_bytes`): a
notebook goes to its adapter (torchlint/notebook.py), anything else to the engine
as Python source (engine/runner.py), which knows nothing of notebooks.
"""

from __future__ import annotations

import gc
import os
import sys
from bisect import bisect_left
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterable, Iterator, List, Optional, Sequence, Tuple

from torchlint import source as sources
from torchlint.cache import Cache
from torchlint.engine import budget
from torchlint.finding import FileResult

if TYPE_CHECKING:
    from torchlint.config import Config

# While many files are linted, the cycle collector runs once per this many files, not on its own (`_collector`).
_FILES_PER_COLLECTION = 1000

_worker_config: Optional["Config"] = None
_worker_prefilter = True
_worker_lanes: Optional["_Lanes"] = None


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def lint_files(
    files: Iterable[Tuple[str, str]],
    config: "Config",
    jobs: Optional[int] = None,
    cache: Optional[Cache] = None,
    use_prefilter: bool = True,
) -> List[FileResult]:
    """Lint (path on disk, name to report) pairs; `jobs` None or below 1 means one worker per core.

    `use_prefilter=False` runs every rule on every file (benchmarks/run.py proves that this changes no finding).
    """
    files = list(files)
    results: List[Optional[FileResult]] = [None] * len(files)
    pending = []
    for index, (path, filename) in enumerate(files):
        results[index] = _from_cache(cache, path, filename, config) if cache is not None else None
        if results[index] is None:
            pending.append(index)
    work = [files[index] for index in pending]
    linted = _lint_all(work, config, jobs if jobs and jobs > 0 else default_jobs(), cache is not None, use_prefilter)
    for index, (key, result) in zip(pending, linted):
        if cache is not None and key is not None:
            cache.store(result.filename, key, result.findings, result.dependencies)
        results[index] = result
    if cache is not None:
        cache.save()
    return results


def _from_cache(cache: Cache, path: str, filename: str, config: "Config") -> Optional[FileResult]:
    if filename not in cache:
        return None
    try:
        data = sources.read_bytes(path, config.max_file_bytes)
    except (OSError, sources.TooLarge):  # linted, to say why
        return None
    findings = cache.lookup(filename, cache.key(data, config.codes_for(filename)))
    if findings is None:
        return None
    source = None
    if findings:
        try:
            source = sources.decode(data)
        except sources.SourceError:
            pass
    return FileResult(filename, findings, source)


def _lint_all(
    work: Sequence[Tuple[str, str]], config: "Config", jobs: int, keyed: bool, use_prefilter: bool
) -> List[Tuple[Optional[bytes], FileResult]]:
    workers = min(jobs, len(work))
    if workers <= 1:
        with _collector.deferred():
            return [_lint_one(path, filename, config, keyed, use_prefilter) for path, filename in work]
    # Imported only for a pool: a one-process run does not pay for multiprocessing's import.
    from concurrent.futures import ProcessPoolExecutor

    # Imported before the fork, so that the workers start with the engine and every rule loaded
    # instead of each importing them (libcst alone is a third of a second).
    from torchlint.engine.runner import rules_by_code

    rules_by_code()
    context = _context()
    lanes = _Lanes.split(work, workers, context)
    # The collector of each worker would otherwise walk every inherited object and copy its pages;
    # the parent's objects are thawed once the workers are done, so a long-lived caller frees them as usual.
    gc.freeze()
    try:
        initargs = (config, use_prefilter, lanes)
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=initargs) as pool:
            done = [pool.submit(_work_lane, lane, keyed) for lane in range(workers)]
            by_index = dict(pair for future in done for pair in future.result())
    finally:
        gc.unfreeze()
    return [by_index[index] for index in range(len(work))]


class _Lanes:
    """The files in path order, cut into one run of neighbours per worker, which a worker takes from the front;
    a worker whose run is done takes the back half of the longest run left.

    Neighbours import each other (`from .engine import Engine`), and a file imported by a file a worker lints is
    parsed in that worker (analysis/project.py): handed out as they came (largest first), two workers parsed
    the same imported files, 19% more source on the benchmark sample and 31% more at four times its size, the
    whole of the two-process run's extra CPU time. Runs of neighbours keep an imported file with its importers,
    and halving what is left keeps a late imbalance to about one file.
    """

    def __init__(self, items: List[Tuple[str, str]], indices: List[int], bounds):
        self.items = items
        self.indices = indices
        # Shared by the workers: start and end of each run, in positions of `items`.
        self.bounds = bounds

    @classmethod
    def split(cls, work: Sequence[Tuple[str, str]], count: int, context) -> "_Lanes":
        indices = sorted(range(len(work)), key=lambda index: work[index][0])
        sizes = [_size(work[index][0]) + 1 for index in indices]
        total = sum(sizes)
        # A file goes to the run whose share of the bytes holds its middle.
        lane_of, running = [], 0
        for size in sizes:
            lane_of.append(min(count - 1, int((running + size / 2) * count / total)))
            running += size
        cuts = [bisect_left(lane_of, lane) for lane in range(count)] + [len(indices)]
        bounds = context.Array("q", [bound for lane in range(count) for bound in (cuts[lane], cuts[lane + 1])])
        return cls([work[index] for index in indices], indices, bounds)

    def take(self, lane: int) -> Optional[int]:
        """The position of the next file for the worker of `lane`, None when every file is taken."""
        bounds = self.bounds
        with bounds.get_lock():
            start, end = bounds[2 * lane], bounds[2 * lane + 1]
            if start < end:
                bounds[2 * lane] = start + 1
                return start
            lanes = range(len(bounds) // 2)
            victim = max(lanes, key=lambda other: bounds[2 * other + 1] - bounds[2 * other])
            start, end = bounds[2 * victim], bounds[2 * victim + 1]
            if start >= end:
                return None
            middle = start + (end - start) // 2
            bounds[2 * victim + 1] = middle
            bounds[2 * lane], bounds[2 * lane + 1] = middle + 1, end
            return middle


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _context():
    import multiprocessing

    # Forking starts workers that already imported torchlint; elsewhere fork is unsafe or absent.
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _start_worker(config: "Config", use_prefilter: bool, lanes: _Lanes) -> None:
    global _worker_config, _worker_prefilter, _worker_lanes
    _worker_config, _worker_prefilter, _worker_lanes = config, use_prefilter, lanes
    # A worker lints files until the pool ends it.
    _collector.defer()


def _work_lane(lane: int, keyed: bool) -> List[Tuple[int, Tuple[Optional[bytes], FileResult]]]:
    """Lint files from the worker's run, then from the others' (`_Lanes`): (index in the work, result) pairs."""
    lanes = _worker_lanes
    done = []
    position = lanes.take(lane)
    while position is not None:
        path, filename = lanes.items[position]
        done.append((lanes.indices[position], _lint_one(path, filename, _worker_config, keyed, _worker_prefilter)))
        position = lanes.take(lane)
    return done


def _lint_one(path: str, filename: str, config: "Config", keyed: bool, use_prefilter: bool) -> Tuple[Optional[bytes], FileResult]:
    """The file's cache key (None when not keyed or unreadable) and its result, source kept only with findings."""
    # Imported on first use: a run answered from the cache never loads the engine, its rules or libcst.
    from torchlint.analysis.project import PROJECT
    from torchlint.analysis.summaries import SUMMARIES
    from torchlint.engine.runner import lint_file

    try:
        data = sources.read_bytes(path, config.max_file_bytes)
    except (OSError, sources.TooLarge):  # the finding that says why, not read again whole
        return None, lint_file(path, config, filename)
    # The project files this lint reads through imports are what its cached result depends on besides its bytes.
    PROJECT.start_recording()
    # Imported files' summaries are kept with the cached findings, and only then: without a cache, building one
    # would parse the file it spares parsing.
    SUMMARIES.use_store(config if keyed else None)
    _collector.linted_one()
    overruns = budget.overruns()
    result = lint_file_bytes(data, filename, config, use_prefilter)
    result.dependencies = tuple(sorted(PROJECT.consulted.items()))
    if not result.findings:
        result.source = None
    # A lint stopped by the time budget is not kept: on a less busy machine or with a larger budget it may finish.
    kept = keyed and budget.overruns() == overruns
    return (Cache.key(data, config.codes_for(filename)) if kept else None), result


class _DeferredCollector:
    """Python's cycle collector, run every `_FILES_PER_COLLECTION` files instead of on its own while files are linted.

    What a run keeps between files (the trees of project files read through imports, with their analyses:
    analysis/project.py, parsing.TREES) is some 300,000 objects on the benchmark sample, and the collector,
    left to itself, traverses them again and again as they age through its generations: 0.3 s of a 3 s
    run, where one full collection costs about 0.25 s. A lint leaves few cycles for it (about 20 objects a
    file on the sample: the stdlib's `ast.literal_eval` makes some), so a collection every thousand files
    keeps memory bounded at a cost of a few percent of the run.
    """

    def __init__(self):
        self.count = 0
        self.active = False

    def defer(self) -> None:
        """Defer it for the rest of the process (a pool's worker, which lints until the pool ends it)."""
        gc.disable()
        self.active = True

    @contextmanager
    def deferred(self) -> Iterator[None]:
        enabled = gc.isenabled()
        self.defer()
        try:
            yield
        finally:
            self.active = False
            if enabled:
                gc.enable()

    def linted_one(self) -> None:
        if self.active:
            self.count += 1
            if self.count % _FILES_PER_COLLECTION == 0:
                gc.collect()


_collector = _DeferredCollector()


def lint_file_bytes(data: bytes, filename: str, config: "Config", use_prefilter: bool = True) -> FileResult:
    """A file's bytes linted as what its name says: a notebook through its adapter, anything else as Python."""
    # Imported on first use, as above; the notebook adapter only for notebooks.
    if filename.endswith(".ipynb"):
        from torchlint.notebook import lint_notebook_bytes

        return lint_notebook_bytes(data, filename, config, use_prefilter)
    from torchlint.engine.runner import lint_bytes

    return lint_bytes(data, filename, config, use_prefilter)
