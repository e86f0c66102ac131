"""The options a ruff user reaches for: default path, no files, -j, opt-in selection, -o, --show-files,
--show-settings' origins, --fix-only, --ignore-noqa, --isolated, --per-file-ignores, --add-noqa, TL001, --watch."""

import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from torchlint.cli import main

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"
SYNCHRONOUS = "from torch.utils.data import DataLoader\nfor batch in DataLoader(ds):\n    model(batch).backward()\n"
FIXABLE = "import torch\nx, device = torch.arange(3), torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nfor step in range(2):\n    y = x.float().to(device)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


def check(capsys, *args):
    # --preview: the fixable example is TL202's, a rule in preview.
    code = main(["check", "--preview", "--no-cache", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def codes(out: str):
    return [line.split(" ")[1] for line in out.splitlines() if line.count(":") >= 3]


# ---------------------------------------------------------------- paths


def test_no_path_lints_the_current_folder(project, capsys):
    (project / "sub").mkdir()
    (project / "sub" / "more.py").write_text(BAD)
    code, out, _ = check(capsys, "--quiet")
    assert code == 1 and [line.split(":")[0] for line in out.splitlines()] == ["bad.py", "sub/more.py"]


@pytest.mark.parametrize("paths", [["empty"], ["empty", "docs"]])
def test_no_python_file_is_a_warning_and_exit_0(project, capsys, paths):
    (project / "empty").mkdir()
    (project / "docs").mkdir()
    (project / "docs" / "notes.txt").write_text("x")
    code, out, err = check(capsys, *paths)
    assert (code, out, err) == (0, "All checks passed!\n", "torchlint: warning: No Python files found under the given path(s)\n")


# ---------------------------------------------------------------- -j


@pytest.mark.parametrize("jobs", ["0", "1", "3"])
def test_jobs_0_means_one_per_core(project, capsys, jobs):
    assert check(capsys, "-j", jobs, "--quiet", ".")[:2] == (1, check(capsys, "--quiet", ".")[1])


@pytest.mark.parametrize("jobs", ["-3", "-1"])
def test_negative_jobs_is_a_usage_error(project, capsys, jobs):
    with pytest.raises(SystemExit) as stopped:
        main(["check", "-j", jobs, "."])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"torchlint check: error: argument --jobs/-j: must be 0 (one per core) or more, got {jobs}"


# ---------------------------------------------------------------- opt-in rules


def test_a_prefix_does_not_select_an_opt_in_rule(project, capsys):
    (project / "train.py").write_text(SYNCHRONOUS)
    assert "TL306" not in codes(check(capsys, "--select", "TL3", "--quiet", "train.py")[1])
    for selector in ("TL306", "synchronous-dataloader", "ALL", "TL3,TL306"):
        assert "TL306" in codes(check(capsys, "--select", selector, "--quiet", "train.py")[1]), selector


def test_a_prefix_ignores_opt_in_rules_too(project, capsys):
    (project / "train.py").write_text(SYNCHRONOUS)
    assert "TL306" not in codes(check(capsys, "--select", "ALL", "--ignore", "TL3", "--quiet", "train.py")[1])


def test_a_prefix_of_only_opt_in_rules_says_so(monkeypatch):
    from torchlint import config
    from torchlint.catalogue import RuleEntry

    catalogue = (RuleEntry("TL101", "on-by-default", False, False), RuleEntry("TL901", "first-opt-in", True, False), RuleEntry("TL902", "second-opt-in", True, False))
    monkeypatch.setattr(config, "RULES", catalogue)
    with pytest.raises(config.ConfigError, match=r"'TL9' matches only opt-in rules \(TL901, TL902\): select them by their exact code or name"):
        config.resolve_codes(["TL9"], "--select")
    assert config.resolve_codes(["TL9"], "--ignore", config.IGNORE) == {"TL901", "TL902"}
    assert config.resolve_codes(["TL"], "--select") == {"TL101"}


def test_a_misspelt_rule_name_gets_a_suggestion(project, capsys):
    code, _, err = check(capsys, "--select", "persistent-workers-without-worker", ".")
    assert code == 2 and err.endswith("did you mean 'persistent-workers-without-workers'?\n")


# ---------------------------------------------------------------- output


def test_output_file_holds_the_report(project, capsys):
    code, out, _ = check(capsys, "-o", "reports/out.json", "--output-format", "json", ".")
    import json

    assert code == 1 and out == ""
    assert [finding["code"] for finding in json.loads((project / "reports" / "out.json").read_text())] == ["TL303"]


def test_show_files_lists_what_would_be_linted(project, capsys):
    (project / "build").mkdir()
    (project / "build" / "gen.py").write_text(BAD)
    (project / "stub.pyi").write_text("x: int\n")
    assert check(capsys, "--show-files") == (0, "bad.py\nstub.pyi\n", "")


def test_show_settings_says_where_each_value_came_from(project, capsys):
    (project / "torchlint.toml").write_text('ignore = ["TL303"]\n')
    _, out, _ = check(capsys, "--show-settings", "--select", "TL3", "--output-format", "json", "--per-file-ignores", "tests/*:TL301")
    settings = dict(line.split(" = ", 1) for line in out.splitlines())
    assert settings["select"].endswith("  (from torchlint.toml ignore, --select)")
    assert settings["output-format"] == "json  (from --output-format)"
    assert settings["per-file-ignores"] == "tests/*: TL301  (from --per-file-ignores)"
    assert settings["fix"] == "false  (default)"
    _, out, _ = check(capsys, "--show-settings", "--isolated")
    assert "config file = none  (--isolated)" in out.splitlines()


# ---------------------------------------------------------------- config on the command line


def test_isolated_reads_no_config_file(project, capsys):
    (project / "torchlint.toml").write_text('ignore = ["TL303"]\n')
    assert check(capsys, "--quiet", ".")[0] == 0
    assert check(capsys, "--quiet", "--isolated", ".")[0] == 1


def test_per_file_ignores_on_the_command_line(project, capsys):
    (project / "other.py").write_text(BAD)
    _, out, _ = check(capsys, "--quiet", "--per-file-ignores", "bad.py:TL3", ".")
    assert [line.split(":")[0] for line in out.splitlines()] == ["other.py"]
    with pytest.raises(SystemExit) as stopped:
        main(["check", "--per-file-ignores", "bad.py", "."])
    assert stopped.value.code == 2 and "expected GLOB:CODE[,CODE...], got 'bad.py'" in capsys.readouterr().err


def test_extend_per_file_ignores_adds_to_the_config(project, capsys):
    (project / "other.py").write_text(BAD)
    (project / "torchlint.toml").write_text('per-file-ignores = { "other.py" = ["TL303"] }\n')
    assert check(capsys, "--quiet", "--extend-per-file-ignores", "bad.py:TL303", ".")[0] == 0
    assert check(capsys, "--quiet", "--per-file-ignores", "bad.py:TL303", ".")[1].startswith("other.py:")


# ---------------------------------------------------------------- noqa


def test_ignore_noqa_reports_what_noqa_silences(project, capsys):
    (project / "bad.py").write_text(BAD.replace("True)\n", "True)  # noqa: TL303\n"))
    assert check(capsys, "--quiet", ".")[0] == 0
    code, out, _ = check(capsys, "--quiet", "--ignore-noqa", ".")
    assert code == 1 and codes(out) == ["TL303"]


def test_an_unused_noqa_code_is_tl001_with_a_fix(project, capsys):
    (project / "bad.py").write_text(BAD.replace("True)\n", "True)  # noqa: TL303\n") + "x = 1  # noqa: TL303, E501\ny = 2  # noqa: TL101\n")
    code, out, _ = check(capsys, "--quiet", ".")
    assert out.splitlines() == [
        "bad.py:3:8: TL001 [*] unused `noqa` code `TL303`: suppresses nothing on this line; remove it",
        "bad.py:4:8: TL001 [*] unused `noqa` code `TL101`: suppresses nothing on this line; remove it",
    ]
    assert check(capsys, "--quiet", "--fix", ".")[0] == 0
    assert (project / "bad.py").read_text().splitlines()[2:] == ["x = 1  # noqa: E501", "y = 2"]


@pytest.mark.parametrize(
    "line, reported",
    [
        ("x = 1  # noqa", False),  # bare: other tools' too
        ("x = 1  # noqa: E501", False),  # another tool's code
        ("x = 1  # noqa: TL306", False),  # an opt-in rule that is not selected: its use is unknown
        ("x = '# noqa: TL303'", False),  # in a string, not a comment
        ("x = 1  # noqa: TL303, TL001", False),  # keeps its own unused codes
        ("x = 1  # noqa: TL1O1", True),  # no such rule
    ],
)
def test_what_tl001_leaves_alone(project, capsys, line, reported):
    (project / "bad.py").write_text(line + "\n")
    assert ("TL001" in codes(check(capsys, "--quiet", ".")[1])) == reported


def test_add_noqa_silences_every_finding_and_keeps_existing_codes(project, capsys):
    (project / "bad.py").write_text(BAD.replace("True)\n", "True)  # noqa: E501\n"))
    (project / "fixable.py").write_text(FIXABLE)
    code, out, err = check(capsys, "--add-noqa", ".")
    assert (code, out, err) == (0, "", "Added 2 noqa directives.\n")
    assert (project / "bad.py").read_text().splitlines()[1].endswith("persistent_workers=True)  # noqa: E501, TL303")
    assert (project / "fixable.py").read_text().splitlines()[3] == "    y = x.float().to(device)  # noqa: TL202"
    assert check(capsys, "--quiet", ".")[:2] == (0, "")
    assert check(capsys, "--add-noqa", ".")[2] == "Added 0 noqa directives.\n"


def test_add_noqa_skips_a_line_that_ends_inside_a_string():
    from torchlint.engine.noqa import add_noqa
    from torchlint.finding import Finding, Location

    text = 'x = f("""a\nb""")\n'
    finding = Finding("TL999", "x", "m", "a.py", Location(1, 5), Location(2, 6))
    assert add_noqa(text, [finding]) == (text, 0)


# ---------------------------------------------------------------- --fix-only


def test_fix_only_fixes_and_reports_nothing_that_remains(project, capsys):
    (project / "fixable.py").write_text(FIXABLE)
    code, out, _ = check(capsys, "--fix-only", ".")
    assert (code, out) == (0, "Fixed 1 finding.\n")
    assert "x.to(device, torch.float32)" in (project / "fixable.py").read_text()
    assert check(capsys, "--fix-only", "--exit-non-zero-on-fix", ".")[:2] == (0, "No findings fixed.\n")


# ---------------------------------------------------------------- --watch


def test_watch_lints_again_when_a_file_changes(tmp_path):
    pytest.importorskip("watchfiles")
    (tmp_path / "train.py").write_text("x = 1\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "torchlint", "check", "--watch", "--no-cache", "--output-format", "concise", "."],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        lines = []

        def wait_for(text: str) -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                line = process.stdout.readline()
                lines.append(line)
                if text in line:
                    return
            raise AssertionError(f"{text!r} not printed: {lines}")

        wait_for("All checks passed!")
        time.sleep(0.5)  # the watcher is started after the first run
        (tmp_path / "train.py").write_text(BAD)
        wait_for("TL303")
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert any("Starting linter in watch mode" in line for line in lines)
    assert any("File change detected" in line for line in lines)


# ---------------------------------------------------------------- an empty selection


@pytest.mark.parametrize(
    "args, config, message",
    [
        (["--select", ""], None, "argument --select: selects no rule"),
        (["--select", " , "], None, "argument --select: selects no rule"),
        (["--select", "TL303", "--ignore", "TL3"], None, "no rule is selected (from --select, --ignore)"),
        ([], "[tool.torchlint]\nselect = []\n", "no rule is selected (from pyproject.toml [tool.torchlint] select)"),
    ],
)
def test_an_empty_selection_is_a_usage_error(project, capsys, args, config, message):
    # It would check nothing and always pass: a CI step that lost its codes must not turn green.
    if config:
        (project / "pyproject.toml").write_text(config)
    try:
        code = main(["check", "--no-cache", *args, "bad.py"])
    except SystemExit as error:  # argparse's own usage errors
        code = error.code
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and message in err
