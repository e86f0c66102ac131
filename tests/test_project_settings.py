"""`torch-version` from the project's own files, `--show-settings`, and the default excludes.

The fixture projects in fixtures/projects/settings_*/ each declare torch in one kind of file
(some in two, to show which comes first) and hold the same `train.py`, whose bare
`torch.load(...)` is a TL501 finding only when the resolved torch-version is below 2.6.
"""

import os
import shutil
import time
import warnings

import pytest

from conftest import FIXTURES
from torchlint.cli import main
from torchlint.config import load
from torchlint.discovery import discover
from torchlint.project_settings import (
    CONDA, CONFIG, NBDEV, POETRY, PYPROJECT, REQUIREMENTS, SETUP_CFG, SETUP_PY, find_torch_requirement, specifier_floor,
)

PROJECTS = FIXTURES / "projects"
BAD = "from torch.utils.data import DataLoader\nloader = DataLoader(ds, persistent_workers=True)\n"

# fixture folder: (resolved torch-version, source kind, file, requirement as written)
FIXTURE_PROJECTS = {
    "settings_poetry": ((2, 3), POETRY, "pyproject.toml", 'torch = "^2.3"'),
    "settings_setup_cfg": ((1, 13), SETUP_CFG, "setup.cfg", "torch>=1.13,<3"),
    "settings_setup_py": ((2, 0), SETUP_PY, "setup.py", "torch>=2.0.1"),
    "settings_requirements": ((2, 7), REQUIREMENTS, "requirements.txt", 'torch>=2.7 ; platform_system != "Darwin"'),
    "settings_environment_yml": ((1, 12), CONDA, "environment.yml", "pytorch::pytorch=1.12.1=py3.10_cuda11.6_cudnn8.3.2_0"),
    "settings_pyproject_wins": ((2, 6), PYPROJECT, "pyproject.toml", "torch>=2.6"),
    "settings_explicit_wins": ((2, 4), CONFIG, "pyproject.toml", ""),
}


def test_every_settings_fixture_project_has_its_expectation():
    assert sorted(path.name for path in PROJECTS.glob("settings_*")) == sorted(FIXTURE_PROJECTS)


@pytest.mark.parametrize("name", sorted(FIXTURE_PROJECTS))
def test_a_fixture_project_resolves_its_torch_version_and_records_the_source(name):
    version, kind, filename, requirement = FIXTURE_PROJECTS[name]
    config = load(None, PROJECTS / name)
    source = config.torch_version_source
    assert (config.torch_version, source.kind, source.path, source.requirement) == (
        version, kind, PROJECTS / name / filename, requirement,
    )


@pytest.mark.parametrize("name", sorted(FIXTURE_PROJECTS))
def test_tl501_follows_the_resolved_torch_version(name, capsys):
    version = FIXTURE_PROJECTS[name][0]
    code = main(["check", "--no-cache", "--preview", "--select", "TL501", "--output-format", "concise", "--quiet", str(PROJECTS / name)])
    out = capsys.readouterr().out
    expected = [f"{PROJECTS / name / 'train.py'}:5:9: TL501"] if version < (2, 6) else []
    # `path:row:col: CODE`, without the fix marker (none below torch 1.13, which has no `weights_only`) or message
    assert (code, [line.split(" TL501")[0] + " TL501" for line in out.splitlines()]) == (1 if expected else 0, expected)


def test_the_fixture_projects_resolve_on_both_sides_of_torch_2_6():
    # Else the TL501 test above could not tell a resolved version from the default.
    assert {version < (2, 6) for version, *_ in FIXTURE_PROJECTS.values()} == {True, False}


# ---------------------------------------------------------------- specifiers

