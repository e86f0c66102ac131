"""The torch requirement a project declares in its own files: the default for `torch-version`.

The project's folder is the nearest one, at or above the linted paths, that holds a
pyproject.toml, setup.cfg, setup.py, requirements*.txt or environment.yml/.yaml. Its files
are tried in that order (pyproject.toml: PEP 621 `[project]`, then Poetry), and the first
kind that names torch (or conda's `pytorch`) with a lower bound gives the floor: the lowest
version any of its torch requirements admits.

Nothing of the project is run: setup.py is read with `ast`, everything else as data. A file
that cannot be read or parsed is skipped, never an error: packaging metadata is for pip and
conda to validate, torchlint only takes a default from it.
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

Version = Tuple[int, int]

# Where a `torch-version` can come from; the file kinds in the order they are tried.
CONFIG, DEFAULT = "config", "default"
PYPROJECT, POETRY, SETUP_CFG, SETUP_PY, NBDEV, REQUIREMENTS, CONDA = (
    "pyproject", "poetry", "setup.cfg", "setup.py", "nbdev", "requirements", "conda",
)
PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "environment.yml", "environment.yaml")
REQUIREMENTS_GLOB = "requirements*.txt"
# nbdev's settings, read for the requirements its generated setup.py takes from them (not a sign of a project folder:
# other projects keep other settings under that name).
NBDEV_SETTINGS = "settings.ini"
TORCH_NAMES = ("torch", "pytorch")


@dataclass(frozen=True)
class TorchVersionSource:
    """Where the run's `torch-version` came from: a file, where in it, and the requirement as written."""

    kind: str
    path: Optional[Path] = None
    section: str = ""
    requirement: str = ""

    def describe(self, root: Path) -> str:
        """`from requirements.txt: torch>=2.1`, the file named relative to `root` when it lies inside it."""
        if self.kind == DEFAULT:
            return "default"
        place = " ".join(part for part in (_shown(self.path, root), self.section) if part)
        return f"from {place}: {self.requirement}" if self.requirement else f"from {place}"


DEFAULT_SOURCE = TorchVersionSource(DEFAULT)


def _shown(path: Optional[Path], root: Path) -> str:
    if path is None:
        return ""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class TorchRequirement:
    """The lowest torch version a project's requirements admit, and the requirement that admits it."""

    floor: Version
    source: TorchVersionSource


class _Declared(NamedTuple):
    """A torch requirement as a file declares it, with its version specifier alone."""

    source: TorchVersionSource
    specifier: str


def find_torch_requirement(start: Path) -> Optional[TorchRequirement]:
    """The torch requirement of the project `start` belongs to, with its floor, or None."""
    folder = project_folder(start)
    if folder is None:
        return None
    # Lazily, kind by kind: a later file is not even read once an earlier kind gave a floor.
    for _, declared in itertools.groupby(_declared(folder), key=lambda item: item.source.kind):
        found = [
            TorchRequirement(floor, item.source)
            for item in declared for floor in [specifier_floor(item.specifier)] if floor is not None
        ]
        if found:
            return min(found, key=lambda requirement: requirement.floor)
    return None


def project_folder(start: Path) -> Optional[Path]:
    """The nearest folder at or above `start` that holds one of the project's packaging or environment files."""
    for directory in [start, *start.parents]:
        if any(_is_file(directory / name) for name in PROJECT_FILES) or _requirements_files(directory):
            return directory
    return None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a folder that cannot be searched holds nothing torchlint can read
        return False


def _declared(folder: Path) -> Iterator[_Declared]:
    yield from _pyproject(folder / "pyproject.toml")
    yield from _setup_cfg(folder / "setup.cfg")
    yield from _setup_py(folder / "setup.py")
    yield from _nbdev_settings(folder / NBDEV_SETTINGS)
    for path in _requirements_files(folder):
        yield from _requirements_txt(path)
    for name in ("environment.yml", "environment.yaml"):
        yield from _conda_environment(folder / name)


# ---------------------------------------------------------------- version specifiers

