"""Fork server for witnesses: imports torch once, then forks one isolated child per witness.

Run by `sandbox.py` as `python -I zygote.py`; it imports nothing from torchlint,
and torchlint imports it only for its allow-list (`refusal`, the constants), so
torch is imported in `main`, never at module import.

Importing torch costs about 2.5 s of CPU per process; forking a process that has
already imported it costs milliseconds, so a fixture set verifies in seconds
instead of minutes. Every witness is still its own process tree:

- the forked child (the "keeper") starts a session, sets resource limits and
  scrubs the environment, then, where the kernel allows it, enters new network,
  mount and PID namespaces: no network interface but loopback, every mount
  read-only except the witness's folder and a private /dev/shm;
- the keeper forks the witness itself, PID 1 of the new PID namespace: when it
  ends, or the keeper dies (parent-death signal), the kernel kills every process
  left in the namespace, `setsid`-ed ones included;
- before running the witness, the names its code calls are resolved on the live
  objects (`refusal`): a name that reaches anything but an allow-listed torch
  callable ends the witness with a `skipped` verdict before any of its code runs.

The server is a child subreaper: processes orphaned by a witness are re-parented
to it rather than to init, and it kills every child it did not fork itself.

Protocol, one JSON object per line. Requests on stdin:
`{"id": N, "script": PATH, "workdir": DIR, "device": D, "env": {...}, "limits": [[RESOURCE, VALUE], ...],
"checks": [NAME, ...], "verdict_mark": MARK}` runs a witness;
`{"id": N, "resolve": [NAME, ...]}` asks which names may be called.
Replies on stdout: first `{"protections": {NAME: true/false}}`; then `{"id": N, "pid": PID}` once
forked, `{"id": N, "status": WAITSTATUS}` when it ends; `{"id": N, "refusals": {NAME: REASON or null}}`.
"""

import ctypes
import ctypes.util
import json
import os
import resource
import select
import signal
import sys
import traceback
import types

# Namespaces whose callables may run in a witness, besides top-level `torch.NAME`.
ALLOWED_NAMESPACES = ("torch.nn.functional.", "torch.nn.", "torch.utils.data.", "torch.optim.")
# Callables that read, write, compile or change process-wide state outside the witness, by name.
DENIED_NAMES = frozenset({
    "torch.load", "torch.save", "torch.compile", "torch.set_default_device", "torch.from_file",
    "torch.set_default_tensor_type", "torch.set_num_threads", "torch.set_num_interop_threads",
})
# Modules whose objects a witness may not reach, however the name is spelled: files, network,
# processes, code generation and compilation.
DENIED_MODULES = (
    "torch.serialization", "torch.hub", "torch.jit", "torch.onnx", "torch.package", "torch.utils.cpp_extension",
    "torch.utils.benchmark", "torch.utils.tensorboard", "torch.utils.data.datapipes", "torch.utils.model_zoo",
    "torch.utils.bottleneck", "torch.utils.collect_env", "torch.distributed", "torch.multiprocessing",
    "torch.fx", "torch.export", "torch.profiler", "torch.compiler", "torch.library", "torch.ops", "torch.classes",
    "torch.testing", "torch.backends", "torch.cuda.memory", "torch._dynamo", "torch._inductor", "torch._export",
)
STDLIB_MODULES = frozenset(getattr(sys, "stdlib_module_names", ())) | {"os", "sys", "subprocess", "socket", "pickle", "builtins"}
# Plain values a torch namespace holds (`torch.pi`, `torch.e`).
PLAIN_VALUES = (bool, int, float, complex, str, type(None))

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
# (statvfs flag, mount flag) pairs a read-only remount keeps: in a user namespace they are locked.
KEPT_MOUNT_FLAGS = ((2, MS_NOSUID), (4, MS_NODEV), (8, 8), (1024, 1024), (2048, 2048), (4096, 1 << 21))
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
# A private /dev/shm per witness: DataLoader workers pass tensors through it.
SHM_SIZE = "size=1g"


# ---------------------------------------------------------------- the allow-list, on live objects

def _in(name, prefixes):
    return any(name == prefix.rstrip(".") or name.startswith(prefix.rstrip(".") + ".") for prefix in prefixes)


def _is_torch_module_name(name):
    return name == "torch" or name.startswith("torch.")


def forbidden_name(name):
    """Why the dotted name may never be reached, whatever it is used for; None when it may."""
    parts = name.split(".")
    if any(part.startswith("_") for part in parts):
        return "reaches a private or special attribute"
    if parts[0] != "torch":
        return "is not torch's"
    # Spelled out, code reaches torch's objects directly: a chain that re-enters `torch` or goes through a
    # standard-library module (`torch.utils.data.dataloader.os`) is one a module's imports make possible.
    if "torch" in parts[1:] or any(part in STDLIB_MODULES for part in parts[1:-1]):
        return "goes through a module that torch's modules import, not through torch's own"
    if name in DENIED_NAMES or _in(name, DENIED_MODULES):
        return "reads, writes or compiles outside the witness"
    return None


