"""Run witness programs in isolated processes.

Each program is written to `witness.py` in a fresh temporary folder and run as
the main module there (a script, not `-c`: spawn children re-import the main
module from its path), in its own session so that it and every process it
starts are killed together, under limits on address space, CPU time, file size
(and, for a user other than root, process count), with an environment reduced
to what Python and torch need, and, where the kernel allows, in namespaces of
its own: no network, every mount read-only but its folder, its own PID
namespace (see `zygote.py`). The folder is removed afterwards and any process
left in the session is killed; at the end every process still descending from
the fork server is killed too.

Witnesses are forked from a fork server (`zygote.py`), itself started as
`python -I` with the same limits and environment, that has imported torch once:
importing torch takes about 2.5 s of CPU per process (measured, torch 2.13),
which would make a fixture set of a hundred findings take minutes on two cores.

Runs are polled from one thread: `preexec_fn` is unsafe when other threads exist.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from torchlint.verify.prelude import VERDICT_MARK

PRELUDE = Path(__file__).with_name("prelude.py").read_text(encoding="utf-8")
ZYGOTE = Path(__file__).with_name("zygote.py")
# A CPU torch process maps about 0.6 GiB of address space and a fork worker as much again
# (measured with torch 2.13); 4 GiB leaves room for workers and small tensors.
CPU_ADDRESS_SPACE = 4 * 2**30
# The CUDA driver reserves address space far beyond physical memory, so under CUDA
# only the data segment (writable private mappings) is limited.
CUDA_DATA_SEGMENT = 32 * 2**30
# Beyond its wall-clock timeout a witness process may use this much CPU time (then SIGXCPU, and SIGKILL
# 5 s later): a bound for processes the parent's timeout does not reach directly.
CPU_SECONDS_MARGIN = 10
# Files a witness writes (its output, the tensors DataLoader workers share) stay far below this.
FILE_SIZE = 256 * 2**20
# Processes a user other than root may start beyond those already running (the limit is per user).
EXTRA_PROCESSES = 256
# Variables a witness may see; everything else (TORCH_FORCE_*, PYTHON*, tokens, proxies) is dropped.
KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH")
POLL_SECONDS = 0.02
# How long a witness may wait for the server to import torch and fork it, before its own clock starts.
SERVER_START_SECONDS = 120.0


@dataclass(frozen=True)
class Job:
    program: str
    device: str = "cpu"
    timeout: float = 30.0
    # Variables set for this witness only (e.g. hiding GPUs for the CPU-build failure).
    env: Dict[str, str] = field(default_factory=dict)
    # Names from the checked file, judged on the live objects before the program runs.
    checks: Tuple[str, ...] = ()


@dataclass
class Outcome:
    verdict: Optional[dict]
    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool = False
    seconds: float = 0.0


def scrubbed_environment(workdir: str, extra: Dict[str, str]) -> Dict[str, str]:
    env = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ}
    env.update({
        "HOME": workdir,
        "TMPDIR": workdir,
        # Witnesses run side by side; one intra-op thread each keeps them from fighting for cores.
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
    })
    env.update(extra)
    return env


def _limits(job: Job) -> List[list]:
    cpu = int(job.timeout) + CPU_SECONDS_MARGIN
    limits = [["RLIMIT_CORE", 0], ["RLIMIT_CPU", [cpu, cpu + 5]], ["RLIMIT_FSIZE", FILE_SIZE]]
    if os.geteuid() != 0:  # root is exempt from RLIMIT_NPROC
        limits.append(["RLIMIT_NPROC", _user_processes() + EXTRA_PROCESSES])
    if job.device == "cuda":
        return limits + [["RLIMIT_DATA", CUDA_DATA_SEGMENT]]
    return limits + [["RLIMIT_AS", CPU_ADDRESS_SPACE]]


def _user_processes() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        try:
            count += entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid
        except OSError:
            pass
    return count


def _limit_server() -> None:
    # The server never allocates tensors itself; the tighter per-device limit is set in each witness.
    resource.setrlimit(resource.RLIMIT_DATA, (CUDA_DATA_SEGMENT, CUDA_DATA_SEGMENT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class _Server:
    """The fork server: started at once, so that its torch import overlaps the caller's own work."""

    def __init__(self):
        self.workdir = tempfile.mkdtemp(prefix="torchlint-verify-")
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(ZYGOTE)],
            cwd=self.workdir,
            env=scrubbed_environment(self.workdir, {}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_limit_server,
        )
        os.set_blocking(self.process.stdout.fileno(), False)
        self.buffer = b""
        # {protection: whether the kernel granted it}, once the server has imported torch and tried.
        self.protections: Optional[Dict[str, bool]] = None
        self.refusals: Dict[int, Dict[str, Optional[str]]] = {}
        self.requests = 0

    def _send(self, request: dict) -> None:
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()

    def start(self, number: int, job: Job) -> "_Witness":
        witness = _Witness(job)
        self._send({
            "id": number, "script": witness.script, "workdir": witness.workdir, "device": job.device,
            "env": scrubbed_environment(witness.workdir, job.env), "limits": _limits(job),
            "checks": list(job.checks), "verdict_mark": VERDICT_MARK,
        })
        return witness

    def judge(self, names: Sequence[str]) -> Dict[str, Optional[str]]:
        """{name: why it may not run in a witness, or None}, judged by the server on the live objects."""
        self.requests += 1
        number = -self.requests  # witnesses' ids are >= 0
        self._send({"id": number, "resolve": list(names)})
        pending: List[dict] = []
        deadline = time.monotonic() + SERVER_START_SECONDS
        while number not in self.refusals:
            if time.monotonic() > deadline:  # the server never answered: nothing it was asked about may run
                return {name: "could not be judged (the witness server did not answer)" for name in names}
            time.sleep(POLL_SECONDS)
            pending.extend(self.replies())
        self.buffer = b"".join((json.dumps(message) + "\n").encode() for message in pending) + self.buffer
        return self.refusals.pop(number)

    def replies(self) -> List[dict]:
        try:
            chunk = os.read(self.process.stdout.fileno(), 65536)
        except BlockingIOError:
            chunk = b""
        if not chunk and self.process.poll() is not None:
            raise RuntimeError("the witness fork server exited")
        self.buffer += chunk
        lines = self.buffer.split(b"\n")
        self.buffer = lines.pop()
        messages = []
        for message in (json.loads(line) for line in lines if line.strip()):
            if "protections" in message:
                self.protections = message["protections"]
            elif "refusals" in message:
                self.refusals[message["id"]] = message["refusals"]
            else:
                messages.append(message)
        return messages

    def close(self) -> None:
        _kill_descendants(self.process.pid)
        _kill_session(self.process.pid)
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)


