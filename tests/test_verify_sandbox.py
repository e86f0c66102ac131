"""`torchlint verify` runs no code of the checked file's but torch's allow-listed callables (issue 33).

Three layers, each tested on its own: the names a finding's code reaches are judged on
the live objects (`zygote.refusal`) and by their spelling (`Site.blocked_call`); a
witness that gets past them anyway runs under an audit hook, in namespaces of its
own, with every process it starts killed at the end; and end to end, `torchlint verify`
on the attack fixtures (fixtures/verify_attacks/) writes nothing, starts nothing that
survives and connects nowhere.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURES, ROOT, make_config

pytest.importorskip("torch")

ATTACKS = FIXTURES / "verify_attacks"
# What every attack fixture writes to, or names in the processes it starts.
MARKER = "/tmp/torchlint-verify-attack-"
# The port the network attack fixture connects to.
FIXTURE_URL = "http://127.0.0.1:9/"


def processes_mentioning(text: str):
    """Host pids whose command line contains `text`, other than this test's own process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if text.encode() in handle.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


def processes_in(folder) -> list:
    """Host pids whose working directory is `folder`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd") == str(folder):
                found.append(int(entry))
        except OSError:
            pass
    return found


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture()
def listener():
    """A TCP port on the loopback interface that counts the connections it gets."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.setblocking(False)

    def connections():
        count = 0
        while True:
            try:
                connection, _ = server.accept()
            except BlockingIOError:
                return count
            connection.close()
            count += 1

    yield server.getsockname()[1], connections
    server.close()


# ---------------------------------------------------------------- the live-object judge

@pytest.mark.parametrize("name, why", [
    # Allowed by their spelling: only the live objects show where they lead.
    ("torch.nn.modules.module.namedtuple", "is defined in `collections`, not in torch"),
    ("torch.nn.functional.Callable", "is defined in `collections.abc`, not in torch"),
    ("torch.nn.modules.module.Module.register_forward_hook", "not of a module"),
])
def test_the_live_objects_refuse_names_the_spelling_allows(name, why):
    from torchlint.verify.zygote import refusal, static_refusal

    assert static_refusal(name) is None
    assert why in (refusal(name) or "allowed")


@pytest.mark.parametrize("name", [
    "torch.exp", "torch.tensor", "torch.float32", "torch.pi", "torch.nn.Linear", "torch.nn.functional.relu",
    "torch.utils.data.DataLoader", "torch.optim.Adam", "torch.no_grad",
])
def test_torch_callables_and_values_are_allowed(name):
    from torchlint.verify.zygote import refusal

    assert refusal(name) is None


@pytest.mark.parametrize("name, why", [
    ("torch.utils.data.dataloader.os.system", "goes through a module that torch's modules import"),
    ("torch.utils.data.dataloader.os", "is a module"),
    ("torch.nn.modules.module.torch.utils.data.dataloader.os.popen", "goes through a module that torch's modules import"),
    ("torch.utils.data.dataloader.python_multiprocessing.Process", "goes through `multiprocessing`"),
    ("torch.utils.data.dataloader.threading.Thread", "goes through a module that torch's modules import"),
    ("torch.nn.modules.module.torch.load", "goes through a module that torch's modules import"),
    ("torch.utils.data.dataloader.functools.partial", "goes through a module that torch's modules import"),
    ("torch.load", "reads, writes or compiles"),
    ("torch.compile", "reads, writes or compiles"),
    ("torch.hub.download_url_to_file", "reads, writes or compiles"),
    ("torch._C._get_tracing_state", "private or special"),
    ("torch.nn.Module.__init__", "private or special"),
    ("torch.nn.Module.zero_grad", "not of a module"),  # through a class: its attributes are not judged
    ("torch.nn", "is a module"),
    ("torch.cuda.is_available", "outside the allowed torch namespaces"),
    ("torch.no_such_name", "cannot be resolved"),
])
def test_names_leaving_torch_are_refused(name, why):
    from torchlint.verify.zygote import refusal

    assert why in (refusal(name) or "allowed")


def planned(text: str, code: str, judge_live: bool):
    from torchlint.engine.runner import lint_text
    from torchlint.verify.run import plan
    from torchlint.verify.zygote import refusal

    text = textwrap.dedent(text)
    config = make_config(select=["ALL"])
    [finding] = [finding for finding in lint_text(text, "example.py", config) if finding.code == code]
    return plan(finding, text, config, "cpu", resolver=refusal if judge_live else None)


