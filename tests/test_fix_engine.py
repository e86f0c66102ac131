"""Applying fixes: edits to text, rounds until the text settles, safe writes, diffs.

The rules here are synthetic (regular expressions that report a finding with a fix)
so that the machinery is tested apart from any real rule; they are plain functions,
not `Rule` subclasses, so they never enter the rule catalogue.
"""

import codecs
import os
import re
import stat

import pytest

from torchlint.finding import Edit, Finding, Fix, Location
from torchlint.fixes import MAX_ROUNDS, apply_fixes, fix_file, fix_text, unified_diff, write

_LINE_BREAK = re.compile(r"\r\n|\r|\n")

# code, name, pattern, replacement (re.Match.expand template), applicability
SAFE_RENAME = ("TL991", "synthetic-rename", r"\bold_api\(", "new_api(", "safe")
UNSAFE_RENAME = ("TL992", "synthetic-unsafe", r"\brisky_api\(", "new_api(", "unsafe")
BREAKS_CODE = ("TL993", "synthetic-breaks-code", r"\bbreak_me\b", "break_me(", "safe")
DUPLICATE_KEYWORD = ("TL994", "synthetic-duplicate-keyword", r"\bf\(a=2\)", "f(a=2, a=1)", "safe")
UNNEST = ("TL995", "synthetic-unnest", r"\(\((\w+)\)\)", r"(\1)", "safe")
SECOND_ARGUMENT = ("TL996", "synthetic-second-argument", r"api\(1\)", "api(2)", "safe")
ADD_LINE = ("TL997", "synthetic-add-line", r"add_line\(\)\r?\n(?!added)", "add_line()\nadded = 1\n", "safe")
SYNTHETIC = (SAFE_RENAME, UNSAFE_RENAME, BREAKS_CODE)


def position(text: str, offset: int) -> Location:
    breaks = list(_LINE_BREAK.finditer(text, 0, offset))
    return Location(len(breaks) + 1, offset - (breaks[-1].end() if breaks else 0) + 1)


def synthetic_findings(text: str, filename: str = "example.py", rules=SYNTHETIC):
    findings = []
    for code, name, pattern, replacement, applicability in rules:
        for match in re.finditer(pattern, text):
            start, end = position(text, match.start()), position(text, match.end())
            fix = Fix(applicability, f"write `{match.expand(replacement)}`", (Edit(match.expand(replacement), start, end),))
            findings.append(Finding(code, name, f"{name} found", filename, start, end, fix))
    return sorted(findings, key=Finding.sort_key)


def synthetic_lint(*rules):
    return lambda text: synthetic_findings(text, rules=rules or SYNTHETIC)


def replace(content, row, column, end_row, end_column, applicability="safe"):
    return Fix(applicability, "synthetic", (Edit(content, Location(row, column), Location(end_row, end_column)),))


# ---------------------------------------------------------------- edits


def test_an_edit_replaces_exactly_its_range():
    applied = apply_fixes("x = a.double()\n", [replace("float", 1, 7, 1, 13)])
    assert applied.text == "x = a.float()\n"
    assert applied.applied == [0]


def test_columns_count_characters_not_bytes():
    applied = apply_fixes('s = "é"; t = old\n', [replace("new", 1, 14, 1, 17)])
    assert applied.text == 's = "é"; t = new\n'


def test_insertions_deletions_and_the_end_of_a_line_without_newline():
    text = "a = 1\nb = 2\nc = 3"
    fixes = [
        replace("import torch\n", 1, 1, 1, 1),
        replace("", 2, 1, 3, 1),  # the whole second line
        replace("  # done", 3, 6, 3, 6),  # just past the last character
    ]
    assert apply_fixes(text, fixes).text == "import torch\na = 1\nc = 3  # done"


def test_new_lines_in_content_take_the_line_ending_of_the_file():
    text = "if x:\r\n    y = old\r\n"
    applied = apply_fixes(text, [replace("(\n        new\n    )", 2, 9, 2, 12)])
    assert applied.text == "if x:\r\n    y = (\r\n        new\r\n    )\r\n"


def test_content_copied_with_crlf_is_not_doubled():
    applied = apply_fixes("a\r\nb\r\n", [replace("x\r\ny", 1, 1, 1, 2)])
    assert applied.text == "x\r\ny\r\nb\r\n"


def test_a_fix_that_touches_an_accepted_one_waits():
    text = "old_api(1)\n"
    first = replace("new_api(", 1, 1, 1, 9)
    overlapping = replace("api(2)", 1, 5, 1, 11)
    adjacent = replace("x", 1, 9, 1, 10)  # starts where the first ends: which goes first would be a guess
    separate = replace(" # ok", 1, 11, 1, 11)
    applied = apply_fixes(text, [first, overlapping, adjacent, separate])
    assert applied.applied == [0, 3]
    assert applied.text == "new_api(1) # ok\n"


def test_edits_of_one_fix_apply_together():
    both = Fix("safe", "two edits", (Edit(")", Location(1, 6), Location(1, 6)), Edit("f(", Location(1, 5), Location(1, 5))))
    assert apply_fixes("y = x\n", [both]).text == "y = f(x)\n"