FLOORS = [
    (">=1.8", (1, 8)),
    ("==2.0.1", (2, 0)),
    ("~=2.1", (2, 1)),
    ("^2.1", (2, 1)),
    ("~2.1", (2, 1)),
    (">1.9", (1, 9)),
    ("=1.13", (1, 13)),
    ("1.13.*", (1, 13)),
    ("2.1", (2, 1)),
    (">=2", (2, 0)),
    (">=0.4.1", (0, 4)),
    ("^0.4.1", (0, 4)),
    (" >= 2.1 ", (2, 1)),
    ("(>=2.1)", (2, 1)),
    (">=2.1.0+cu118", (2, 1)),
    ("==2.2.0rc1", (2, 2)),
    (">=1.8,<2", (1, 8)),
    ("<3,>=2.1", (2, 1)),
    (">=2.1 <3", (2, 1)),
    (">=1.8,>=2.0", (2, 0)),
    ("^1.13 || ^2.0", (1, 13)),
    ("=1.12.1=py3.10_cuda11.6_cudnn8.3.2_0", (1, 12)),
    (" 1.12.1 py310_0", (1, 12)),
    ("<2", None),
    ("<=2.1", None),
    ("!=2.0.1", None),
    ("<2,!=1.5", None),
    ("", None),
    ("*", None),
    ("latest", None),
    (">=" + "1" * 5000 + ".1", None),
    (">=2." + "1" * 5000, (2, 0)),
]


@pytest.mark.parametrize("specifier, floor", FLOORS)
def test_the_floor_is_the_lowest_version_a_specifier_admits(specifier, floor):
    assert specifier_floor(specifier) == floor


# ---------------------------------------------------------------- each kind of file

PYPROJECT_DEPENDENCIES = '[project]\nname = "x"\ndependencies = ["torchvision>=0.4", "torch>=2.1,<3"]\n'

# (files, resolved floor, source kind, section, requirement as written)
DECLARATIONS = [
    ({"pyproject.toml": PYPROJECT_DEPENDENCIES}, (2, 1), PYPROJECT, "[project] dependencies", "torch>=2.1,<3"),
    ({"pyproject.toml": '[project.optional-dependencies]\ngpu = ["Torch[opt-einsum] >= 2.2 ; sys_platform == \'linux\'"]\n'},
     (2, 2), PYPROJECT, "[project.optional-dependencies] gpu", "Torch[opt-einsum] >= 2.2 ; sys_platform == 'linux'"),
    ({"pyproject.toml": '[tool.poetry.dependencies]\ntorch = ">=2.1"\n'}, (2, 1), POETRY, "[tool.poetry.dependencies]", 'torch = ">=2.1"'),
    ({"pyproject.toml": '[tool.poetry.dependencies]\ntorch = "^0.4.1"\n'}, (0, 4), POETRY, "[tool.poetry.dependencies]", 'torch = "^0.4.1"'),
    ({"pyproject.toml": '[tool.poetry.dependencies]\ntorch = [\n  {version = "^2.2", platform = "linux"},\n  {version = "^1.13", platform = "darwin"},\n]\n'},
     (1, 13), POETRY, "[tool.poetry.dependencies]", 'torch = "^1.13"'),
    ({"setup.cfg": "[options]\ninstall_requires = numpy; torch>=1.10\n"}, (1, 10), SETUP_CFG, "[options] install_requires", "torch>=1.10"),
    ({"setup.py": "", "settings.ini": "[DEFAULT]\nlib_name = miniai\nrequirements = fastcore\npip_requirements = torch>=1.7,<2.1 datasets\n"},
     (1, 7), NBDEV, "pip_requirements", "torch>=1.7,<2.1"),
    ({"setup.cfg": "[options.extras_require]\ngpu =\n    torch==2.3.1\n"}, (2, 3), SETUP_CFG, "[options.extras_require] gpu", "torch==2.3.1"),
    ({"setup.py": 'import setuptools\nsetuptools.setup(install_requires=("torch>=1.9",))\n'}, (1, 9), SETUP_PY, "install_requires", "torch>=1.9"),
    ({"setup.py": 'BASE = ["numpy"]\nGPU = BASE + ["torch>=2.2"]\nGPU = GPU + ["scipy"]\nfrom setuptools import setup\nsetup(install_requires=[*GPU])\n'},
     (2, 2), SETUP_PY, "install_requires", "torch>=2.2"),
    ({"setup.py": 'REQUIRES = ["torch>=1.0"]\nREQUIRES = ["numpy"]\nREQUIRES += ["torch>=2.3"]\nfrom setuptools import setup\nsetup(install_requires=REQUIRES)\nREQUIRES = ["torch>=0.1"]\n'},
     (2, 3), SETUP_PY, "install_requires", "torch>=2.3"),
    ({"setup.py": 'from setuptools import setup\ndef main():\n    setup(install_requires=REQUIRES)\nREQUIRES = ["torch>=1.11"]\nmain()\n'},
     (1, 11), SETUP_PY, "install_requires", "torch>=1.11"),
    ({"setup.py": 'from setuptools import setup\nEXTRAS = {"gpu": ["torch>=2.4"]}\nif __name__ == "__main__":\n    setup(extras_require=EXTRAS)\n'},
     (2, 4), SETUP_PY, "extras_require", "torch>=2.4"),
    ({"requirements.txt": "-r base.txt\n-e .\n--index-url https://example.com\n# torch>=1.0\ntorch>=2.1  # cu121\n"},
     (2, 1), REQUIREMENTS, "", "torch>=2.1"),
    ({"requirements.txt": "torch==2.1.0 \\\n    --hash=sha256:91f3aa76e56b9\n"}, (2, 1), REQUIREMENTS, "", "torch==2.1.0"),
    ({"requirements.txt": 'torch>=2.1; python_version >= "3.9"\ntorch>=1.13; python_version < "3.9"\n'},
     (1, 13), REQUIREMENTS, "", 'torch>=1.13; python_version < "3.9"'),
    ({"requirements.txt": "torch>=2.1\n", "requirements-cpu.txt": "torch==1.13.1\n"}, (1, 13), REQUIREMENTS, "", "torch==1.13.1"),
    ({"environment.yml": "dependencies:\n- pytorch>=1.8\n"}, (1, 8), CONDA, "dependencies", "pytorch>=1.8"),
    ({"environment.yaml": "name: x\ndependencies:\n  - 'pytorch=1.13'  # GPU build\n"}, (1, 13), CONDA, "dependencies", "pytorch=1.13"),
    ({"environment.yml": "dependencies:\n  - python=3.11\n  - pip:\n    - torch==2.0.1\n"}, (2, 0), CONDA, "dependencies", "torch==2.0.1"),
]


