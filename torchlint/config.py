"""Configuration: `[tool.torchlint]` in the nearest pyproject.toml, or a file given with --config.

Config is resolved once per run into a `Config`; every bad key or value raises
`ConfigError` naming the key and the file, which the CLI turns into exit 2.
Without a `torch-version` key, the project's own torch requirement gives it
(see `torchlint.project_settings`), and the `Config` records where it came from.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import FrozenSet, Iterable, List, Optional, Tuple

import pathspec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

from torchlint.catalogue import RULES
from torchlint.project_settings import CONFIG, DEFAULT_SOURCE, TorchVersionSource, find_torch_requirement

DEFAULT_EXCLUDES = (
    ".git", ".hg", ".venv", "venv", "build", "dist", "__pycache__", ".tox", ".nox",
    "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".torchlint_cache",
    # Jupyter's autosave copies of the notebooks beside them: each finding would be reported twice.
    ".ipynb_checkpoints",
)
DEFAULT_LABEL_NAMES = (
    "y", "y_true", "target", "targets", "label", "labels", "gt", "cls", "class_ids",
    "*_label", "*_labels", "*_target", "*_targets",
)
DEFAULT_TORCH_VERSION = (2, 6)
OUTPUT_FORMATS = ("full", "concise", "json", "sarif", "github")


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Config:
    select: FrozenSet[str]
    per_file_ignores: Tuple[Tuple[pathspec.PathSpec, FrozenSet[str]], ...] = ()
    exclude: Optional[pathspec.PathSpec] = None
    fix: bool = False
    unsafe_fixes: bool = False
    output_format: Optional[str] = None
    device_name: str = "device"
    label_names: Tuple[str, ...] = DEFAULT_LABEL_NAMES
    torch_version: Tuple[int, int] = DEFAULT_TORCH_VERSION
    torch_version_source: TorchVersionSource = DEFAULT_SOURCE
    root: Path = field(default_factory=Path.cwd)
    path: Optional[Path] = None

    def codes_for(self, filename: str) -> FrozenSet[str]:
        """The selected codes minus the per-file ignores that match `filename`."""
        if not self.per_file_ignores:
            return self.select
        relative = _relative(filename, self.root)
        codes = self.select
        for spec, ignored in self.per_file_ignores:
            if spec.match_file(relative):
                codes = codes - ignored
        return codes

    def is_excluded(self, path: str, is_dir: bool = False) -> bool:
        if self.exclude is None:
            return False
        relative = _relative(path, self.root)
        return self.exclude.match_file(relative + "/" if is_dir else relative)

    def is_label_name(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.label_names)


def _relative(path: str, root: Path) -> str:
    absolute = os.path.abspath(path)
    try:
        return Path(absolute).relative_to(root).as_posix()
    except ValueError:
        return Path(absolute).as_posix().lstrip("/")


# ---------------------------------------------------------------- selection


def resolve_codes(selectors: Iterable[str], where: str) -> FrozenSet[str]:
    """Codes named by selectors: `ALL`, a code, a code prefix (`TL1`) or a kebab name."""
    codes = set()
    for selector in selectors:
        if not isinstance(selector, str):
            raise ConfigError(f"{where}: expected rule codes, got {selector!r}")
        token = selector.strip()
        matched = [
            rule.code for rule in RULES
            if token.upper() == "ALL" or rule.code.startswith(token.upper()) or rule.name == token
        ]
        if not matched or not token:
            raise ConfigError(f"{where}: unknown rule code or name {selector!r}")
        codes.update(matched)
    return frozenset(codes)


def default_codes() -> FrozenSet[str]:
    return frozenset(rule.code for rule in RULES if not rule.opt_in)


# ---------------------------------------------------------------- loading

_KEYS = {
    "select": list, "ignore": list, "extend-select": list, "extend-ignore": list,
    "per-file-ignores": dict, "exclude": list, "extend-exclude": list, "fix": bool,
    "unsafe-fixes": bool, "output-format": str, "device-name": str, "label-names": list,
    "torch-version": str,
}


def find_config_file(start: Path) -> Optional[Path]:
    """The nearest torchlint.toml, or pyproject.toml with a [tool.torchlint] table, at or above `start`."""
    for directory in [start, *start.parents]:
        candidate = directory / "torchlint.toml"
        if candidate.is_file():
            return candidate
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            tool = _read_toml(candidate).get("tool")
            if isinstance(tool, dict) and "torchlint" in tool:
                return candidate
    return None


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None


def load_table(path: Path) -> dict:
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        tool = data.get("tool")
        table = tool.get("torchlint", {}) if isinstance(tool, dict) else {}
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [tool.torchlint] must be a table")
        return table
    return data


def load(config_path: Optional[Path], start: Path, overrides: Optional[dict] = None) -> Config:
    """Build the run's Config from the config file (given or found from `start`) and CLI overrides."""
    path = config_path or find_config_file(start)
    if config_path is not None and not config_path.is_file():
        raise ConfigError(f"{config_path}: config file not found")
    table = load_table(path) if path else {}
    # Without a config file, globs are relative to where torchlint runs, as in ruff.
    root = path.parent.resolve() if path else Path.cwd().resolve()
    where = str(path) if path else "command line"
    for key, value in table.items():
        expected = _KEYS.get(key)
        if expected is None:
            raise ConfigError(f"{where}: unknown key {key!r} in {_table_name(path)}")
        if not isinstance(value, expected):
            raise ConfigError(f"{where}: {key!r} must be a {expected.__name__}, got {type(value).__name__}")
    merged = dict(table)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        # Command-line extensions add to the file's lists; everything else replaces.
        merged[key] = merged.get(key, []) + value if key in ("extend-select", "extend-ignore") else value
    return build(merged, root=root, path=path, where=where, torch_requirement_from=start.resolve())


