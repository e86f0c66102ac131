"""The flake8 plugin reports what `torchlint check` reports, through the real flake8."""

import re
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURES
from torchlint import cli
from torchlint.integrations import flake8 as plugin

FIXTURE_FILES = sorted(path for path in FIXTURES.rglob("*.py") if "examples" not in path.parts)
# The text formats mark fixable findings after the code (`[*]`, `[~]`); flake8's lines have no marker.
REPORT = re.compile(r"^(?P<path>.+?):(?P<row>\d+):(?P<column>\d+): (?P<code>[A-Z]+\d+)(?: \[.\])? (?P<message>.*)$")
LOADER = "import torch\nloader = torch.utils.data.DataLoader(ds, persistent_workers=True)\n"


def flake8(*args, stdin: str = "", cwd=None):
    completed = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", *map(str, args)],
        input=stdin.encode(), capture_output=True, cwd=cwd, timeout=300,
    )
    assert completed.returncode in (0, 1), completed.stderr.decode()
    return completed.stdout.decode()


def reports(output: str):
    return sorted(match.groups() for match in map(REPORT.match, output.splitlines()) if match)


def torchlint_concise(path, capsys, monkeypatch):
    monkeypatch.chdir(path.parent)
    capsys.readouterr()
    cli.main(["check", "--output-format", "concise", "--no-cache", "--quiet", path.name])
    return [(str(path.parent / name), *rest) for name, *rest in reports(capsys.readouterr().out)]