@pytest.mark.parametrize("expression", [
    "torch.nn.modules.module.namedtuple('T', 'a')",  # allowed by its spelling, collections' on the live object
    "torch.nn.modules.module.Module.register_forward_hook(x, x)",
])
def test_the_live_judge_refuses_what_the_spelling_allows(expression):
    from torchlint.verify.witness import CANONICAL

    witness = planned(f"import torch\ny = torch.exp({expression}) - 1\n", "TL607", judge_live=True)
    assert witness.origin == CANONICAL and "not on the allow-list" in witness.note


def test_without_the_live_judge_the_witness_process_judges_before_running(tmp_path):
    """Planned without the fork server (as here), the names are judged again where the witness runs."""
    from torchlint.verify import sandbox

    witness = planned("import torch\ny = torch.exp(torch.nn.modules.module.namedtuple('T', 'a')) - 1\n", "TL607", judge_live=False)
    assert witness.origin == "finding" and "torch.nn.modules.module.namedtuple" in witness.checks
    [outcome] = sandbox.run_all([sandbox.Job(witness.program, "cpu", witness.timeout, witness.env, witness.checks)], 1)
    assert outcome.verdict["status"] == "skipped"
    assert outcome.verdict["reason"].startswith("refused to run: `torch.nn.modules.module.namedtuple` is defined in `collections`")


@pytest.mark.parametrize("expression, refused", [
    ("torch.utils.data.dataloader.os.system('true')", "torch.utils.data.dataloader.os.system"),
    ("x.__class__", "x.__class__"),
    ("x.float().__class__.__subclasses__()", "x.float().__class__.__subclasses__"),
    ("eval('1')", "eval"),
    ("torch.utils.data.DataLoader(x, collate_fn=torch.utils.data.dataloader.os.system)", "torch.utils.data.dataloader.os.system"),
    ("torch.utils.data.DataLoader(x, collate_fn=getattr)", "getattr"),
    ("torch.utils.data.DataLoader(x, collate_fn=__builtins__)", "__builtins__"),
    ("torch.utils.data.dataloader.__builtins__", "torch.utils.data.dataloader.__builtins__"),
])
def test_the_spelling_refuses_calls_references_dunders_and_builtins(expression, refused):
    """Without the live judge (tests, `torchlint rule --verify`), the spelling alone refuses these."""
    witness = planned(f"import torch\ny = torch.exp({expression}) - 1\n", "TL607", judge_live=False)
    assert witness.origin == "canonical" and f"`{refused}` is not on the allow-list" in witness.note


def test_an_allowed_expression_is_still_built_from_the_finding():
    witness = planned("import torch\ny = torch.exp(torch.nn.functional.relu(x).float()) - 1\n", "TL607", judge_live=True)
    assert witness.origin == "finding"
    assert witness.checks == ("torch.exp", "torch.nn.functional.relu")


def test_imports_that_rebind_the_witness_helpers_or_reach_denied_modules_are_dropped():
    witness = planned(
        """
        import torch
        from torch.serialization import load as confirmed
        from torch.hub import load
        from torch import exp
        y = exp(x) - 1
        """,
        "TL607", judge_live=True,
    )
    assert "from torch import exp" in witness.program
    assert "torch.serialization" not in witness.program and "torch.hub" not in witness.program


# ---------------------------------------------------------------- a witness that got past the judges

def run_program(program: str, timeout: float = 30.0):
    from torchlint.verify import sandbox

    return sandbox.run_all([sandbox.Job(textwrap.dedent(program), "cpu", timeout)], 1)[0]