# One clause: an operator (PEP 440, Poetry's `^` and `~`, conda's `=`) or none (an exact version
# for Poetry and conda), then a version. The look-behind keeps digits inside a conda build string
# (`=py3.9_cuda11.7_0`) from reading as versions; at most 9 digits a number, as `int` refuses
# strings of thousands. Blanks only after an operator: a `\s*` tried at each blank of a run reads the rest of
# the run each time (quadratic in its length).
_CLAUSE = re.compile(
    r"(?:(?P<operator>===|==|>=|<=|~=|!=|\^|~|=|>|<)\s*)?(?<![\w.])v?(?P<major>\d{1,9})(?!\d)(?:\.(?P<minor>\d{1,9})(?!\d))?[\w.*+!-]*"
)
_NOT_A_LOWER_BOUND = ("<", "<=", "!=")


def specifier_floor(specifier: str) -> Optional[Version]:
    """The lowest (major, minor) a version specifier admits, or None when it sets no lower bound.

    `>1.9` gives 1.9: only major.minor matters, and 1.9.1 satisfies it. Poetry's `||` separates
    alternatives, of which the lowest counts.
    """
    floors = [floor for alternative in specifier.split("|") for floor in [_clauses_floor(alternative)] if floor]
    return min(floors, default=None)


def _clauses_floor(clauses: str) -> Optional[Version]:
    # Every clause must hold, so the highest lower bound is the floor.
    bounds = [
        (int(clause["major"]), int(clause["minor"] or 0))
        for clause in _CLAUSE.finditer(clauses) if clause["operator"] not in _NOT_A_LOWER_BOUND
    ]
    return max(bounds, default=None)


# A requirement's name, after conda's optional `channel::`, then its extras, which do not matter here.
_NAMED = re.compile(r"\s*(?:[\w.-]+::)?(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?(?P<specifier>.*)", re.DOTALL)


def _torch_specifier(requirement: str) -> Optional[str]:
    """The version specifier of a requirement on torch, environment markers dropped; None for any other requirement.

    Markers are not evaluated: each torch requirement counts, so the floor is the oldest torch any
    environment may install.
    """
    match = _NAMED.match(requirement)
    if match is None or match["name"].lower() not in TORCH_NAMES:
        return None
    specifier = match["specifier"].split(";", 1)[0]
    # `torch @ https://...`: a URL, whose digits are no version bound.
    return None if specifier.lstrip().startswith("@") else specifier


def _torch_requirements(kind: str, path: Path, section: str, requirements: Iterable[object]) -> Iterator[_Declared]:
    for requirement in requirements:
        specifier = _torch_specifier(requirement) if isinstance(requirement, str) else None
        if specifier is not None:
            yield _Declared(TorchVersionSource(kind, path, section, requirement.strip()), specifier)


# ---------------------------------------------------------------- pyproject.toml


def _pyproject(path: Path) -> Iterator[_Declared]:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, ValueError, RecursionError):  # ValueError: TOMLDecodeError, or bytes that are not UTF-8
        return
    project = _table(data, "project")
    yield from _torch_requirements(PYPROJECT, path, "[project] dependencies", _as_list(project.get("dependencies")))
    for extra, group in _table(project, "optional-dependencies").items():
        yield from _torch_requirements(PYPROJECT, path, f"[project.optional-dependencies] {extra}", _as_list(group))
    yield from _poetry(path, _table(_table(_table(data, "tool"), "poetry"), "dependencies"))


def _poetry(path: Path, dependencies: dict) -> Iterator[_Declared]:
    """`torch = "^2.1"`, `torch = {version = "^2.1", source = "pytorch"}`, or a list of such tables (one per platform)."""
    for name, value in dependencies.items():
        if name.lower() not in TORCH_NAMES:
            continue
        for constraint in value if isinstance(value, list) else [value]:
            version = constraint.get("version") if isinstance(constraint, dict) else constraint
            if isinstance(version, str):
                yield _Declared(TorchVersionSource(POETRY, path, "[tool.poetry.dependencies]", f'{name} = "{version}"'), version)


def _table(data: object, key: str) -> dict:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else []


# ---------------------------------------------------------------- setup.cfg and setup.py