def write(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize("files, floor, kind, section, requirement", DECLARATIONS)
def test_each_kind_of_file_gives_the_floor_of_its_torch_requirement(tmp_path, files, floor, kind, section, requirement):
    found = find_torch_requirement(write(tmp_path, files))
    assert (found.floor, found.source.kind, found.source.section, found.source.requirement) == (floor, kind, section, requirement)


def test_a_requirements_file_reads_the_files_it_includes_as_pip_does(tmp_path):
    files = {
        "requirements.txt": "numpy\n-r requirements/base.txt\n",
        "requirements/base.txt": "--requirement=../requirements.txt\ntorchvision\n-r extra.txt\n",
        "requirements/extra.txt": "torch>=1.9  # cu118\n",
    }
    found = find_torch_requirement(write(tmp_path, files))
    assert (found.floor, found.source.path) == ((1, 9), tmp_path / "requirements" / "extra.txt")
    assert find_torch_requirement(write(tmp_path / "cycle", {"requirements.txt": "-r requirements.txt\nnumpy\n"})) is None


def test_a_settings_ini_that_is_not_nbdevs_is_not_read(tmp_path):
    files = {"setup.py": "", "settings.ini": "[DEFAULT]\nrequirements = torch>=1.7\n"}
    assert find_torch_requirement(write(tmp_path, files)) is None


def test_the_first_of_several_requirements_files_in_sorted_order_is_the_one_named(tmp_path):
    files = {"requirements-gpu.txt": "torch>=2.3\n", "requirements.txt": "torch>=2.3\n", "requirements-cpu.txt": "torch>=2.3\n"}
    assert find_torch_requirement(write(tmp_path, files)).source.path == tmp_path / "requirements-cpu.txt"


# Each file in turn is the first that names torch with a floor; a later one only counts once
# every earlier one is gone, or names torch without a lower bound.
LADDER = [
    (PYPROJECT, "pyproject.toml", '[project]\nname = "x"\ndependencies = ["torch>=2.5"]\n', (2, 5)),
    (POETRY, "pyproject.toml", '[tool.poetry.dependencies]\ntorch = "^2.4"\n', (2, 4)),
    (SETUP_CFG, "setup.cfg", "[options]\ninstall_requires =\n    torch>=2.3\n", (2, 3)),
    (SETUP_PY, "setup.py", 'from setuptools import setup\nsetup(install_requires=["torch>=2.2"])\n', (2, 2)),
    (REQUIREMENTS, "requirements.txt", "torch>=2.1\n", (2, 1)),
    (CONDA, "environment.yml", "dependencies:\n  - pytorch=2.0\n", (2, 0)),
]


@pytest.mark.parametrize("first", range(len(LADDER)), ids=[kind for kind, *_ in LADDER])
def test_the_files_are_tried_in_order(tmp_path, first):
    files = {}
    for _, name, text, _ in LADDER[first:]:
        files[name] = files.get(name, "") + text
    found = find_torch_requirement(write(tmp_path, files))
    assert (found.source.kind, found.floor) == (LADDER[first][0], LADDER[first][3])


def test_a_requirement_without_a_lower_bound_passes_to_the_next_file(tmp_path):
    files = {"pyproject.toml": '[project]\nname = "x"\ndependencies = ["torch<3", "torch!=2.0.0"]\n', "requirements.txt": "torch~=1.13\n"}
    found = find_torch_requirement(write(tmp_path, files))
    assert (found.source.kind, found.floor) == (REQUIREMENTS, (1, 13))


@pytest.mark.parametrize(
    "requirement",
    ["torchvision>=0.15", "pytorch-lightning>=1.9", "torch-geometric>=2.3", "torch_tb_profiler>=0.4", "pytorch-cuda=11.8",
     "torch @ https://download.pytorch.org/whl/cu118/torch-2.0.1%2Bcu118-cp310-cp310-linux_x86_64.whl", "torch", "notorch>=2.1"],
)
def test_other_packages_and_unbounded_torch_give_no_floor(tmp_path, requirement):
    write(tmp_path, {"requirements.txt": f"{requirement}\n", "environment.yml": f"dependencies:\n  - {requirement}\n"})
    assert find_torch_requirement(tmp_path) is None


def test_environment_lists_under_other_keys_are_not_dependencies(tmp_path):
    text = "channels:\n  - pytorch=0.1\ndependencies:\n  - numpy\nvariables:\n  - pytorch=0.2\n"
    assert find_torch_requirement(write(tmp_path, {"environment.yml": text})) is None


def test_setup_py_is_read_never_run(tmp_path):
    marker = tmp_path / "ran"
    text = f'open({str(marker)!r}, "w").close()\nfrom setuptools import setup\nsetup(install_requires=["torch>=2.2"])\n'
    assert find_torch_requirement(write(tmp_path, {"setup.py": text})).floor == (2, 2)
    assert not marker.exists()


def test_a_setup_py_name_used_twice_at_each_level_is_followed_once(tmp_path):
    # Followed at each use, the 20 levels would make 2**20 list literals to read (about 20 seconds).
    levels = "".join(f"R{level + 1} = R{level} + R{level}\n" for level in range(20))
    text = f'R0 = ["torch>=2.1"]\n{levels}from setuptools import setup\nsetup(install_requires=R20)\n'
    started = time.perf_counter()
    assert find_torch_requirement(write(tmp_path, {"setup.py": text})).floor == (2, 1)
    assert time.perf_counter() - started < 5


def test_a_setup_py_that_python_warns_about_is_read_without_a_warning(tmp_path):
    text = 'import re\nPATTERN = re.compile("\\d+")\nfrom setuptools import setup\nsetup(install_requires=["torch>=2.2"])\n'
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert find_torch_requirement(write(tmp_path, {"setup.py": text})).floor == (2, 2)
    assert caught == []


def test_a_setup_py_whose_requirements_are_computed_gives_no_floor(tmp_path):
    text = 'from setuptools import setup\nsetup(install_requires=open("requirements.in").read().splitlines())\n'
    write(tmp_path, {"setup.py": text, "requirements.in": "torch>=2.1\n"})
    assert find_torch_requirement(tmp_path) is None


# ---------------------------------------------------------------- where the project is


def test_the_nearest_folder_with_project_files_is_the_project(tmp_path):
    write(tmp_path, {"requirements.txt": "torch>=1.13\n"})
    assert find_torch_requirement(write(tmp_path / "src" / "pkg", {})).floor == (1, 13)
    # A sub-project with files of its own does not inherit the torch requirement above it.
    assert find_torch_requirement(write(tmp_path / "tools", {"setup.cfg": "[options]\ninstall_requires = numpy\n"})) is None


def test_the_project_is_found_from_the_linted_paths(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(write(tmp_path / "elsewhere", {}))
    project = write(tmp_path / "project", {"requirements.txt": "torch>=2.7\n"})
    assert main(["check", "--show-settings", str(project)]) == 0
    assert f"torch-version = 2.7  (from {project / 'requirements.txt'}: torch>=2.7)\n" in capsys.readouterr().out


# ---------------------------------------------------------------- malformed files

MALFORMED = [
    ("pyproject.toml", "[project\n"),
    ("pyproject.toml", "project = 1\ntool = 1\n"),
    ("pyproject.toml", '[project]\ndependencies = "torch>=2.1"\noptional-dependencies = ["torch>=2.1"]\n'),
    ("pyproject.toml", "[tool.poetry]\ndependencies = 1\n"),
    ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = 2.1\nTorch = [1, {version = 2}, {git = "https://x"}]\n'),
    ("pyproject.toml", "a = " + "[" * 5000 + "]" * 5000 + "\n"),
    ("setup.cfg", "install_requires = torch>=2.1\n"),
    ("setup.cfg", "[options]\ninstall_requires = torch>=2.1\ninstall_requires = torch>=2.2\n"),
    ("setup.cfg", "[options]\n[options]\n"),
    ("setup.py", "setup(install_requires=[\n"),
    ("setup.py", "setup(install_requires=['torch>=2.1'])\x00\n"),
    ("setup.py", 'setup(install_requires=["\\d torch"])\n'),
    ("setup.py", "REQ = REQ + REQ\nsetup(install_requires=REQ)\n"),
    ("setup.py", "setup(install_requires=[" + "+".join(["[]"] * 20000) + "])\n"),
    ("requirements.txt", "torch>=\n-\n\\\n"),
    ("environment.yml", "dependencies: [pytorch=1.8]\n- \n  -\n\t- pytorch>=\n"),
]


@pytest.mark.parametrize("name, text", MALFORMED)
def test_a_malformed_file_is_skipped_for_the_next_one(tmp_path, name, text):
    write(tmp_path, {name: text, "environment.yaml": "dependencies:\n  - pytorch>=1.9\n"})
    found = find_torch_requirement(tmp_path)
    assert (found.source.kind, found.floor) == (CONDA, (1, 9))


@pytest.mark.parametrize("name", ["setup.cfg", "setup.py", "requirements.txt", "environment.yml"])
def test_unreadable_bytes_and_folders_are_skipped(tmp_path, name):
    (tmp_path / name).write_bytes(b"\xff\xfe torch>=2.1 \x80\n")
    (tmp_path / "requirements-folder.txt").mkdir()
    (tmp_path / "environment.yaml").mkdir()
    assert find_torch_requirement(tmp_path) is None


def test_a_malformed_setup_py_never_reaches_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"setup.py": "setup(install_requires=['\\d', \n", "bad.py": BAD})
    assert main(["check", "--no-cache", "--quiet", "--output-format", "concise", "bad.py"]) == 1
    out, err = capsys.readouterr()
    assert (out.count("TL303"), err) == (1, "")