def test_a_witness_cannot_write_start_programs_or_connect(tmp_path, listener):
    port, connections = listener
    marker = tmp_path / "marker"
    outcome = run_program(
        f"""
        import os, socket, subprocess
        attempts = {{
            "system": lambda: os.system("touch {marker}-system"),
            "popen": lambda: subprocess.Popen(["touch", "{marker}-popen"]).wait(),
            "write": lambda: open("{marker}-write", "w").write("x"),
            "os.open": lambda: os.open("{marker}-os-open", os.O_WRONLY | os.O_CREAT),
            "rename": lambda: os.rename("witness.py", "{marker}-renamed"),
            "connect": lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5),
        }}
        confirmed("; ".join(f"{{name}}: {{describe(raised(action))}}" for name, action in attempts.items()))
        """,
    )
    assert outcome.verdict is not None, outcome.stderr
    evidence = outcome.verdict["evidence"]
    assert all(f"{name}: PermissionError" in evidence for name in ("system", "popen", "write", "os.open", "rename", "connect")), evidence
    assert list(tmp_path.iterdir()) == []
    assert connections() == 0


def test_no_process_a_witness_starts_outlives_it(tmp_path):
    # Forking is allowed (DataLoader workers fork): children that leave the session and sleep on,
    # recognisable by their working directory.
    outcome = run_program(
        f"""
        import os, time
        for _ in range(3):
            if os.fork() == 0:
                os.setsid()
                os.chdir({str(tmp_path)!r})
                if os.fork() == 0:
                    time.sleep(300)
                os._exit(0)
        time.sleep(0.5)
        confirmed("started")
        """,
    )
    survivors = processes_in(tmp_path)
    kill_all(survivors)
    assert outcome.verdict is not None, outcome.stderr
    assert survivors == []


def test_isolation_where_the_kernel_grants_it(tmp_path):
    """The namespaces alone, without the audit hook: no network, nothing writable but the folder."""
    from torchlint.verify.zygote import isolate

    folder = tmp_path / "witness"
    folder.mkdir()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            active = isolate(str(folder))
            results = dict(active)
            for name, path in (("folder", folder / "x"), ("outside", tmp_path / "outside")):
                try:
                    path.write_text("x")
                    results[name] = "written"
                except OSError as error:
                    results[name] = error.strerror
            try:
                socket.create_connection(("127.0.0.1", 9), timeout=2)
                results["network"] = "connected"
            except OSError as error:
                results["network"] = error.strerror
            os.write(write, json.dumps(results).encode())
        finally:
            os._exit(0)
    os.close(write)
    results = json.loads(os.read(read, 65536))
    os.waitpid(pid, 0)
    if not results["read-only filesystem"] or not results["network namespace"]:
        pytest.skip(f"the kernel does not grant the namespaces here: {results}")
    assert results["folder"] == "written"
    assert results["outside"] == "Read-only file system"
    assert results["network"] == "Network is unreachable"
    assert not (tmp_path / "outside").exists()


# ---------------------------------------------------------------- end to end, the attack fixtures

@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """`torchlint verify` on copies of the attack fixtures whose markers point into a folder of the test's."""
    folder = tmp_path_factory.mktemp("attacks")
    marker = str(folder / "marker-")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.setblocking(False)
    url = f"http://127.0.0.1:{server.getsockname()[1]}/"
    copies = []
    for path in sorted(ATTACKS.glob("*.py")):
        copy = folder / path.name
        copy.write_text(path.read_text().replace(MARKER, marker).replace(FIXTURE_URL, url))
        copies.append(str(copy))
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "verify", "--device", "cpu", "--output-format", "json", *copies],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    survivors = processes_mentioning(marker)
    kill_all(survivors)
    connections = 0
    while True:
        try:
            server.accept()[0].close()
            connections += 1
        except BlockingIOError:
            break
    server.close()
    assert completed.returncode in (0, 1), completed.stderr
    return {
        "findings": json.loads(completed.stdout),
        "written": sorted(path.name for path in folder.iterdir() if path.name.startswith("marker-")),
        "survivors": survivors,
        "connections": connections,
    }


def test_the_attacks_are_findings(attacked):
    assert len(attacked["findings"]) >= 20


def test_no_attack_writes_a_file(attacked):
    assert attacked["written"] == []


def test_no_attack_leaves_a_process(attacked):
    assert attacked["survivors"] == []


def test_no_attack_reaches_the_network(attacked):
    assert attacked["connections"] == 0


def test_no_attack_runs_as_written(attacked):
    """Each finding's witness is the canonical one or none: never one built from the attack's code."""
    ran = [
        (finding["filename"].rsplit("/", 1)[-1], finding["location"]["row"], finding["verification"]["status"])
        for finding in attacked["findings"]
        if finding["verification"]["witness"] == "finding"
    ]
    assert ran == []
