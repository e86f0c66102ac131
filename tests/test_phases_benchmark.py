"""benchmarks/phases.py splits one cold run's CPU time by phase, with the rules' handlers and without them: its
"rules off" column says what the engine costs alone only while that switch silences every rule, whatever kind of
handler reports (a visit, a call given only to the rules that name it, a reference, `finish`)."""

import importlib.util
import json
import subprocess
import sys

from conftest import FIXTURES, ROOT

_SPEC = importlib.util.spec_from_file_location("phases_benchmark", ROOT / "benchmarks" / "phases.py")
phases = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = phases
_SPEC.loader.exec_module(phases)

# Reported from visits, calls, references and `finish`.
FILES = [
    FIXTURES / "autograd" / "TL101_forward_under_no_grad.py", FIXTURES / "api" / "TL602_amp_aliases.py",
    FIXTURES / "device" / "TL205_hard_coded.py", FIXTURES / "autograd" / "TL103_accumulated_loss.py",
]


def _run(mode: str, tmp_path):
    report = tmp_path / f"{mode}.json"
    done = subprocess.run(
        [sys.executable, "-c", phases.CHILD, mode, "check", "--isolated", "--select", "ALL", "--preview", "--no-cache", "--jobs", "1",
         "--output-format", "json", "--exit-zero", "--output-file", str(report), *map(str, FILES)],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )
    return json.loads(report.read_text()), json.loads(done.stderr.strip().splitlines()[-1])


def test_the_rules_off_run_reports_nothing_that_the_full_run_reports(tmp_path):
    findings, spent = _run("torchlint", tmp_path)
    silent, spent_off = _run("rules-off", tmp_path)
    assert {finding["code"] for finding in findings} >= {"TL101", "TL602", "TL205", "TL103"}
    assert silent == []
    for seconds in (spent, spent_off):
        assert set(phases.PHASES) <= set(seconds)
