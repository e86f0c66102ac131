"""Options a ruff user expects, with ruff's meanings: --exclude/--extend-exclude, --config 'KEY = VALUE', the grouped
format, --verbose, FORCE_COLOR/CLICOLOR_FORCE/NO_COLOR, and --watch clearing the terminal between runs."""

import io
import sys
import types

import pytest

from torchlint import watch
from torchlint.cli import main, use_colour

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"
TL303 = "TL303 `persistent_workers=True` with no workers"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("a.py", "gen/b.py", "vendored/c.py", "build/d.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(BAD)
    for variable in ("FORCE_COLOR", "CLICOLOR_FORCE", "NO_COLOR"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


def run(capsys, *args):
    try:
        code = main(["check", "--no-cache", *args])
    except SystemExit as error:  # argparse's own usage errors
        code = error.code
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- --exclude, --extend-exclude


def test_exclude_replaces_the_excludes_defaults_included(project, capsys):
    # As in ruff, the config's extend-exclude still applies: --exclude replaces `exclude` only.
    (project / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["vendored"]\n')
    code, out, _ = run(capsys, "--show-files", "--exclude", "gen", "--exclude", "a.py")
    assert (code, out.splitlines()) == (0, ["build/d.py"])


def test_extend_exclude_adds_to_the_config(project, capsys):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["vendored"]\n')
    code, out, _ = run(capsys, "--show-files", "--extend-exclude", "gen,a.py")
    assert (code, out) == (0, "")
    _, settings, _ = run(capsys, "--show-settings", "--extend-exclude", "gen")
    assert "vendored, gen  (default, then from pyproject.toml [tool.torchlint] extend-exclude, --extend-exclude)" in settings


# ---------------------------------------------------------------- --config KEY=VALUE


def test_config_takes_an_inline_toml_override(project, capsys):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["TL101"]\n')
    code, out, _ = run(capsys, "--output-format", "concise", "--config", 'select = ["TL303"]', "a.py")
    assert code == 1 and TL303 in out
    _, settings, _ = run(capsys, "--show-settings", "--config", 'select = ["TL303"]', "--config", "tool.torchlint.device-name = 'dev'")
    assert "select = TL303  (from --config)" in settings and "device-name = dev  (from --config)" in settings


def test_a_dedicated_option_wins_over_an_inline_override(project, capsys):
    _, settings, _ = run(capsys, "--show-settings", "--config", 'select = ["TL303"]', "--select", "TL101")
    assert "select = TL101  (from --select)" in settings


def test_config_still_takes_a_path(project, capsys):
    (project / "strict.toml").write_text('select = ["TL101"]\n')
    _, settings, _ = run(capsys, "--show-settings", "--config", "strict.toml", "--config", "preview = true")
    assert "config file = strict.toml" in settings and "select = TL101  (from strict.toml select)" in settings
    assert "preview = true  (from --config)" in settings


@pytest.mark.parametrize(
    "value, message",
    [
        ("missing.toml", "missing.toml: config file not found"),
        ("selec = ['TL1']", "--config: unknown key 'selec' in an inline override; did you mean 'select'?"),
        ("fix = 'yes'", "--config: 'fix' must be a bool, got str"),
        ("strict", "--config 'strict' is neither a config file nor a TOML `KEY = VALUE` override"),
    ],
)
def test_a_bad_config_value_says_what_it_is(project, capsys, value, message):
    code, out, err = run(capsys, "--config", value, "a.py")
    assert (code, out) == (2, "") and message in err


# ---------------------------------------------------------------- --output-format grouped


def test_grouped_lists_findings_under_each_file(project, capsys):
    (project / "two.py").write_text("\n" * 9 + BAD)
    code, out, _ = run(capsys, "--output-format", "grouped", "a.py", "two.py", "--select", "TL303,TL302")
    message = out.split("TL303 ", 1)[1].split("\n", 1)[0]
    assert code == 1
    assert out == f"a.py:\n  2:25 TL303 {message}\n\ntwo.py:\n  11:25 TL303 {message}\n\nFound 2 findings.\n"


# ---------------------------------------------------------------- --verbose


def test_verbose_says_which_config_how_many_files_and_cache_hits(project, capsys):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["vendored"]\n')
    assert main(["check", "--verbose", "--quiet", "."]) == 1
    first = capsys.readouterr().err
    assert f"Using configuration file {project / 'pyproject.toml'}" in first
    assert "Found 2 files to lint under ." in first and ": 0 hits, 2 files linted" in first and "Done in " in first
    assert main(["check", "-v", "--quiet", "."]) == 1
    assert ": 2 hits, 0 files linted" in capsys.readouterr().err


def test_without_verbose_nothing_is_logged(project, capsys):
    assert main(["check", "--verbose", "--quiet", "."]) == 1
    capsys.readouterr()
    code, out, err = run(capsys, "--quiet", ".")
    assert code == 1 and err == ""


# ---------------------------------------------------------------- colour


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize(
    "environment, terminal, coloured",
    [
        ({}, True, True),
        ({}, False, False),
        ({"FORCE_COLOR": "1"}, False, True),
        ({"CLICOLOR_FORCE": "1"}, False, True),
        ({"CLICOLOR_FORCE": "0"}, False, False),
        ({"FORCE_COLOR": ""}, False, False),
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": ""}, True, True),  # no-color.org: only a value that is not empty turns colour off
        ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, True, True),  # as in ruff, forcing wins
    ],
)
def test_colour_follows_the_environment(project, monkeypatch, environment, terminal, coloured):
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    assert use_colour(_Terminal() if terminal else io.StringIO()) is coloured


def test_force_color_colours_the_report_on_a_pipe_but_not_in_an_output_file(project, capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    _, out, _ = run(capsys, "--output-format", "concise", "a.py")
    assert out.startswith("\x1b[1ma.py:2:25:\x1b[0m \x1b[31m\x1b[1mTL303\x1b[0m")
    run(capsys, "--output-format", "concise", "-o", "report.txt", "a.py")
    assert "\x1b[" not in (project / "report.txt").read_text()


# ---------------------------------------------------------------- --watch


def test_watch_clears_a_terminal_before_each_run(monkeypatch):
    changes = [{("modified", "a.py")}, {("modified", "a.py"), ("added", "b.py")}]
    monkeypatch.setitem(sys.modules, "watchfiles", types.SimpleNamespace(
        watch=lambda *paths, watch_filter: iter(changes), PythonFilter=lambda extra_extensions: None,
    ))
    screen = _Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    watch.watch(["."], lambda: screen.write("report\n"))
    assert screen.getvalue() == (watch.CLEAR_SCREEN + "report\n") * 3
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stdout", piped)
    watch.watch(["."], lambda: piped.write("report\n"))
    assert piped.getvalue() == "report\n" * 3
