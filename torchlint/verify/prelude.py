"""Helpers every witness program starts with (its text is prepended, not imported).

A witness runs as `python -I witness.py DEVICE` in an empty temporary folder and
ends by printing one verdict line that the parent reads back. Nothing here runs
torch code at import, so a spawn child that re-imports the script pays nothing.

First of all it installs an audit hook (`sys.addaudithook`; it cannot be removed)
that refuses, for the rest of the process and in spawn children that re-import
the script: starting programs other than this Python interpreter (`os.system`
always; `subprocess`, `os.exec*`, `os.posix_spawn` of anything else), network sockets, loading native code through `ctypes`,
writing, removing or renaming files outside the witness's folder and /dev/shm,
and signalling processes outside the witness's session. Forking stays allowed:
DataLoader workers are forked. An audit hook is no boundary against native code
that is already loaded; it is one layer of several (see docs/verify.md).
"""

import json
import re
import sys
import warnings

VERDICT_MARK = "@@torchlint-verdict@@ "
DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


def _install_guard():
    import os
    import socket

    folders = tuple(os.path.realpath(folder) + os.sep for folder in (os.getcwd(), "/dev/shm"))
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    session = os.getsid(0)
    refused = frozenset({
        "os.system", "os.startfile", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "webbrowser.open",
    })
    # Starting programs: only this interpreter (TL302's and TL311's witnesses run Python programs of their own).
    programs = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn")
    interpreter = os.path.realpath(sys.executable)

    def this_interpreter(executable, argv):
        program = executable if executable is not None else (argv[0] if argv else None)
        try:
            return program is not None and os.path.realpath(os.fsdecode(program)) == interpreter
        except (TypeError, ValueError):
            return False

    paths = {"os.remove": 0, "os.rmdir": 0, "os.rename": (0, 1), "os.replace": (0, 1), "os.link": (0, 1), "os.symlink": (0, 1),
             "os.mkdir": 0, "os.chmod": 0, "os.chown": 0, "os.truncate": 0, "os.utime": 0, "shutil.rmtree": 0}

    def inside(path):
        if isinstance(path, int):  # an open descriptor: where it points was judged when it was opened
            return True
        try:
            resolved = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return resolved == os.devnull or (resolved + os.sep).startswith(folders)

    def guard(event, args):
        if event in refused:
            raise PermissionError(f"torchlint verify: a witness may not {event}")
        if event in programs and not this_interpreter(args[0], args[1] if len(args) > 1 else None):
            raise PermissionError(f"torchlint verify: a witness may start no program but Python ({event})")
        if event == "open" and len(args) >= 3:
            flags = args[2] if isinstance(args[2], int) else 0
            mode = args[1] if isinstance(args[1], str) else ""
            if (flags & writes or any(letter in mode for letter in "wax+")) and args[0] is not None and not inside(args[0]):
                raise PermissionError(f"torchlint verify: a witness may not write {args[0]!r}")
        elif event in paths:
            where = paths[event]
            if not all(inside(args[index]) for index in ((where,) if isinstance(where, int) else where)):
                raise PermissionError(f"torchlint verify: a witness may not {event} outside its folder")
        elif event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            if getattr(args[0], "family", None) != socket.AF_UNIX:
                raise PermissionError("torchlint verify: a witness may not use the network")
        elif event == "socket.getaddrinfo":
            raise PermissionError("torchlint verify: a witness may not use the network")
        elif event in ("os.kill", "os.killpg") and args:
            # kill(pid > 0), kill(-pgid), killpg(pgid); 0 is the caller's own group, kill(-1) everyone.
            target = -args[0] if event == "os.kill" and args[0] < 0 else args[0]
            try:
                same = target == 0 and args[0] != -1 or target > 1 and os.getsid(target) == session
            except OSError:
                same = False
            if not same:
                raise PermissionError("torchlint verify: a witness may not signal processes outside its own")

    sys.addaudithook(guard)


if __name__ in ("__main__", "__mp_main__"):  # the witness itself or a spawn child, never torchlint
    _install_guard()


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
