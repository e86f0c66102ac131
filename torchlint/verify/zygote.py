"""Fork server for witnesses: imports torch once, then forks one isolated child per witness.

Run by `sandbox.py` as `python -I zygote.py` (it imports nothing from torchlint).
Importing torch costs about 2.5 s of CPU per process; forking a process that has
already imported it costs milliseconds, so a fixture set verifies in seconds
instead of minutes. Every child is still its own process: its own session (the
parent kills the whole group on timeout), its own temporary folder as working
directory, its own address-space limit and scrubbed environment, and it runs the
witness file as `__main__` with `runpy`, so that spawn workers re-import it by path.

Protocol, one JSON object per line. Requests on stdin:
`{"id": N, "script": PATH, "workdir": DIR, "device": D, "env": {...}, "limits": [[RESOURCE, BYTES], ...]}`.
Replies on stdout: `{"id": N, "pid": PID}` once forked, `{"id": N, "status": WAITSTATUS}` when it ends.
"""

import json
import os
import resource
import runpy
import select
import sys
import traceback

try:  # what witnesses import; a failure here shows up in each witness's own output
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (building the first optimizer imports it: 5 s on its own)
    import torch.nn  # noqa: F401
    import torch.optim  # noqa: F401
    import torch.profiler  # noqa: F401
    import torch.utils.data  # noqa: F401
except Exception:
    pass


def run_child(request):
    """In the forked child: isolate, run the witness, never return."""
    code = 1
    try:
        os.setsid()
        os.chdir(request["workdir"])
        for name, limit in request["limits"]:
            resource.setrlimit(getattr(resource, name), (limit, limit))
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, name in ((1, ".stdout"), (2, ".stderr")):
            target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        # Fresh stream objects: the inherited ones may hold the server's buffered protocol lines.
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        sys.argv = [request["script"], request["device"]]
        runpy.run_path(request["script"], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main():
    children = {}
    requests = sys.stdin.buffer
    pending = b""
    open_input = True
    while open_input or children:
        readable, _, _ = select.select([requests] if open_input else [], [], [], 0.02)
        if readable:
            chunk = os.read(requests.fileno(), 65536)
            if not chunk:
                open_input = False
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    run_child(request)
                children[pid] = request["id"]
                reply({"id": request["id"], "pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                reply({"id": children.pop(pid), "status": status})


def reply(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