def test_a_fix_that_changes_nothing_is_not_applied():
    applied = apply_fixes("x = 1\n", [replace("1", 1, 5, 1, 6), replace("x", 1, 1, 1, 2), replace("y", 1, 1, 1, 2)])
    assert applied.applied == [2]
    assert applied.text == "y = 1\n"


@pytest.mark.parametrize(
    "fix, reason",
    [
        (replace("x", 3, 1, 3, 1), "row 3 is outside"),
        (replace("x", 1, 7, 1, 7), "column 7 is outside row 1"),
        (replace("x", 1, 4, 1, 2), "ends (1:2) before it starts (1:4)"),
        (Fix("safe", "overlapping", (Edit("a", Location(1, 1), Location(1, 4)), Edit("b", Location(1, 2), Location(1, 5)))), "overlap"),
        (Fix("safe", "empty", ()), "no edits"),
    ],
)
def test_malformed_fixes_are_rejected_with_a_reason(fix, reason):
    applied = apply_fixes("hello\n", [fix, replace("j", 1, 1, 1, 2)])
    assert applied.applied == [1]
    assert applied.text == "jello\n"
    [(index, why)] = applied.malformed
    assert index == 0 and reason in why


# ---------------------------------------------------------------- rounds


def test_safe_fixes_apply_and_unsafe_ones_wait_for_the_option():
    text = "old_api(1)\nrisky_api(2)\n"
    safe = fix_text(text, synthetic_lint())
    assert safe.text == "new_api(1)\nrisky_api(2)\n"
    assert [finding.code for finding in safe.fixed] == ["TL991"]
    assert [finding.code for finding in safe.findings] == ["TL992"]
    both = fix_text(text, synthetic_lint(), unsafe=True)
    assert both.text == "new_api(1)\nnew_api(2)\n"
    assert [finding.code for finding in both.fixed] == ["TL991", "TL992"]
    assert both.findings == []


def test_rounds_continue_until_nothing_changes_and_a_second_run_changes_nothing():
    calls = []

    def lint(text):
        calls.append(text)
        return synthetic_findings(text, rules=(UNNEST,))

    result = fix_text("f(((((x)))))\n", lint)
    assert result.text == "f(x)\n"
    assert len(result.fixed) == 4
    assert len(calls) == 5  # the original, then once after each round
    again = fix_text(result.text, lint)
    assert not again.changed and again.fixed == [] and again.findings == []


def test_overlapping_fixes_are_applied_in_the_next_round():
    result = fix_text("old_api(1)\n", synthetic_lint(SAFE_RENAME, SECOND_ARGUMENT))
    assert result.text == "new_api(2)\n"
    assert [finding.code for finding in result.fixed] == ["TL991", "TL996"]
    assert result.problems == []


def test_rounds_are_bounded_and_a_fix_that_never_settles_is_reported():
    nested = "f(" + "(" * 20 + "x" + ")" * 20 + ")\n"
    result = fix_text(nested, synthetic_lint(UNNEST), filename="deep.py")
    assert len(result.fixed) == MAX_ROUNDS
    [problem] = result.problems
    assert problem.startswith("deep.py: fixes did not settle after 10 rounds (TL995 (synthetic-unnest)")
    assert not result.broken


def test_a_fix_that_breaks_the_code_leaves_the_file_unchanged_and_names_the_rule():
    text = "old_api(1)\nbreak_me\n"
    result = fix_text(text, synthetic_lint(), filename="model.py")
    assert result.broken
    assert result.text == text and result.fixed == []
    assert [finding.code for finding in result.findings] == ["TL991", "TL993"]
    [problem] = result.problems
    assert problem.startswith("model.py: the fix of TL993 (synthetic-breaks-code) would make the code invalid (SyntaxError")
    assert "TL991" not in problem
    assert "torchlint bug" in problem


def test_a_duplicate_keyword_counts_as_broken_code():
    result = fix_text("f(a=2)\n", synthetic_lint(DUPLICATE_KEYWORD))
    assert result.broken
    assert "keyword argument repeated" in result.problems[0]


def test_snippets_that_only_compile_in_context_can_still_be_fixed():
    result = fix_text("return old_api(1)\n", synthetic_lint())
    assert result.text == "return new_api(1)\n"
    assert not result.broken


def test_a_malformed_fix_is_reported_and_the_others_apply():
    def lint(text):
        bad = Finding("TL990", "synthetic-malformed", "m", "x.py", Location(1, 1), Location(1, 2), replace("x", 9, 1, 9, 1))
        return [bad] + synthetic_findings(text, rules=(UNNEST,))

    result = fix_text("f((((x))))\n", lint, filename="x.py")
    assert result.text == "f(x)\n"
    assert len(result.fixed) == 3
    assert result.problems == [  # once, although the finding comes back every round
        "x.py: the fix of TL990 (synthetic-malformed) cannot be applied: row 9 is outside the file (2 lines); "
        "please report this torchlint bug"
    ]


