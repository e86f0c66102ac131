"""The command line as a user meets it: exit codes, formats, selection, config, discovery."""

import gc
import json
import os
import subprocess
import sys

import pytest

from conftest import run_cli
from torchlint.cli import main
from torchlint.finding import documentation_url

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"
CLEAN = "import torch\nx = torch.zeros(3)\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def check(capsys, *args):
    # --preview: the fixable example is TL202's, a rule in preview.
    code = main(["check", "--preview", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_findings_exit_1_with_concise_lines_and_summary(project, capsys):
    code, out, err = check(capsys, ".")
    assert code == 1
    assert out.splitlines() == [
        "bad.py:2:25: TL303 " + _message("TL303"),
        "Found 1 finding.",
    ]


def _message(code):
    from torchlint.rules import rules_by_code

    return rules_by_code()[code].message


def test_a_check_run_freezes_what_it_kept_out_of_the_collection_at_exit(project, capsys):
    # Python runs the collector once more when the process ends, even when it is off; what the run kept is frozen
    # out of that pass, which took a tenth of a one-process run on the benchmark sample.
    gc.unfreeze()
    try:
        check(capsys, ".")
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_check_is_parsed_alike_without_the_feature_commands():
    # `check` builds its parser without importing the feature commands' modules (cli.build_parser): none of them may add
    # an option to `check`, or a check run would refuse it.
    from torchlint.cli import build_parser

    def check_options(parser):
        (commands,) = [action for action in parser._actions if action.dest == "command"]
        return sorted(option for action in commands.choices["check"]._actions for option in action.option_strings)

    assert check_options(build_parser("check")) == check_options(build_parser())


def test_clean_exit_0(project, capsys):
    assert check(capsys, "clean.py") == (0, "All checks passed!\n", "")


def test_default_command_is_check(project):
    code, out, _ = run_cli("bad.py", "--quiet", cwd=project)
    assert (code, out) == (1, "bad.py:2:25: TL303 " + _message("TL303") + "\n")


def test_exit_zero_and_quiet(project, capsys):
    code, out, _ = check(capsys, "--exit-zero", "--quiet", "bad.py")
    assert code == 0 and out.count("\n") == 1


@pytest.mark.parametrize("selector", ["TL303", "TL3", "TL", "persistent-workers-without-workers", "ALL"])
def test_select_by_code_prefix_or_name(project, capsys, selector):
    assert check(capsys, "--select", selector, "bad.py")[0] == 1


def test_ignore_wins_over_select(project, capsys):
    assert check(capsys, "--select", "TL3", "--ignore", "TL303", "bad.py")[0] == 0


def test_unknown_selector_is_a_usage_error(project, capsys):
    code, out, err = check(capsys, "--select", "TL9999", "bad.py")
    assert code == 2 and out == ""
    assert err == "torchlint: error: --select: unknown rule code or name 'TL9999'\n"


def test_missing_path_is_one_line_and_exit_2(project, capsys):
    code, out, err = check(capsys, "nope.py")
    assert (code, out, err) == (2, "", "torchlint: error: nope.py: no such file or folder\n")


def test_full_format_shows_the_line_and_a_caret(project, capsys):
    code, out, _ = check(capsys, "--output-format", "full", "bad.py")
    assert out.splitlines()[:4] == [
        "bad.py:2:25: TL303 " + _message("TL303"),
        "  |",
        "2 | loader = DataLoader(ds, persistent_workers=True)",
        "  |                         ^^^^^^^^^^^^^^^^^^^^^^^",
    ]


def test_json_matches_the_spec_schema(project, capsys):
    code, out, _ = check(capsys, "--output-format", "json", "bad.py", "clean.py")
    assert code == 1
    assert json.loads(out) == [
        {
            "code": "TL303",
            "name": "persistent-workers-without-workers",
            "message": _message("TL303"),
            "filename": "bad.py",
            "location": {"row": 2, "column": 25},
            "end_location": {"row": 2, "column": 48},
            "fix": None,
            "url": documentation_url("rules/TL303.md"),
        }
    ]


def test_json_is_empty_array_when_clean(project, capsys):
    assert check(capsys, "--output-format", "json", "clean.py") == (0, "[]\n", "")


def test_statistics_is_only_the_table_with_a_fixable_column(project, capsys):
    (project / "fixable.py").write_text("import torch\nx, device = torch.arange(3), torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nfor step in range(2):\n    y = x.float().to(device)\n")
    code, out, _ = check(capsys, "--statistics", "bad.py", "fixable.py")
    assert (code, out.splitlines()) == (1, [
        "    1  TL202  [*] chained-conversion",
        "    1  TL303      persistent-workers-without-workers",
    ])


@pytest.mark.parametrize("output_format", ["json", "sarif", "gitlab"])
def test_statistics_with_a_machine_format_is_one_document(project, capsys, output_format):
    code, out, _ = check(capsys, "--statistics", "--output-format", output_format, "bad.py")
    # One JSON document, nothing after it: the counts, in every JSON format.
    assert json.loads(out) == [{
            "code": "TL303", "name": "persistent-workers-without-workers", "count": 1,
            "fixable": False, "fixable_count": 0, "unsafe_fixable_count": 0,
        }]


def test_stdin_with_filename(project):
    code, out, _ = run_cli("check", "-", "--stdin-filename", "train.py", "--quiet", stdin=BAD.encode(), cwd=project)
    assert (code, out) == (1, "train.py:2:25: TL303 " + _message("TL303") + "\n")


def test_version():
    from torchlint import __version__

    assert run_cli("--version")[1] == f"torchlint {__version__}\n"


def test_rule_explains_and_lists(capsys):
    assert main(["rule", "TL303"]) == 0
    assert capsys.readouterr().out.startswith("# TL303 persistent-workers-without-workers\n")
    assert main(["rule", "persistent-workers-without-workers"]) == 0
    assert capsys.readouterr().out.startswith("# TL303")
    assert main(["rule", "--all"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    from torchlint.rules import all_rules

    assert listed == [rule.code for rule in all_rules()]
    assert main(["rule", "TL999"]) == 2
    assert capsys.readouterr().err == "torchlint: error: unknown rule 'TL999'; `torchlint rule --all` lists them\n"


# ------------------------------------------------------------------ config


def test_pyproject_config_is_found_from_the_linted_path(project, capsys):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["TL303"]\n')
    os.chdir("/")
    assert check(capsys, project / "bad.py")[0] == 0


def test_per_file_ignores(project, capsys):
    (project / "pyproject.toml").write_text('[tool.torchlint.per-file-ignores]\n"bad.py" = ["TL3"]\n')
    assert check(capsys, ".")[0] == 0


def test_torchlint_toml_and_explicit_config(project, capsys):
    (project / "other.toml").write_text('select = ["TL000"]\n')
    assert check(capsys, "--config", "other.toml", "bad.py")[0] == 0


@pytest.mark.parametrize(
    "content, message",
    [
        ('[tool.torchlint]\nselec = ["TL1"]\n', "pyproject.toml: unknown key 'selec' in [tool.torchlint]; did you mean 'select'?"),
        ('[tool.torchlint]\nselect = "TL1"\n', "pyproject.toml: 'select' must be a list, got str"),
        ('[tool.torchlint]\nselect = ["TL777"]\n', "pyproject.toml: 'select': unknown rule code or name 'TL777'"),
        ('[tool.torchlint]\ntorch-version = "two"\n', "pyproject.toml: 'torch-version': expected a version like \"2.1\", got 'two'"),
        ('[tool.torchlint]\noutput-format = "xml"\n', "pyproject.toml: 'output-format': must be one of full, concise, grouped, json, json-lines, sarif, github, gitlab, junit, pylint, got 'xml'"),
        ('[tool.torchlint\n', "pyproject.toml: invalid TOML: "),
    ],
)
def test_bad_config_exits_2_naming_key_and_file(project, capsys, content, message):
    (project / "pyproject.toml").write_text(content)
    code, out, err = check(capsys, "bad.py")
    assert code == 2 and out == ""
    assert err.startswith(f"torchlint: error: {project}/{message}")
    assert err.count("\n") == 1


def test_torch_version_defaults_to_the_project_requirement(project):
    from torchlint.config import load

    (project / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["torchvision>=0.15", "torch>=2.1,<3"]\n')
    assert load(None, project).torch_version == (2, 1)
    (project / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["numpy"]\n')
    assert load(None, project).torch_version == (2, 6)


# ------------------------------------------------------------------ discovery


def test_discovery_honours_default_excludes_gitignore_and_exclude(project, capsys):
    for folder in ("build", ".venv", "ignored", "skipped", "pkg"):
        (project / folder).mkdir()
        (project / folder / "m.py").write_text(BAD)
    (project / "pkg" / "stub.pyi").write_text(BAD)
    (project / "notes.txt").write_text(BAD)
    (project / ".git").mkdir()
    (project / ".gitignore").write_text("ignored/\n")
    (project / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["skipped"]\n')
    _, out, _ = check(capsys, "--output-format", "concise", "--quiet", ".")
    assert [line.split(":")[0] for line in out.splitlines()] == ["bad.py", "pkg/m.py", "pkg/stub.pyi"]


def test_explicit_paths_are_linted_even_when_excluded_unless_forced(project, capsys):
    (project / "build").mkdir()
    (project / "build" / "m.py").write_text(BAD)
    assert check(capsys, "build/m.py")[0] == 1
    assert check(capsys, "--force-exclude", "build/m.py")[0] == 0


def test_symlink_loop_does_not_hang(project, capsys):
    (project / "loop").mkdir()
    os.symlink(project / "loop", project / "loop" / "again")
    code, out, _ = check(capsys, "--quiet", ".")
    assert code == 1 and out.count("TL303") == 1


def test_a_file_reached_twice_is_linted_once(project, capsys):
    (project / "sub").mkdir()
    os.symlink(project / "bad.py", project / "sub" / "alias.py")
    os.symlink(project, project / "sub" / "here")
    code, out, _ = check(capsys, "--quiet", "bad.py", "./bad.py", "sub/alias.py", "sub/here/bad.py")
    assert code == 1 and out.count("TL303") == 1


def test_order_is_deterministic_whatever_the_argument_order(project, capsys):
    (project / "a.py").write_text(BAD)
    first = check(capsys, "bad.py", "a.py")[1]
    second = check(capsys, "a.py", "bad.py")[1]
    assert first == second and first.index("a.py") < first.index("bad.py")


def test_readme_example_output_is_what_torchlint_prints():
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme.split("$ torchlint fixtures/examples/\n", 1)[1].split("```", 1)[0]
    code, out, _ = run_cli("fixtures/examples/", "--output-format", "concise")
    assert code == 1 and out == shown


def test_a_plain_check_leaves_out_the_modules_only_some_runs_need(tmp_path):
    # `logging` (--verbose), `difflib` (a fix's diff, a config typo's suggestion) and `importlib.resources` (the API
    # tables are read through pkgutil) are a start-up cost of every run otherwise (docs/performance.md, tenth session).
    # The file has a finding with a fix, from a rule that reads its API table.
    (tmp_path / "train.py").write_text("import torch\nfrom torch.autograd import Variable\nx = Variable(torch.zeros(3))\n")
    program = (
        "import sys, io, contextlib\n"
        "from torchlint.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    code = main(sys.argv[1:])\n"
        "print(code, 'TL6' in out.getvalue(), *(name in sys.modules for name in ('logging', 'difflib', 'importlib.resources')))\n"
    )

    def run(*options):
        command = [sys.executable, "-c", program, "check", "--no-cache", *options, "train.py"]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()

    assert run("--output-format", "concise") == ["1", "True", "False", "False", "False"]
    # What they are there for still works: the fix's diff, and the debug messages under --verbose.
    assert run("--output-format", "full", "--verbose")[:4] == ["1", "True", "True", "True"]