# ---------------------------------------------------------------- --show-settings


def test_show_settings_prints_the_resolved_settings_and_lints_nothing(tmp_path, monkeypatch, capsys):
    project = tmp_path / "project"
    shutil.copytree(PROJECTS / "settings_requirements", project)
    (project / "bad.py").write_text(BAD)
    (project / "torchlint.toml").write_text(
        'select = ["TL3"]\nignore = ["TL306"]\nextend-exclude = ["notebooks"]\n'
        'per-file-ignores = {"tests/*.py" = ["TL303", "TL301"]}\nlabel-names = ["y", "*_ids"]\n'
    )
    monkeypatch.chdir(project)
    assert main(["check", "--show-settings", "."]) == 0
    out, err = capsys.readouterr()
    assert (out.splitlines(), err) == ([
        f"config file = {project / 'torchlint.toml'}",
        f"project root = {project}",
        'torch-version = 2.7  (from requirements.txt: torch>=2.7 ; platform_system != "Darwin")',
        "select = TL301, TL302, TL303, TL304, TL305, TL307, TL308  (from torchlint.toml select, ignore)",
        "exclude = .git, .hg, .venv, venv, build, dist, __pycache__, .tox, .nox, node_modules, .mypy_cache,"
        " .pytest_cache, .ruff_cache, .torchlint_cache, .ipynb_checkpoints, notebooks  (default, then from torchlint.toml extend-exclude)",
        "per-file-ignores = tests/*.py: TL301, TL303  (from torchlint.toml per-file-ignores)",
        "label-names = y, *_ids  (from torchlint.toml label-names)",
        "device-name = device  (default)",
        "output-format = full on a terminal, else concise  (default)",
        "fix = false  (default)",
        "unsafe-fixes = false  (default)",
        "ignore-noqa = false  (default)",
        "preview = false  (default)",
        "max-file-bytes = 20000000  (default)",
        "max-file-seconds = 60  (default)",
    ], "")
    assert not (project / ".torchlint_cache").exists()