def static_refusal(name):
    """Why the dotted name may not be called, judged on its spelling only; None when it may."""
    why = forbidden_name(name)
    if why is None and not (name.startswith(ALLOWED_NAMESPACES) or name.count(".") == 1):
        why = "is outside the allowed torch namespaces"
    return why


def _denied_objects():
    found = []
    for name in DENIED_NAMES:
        try:
            found.append(_walk(name, importing=False)[-1])
        except Exception:
            pass
    return found


def _walk(name, importing):
    """Every object along the dotted name, looked up in the modules' own dictionaries (no `__getattr__`)."""
    import importlib

    parts = name.split(".")
    found = [sys.modules.get(parts[0]) or importlib.import_module(parts[0])]
    for part in parts[1:]:
        owner = found[-1]
        if not isinstance(owner, types.ModuleType):
            raise LookupError(f"goes through `{part}` of a {type(owner).__name__}, not of a module")
        missing = object()
        value = vars(owner).get(part, missing)
        if value is missing:
            submodule = f"{owner.__name__}.{part}"
            value = sys.modules.get(submodule, missing)
            if value is missing and importing and _is_torch_module_name(submodule):
                value = importlib.import_module(submodule)
            if value is missing:
                raise LookupError(f"`{part}` is not loaded")
        found.append(value)
    return found


def refusal(name, importing=True):
    """Why the dotted name may not be called in a witness, judged on the live objects; None when it may.

    Only for a process that may import torch (the fork server's children): every step of
    the name must be a torch module, and what it reaches a torch callable or value that
    is neither a module nor on the deny-lists. Importing missing torch submodules is
    what the witness's own import statements would do.
    """
    why = static_refusal(name)
    if why is not None:
        return why
    try:
        chain = _walk(name, importing)
    except Exception as error:
        return f"cannot be resolved ({error})"
    for step in chain[:-1]:
        step_name = getattr(step, "__name__", "")
        if not isinstance(step_name, str) or not _is_torch_module_name(step_name) or _in(step_name, DENIED_MODULES):
            return f"goes through `{step_name}`, which is not an allowed torch module"
    target = chain[-1]
    if isinstance(target, types.ModuleType):
        return "is a module"
    if any(target is denied for denied in _denied_objects()):
        return "reads, writes or compiles outside the witness"
    if isinstance(target, PLAIN_VALUES):
        return None
    origin = getattr(target, "__module__", None) if callable(target) else type(target).__module__
    if not isinstance(origin, str) or not _is_torch_module_name(origin):
        return f"is defined in `{origin}`, not in torch"
    if _in(origin, DENIED_MODULES):
        return f"is defined in `{origin}`, which reads, writes or compiles outside the witness"
    return None


# ---------------------------------------------------------------- isolation

def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result):
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def _mount(libc, source, target, kind, flags, data=None):
    encode = lambda text: text.encode() if text is not None else None  # noqa: E731
    _check(libc.mount(encode(source), encode(target), encode(kind), ctypes.c_ulong(flags), encode(data)))


def _mount_points():
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        points = [line.split()[4].encode().decode("unicode_escape") for line in handle]
    return points