class _Witness:
    def __init__(self, job: Job):
        self.job = job
        self.workdir = tempfile.mkdtemp(prefix="torchlint-verify-")
        self.script = os.path.join(self.workdir, "witness.py")
        with open(self.script, "w", encoding="utf-8") as handle:
            handle.write(PRELUDE + "\n\n# ---- witness ----\n" + job.program)
        self.started = time.monotonic()
        self.pid: Optional[int] = None
        self.status: Optional[int] = None

    def forked(self, pid: int) -> None:
        self.pid = pid
        self.started = time.monotonic()

    def overdue(self) -> bool:
        allowed = self.job.timeout if self.pid is not None else self.job.timeout + SERVER_START_SECONDS
        return time.monotonic() - self.started > allowed

    def finish(self) -> Outcome:
        seconds = time.monotonic() - self.started
        if self.pid is not None:
            _kill_session(self.pid)  # on timeout the witness itself; always, any worker it left behind
        stdout = _read(os.path.join(self.workdir, ".stdout"))
        stderr = _read(os.path.join(self.workdir, ".stderr"))
        shutil.rmtree(self.workdir, ignore_errors=True)
        returncode = os.waitstatus_to_exitcode(self.status) if self.status is not None else None
        return Outcome(_verdict(stdout), returncode, stdout, stderr, self.status is None, seconds)


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_descendants(root: int) -> None:
    """SIGKILL every process descending from `root` (not `root` itself), including those that left its session.

    Repeated until none is left: a process forking while its siblings are killed adds
    children, and killed processes' children are re-parented to the server (a subreaper).
    """
    for _ in range(100):
        children: Dict[int, List[int]] = {}
        try:
            entries = os.listdir("/proc")
        except OSError:  # no procfs: the sessions' kill is all there is
            return
        for entry in entries:
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
        found: Set[int] = set()
        pending = list(children.get(root, []))
        while pending:
            pid = pending.pop()
            if pid not in found:
                found.add(pid)
                pending.extend(children.get(pid, []))
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(POLL_SECONDS)


def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _verdict(stdout: str) -> Optional[dict]:
    for line in reversed(stdout.splitlines()):
        if line.startswith(VERDICT_MARK):
            try:
                return json.loads(line[len(VERDICT_MARK):])
            except ValueError:
                return None
    return None


class Pool:
    """Runs witnesses; use as a context manager so that the server and its folder always go."""

    def __init__(self):
        self.server = _Server()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.server.close()

    @property
    def protections(self) -> Optional[Dict[str, bool]]:
        """{protection: whether it is active}, as the fork server found the kernel; None before it reported."""
        return self.server.protections

    def resolver(self, names: Sequence[str] = ()) -> Callable[[str], Optional[str]]:
        """A judge of names on the live objects, `names` judged at once in one batch, others one by one."""
        known = self.server.judge(sorted(names)) if names else {}

        def judge(name: str) -> Optional[str]:
            if name not in known:
                known.update(self.server.judge([name]))
            return known[name]

        return judge

    def run(self, jobs: Sequence[Job], parallel: int, on_done: Optional[Callable[[int], None]] = None) -> List[Outcome]:
        """Run every job, at most `parallel` at a time; outcomes in the order of `jobs`."""
        outcomes: List[Optional[Outcome]] = [None] * len(jobs)
        # The slowest (spawn) witnesses start first, so that they do not finish the run alone.
        waiting = sorted(range(len(jobs)), key=lambda number: -jobs[number].timeout)
        running: Dict[int, _Witness] = {}
        try:
            while waiting or running:
                while waiting and len(running) < max(1, parallel):
                    number = waiting.pop(0)
                    running[number] = self.server.start(number, jobs[number])
                time.sleep(POLL_SECONDS)
                for message in self.server.replies():
                    witness = running.get(message["id"])
                    if witness is not None and "pid" in message:
                        witness.forked(message["pid"])
                    elif witness is not None:
                        witness.status = message["status"]
                for number, witness in list(running.items()):
                    if witness.status is None and not witness.overdue():
                        continue
                    outcomes[number] = running.pop(number).finish()
                    if on_done is not None:
                        on_done(len(jobs) - len(waiting) - len(running))
        finally:
            for witness in running.values():  # interrupted: leave nothing behind
                witness.finish()
        return outcomes  # type: ignore[return-value]


def run_all(jobs: Sequence[Job], parallel: int, on_done: Optional[Callable[[int], None]] = None) -> List[Outcome]:
    with Pool() as pool:
        return pool.run(jobs, parallel, on_done)
