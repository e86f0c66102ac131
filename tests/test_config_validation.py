"""Bad configuration is one clear line naming the file and the key, and exit 2; odd paths just work.

Every case runs the CLI in this process, so a traceback fails the test as an
exception instead of hiding in a subprocess's stderr.
"""

import builtins
import errno
import os
import subprocess
import sys

import pytest

from torchlint.cli import main
from torchlint.rules import rules_by_code

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"
FINDING = "2:25: TL303 "
BAD_MESSAGE = rules_by_code()["TL303"].message


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


def check(capsys, *args):
    # Standard output is not a terminal here, so the format is concise unless the config says otherwise.
    code = main(["check", "--quiet", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(result, message: str) -> None:
    code, out, err = result
    assert (code, out, err) == (2, "", f"torchlint: error: {message}\n")


# ---------------------------------------------------------------- values in [tool.torchlint]

WRONG_TYPES = [
    ('select = "TL1"', "'select' must be a list, got str"),
    ("ignore = 303", "'ignore' must be a list, got int"),
    ("extend-select = true", "'extend-select' must be a list, got bool"),
    ('extend-ignore = {TL1 = true}', "'extend-ignore' must be a list, got dict"),
    ('per-file-ignores = ["a.py"]', "'per-file-ignores' must be a dict, got list"),
    ('exclude = "build"', "'exclude' must be a list, got str"),
    ("extend-exclude = 1.5", "'extend-exclude' must be a list, got float"),
    ('fix = "yes"', "'fix' must be a bool, got str"),
    ("unsafe-fixes = 1", "'unsafe-fixes' must be a bool, got int"),
    ('output-format = ["json"]', "'output-format' must be a str, got list"),
    ("device-name = 0", "'device-name' must be a str, got int"),
    ('label-names = "y"', "'label-names' must be a list, got str"),
    ("torch-version = 2.1", "'torch-version' must be a str, got float"),
    ("torch-version = 2024-01-01", "'torch-version' must be a str, got date"),
]

BAD_VALUES = [
    ('selec = ["TL1"]', "unknown key 'selec' in [tool.torchlint]; did you mean 'select'?"),
    ('select = ["TL777"]', "'select': unknown rule code or name 'TL777'"),
    ('ignore = ["backward-under-nograd"]', "'ignore': unknown rule code or name 'backward-under-nograd'; did you mean 'backward-under-no-grad'?"),
    ('extend-select = ["TL1", "XX"]', "'extend-select': unknown rule code or name 'XX'"),
    ('extend-ignore = [""]', "'extend-ignore': unknown rule code or name ''"),
    ("select = [1]", "'select': expected rule codes, got 1"),
    ('per-file-ignores = {"a.py" = ["TL9"]}', "'per-file-ignores': unknown rule code or name 'TL9'"),
    ('per-file-ignores = {"a.py" = "TL1"}', "'per-file-ignores': the value for 'a.py' must be a list of codes"),
    ('per-file-ignores = {"a.py" = [1]}', "'per-file-ignores': expected rule codes, got 1"),
    ("exclude = [1]", "'exclude': expected glob strings, got 1"),
    ('output-format = "xml"', "'output-format': must be one of full, concise, grouped, json, json-lines, sarif, github, gitlab, junit, pylint, got 'xml'"),
    ('output-format = "jsonlines"', "'output-format': must be one of full, concise, grouped, json, json-lines, sarif, github, gitlab, junit, pylint, got 'jsonlines'; did you mean 'json-lines'?"),
    ('device-name = "1gpu"', "'device-name': '1gpu' is not a Python name"),
    ("label-names = [1]", "'label-names': must be a list of non-empty strings"),
    ('label-names = ["y", ""]', "'label-names': must be a list of non-empty strings"),
    ('torch-version = "two"', "'torch-version': expected a version like \"2.1\", got 'two'"),
    ('torch-version = "2"', "'torch-version': expected a version like \"2.1\", got '2'"),
    (f'torch-version = "{"1" * 5000}.1"', f"'torch-version': expected a version like \"2.1\", got '{'1' * 5000}.1'"),
]

BAD_GLOBS = [
    ('exclude = ["!"]', "'exclude': bad glob: Invalid git pattern: '!'"),
    ('exclude = ["[z-a]"]', "'exclude': bad glob: bad character range z-a at position 10"),
    ('per-file-ignores = {"[z-a]" = ["TL1"]}', "'per-file-ignores': bad glob: bad character range z-a at position 10"),
]


@pytest.mark.parametrize("line, message", WRONG_TYPES + BAD_VALUES + BAD_GLOBS)
def test_a_bad_value_in_pyproject_names_the_file_and_the_key(project, capsys, line, message):
    (project / "pyproject.toml").write_text(f"[tool.torchlint]\n{line}\n")
    assert_one_error_line(check(capsys, "bad.py"), f"{project / 'pyproject.toml'}: {message}")


@pytest.mark.parametrize("line, message", [('selec = ["TL1"]', "unknown key 'selec' in the config; did you mean 'select'?")] + WRONG_TYPES[:3] + BAD_VALUES[1:4])
def test_a_bad_value_in_torchlint_toml_names_the_file_and_the_key(project, capsys, line, message):
    (project / "torchlint.toml").write_text(f"{line}\n")
    assert_one_error_line(check(capsys, "bad.py"), f"{project / 'torchlint.toml'}: {message}")


def test_a_bad_glob_in_extend_exclude_names_extend_exclude(project, capsys):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["a\\\\"]\n')
    message = "'extend-exclude': bad glob: Invalid git pattern: 'a\\\\'"
    assert_one_error_line(check(capsys, "bad.py"), f"{project / 'pyproject.toml'}: {message}")


@pytest.mark.parametrize(
    "name, content",
    [
        ("pyproject.toml", "[tool.torchlint\n"),
        ("pyproject.toml", '[tool.torchlint]\nselect = ["TL1"]\nselect = ["TL2"]\n'),
        ("pyproject.toml", "[tool.torchlint]\nselect = [TL1]\n"),
        ("torchlint.toml", 'select = ["TL1"\n'),
        ("torchlint.toml", "fix = yes\n"),
    ],
)
def test_invalid_toml_names_the_file_and_where_it_breaks(project, capsys, name, content):
    (project / name).write_text(content)
    with pytest.raises(tomllib.TOMLDecodeError) as parsed:
        tomllib.loads(content)
    assert_one_error_line(check(capsys, "bad.py"), f"{project / name}: invalid TOML: {parsed.value}")


def test_a_torchlint_table_that_is_not_a_table(project, capsys):
    (project / "pyproject.toml").write_text("[tool]\ntorchlint = 1\n")
    assert_one_error_line(check(capsys, "bad.py"), f"{project / 'pyproject.toml'}: [tool.torchlint] must be a table")



@pytest.mark.parametrize("content", ["tool = 1\n", 'tool = "torchlint"\n', "tool = [1]\n"])
def test_a_tool_key_that_is_not_a_table_is_not_a_torchlint_config(project, capsys, content):
    (project / "pyproject.toml").write_text(content)
    code, out, err = check(capsys, "bad.py")
    assert (code, out, err) == (1, "bad.py:" + FINDING + BAD_MESSAGE + "\n", "")



@pytest.mark.parametrize(
    "content",
    [
        "project = 1\n",
        "[project]\noptional-dependencies = 1\n",
        "[project.optional-dependencies]\ngpu = 1\n",
        '[project]\ndependencies = {torch = "2"}\n',
        '[project]\ndependencies = "torch>=2.1"\n',
        "[project]\ndependencies = [1, true]\n",
        "[tool.poetry]\ndependencies = 1\n",
        "[tool.poetry.dependencies]\ntorch = 2.1\n",
        '[tool.poetry.dependencies]\ntorch = [1, {version = 2}, {git = "https://example.com/torch"}]\n',
    ],
)
def test_malformed_project_metadata_is_ignored_when_looking_for_the_torch_requirement(project, capsys, content):
    # [project] is pip's to validate; torchlint only reads it for a default and must not fail on it.
    (project / "pyproject.toml").write_text(content)
    code, out, err = check(capsys, "bad.py")
    assert (code, out, err) == (1, "bad.py:" + FINDING + BAD_MESSAGE + "\n", "")


def test_a_missing_config_file(project, capsys):
    assert_one_error_line(check(capsys, "--config", "nothere.toml", "bad.py"), "nothere.toml: config file not found")
    assert_one_error_line(check(capsys, "--config", ".", "bad.py"), ".: config file not found")


def test_an_unreadable_config_file(project, capsys, monkeypatch):
    config = project / "pyproject.toml"
    config.write_text("[tool.torchlint]\n")
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):
        if str(file) == str(config):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    assert_one_error_line(check(capsys, "--config", config, "bad.py"), f"{config}: cannot read: Permission denied")


def test_a_bad_command_line_selector_is_not_blamed_on_the_config_file(project, capsys):
    (project / "pyproject.toml").write_text("[tool.torchlint]\n")
    assert_one_error_line(check(capsys, "--select", "TL9999", "bad.py"), "--select: unknown rule code or name 'TL9999'")


def test_a_bad_option_value_is_a_usage_error(project, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["check", "--jobs", "many", "bad.py"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "torchlint check: error: argument --jobs/-j: invalid int value: 'many'"


# ---------------------------------------------------------------- odd paths

@pytest.mark.parametrize("name", ["with space.py", "données ünïcode.py", "模型.py", "-weird.py", "--weird.py", "-", "a;b&c.py", "'quoted\".py"])
def test_odd_file_names_are_linted_and_reported_as_given(project, capsys, name):
    (project / name).write_text(BAD)
    expected = (1, f"{name}:{FINDING}{BAD_MESSAGE}\n", "")
    assert check(capsys, f"./{name}") == expected
    if name != "-":  # after `--`, a lone `-` still means standard input, as in every Unix tool
        assert check(capsys, "--", name) == expected


def test_odd_folder_names_are_walked(project, capsys):
    folder = project / "-my project" / "ünï cøde"
    folder.mkdir(parents=True)
    (folder / "train -v.py").write_text(BAD)
    code, out, err = check(capsys, "--", "-my project")
    assert (code, out, err) == (1, f"-my project/ünï cøde/train -v.py:{FINDING}{BAD_MESSAGE}\n", "")


def test_odd_names_are_fixed_in_place(project, capsys):
    source = "import torch\nfor param in model.parameters():\n    param.require_grad = False\n"
    path = project / "-fix me ü.py"
    path.write_text(source)
    assert check(capsys, "--fix", "--", path.name) == (0, "", "")
    assert path.read_text() == source.replace("require_grad", "requires_grad")


def test_a_file_name_that_is_not_valid_utf8(project):
    name = b"caf\xe9.py"  # Latin-1 on disk: Python hands it over with a surrogate escape
    with open(bytes(project) + b"/" + name, "w") as handle:
        handle.write(BAD)
    # A UTF-8 locale other than C.UTF-8 makes standard output strict, as on most desktops.
    environment = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    completed = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", "--quiet", "--output-format", "concise", "."],
        capture_output=True, cwd=project, env=environment, timeout=120,
    )
    assert (completed.returncode, completed.stderr) == (1, b"")
    assert completed.stdout == b"bad.py:" + f"{FINDING}{BAD_MESSAGE}\n".encode() + name + f":{FINDING}{BAD_MESSAGE}\n".encode()