def test_notebook_cell_findings_are_not_fixed_in_the_notebook_text():
    def lint(text):
        return [
            Finding(f.code, f.name, f.message, f.filename, f.location, f.end_location, f.fix, cell=1)
            for f in synthetic_findings(text)
        ]

    result = fix_text("old_api(1)\n", lint)
    assert not result.changed


# ---------------------------------------------------------------- files


@pytest.fixture
def synthetic_rules(monkeypatch):
    """Make fix_file see the synthetic findings next to the real rules' ones."""
    from torchlint.fixes import files

    real = files.lint_text

    def lint_text(text, filename, config):
        found = real(text, filename, config) + synthetic_findings(text, filename, SYNTHETIC + (ADD_LINE,))
        return sorted(found, key=Finding.sort_key)

    monkeypatch.setattr(files, "lint_text", lint_text)


@pytest.fixture
def config():
    from conftest import make_config

    return make_config(select=["ALL"])


def fix_and_write(path, config):
    """The reason the fixes of `path` were not written, or None."""
    fix = fix_file(str(path), str(path), config, unsafe=False)
    assert fix.changed
    return write(fix)


def test_writing_keeps_permissions_bom_and_line_endings(tmp_path, config, synthetic_rules):
    path = tmp_path / "script.py"
    path.write_bytes(codecs.BOM_UTF8 + "s = 'é'\r\nadd_line()\r\nold_api(1)\r\n".encode())
    path.chmod(0o751)
    problem = fix_and_write(path, config)
    assert problem is None
    assert path.read_bytes() == codecs.BOM_UTF8 + "s = 'é'\r\nadd_line()\r\nadded = 1\r\nnew_api(1)\r\n".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert sorted(os.listdir(tmp_path)) == ["script.py"]  # no temporary file left behind


def test_writing_keeps_a_declared_encoding(tmp_path, config, synthetic_rules):
    path = tmp_path / "legacy.py"
    path.write_bytes("# -*- coding: latin-1 -*-\ns = 'café'\nold_api(1)\n".encode("latin-1"))
    problem = fix_and_write(path, config)
    assert problem is None
    assert path.read_bytes() == "# -*- coding: latin-1 -*-\ns = 'café'\nnew_api(1)\n".encode("latin-1")


def test_a_symlink_stays_a_link_and_its_target_is_fixed(tmp_path, config, synthetic_rules):
    target = tmp_path / "real.py"
    target.write_text("old_api(1)\n")
    link = tmp_path / "link.py"
    link.symlink_to(target)
    problem = fix_and_write(link, config)
    assert problem is None
    assert link.is_symlink()
    assert target.read_text() == "new_api(1)\n"


def test_a_read_only_file_is_reported_and_left_alone(tmp_path, config, synthetic_rules):
    path = tmp_path / "frozen.py"
    path.write_text("old_api(1)\n")
    path.chmod(0o444)
    problem = fix_and_write(path, config)
    assert problem == f"{path}: the file is read-only; its fixes were not written"
    assert path.read_text() == "old_api(1)\n"


def test_a_file_changed_during_the_run_is_reported_and_left_alone(tmp_path, config, synthetic_rules):
    path = tmp_path / "busy.py"
    path.write_text("old_api(1)\n")
    fix = fix_file(str(path), "busy.py", config, unsafe=False)
    path.write_text("old_api(1)\nsomeone_else = 1\n")
    assert write(fix) == "busy.py: the file changed on disk during the run; its fixes were not written (run again)"
    assert path.read_text() == "old_api(1)\nsomeone_else = 1\n"


def test_text_the_encoding_cannot_hold_is_reported(tmp_path, config, monkeypatch):
    from torchlint.fixes import files

    pi = ("TL991", "synthetic-pi", r"\bpi\b", "π", "safe")
    monkeypatch.setattr(files, "lint_text", lambda text, filename, config: synthetic_findings(text, filename, (pi,)))
    path = tmp_path / "ascii.py"
    path.write_bytes(b"# coding: ascii\nx = pi\n")
    problem = fix_and_write(path, config)
    assert problem == f"{path}: the fixed text cannot be written in the file's encoding (ascii); its fixes were not written"
    assert path.read_bytes() == b"# coding: ascii\nx = pi\n"


def test_an_unreadable_file_is_reported_as_its_finding(tmp_path, config):
    path = tmp_path / "binary.py"
    path.write_bytes(b"x = '\xff'\n")
    fix = fix_file(str(path), "binary.py", config, unsafe=False)
    assert not fix.changed
    assert [finding.code for finding in fix.findings] == ["TL000"]


# ---------------------------------------------------------------- diff


def test_the_diff_names_the_file_relative_to_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    diff = unified_diff("a = 1\nb = old\n", "a = 1\nb = new\n", str(tmp_path / "pkg" / "m.py"))
    assert diff == "--- pkg/m.py\n+++ pkg/m.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = old\n+b = new\n"


def test_the_diff_marks_a_missing_newline_at_the_end():
    diff = unified_diff("b = old", "b = new", "m.py")
    assert diff.endswith("-b = old\n\\ No newline at end of file\n+b = new\n\\ No newline at end of file\n")