def fixture_project(fixture, folder):
    """The fixture in a folder of its own, with a torchlint.toml holding its config and selecting every rule."""
    text = fixture.read_text(encoding="utf-8", errors="replace")
    lines = [line.split("fixture-config:", 1)[1].strip() for line in text.splitlines() if line.startswith("# fixture-config:")]
    if not any(line.partition("=")[0].strip() == "select" for line in lines):
        lines.insert(0, 'select = ["ALL"]')
    folder.mkdir()
    (folder / "torchlint.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    copy = folder / fixture.name
    copy.write_bytes(fixture.read_bytes())
    return copy


def test_flake8_reports_exactly_what_torchlint_check_reports_on_every_fixture(tmp_path, capsys, monkeypatch):
    copies = [fixture_project(fixture, tmp_path / str(number)) for number, fixture in enumerate(FIXTURE_FILES)]
    # E9: flake8 reports the syntax errors itself (E999) and then runs no plugin on the file.
    by_flake8 = reports(flake8("--select", "TL,E9", *copies, cwd=tmp_path))
    by_torchlint = []
    for copy in copies:
        by_torchlint += torchlint_concise(copy, capsys, monkeypatch)
    assert by_torchlint, "the fixtures produced no finding at all"
    syntax_errors = sorted((path, row) for path, row, _, code, _ in by_flake8 if code.startswith("E9"))
    assert syntax_errors == sorted((path, row) for path, row, _, code, _ in by_torchlint if code == "TL000")
    by_torchlint = sorted(report for report in by_torchlint if report[3] != "TL000")
    assert [report for report in by_flake8 if report[3].startswith("TL")] == by_torchlint


def test_the_plugin_is_registered_under_the_tl_prefix():
    assert "torchlint" in flake8("--version")


def test_columns_are_flake8s_zero_based_offsets(tmp_path):
    (tmp_path / "torchlint.toml").write_text('select = ["TL303"]\n')
    lines = ["import torch\n", "def build(ds):\n", "\treturn torch.utils.data.DataLoader(ds, persistent_workers=True)\n"]
    found = list(plugin.TorchlintChecker(None, lines, str(tmp_path / "train.py")).run())
    assert [(row, column, text.split()[0]) for row, column, text, _ in found] == [(3, lines[2].index("persistent_workers"), "TL303")]
    assert found[0][3] is plugin.TorchlintChecker


def test_pyproject_options_are_honoured(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nper-file-ignores = { "quiet_*.py" = ["TL303"] }\n')
    (tmp_path / "quiet_train.py").write_text(LOADER)
    (tmp_path / "train.py").write_text(LOADER)
    assert [(path, code) for path, _, _, code, _ in reports(flake8("--select", "TL", ".", cwd=tmp_path))] == [("./train.py", "TL303")]


def test_excluded_files_are_not_reported(tmp_path):
    (tmp_path / "torchlint.toml").write_text('extend-exclude = ["generated/"]\n')
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "train.py").write_text(LOADER)
    assert flake8("--select", "TL", "generated/train.py", cwd=tmp_path) == ""


def test_a_bad_config_is_reported_not_raised(tmp_path):
    (tmp_path / "torchlint.toml").write_text('select = ["TL999"]\n')
    (tmp_path / "train.py").write_text(LOADER)
    [(_, row, column, code, message)] = reports(flake8("--select", "TL", "train.py", cwd=tmp_path))
    assert (row, column, code) == ("1", "1", "TL000")
    assert "torchlint cannot run" in message and "TL999" in message


def test_an_engine_crash_is_reported_not_raised(tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(plugin, "lint_text", crash)
    found = list(plugin.TorchlintChecker(None, [LOADER], str(tmp_path / "train.py")).run())
    assert [(row, column) for row, column, _, _ in found] == [(1, 0)]
    assert "internal error in torchlint: RuntimeError: boom" in found[0][2]


def test_noqa_comments_silence_findings_once(tmp_path):
    (tmp_path / "torchlint.toml").write_text('select = ["ALL"]\n')
    code = textwrap.dedent("""\
        import torch
        a = torch.utils.data.DataLoader(ds, persistent_workers=True)  # noqa: TL303
        b = torch.utils.data.DataLoader(ds, persistent_workers=True)  # noqa: E501
        """)
    (tmp_path / "train.py").write_text(code)
    assert [(row, code) for _, row, _, code, _ in reports(flake8("--select", "TL", "train.py", cwd=tmp_path))] == [("3", "TL303")]


def test_vscode_extension_invocation(tmp_path):
    """The VS Code flake8 extension pipes the editor buffer to flake8 with its own format, from the workspace root."""
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["TL3"]\n')
    (tmp_path / "src").mkdir()
    unsaved_buffer = "\n" + LOADER  # what the editor shows, not what is on disk
    output = flake8(
        "--format=%(row)d,%(col)d,%(code).1s,%(code)s:%(text)s",
        "--stdin-display-name", tmp_path / "src" / "train.py", "-",
        stdin=unsaved_buffer, cwd=tmp_path,
    )
    # The extension's own pattern; "T" is the type its `flake8.severity` setting falls back on.
    pattern = re.compile(r"(?P<line>\d+),(?P<column>-?\d+),(?P<type>\w+),(?P<code>\w+\d+):(?P<message>[^\r\n]*)")
    diagnostics = [pattern.match(line).groupdict() for line in output.splitlines()]
    diagnostics = [d for d in diagnostics if d["code"].startswith("TL")]  # pyflakes' F821 on `ds` comes too
    column = LOADER.splitlines()[1].index("persistent_workers") + 1
    assert [(d["line"], d["column"], d["type"], d["code"]) for d in diagnostics] == [("3", str(column), "T", "TL303")]
    assert diagnostics[0]["message"].startswith("`persistent_workers=True` with no workers")


@pytest.mark.parametrize("source", ["", "\n", "x = (\n", "def f(:\n"], ids=["empty", "blank", "open-bracket", "bad-def"])
def test_the_plugin_never_raises_on_odd_input(tmp_path, source):
    lines = source.splitlines(keepends=True)
    found = list(plugin.TorchlintChecker(None, lines, str(tmp_path / "odd.py")).run())
    assert all(text.startswith("TL") for _, _, text, _ in found)
