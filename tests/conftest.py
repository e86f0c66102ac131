import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def make_config(**table):
    """A Config built from TOML-style keys (`torch-version="2.1"`), rooted at the fixtures folder.

    Preview is on unless the test says otherwise: fixtures test what each rule finds, preview or not;
    tests/test_preview.py tests the gate itself."""
    from torchlint.config import build

    table = {key.replace("_", "-"): value for key, value in table.items()}
    table.setdefault("preview", True)
    return build(table, root=FIXTURES, path=None, where="test", torch_requirement_from=FIXTURES)


def lint(code: str, filename: str = "example.py", **table):
    """Findings for a snippet, with every rule selected unless `select` says otherwise."""
    from torchlint.engine.runner import lint_text

    table.setdefault("select", ["ALL"])
    return lint_text(textwrap.dedent(code), filename, make_config(**table))


def run_cli(*args, stdin: bytes = b"", cwd=None):
    """Run `python -m torchlint` in a subprocess; returns (exit code, stdout, stderr)."""
    import subprocess

    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", *map(str, args)],
        input=stdin, capture_output=True, cwd=cwd or ROOT, timeout=120,
    )
    return completed.returncode, completed.stdout.decode(), completed.stderr.decode()


@pytest.fixture
def lint_snippet():
    return lint
