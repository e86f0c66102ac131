"""`torchlint check --fix / --unsafe-fixes / --diff / --show-fixes` from the command line.

The CLI runs in this process with the synthetic rules of test_fix_engine added to
the real ones, so these tests do not depend on which real rules offer fixes yet.
"""

import io
import json
import sys

import pytest

from test_fix_engine import SYNTHETIC, synthetic_findings
from torchlint.cli import main
from torchlint.finding import Finding


@pytest.fixture(autouse=True)
def synthetic_rules(monkeypatch):
    from torchlint.engine import runner
    from torchlint.fixes import files

    real = runner.lint_text

    def lint_text(text, filename, config, codes=None, **options):
        found = real(text, filename, config, codes, **options) + synthetic_findings(text, filename, SYNTHETIC)
        return sorted(found, key=Finding.sort_key)

    monkeypatch.setattr(runner, "lint_text", lint_text)
    monkeypatch.setattr(files, "lint_text", lint_text)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with its own (empty) config, as the current folder."""
    (tmp_path / "pyproject.toml").write_text("[tool.torchlint]\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *args, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(["check", "--output-format", "concise", *args])
    out, err = capsys.readouterr()
    return code, out, err


SAFE_AND_UNSAFE = "old_api(1)\nrisky_api(2)\n"


def test_fix_applies_safe_fixes_and_reports_what_remains(project, capsys):
    (project / "a.py").write_text(SAFE_AND_UNSAFE)
    code, out, err = run(capsys, "--fix", "a.py")
    assert (project / "a.py").read_text() == "new_api(1)\nrisky_api(2)\n"
    assert out == (
        "a.py:2:1: TL992 [~] synthetic-unsafe found\n"
        "Found 2 findings (1 fixed, 1 remaining).\n"
        "[~] 1 more fixable with `--unsafe-fixes`.\n"
    )
    assert (code, err) == (1, "")


def test_unsafe_fixes_apply_too_with_the_option(project, capsys):
    (project / "a.py").write_text(SAFE_AND_UNSAFE)
    code, out, _ = run(capsys, "--fix", "--unsafe-fixes", "a.py")
    assert (project / "a.py").read_text() == "new_api(1)\nnew_api(2)\n"
    assert out == "Found 2 findings (2 fixed, 0 remaining).\n"
    assert code == 0


def test_exit_non_zero_on_fix(project, capsys):
    (project / "a.py").write_text("old_api(1)\n")
    assert run(capsys, "--fix", "--exit-non-zero-on-fix", "a.py")[0] == 1
    assert run(capsys, "--fix", "--exit-non-zero-on-fix", "a.py")[0] == 0  # nothing left to fix


def test_a_second_fix_run_changes_nothing(project, capsys):
    (project / "a.py").write_text(SAFE_AND_UNSAFE)
    run(capsys, "--fix", "a.py")
    fixed = (project / "a.py").read_bytes()
    code, out, _ = run(capsys, "--fix", "a.py")
    assert (project / "a.py").read_bytes() == fixed
    assert code == 1
    assert out.endswith("Found 1 finding (0 fixed, 1 remaining).\n[~] 1 more fixable with `--unsafe-fixes`.\n")


def test_diff_prints_the_changes_and_writes_nothing(project, capsys):
    (project / "pkg").mkdir()
    (project / "pkg" / "a.py").write_text(SAFE_AND_UNSAFE)
    (project / "pkg" / "clean.py").write_text("x = 1\n")
    code, out, err = run(capsys, "--diff", str(project / "pkg"))
    assert out == "--- pkg/a.py\n+++ pkg/a.py\n@@ -1,2 +1,2 @@\n-old_api(1)\n+new_api(1)\n risky_api(2)\n"
    assert err == "Would fix 1 finding (1 would remain).\n"
    assert code == 1
    assert (project / "pkg" / "a.py").read_text() == SAFE_AND_UNSAFE


def test_diff_without_changes_exits_zero(project, capsys):
    (project / "a.py").write_text("risky_api(2)\n")
    assert run(capsys, "--diff", "a.py") == (0, "", "Would fix 0 findings (1 would remain).\n")


def test_show_fixes_lists_what_was_fixed(project, capsys):
    (project / "a.py").write_text("old_api(1)\nold_api(2)\n")
    (project / "b.py").write_text("risky_api(1)\n")
    code, out, _ = run(capsys, "--fix", "--unsafe-fixes", "--show-fixes", "a.py", "b.py")
    assert code == 0
    assert out == (
        "Fixed 3 findings:\n"
        "- a.py:\n"
        "    2 x TL991 (synthetic-rename)\n"
        "- b.py:\n"
        "    1 x TL992 (synthetic-unsafe)\n"
        "Found 3 findings (3 fixed, 0 remaining).\n"
    )


@pytest.mark.parametrize(
    "table, args, expected",
    [
        ("fix = true", [], "new_api(1)\nrisky_api(2)\n"),
        ("fix = true\nunsafe-fixes = true", [], "new_api(1)\nnew_api(2)\n"),
        ("fix = true", ["--unsafe-fixes"], "new_api(1)\nnew_api(2)\n"),
        ("fix = true", ["--no-fix"], SAFE_AND_UNSAFE),
    ],
)
def test_fix_settings_in_the_config_behave_as_the_options(project, capsys, table, args, expected):
    (project / "pyproject.toml").write_text(f"[tool.torchlint]\n{table}\n")
    (project / "a.py").write_text(SAFE_AND_UNSAFE)
    run(capsys, *args, "a.py")
    assert (project / "a.py").read_text() == expected


def test_fixed_standard_input_goes_to_standard_output(project, capsys, monkeypatch):
    stdin = SAFE_AND_UNSAFE.encode()
    code, out, err = run(capsys, "--fix", "--stdin-filename", "piped.py", "-", stdin=stdin, monkeypatch=monkeypatch)
    assert out == "new_api(1)\nrisky_api(2)\n"
    assert err.startswith("piped.py:2:1: TL992 [~] synthetic-unsafe found\nFound 2 findings (1 fixed, 1 remaining).\n")
    assert code == 1


def test_standard_input_with_nothing_to_fix_comes_back_unchanged(project, capsys, monkeypatch):
    code, out, err = run(capsys, "--fix", "-", stdin=b"x = 1\r\n", monkeypatch=monkeypatch)
    assert (code, out, err) == (0, "x = 1\r\n", "All checks passed!\n")


def test_a_fix_that_breaks_the_code_is_reported_and_the_other_files_are_fixed(project, capsys):
    (project / "bad.py").write_text("old_api(1)\nbreak_me\n")
    (project / "good.py").write_text("old_api(1)\n")
    code, out, err = run(capsys, "--fix", "bad.py", "good.py")
    assert (project / "bad.py").read_text() == "old_api(1)\nbreak_me\n"
    assert (project / "good.py").read_text() == "new_api(1)\n"
    assert err.startswith("torchlint: bad.py: the fix of TL993 (synthetic-breaks-code) would make the code invalid")
    assert "bad.py:1:1: TL991 [*]" in out
    assert code == 2


def test_a_read_only_file_is_reported_and_the_others_are_fixed(project, capsys):
    (project / "frozen.py").write_text("old_api(1)\n")
    (project / "frozen.py").chmod(0o444)
    (project / "good.py").write_text("old_api(1)\n")
    code, out, err = run(capsys, "--fix", "frozen.py", "good.py")
    assert err == "torchlint: frozen.py: the file is read-only; its fixes were not written\n"
    assert (project / "frozen.py").read_text() == "old_api(1)\n"
    assert (project / "good.py").read_text() == "new_api(1)\n"
    assert out.endswith(
        "frozen.py:1:1: TL991 [*] synthetic-rename found\n"
        "Found 2 findings (1 fixed, 1 remaining).\n"
        "[*] 1 fixable with another `--fix` run.\n"
    )
    assert code == 1


def test_json_after_fix_holds_the_remaining_findings_only(project, capsys):
    (project / "a.py").write_text(SAFE_AND_UNSAFE)
    code = main(["check", "--fix", "--show-fixes", "--output-format", "json", "a.py"])
    out, err = capsys.readouterr()
    [remaining] = json.loads(out)
    assert remaining["code"] == "TL992"
    assert remaining["fix"]["applicability"] == "unsafe"
    [edit] = remaining["fix"]["edits"]
    assert edit == {"content": "new_api(", "location": {"row": 2, "column": 1}, "end_location": {"row": 2, "column": 11}}
    assert err == "Fixed 1 finding:\n- a.py:\n    1 x TL991 (synthetic-rename)\n"
    assert code == 1


def test_check_shows_how_safely_each_finding_is_fixable(project, capsys):
    (project / "a.py").write_text(SAFE_AND_UNSAFE)
    code, out, _ = run(capsys, "a.py")
    assert code == 1
    assert out == (
        "a.py:1:1: TL991 [*] synthetic-rename found\n"
        "a.py:2:1: TL992 [~] synthetic-unsafe found\n"
        "Found 2 findings.\n"
        "[*] 1 fixable with the `--fix` option.\n"
        "[~] 1 more fixable with `--fix --unsafe-fixes`.\n"
    )
    out = run(capsys, "--unsafe-fixes", "a.py")[1]
    assert out.endswith("Found 2 findings.\n[*] 2 fixable with the `--fix` option.\n")
    main(["check", "--output-format", "full", "a.py"])
    out = capsys.readouterr().out
    assert "a.py:2:1: TL992 [~] synthetic-unsafe found\n  |\n2 | risky_api(2)\n  | ^^^^^^^^^^\n  = fix (unsafe): write `new_api(`\n" in out