def _table_name(path: Optional[Path]) -> str:
    return "[tool.torchlint]" if path is not None and path.name == "pyproject.toml" else "the config"


def build(table: dict, root: Path, path: Optional[Path], where: str, torch_requirement_from: Path) -> Config:
    def key_where(key: str) -> str:
        return f"{where}: {key!r}"

    if "select" in table:
        select = resolve_codes(table["select"], key_where("select"))
    else:
        select = default_codes()
    select |= resolve_codes(table.get("extend-select", []), key_where("extend-select"))
    select -= resolve_codes(table.get("ignore", []), key_where("ignore"))
    select -= resolve_codes(table.get("extend-ignore", []), key_where("extend-ignore"))

    per_file = []
    for pattern, codes in table.get("per-file-ignores", {}).items():
        if not isinstance(codes, list):
            raise ConfigError(f"{key_where('per-file-ignores')}: the value for {pattern!r} must be a list of codes")
        per_file.append((_spec([pattern], key_where("per-file-ignores")), resolve_codes(codes, key_where("per-file-ignores"))))

    exclude_patterns = list(table.get("exclude", DEFAULT_EXCLUDES)) + list(table.get("extend-exclude", []))
    for key in ("exclude", "extend-exclude"):
        _spec(table.get(key, []), key_where(key))
    output_format = table.get("output-format")
    if output_format is not None and output_format not in OUTPUT_FORMATS:
        raise ConfigError(f"{key_where('output-format')}: must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}")
    device_name = table.get("device-name", "device")
    if not device_name.isidentifier():
        raise ConfigError(f"{key_where('device-name')}: {device_name!r} is not a Python name")
    label_names = table.get("label-names", list(DEFAULT_LABEL_NAMES))
    if not all(isinstance(name, str) and name for name in label_names):
        raise ConfigError(f"{key_where('label-names')}: must be a list of non-empty strings")
    torch_version, torch_version_source = _torch_version(table, path, where, torch_requirement_from)
    return Config(
        select=frozenset(select),
        per_file_ignores=tuple(per_file),
        exclude=_spec(exclude_patterns, key_where("exclude")),
        fix=bool(table.get("fix", False)),
        unsafe_fixes=bool(table.get("unsafe-fixes", False)),
        output_format=output_format,
        device_name=device_name,
        label_names=tuple(label_names),
        torch_version=torch_version,
        torch_version_source=torch_version_source,
        root=root,
        path=path,
    )


def _spec(patterns: List[str], where: str) -> pathspec.PathSpec:
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise ConfigError(f"{where}: expected glob strings, got {pattern!r}")
    try:
        return pathspec.GitIgnoreSpec.from_lines(patterns)
    except Exception as error:  # pathspec raises several types for malformed globs
        raise ConfigError(f"{where}: bad glob: {error}") from None


def parse_version(text: str, where: str) -> Tuple[int, int]:
    # At most 9 digits a number: `int` refuses strings of thousands with a ValueError.
    match = re.fullmatch(r"\s*(\d{1,9})\.(\d{1,9})(?:\.\d+)?\s*", str(text))
    if not match:
        raise ConfigError(f"{where}: expected a version like \"2.1\", got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _torch_version(table: dict, path: Optional[Path], where: str, start: Path) -> Tuple[Tuple[int, int], TorchVersionSource]:
    """`torch-version` from the config, else the floor of the project's torch requirement, else the default; and its source."""
    if "torch-version" in table:
        return parse_version(table["torch-version"], f"{where}: 'torch-version'"), _config_source(path, where)
    requirement = find_torch_requirement(start)
    if requirement is None:
        return DEFAULT_TORCH_VERSION, DEFAULT_SOURCE
    return requirement.floor, requirement.source


def _config_source(path: Optional[Path], where: str) -> TorchVersionSource:
    if path is None:  # a table built in code (tests, verify's evidence), read from no file
        return TorchVersionSource(CONFIG, section=where)
    key = "[tool.torchlint] torch-version" if path.name == "pyproject.toml" else "torch-version"
    return TorchVersionSource(CONFIG, path, key)


# ---------------------------------------------------------------- --show-settings


def settings_report(config: Config) -> str:
    """The resolved settings, one `key = value` line each, as `torchlint check --show-settings` prints them."""
    torch_version = ".".join(map(str, config.torch_version))
    per_file_ignores = [f"{_patterns(spec)[0]}: {_listed(codes)}" for spec, codes in config.per_file_ignores]
    settings = [
        ("config file", str(config.path) if config.path else "none"),
        ("project root", str(config.root)),
        ("torch-version", f"{torch_version}  ({config.torch_version_source.describe(config.root)})"),
        ("select", _listed(config.select)),
        ("exclude", ", ".join(_patterns(config.exclude)) or "none"),
        ("per-file-ignores", "; ".join(per_file_ignores) or "none"),
        ("label-names", ", ".join(config.label_names)),
        ("device-name", config.device_name),
        ("output-format", config.output_format or "full on a terminal, else concise"),
        ("fix", str(config.fix).lower()),
        ("unsafe-fixes", str(config.unsafe_fixes).lower()),
    ]
    return "".join(f"{key} = {value}\n" for key, value in settings)


def _listed(codes: FrozenSet[str]) -> str:
    return ", ".join(sorted(codes)) or "none"


def _patterns(spec: Optional[pathspec.PathSpec]) -> List[str]:
    return [pattern.pattern for pattern in spec.patterns] if spec is not None else []
