"""Helpers every witness program starts with (its text is prepended, not imported).

A witness runs as `python -I witness.py DEVICE` in an empty temporary folder and
ends by printing one verdict line that the parent reads back. Nothing here runs
torch code at import, so a spawn child that re-imports the script pays nothing.
"""

import json
import re
import sys
import warnings

VERDICT_MARK = "@@torchlint-verdict@@ "
DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


def _verdict(status, evidence, reason=""):
    import torch

    record = {"status": status, "evidence": evidence, "reason": reason, "torch": torch.__version__, "device": DEVICE}
    print("\n" + VERDICT_MARK + json.dumps(record), flush=True)
    sys.exit(0)


def confirmed(evidence):
    _verdict("confirmed", evidence)


def not_reproduced(evidence):
    _verdict("not-reproduced", evidence)


def skipped(reason, evidence=""):
    _verdict("skipped", evidence, reason)


def require(module):
    """Skip the witness when an optional module it needs is not installed."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        skipped(f"{module} is not installed")


def raised(function):
    """The exception `function()` raises, or None."""
    try:
        function()
    except Exception as error:  # the witness judges the type itself
        return error
    return None


def resolve(name):
    """The object a dotted name reaches as code does: attributes, importing submodules that are not loaded yet.

    A missing module raises `ModuleNotFoundError`, as the import statement would.
    """
    import importlib

    parts = name.split(".")
    found = importlib.import_module(parts[0])
    for index, part in enumerate(parts[1:], start=2):
        try:
            found = getattr(found, part)
        except AttributeError:
            found = importlib.import_module(".".join(parts[:index]))
    return found


def warnings_of(function):
    """(the warnings `function()` emits, every one recorded; the exception it raises, or None)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error = raised(function)
    return [record.message for record in caught], error


def describe(error):
    """`Type: first line of the message`, short enough for a report line."""
    if error is None:
        return "no exception"
    # Some torch messages carry terminal colour codes.
    first = (re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines() or [""])[0]
    if len(first) > 240:
        first = first[:237] + "..."
    return f"{type(error).__name__}: {first}"


def host_allocations(function):
    """(count, bytes) of host allocations `function()` makes, from the profiler's allocator events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        function()
    sizes = [
        event.cpu_memory_usage
        for event in profiler.profiler.function_events
        if event.name.startswith("aten::empty") and event.cpu_memory_usage > 0
    ]
    return len(sizes), sum(sizes)


def cuda_allocations(function):
    """(count, bytes, milliseconds) of CUDA caching-allocator allocations and time for `function()`."""
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    function()
    end.record()
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    count = after.get("allocation.all.allocated", 0) - before.get("allocation.all.allocated", 0)
    size = after.get("allocated_bytes.all.allocated", 0) - before.get("allocated_bytes.all.allocated", 0)
    return count, size, start.elapsed_time(end)
