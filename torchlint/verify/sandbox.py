"""Run witness programs in isolated processes.

Each program is written to `witness.py` in a fresh temporary folder and run as
the main module there (a script, not `-c`: spawn children re-import the main
module from its path), in its own session so that it and every process it
starts are killed together, under an address-space limit, with an environment
reduced to what Python and torch need. The folder is removed afterwards and any
process left in the session is killed.

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
from typing import Callable, Dict, List, Optional, Sequence

from torchlint.verify.prelude import VERDICT_MARK

PRELUDE = Path(__file__).with_name("prelude.py").read_text(encoding="utf-8")
ZYGOTE = Path(__file__).with_name("zygote.py")
# A CPU torch process maps about 0.6 GiB of address space and a fork worker as much again
# (measured with torch 2.13); 4 GiB leaves room for workers and small tensors.
CPU_ADDRESS_SPACE = 4 * 2**30
# The CUDA driver reserves address space far beyond physical memory, so under CUDA
# only the data segment (writable private mappings) is limited.
CUDA_DATA_SEGMENT = 32 * 2**30
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


def _limits(device: str) -> List[list]:
    if device == "cuda":
        return [["RLIMIT_DATA", CUDA_DATA_SEGMENT], ["RLIMIT_CORE", 0]]
    return [["RLIMIT_AS", CPU_ADDRESS_SPACE], ["RLIMIT_CORE", 0]]


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

    def start(self, number: int, job: Job) -> "_Witness":
        witness = _Witness(job)
        request = {
            "id": number, "script": witness.script, "workdir": witness.workdir, "device": job.device,
            "env": scrubbed_environment(witness.workdir, job.env), "limits": _limits(job.device),
        }
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        return witness

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
        return [json.loads(line) for line in lines if line.strip()]

    def close(self) -> None:
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