def _setup_cfg(path: Path) -> Iterator[_Declared]:
    import configparser  # only for a project with a setup.cfg

    parser = configparser.ConfigParser(interpolation=None)
    try:
        if not parser.read(path, encoding="utf-8"):
            return
    except (configparser.Error, ValueError):  # ValueError: bytes that are not UTF-8
        return
    groups = [("options", "install_requires")]
    if parser.has_section("options.extras_require"):
        groups += [("options.extras_require", extra) for extra in parser.options("options.extras_require")]
    for section, key in groups:
        value = parser.get(section, key, fallback="")
        yield from _torch_requirements(SETUP_CFG, path, f"[{section}] {key}", _setup_cfg_list(value))


def _setup_cfg_list(value: str) -> List[str]:
    # As setuptools reads `list-semi` values: one item a line, or `;`-separated on a single line.
    items = value.splitlines() if "\n" in value else value.split(";")
    return [item.strip() for item in items if item.strip() and not item.strip().startswith("#")]


def _setup_py(path: Path) -> Iterator[_Declared]:
    try:
        with warnings.catch_warnings():  # an invalid escape in their setup.py is not torchlint's to print
            warnings.simplefilter("ignore")
            tree = ast.parse(path.read_bytes(), filename=str(path))
        found = list(_setup_keywords(tree))
    except (OSError, SyntaxError, ValueError, RecursionError):  # ValueError: null bytes, on Python < 3.12
        return
    for keyword, requirements in found:
        yield from _torch_requirements(SETUP_PY, path, keyword, requirements)


def _nbdev_settings(path: Path) -> Iterator[_Declared]:
    """nbdev's `settings.ini`, which its generated `setup.py` reads for the requirements (`requirements = fastcore
    torch>=1.7`, `pip_requirements = ...`, separated by spaces): only with nbdev's `lib_name`, since other projects
    keep other settings under that name."""
    if not _is_file(path):
        return
    import configparser  # only for a project with a settings.ini

    parser = configparser.ConfigParser(interpolation=None)
    try:
        if not parser.read(path, encoding="utf-8") or not parser.has_option("DEFAULT", "lib_name"):
            return
    except (configparser.Error, ValueError):  # ValueError: bytes that are not UTF-8
        return
    for key in ("requirements", "pip_requirements"):
        value = parser.get("DEFAULT", key, fallback="")
        yield from _torch_requirements(NBDEV, path, key, value.split())


def _setup_keywords(tree: ast.Module) -> Iterator[Tuple[str, List[str]]]:
    """The string literals given as `install_requires` / `extras_require` to a `setup(...)` call."""
    bindings = _module_bindings(tree)
    for index, statement in enumerate(tree.body):
        # A call inside a function runs when the function is called, after the whole module ran.
        sees_bindings_before = len(tree.body) if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) else index
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and _calls_setup(node.func):
                for keyword in node.keywords:
                    if keyword.arg in ("install_requires", "extras_require"):
                        yield keyword.arg, _literal_strings(keyword.value, sees_bindings_before, bindings)


# A module-level name's bindings, each with the index of its statement in the module's body.
_Bindings = Dict[str, List[Tuple[int, ast.expr]]]


def _module_bindings(tree: ast.Module) -> _Bindings:
    bindings: _Bindings = {}
    for index, statement in enumerate(tree.body):
        for name, value in _bound(statement):
            bindings.setdefault(name, []).append((index, value))
    return bindings


def _bound(statement: ast.stmt) -> List[Tuple[str, ast.expr]]:
    """The names a module-level statement binds, and to what."""
    if isinstance(statement, ast.Assign):
        return [(target.id, statement.value) for target in statement.targets if isinstance(target, ast.Name)]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value is not None:
        return [(statement.target.id, statement.value)]
    if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name) and isinstance(statement.op, ast.Add):
        # `NAME += [...]` is `NAME = NAME + [...]`, whose NAME is the binding before.
        return [(statement.target.id, ast.BinOp(ast.Name(statement.target.id, ast.Load()), ast.Add(), statement.value))]
    return []


def _calls_setup(function: ast.expr) -> bool:
    return (isinstance(function, ast.Name) and function.id == "setup") or (
        isinstance(function, ast.Attribute) and function.attr == "setup"
    )