def _read_only_except(libc, workdir):
    """Every mount read-only, then the witness folder (a bind mount of itself) and a fresh /dev/shm writable."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, workdir, workdir, None, MS_BIND)
    for point in _mount_points():
        if point == workdir:
            continue
        try:  # keep each mount's own flags: a bind remount changes only those given
            kept = os.statvfs(point).f_flag
            flags = sum(ms for st, ms in KEPT_MOUNT_FLAGS if kept & st)
            _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError:
            pass  # a mount hidden under another, or one the kernel will not change: the write probe below decides
    _mount(libc, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, SHM_SIZE)


def isolate(workdir):
    """Enter new network, mount and PID namespaces where the kernel allows; {protection: active}."""
    libc = _libc()
    active = {"network namespace": False, "read-only filesystem": False, "pid namespace": False}
    if os.geteuid() != 0:
        # Unprivileged: a user namespace of its own makes the others possible where the kernel allows them.
        uid, gid = os.geteuid(), os.getegid()
        if libc.unshare(CLONE_NEWUSER) != 0:
            return active
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"0 {uid} 1"), ("/proc/self/gid_map", f"0 {gid} 1")):
            try:
                with open(path, "w") as handle:
                    handle.write(text)
            except OSError:
                pass
    active["network namespace"] = libc.unshare(CLONE_NEWNET) == 0
    active["pid namespace"] = libc.unshare(CLONE_NEWPID) == 0
    if libc.unshare(CLONE_NEWNS) == 0:
        try:
            _read_only_except(libc, workdir)
        except OSError:
            pass
        active["read-only filesystem"] = not _writable(os.path.dirname(workdir)) and not _writable("/")
    return active


def _writable(folder):
    probe = os.path.join(folder, f".torchlint-probe-{os.getpid()}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:
        return False
    os.unlink(probe)
    return True


def _die_with_parent():
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _refused_verdict(request, name, why):
    record = {"status": "skipped", "evidence": "", "reason": f"refused to run: `{name}` {why}", "device": request["device"]}
    return request["verdict_mark"] + json.dumps(record)


# ---------------------------------------------------------------- the witness's processes

def run_child(request):
    """In the forked keeper: isolate, fork the witness and wait for it, never return."""
    code = 1
    try:
        os.setsid()
        os.chdir(request["workdir"])
        for name, limit in request["limits"]:
            resource.setrlimit(getattr(resource, name), tuple(limit) if isinstance(limit, list) else (limit, limit))
        os.environ.clear()
        os.environ.update(request["env"])
        if "tempfile" in sys.modules:  # its folder, cached in the server, is the server's: TMPDIR is read again
            sys.modules["tempfile"].tempdir = None
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
        isolate(request["workdir"])
        os.chdir(request["workdir"])  # the folder's own (writable) mount now, not the read-only one beneath
        keeper = os.getpid()
        witness = os.fork()
        if witness == 0:
            _die_with_parent()
            # The keeper may have died before the line above (PID 1 of a namespace sees parent 0).
            if os.getppid() not in (keeper, 0):
                os._exit(1)
            run_witness(request)
        _, status = os.waitpid(witness, 0)
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
    except BaseException:
        traceback.print_exc()
    finally:
        _flush_and_exit(code)


def _flush_and_exit(code: int) -> None:
    """End this forked process at once (no cleanup that belongs to the process it was forked from), output kept."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def run_witness(request):
    """PID 1 of the witness's namespace (or the keeper's child): check the names, then run the program."""
    import runpy

    code = 1
    try:
        for name in request.get("checks", ()):
            why = refusal(name)
            if why is not None:
                print("\n" + _refused_verdict(request, name, why), flush=True)
                code = 0
                return
        sys.argv = [request["script"], request["device"]]
        runpy.run_path(request["script"], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        _flush_and_exit(code)


def resolve_all(names):
    """{name: refusal or None}, judged in a throwaway child: imports it makes do not stay in the server."""
    def judge():
        signal.alarm(60)
        return {name: refusal(name) for name in names}

    return _in_a_child(judge, {name: "could not be judged" for name in names})


def _in_a_child(compute, failed):
    """What `compute()` returns (a JSON value), computed in a forked child that then ends, so that nothing it
    imports or changes stays in this process; `failed` when it raises or returns nothing readable."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            data = json.dumps(compute()).encode()
        except BaseException:
            data = json.dumps(failed).encode()
        with os.fdopen(write, "wb") as stream:
            stream.write(data)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        data = stream.read()
    os.waitpid(pid, 0)
    try:
        return json.loads(data)
    except ValueError:
        return failed


def probe_protections():
    """Which isolation the kernel grants here, tried once in a throwaway child."""
    import tempfile

    workdir = tempfile.mkdtemp(prefix="torchlint-probe-")

    def probe():
        os.setsid()
        active = isolate(workdir)
        active["witness folder writable"] = _writable(workdir)
        return active

    active = _in_a_child(probe, {})
    os.rmdir(workdir)
    active["orphans re-parented to the server"] = _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return active


def kill_strays(children):
    """Kill every child of the server it did not fork: processes orphaned by a witness."""
    me = str(os.getpid())
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit() or int(entry) in children:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[1].decode() == me:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def main():
    try:  # what witnesses import; a failure here shows up in each witness's own output
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401  (building the first optimizer imports it: 5 s on its own)
        import torch.nn  # noqa: F401
        import torch.optim  # noqa: F401
        import torch.profiler  # noqa: F401
        import torch.utils.data  # noqa: F401
    except Exception:
        pass
    reply({"protections": probe_protections()})
    children = {}
    requests = sys.stdin.buffer
    pending = b""
    open_input = True
    while open_input or children:
        readable, _, _ = select.select([requests] if open_input else [], [], [], 0.02)
        if readable:
            chunk = os.read(requests.fileno(), 65536)
            if not chunk:  # torchlint closed the pipe or died: nobody will time the witnesses any more
                open_input = False
                for pid in children:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                if "resolve" in request:
                    reply({"id": request["id"], "refusals": resolve_all(request["resolve"])})
                    continue
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    run_child(request)
                children[pid] = request["id"]
                reply({"id": request["id"], "pid": pid})
        ended = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                ended = True
                reply({"id": children.pop(pid), "status": status})
        if ended:
            kill_strays(children)
    kill_strays({})


def reply(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