@pytest.mark.parametrize(
    "files, config_file, line",
    [
        ({}, None, "torch-version = 2.6  (default)"),
        ({"torchlint.toml": 'torch-version = "1.13"\n'}, "torchlint.toml", "torch-version = 1.13  (from torchlint.toml torch-version)"),
        ({"pyproject.toml": '[tool.torchlint]\ntorch-version = "2.0"\n'}, "pyproject.toml",
         "torch-version = 2.0  (from pyproject.toml [tool.torchlint] torch-version)"),
        ({"pyproject.toml": PYPROJECT_DEPENDENCIES}, None, "torch-version = 2.1  (from pyproject.toml [project] dependencies: torch>=2.1,<3)"),
    ],
)
def test_show_settings_says_where_torch_version_came_from(tmp_path, monkeypatch, capsys, files, config_file, line):
    # A setup.cfg without torch makes this folder the project, whatever lies above it.
    monkeypatch.chdir(write(tmp_path, {"setup.cfg": "[metadata]\nname = x\n", **files}))
    assert main(["check", "--show-settings"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (lines[0], lines[2]) == (f"config file = {tmp_path / config_file if config_file else 'none'}", line)


def test_show_settings_reports_a_bad_config_as_any_run_does(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(write(tmp_path, {"torchlint.toml": 'torch-version = "two"\n'}))
    assert main(["check", "--show-settings", "."]) == 2
    assert capsys.readouterr() == ("", f"torchlint: error: {tmp_path / 'torchlint.toml'}: 'torch-version': expected a version like \"2.1\", got 'two'\n")


def test_show_settings_is_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert "--show-settings" in capsys.readouterr().out


# ---------------------------------------------------------------- default excludes


@pytest.fixture
def notebooks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkpoints = tmp_path / "notebooks" / ".ipynb_checkpoints"
    checkpoints.mkdir(parents=True)
    for path in (tmp_path / "notebooks" / "explore.ipynb", checkpoints / "explore-checkpoint.ipynb"):
        path.write_text("{}")
    return tmp_path


def found(paths, config, **options):
    return [name for _, name in discover(paths, config, **options)]


def test_jupyter_checkpoints_are_not_linted_when_their_folder_is_walked(notebooks):
    config = load(None, notebooks)
    assert found(["."], config) == [os.path.join("notebooks", "explore.ipynb")]
    # A folder named on the command line is linted, as in ruff (tests/test_named_paths.py), unless --force-exclude.
    checkpoint = os.path.join("notebooks", ".ipynb_checkpoints", "explore-checkpoint.ipynb")
    assert found(["notebooks/.ipynb_checkpoints"], config) == [checkpoint]
    assert found(["notebooks/.ipynb_checkpoints"], config, force_exclude=True) == []


def test_a_checkpoint_named_on_the_command_line_is_linted_unless_forced(notebooks):
    config = load(None, notebooks)
    checkpoint = os.path.join("notebooks", ".ipynb_checkpoints", "explore-checkpoint.ipynb")
    assert found([checkpoint], config) == [checkpoint]
    assert found([checkpoint], config, force_exclude=True) == []