def _literal_strings(node: ast.expr, statement: int, bindings: _Bindings) -> List[str]:
    """The strings of a literal list, tuple or set, the lists of a dict (extras), `+` of those,
    or a module-level name bound to one before the statement at index `statement`.

    With a stack, not recursion: `A + B + C + ...` nests as deep as it is long.
    """
    strings = []
    # Each binding is followed once, so that `B = A + A; C = B + B; ...` stays linear.
    followed = set()
    pending = [(node, statement)]
    while pending:
        node, statement = pending.pop()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.BinOp, ast.Starred)):
            pending.extend((part, statement) for part in reversed(_parts(node)))
        elif isinstance(node, ast.Name):
            earlier = [binding for binding in bindings.get(node.id, ()) if binding[0] < statement]
            if earlier and (node.id, earlier[-1][0]) not in followed:
                followed.add((node.id, earlier[-1][0]))
                pending.append((earlier[-1][1], earlier[-1][0]))
    return strings


def _parts(node: ast.expr) -> List[ast.expr]:
    if isinstance(node, ast.Dict):
        return list(node.values)
    if isinstance(node, ast.BinOp):
        return [node.left, node.right] if isinstance(node.op, ast.Add) else []
    if isinstance(node, ast.Starred):
        return [node.value]
    return list(node.elts)


# ---------------------------------------------------------------- requirements*.txt


def _requirements_files(folder: Path) -> List[Path]:
    try:
        return sorted(path for path in folder.glob(REQUIREMENTS_GLOB) if _is_file(path))
    except OSError:
        return []


_COMMENT = re.compile(r"(^|\s)#.*")
# `-r base.txt`, `--requirement=base.txt`: another requirements file, read as part of this one.
_INCLUDE = re.compile(r"(?:-r|--requirement)(?:\s+|=)?(\S+)")
_MAX_INCLUDE_DEPTH = 8
# pip's per-requirement options (`--hash=...`, `--config-settings ...`) follow the requirement.
_TRAILING_OPTIONS = re.compile(r"\s-{1,2}[A-Za-z].*")


def _requirements_txt(path: Path, including: Tuple[Path, ...] = ()) -> Iterator[_Declared]:
    """The torch requirements of a pip requirements file, then of the files it includes (`-r base.txt`, as pip reads
    them: relative to the including file), each named as the file it is written in."""
    text = _read_text(path)
    if text is None:
        return
    lines, included = [], []
    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        line = _COMMENT.sub("", line).strip()
        include = _INCLUDE.fullmatch(line)
        if include is not None:
            included.append(Path(os.path.normpath(path.parent / include.group(1))))
            continue
        line = _TRAILING_OPTIONS.sub("", line).strip()
        # `-e ./pkg`, `-c constraints.txt`, `--index-url ...`: options, not requirements.
        if line and not line.startswith("-"):
            lines.append(line)
    yield from _torch_requirements(REQUIREMENTS, path, "", lines)
    if len(including) < _MAX_INCLUDE_DEPTH:
        for other in included:
            if other not in including and other != path and _is_file(other):
                yield from _requirements_txt(other, including + (path,))


def _read_text(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


# ---------------------------------------------------------------- environment.yml

def _conda_environment(path: Path) -> Iterator[_Declared]:
    text = _read_text(path)
    if text is None:
        return
    yield from _torch_requirements(CONDA, path, "dependencies", _conda_dependencies(text))


def _conda_dependencies(text: str) -> Iterator[str]:
    """The items of the top-level `dependencies:` list, those of its nested `- pip:` list included.

    Read by hand, line by line, so that torchlint needs no YAML parser: environment files
    keep to block lists of plain or quoted scalars. A flow list (`dependencies: [a, b]`) is not read.
    """
    inside = False
    for line in text.splitlines():
        content = _COMMENT.sub("", line).rstrip()
        if not content:
            continue
        if not line[0].isspace() and not content.startswith("-"):
            # A top-level key: the dependencies list runs until the next one.
            inside = content.startswith("dependencies:")
            continue
        item = content.strip()
        if inside and item.startswith("-"):
            item = item[1:].strip().strip("\"'")
            if item and not item.endswith(":"):  # `- pip:` opens the nested list, whose items follow
                yield item
