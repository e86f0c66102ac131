"""`torchlint verify`: witnesses are right, built from the finding when they can, and isolated."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, make_config

pytest.importorskip("torch")

# On a CPU-only machine these canonical witnesses cannot show their effect (or need an optional module).
CPU_SKIPS = {
    "TL202": "needs a GPU", "TL206": "needs a GPU", "TL204": "numpy is not installed",
    "TL608": "torchvision is not installed", "TL609": "torchvision is not installed",
}


def has_cuda() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True)
    return probe.stdout.strip() == "True"


def findings_of(code: str, text: str):
    from torchlint.engine.runner import lint_text

    return lint_text(textwrap.dedent(text), "example.py", make_config(select=["ALL"]))


def plan_of(code: str, text: str):
    from torchlint.verify.run import plan

    text = textwrap.dedent(text)
    findings = [f for f in findings_of(code, text) if f.code == code]
    assert findings, f"no {code} finding in the snippet"
    return plan(findings[0], text, make_config(select=["ALL"]), "cpu")


def test_linting_and_planning_never_import_torch():
    program = textwrap.dedent(
        """
        import sys
        from torchlint.cli import build_parser
        from torchlint.verify.run import plan
        from torchlint.verify.witnesses import load_all
        build_parser()
        load_all()
        assert "torch" not in sys.modules, "torch imported"
        """
    )
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT)
    assert completed.returncode == 0, completed.stderr


def test_every_canonical_witness_shows_its_rule():
    from torchlint.verify import sandbox
    from torchlint.verify.run import judge, canonical
    from torchlint.verify.witnesses import load_all

    codes = sorted(load_all())
    witnesses = [canonical(code, "cpu") for code in codes]
    outcomes = sandbox.run_all([sandbox.Job(w.program, "cpu", w.timeout, w.env) for w in witnesses], os.cpu_count() or 2)
    statuses = {code: judge(w, o, "cpu", "").status for code, w, o in zip(codes, witnesses, outcomes)}
    for code, status in statuses.items():
        if code in CPU_SKIPS and status.startswith("skipped"):
            assert CPU_SKIPS[code] in status, (code, status)
        else:
            assert status == "confirmed", (code, status)


def test_witness_uses_the_findings_own_arguments():
    witness = plan_of("TL303", """
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, batch_size=7, num_workers=0, persistent_workers=True, collate_fn=my_collate)
    """)
    assert witness.origin == "finding"
    assert "DataLoader(dataset, batch_size=7, num_workers=0, persistent_workers=True)" in witness.program
    assert "my_collate" not in witness.program
    assert "collate_fn dropped" in witness.note


def test_code_off_the_allow_list_falls_back_to_the_canonical_witness():
    witness = plan_of("TL304", """
        import os
        from torch.utils.data import DataLoader
        def make():
            return DataLoader(ds, num_workers=2, collate_fn=lambda batch: os.system("echo hi"))
    """)
    assert witness.origin == "canonical"
    assert "os.system" in witness.note
    assert "os.system" not in witness.program


def test_the_files_torch_imports_resolve_in_a_witness_built_from_it():
    witness = plan_of("TL104", """
        from torch import randn
        halved = randn(5, requires_grad=True).half()
        print(halved.grad)
    """)
    assert witness.origin == "finding"
    assert witness.program.startswith("from torch import randn\n")
    assert "w = randn(5, requires_grad=True).half()" in witness.program


def test_numpy_producers_run_as_written_with_the_files_numpy_imports():
    witness = plan_of("TL204", """
        import torch
        from numpy.random import rand
        imported = torch.from_numpy(rand(4))
        outputs = torch.nn.Linear(4, 1)(imported)
    """)
    assert witness.origin == "finding"
    assert "from numpy.random import rand\n" in witness.program
    assert "tensor = torch.from_numpy(rand(4))" in witness.program


def test_a_tensor_created_on_cuda_needs_a_gpu():
    reason = plan_of("TL104", """
        import torch
        from_gpu = torch.empty(2, requires_grad=True, device="cuda").cpu()
        print(from_gpu.grad)
    """)
    assert reason == "needs a GPU: the tensor is created on cuda"


def test_precision_witness_runs_the_flagged_formula_on_small_stand_ins():
    witness = plan_of("TL606", """
        import torch as T
        value = T.log(x + 1.0)
    """)
    assert witness.origin == "finding"
    assert "return T.log(x + 1.0), torch.log1p(x)" in witness.program
    assert "x = torch.tensor([1e-3, 1e-5, 1e-8], dtype=dtype)" in witness.program


def test_table_witness_resolves_the_imported_name():
    witness = plan_of("TL601", """
        from torch._six import string_classes
    """)
    assert witness.origin == "canonical"
    assert "resolve('torch._six.string_classes')" in witness.program


def _verdict_of(witness, preamble: str = ""):
    from torchlint.verify import sandbox
    from torchlint.verify.run import judge

    [outcome] = sandbox.run_all([sandbox.Job(preamble + witness.program, "cpu", witness.timeout, witness.env)], 1)
    return judge(witness, outcome, "cpu", "")


def test_variable_witness_observes_the_silence_and_the_detached_alias_its_message_states():
    witness = plan_of("TL602", """
        from torch.autograd import Variable
    """)
    result = _verdict_of(witness)
    assert result.status == "confirmed"
    assert result.evidence == (
        "`torch.autograd.Variable(A)` gave no warning (no exception) and its docstring is silent; "
        "`Variable(x)` of an x that requires grad returns a plain `torch.Tensor`; not x itself: True; "
        "sharing x's storage: True; requires_grad=False, grad_fn=None; "
        "`Variable(x, requires_grad=True)` is a new leaf: True; `isinstance(torch.ones(1), Variable)`: True "
        "[canonical witness: `torch.autograd.Variable` called with stand-in arguments]"
    )


# Stand-ins for `torch.autograd.Variable` that contradict its message, installed before the witness runs.
CONTRADICTING_VARIABLES = {
    "returns its argument": ("""
        class Variable:
            def __new__(cls, tensor, requires_grad=False):
                return tensor.requires_grad_(requires_grad)
    """, ["not x itself: False", "`isinstance(torch.ones(1), Variable)`: False"]),
    "warns": ("""
        import warnings


        class Variable:
            def __new__(cls, tensor, requires_grad=False):
                warnings.warn("Variable is deprecated", FutureWarning)
                return tensor.detach().requires_grad_(requires_grad)
    """, ["`torch.autograd.Variable(A)` is no longer silent: FutureWarning: Variable is deprecated"]),
}


@pytest.mark.parametrize("variable, expected", CONTRADICTING_VARIABLES.values(), ids=CONTRADICTING_VARIABLES)
def test_variable_witness_is_not_reproduced_by_a_variable_its_message_does_not_describe(variable, expected):
    witness = plan_of("TL602", """
        import torch
        wrapped = torch.autograd.Variable(x)
    """)
    stand_in = textwrap.dedent(variable) + "\n\nimport torch.autograd\ntorch.autograd.Variable = Variable\n"
    result = _verdict_of(witness, stand_in)
    assert result.status == "not-reproduced"
    assert all(part in result.evidence for part in expected), result.evidence


def test_every_table_api_that_is_called_has_a_probe():
    from torchlint.rules.api._table import api_table
    from torchlint.verify.witnesses.api import PROBES

    # Only resolved, not called: a module, and classes the private-API witness compares with their public names.
    resolved_only = {"torch._six", "torch.distributed._tensor", "torch.optim.lr_scheduler._LRScheduler",
                     "torch.distributed._composable.fsdp.fully_shard", "torch.legacy", "torch.utils.ffi"}
    assert set(api_table()) - resolved_only == set(PROBES)


def test_timeout_kills_the_witness_and_the_processes_it_started():
    from torchlint.verify import sandbox

    # The child's pid as the witness sees it is its pid in the witness's own PID namespace, where
    # the kernel grants one: the child is found here by a token on its command line instead.
    token = f"torchlint-timeout-test-{os.getpid()}-{time.time_ns()}"
    program = textwrap.dedent(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "{token}"])
        print("child", child.pid, flush=True)
        time.sleep(120)
        """
    )
    outcome = sandbox.run_all([sandbox.Job(program, "cpu", timeout=3)], 1)[0]
    assert outcome.timed_out and outcome.verdict is None
    assert "child" in outcome.stdout
    deadline = time.monotonic() + 10
    while _running(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(token)


def _running(token: str) -> bool:
    """Whether a live (not zombie) process has `token` on its command line."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                mentions = token.encode() in handle.read()
            with open(f"/proc/{entry}/stat", "rb") as handle:
                zombie = handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if entry.isdigit() and entry != str(os.getpid()) and mentions and not zombie:
            return True
    return False


def test_witness_runs_with_a_memory_limit_a_scrubbed_environment_in_its_own_folder(monkeypatch):
    from torchlint.verify import sandbox

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    monkeypatch.setenv("SECRET_TOKEN", "x")
    program = textwrap.dedent(
        """
        import os, resource, sys
        error = raised(lambda: bytearray(6 * 2**30))
        leaked = sorted(name for name in os.environ if name.startswith("TORCH_FORCE") or name == "SECRET_TOKEN")
        confirmed(f"{type(error).__name__}|{leaked}|{os.getcwd()}|{sys.flags.isolated}")
        """
    )
    outcome = sandbox.run_all([sandbox.Job(program, "cpu", timeout=30)], 1)[0]
    memory, leaked, cwd, isolated = outcome.verdict["evidence"].split("|")
    assert memory == "MemoryError"
    assert leaked == "[]"
    assert "torchlint-verify-" in cwd and not os.path.exists(cwd)
    assert isolated == "1"


def test_cli_verifies_without_running_the_file_and_leaves_nothing_behind(tmp_path):
    psutil = pytest.importorskip("psutil")
    target = tmp_path / "train.py"
    target.write_text(textwrap.dedent(
        """
        import torch
        from torch.utils.data import DataLoader
        open("RAN", "w").write("the file was executed")
        loader = DataLoader(ds, persistent_workers=True)
        """
    ))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = dict(os.environ, TMPDIR=str(temporary))
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "verify", str(target), "--device", "cpu", "--output-format", "json"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )
    assert completed.returncode == 1, completed.stderr
    [finding] = json.loads(completed.stdout)
    assert finding["code"] == "TL303"
    verification = finding["verification"]
    assert verification["status"] == "confirmed"
    assert verification["device"] == "cpu"
    assert verification["torch"].startswith("2.")
    assert "ValueError: persistent_workers option needs num_workers > 0" in verification["evidence"]
    assert completed.stderr.strip().endswith("1 confirmed, 0 not reproduced, 0 skipped")
    assert not (tmp_path / "RAN").exists()
    assert list(temporary.iterdir()) == []
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(temporary) in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []


def test_text_output_has_a_status_line_per_finding_and_the_summary(tmp_path):
    target = tmp_path / "loader.py"
    target.write_text("from torch.utils.data import DataLoader\nDataLoader(ds, persistent_workers=True)\n")
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "verify", str(target), "--device", "cpu", "--output-format", "concise"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    lines = completed.stdout.splitlines()
    assert lines[0].startswith(f"{target}:2:16: TL303")
    assert lines[1].startswith("  confirmed: ValueError: persistent_workers option needs num_workers > 0")
    assert lines[-1] == "1 confirmed, 0 not reproduced, 0 skipped"


def test_a_clean_file_exits_zero(tmp_path):
    target = tmp_path / "clean.py"
    target.write_text("import torch\n")
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "verify", str(target), "--device", "cpu"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert completed.returncode == 0
    assert completed.stdout.strip() == "0 confirmed, 0 not reproduced, 0 skipped"


def test_rule_verify_prints_the_canonical_evidence():
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "rule", "TL303", "--verify", "--device", "cpu"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[0] == "TL303 persistent-workers-without-workers: confirmed"
    assert "ValueError: persistent_workers option needs num_workers > 0" in completed.stdout


def test_cuda_requested_without_a_gpu_skips_every_finding(tmp_path):
    if has_cuda():
        pytest.skip("a GPU is present")
    target = tmp_path / "loader.py"
    target.write_text("from torch.utils.data import DataLoader\nDataLoader(ds, persistent_workers=True)\n")
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "verify", str(target), "--device", "cuda", "--output-format", "json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    [finding] = json.loads(completed.stdout)
    assert finding["verification"]["status"] == "skipped (CUDA is not available)"


def test_cuda_witnesses_run_on_a_gpu():
    if not has_cuda():
        pytest.skip("no GPU")
    from torchlint.verify.run import run_canonical

    for code in ("TL201", "TL205", "TL206"):
        assert run_canonical(code, "cuda").status == "confirmed", code
    # Cast-then-move may allocate exactly like the merged call (torch converts on the host for both).
    assert run_canonical("TL202", "cuda").status in ("confirmed", "not-reproduced")
