"""Configuration: `[tool.torchlint]` in the nearest pyproject.toml, or a file given with --config.

Config is resolved once per run into a `Config`; every bad key or value raises
`ConfigError` naming the key and the file (and the key it was likely meant to be),
which the CLI turns into exit 2. Without a `torch-version` key, the project's own
torch requirement gives it (see `torchlint.project_settings`), and the `Config`
records where it came from. `SCHEMA` describes every key: the loader checks types
against it and docs/configuration.md's reference is generated from it
(`python -m torchlint.config_reference`).

Selection: a code, a name or `ALL` selects any rule; a prefix (`TL3`) selects only
the rules that are on by default, so an opt-in rule is enabled only by its own code,
its name or `ALL`. Ignoring by prefix ignores every rule it matches. A rule in preview
runs only when `preview` is on, however it is selected (ruff's preview).
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Tuple

import pathspec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

from torchlint.catalogue import RULES
from torchlint.engine import budget
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
OUTPUT_FORMATS = ("full", "concise", "grouped", "json", "json-lines", "sarif", "github", "gitlab", "junit", "pylint")


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
    # `--ignore-noqa`: report what `# noqa` comments would silence.
    ignore_noqa: bool = False
    # `--preview`: rules (and rule behaviours) that have not yet shown their precision on unseen code run too.
    preview: bool = False
    # Preview rules named by their code or name while preview is off: left out, and the CLI says so.
    preview_left_out: FrozenSet[str] = frozenset()
    # The budgets of one file (engine/budget.py); 0 means none.
    max_file_bytes: int = budget.DEFAULT_BYTES
    max_file_seconds: float = budget.DEFAULT_SECONDS

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

SELECT, IGNORE = "select", "ignore"


def resolve_codes(selectors: Iterable[str], where: str, purpose: str = SELECT) -> FrozenSet[str]:
    """Codes named by selectors: `ALL`, a code, a code prefix (`TL1`) or a kebab name.

    To select, a prefix names only the rules that are on by default: an opt-in rule needs its exact code,
    its name or `ALL`, as ruff's preview rules do. To ignore, a prefix names every rule it matches.
    """
    codes = set()
    for selector in selectors:
        if not isinstance(selector, str):
            raise ConfigError(f"{where}: expected rule codes, got {selector!r}")
        token = selector.strip()
        exact = [rule for rule in RULES if token.upper() in ("ALL", rule.code) or rule.name == token]
        prefixed = [rule for rule in RULES if token and rule.code.startswith(token.upper())]
        if exact:
            codes.update(rule.code for rule in exact)
        elif prefixed and purpose == SELECT and all(rule.opt_in for rule in prefixed):
            names = ", ".join(rule.code for rule in prefixed)
            raise ConfigError(f"{where}: {selector!r} matches only opt-in rules ({names}): select them by their exact code or name")
        elif prefixed:
            codes.update(rule.code for rule in prefixed if purpose == IGNORE or not rule.opt_in)
        else:
            raise ConfigError(f"{where}: unknown rule code or name {selector!r}{_did_you_mean(token, _rule_words())}")
    return frozenset(codes)


def default_codes() -> FrozenSet[str]:
    return frozenset(rule.code for rule in RULES if not rule.opt_in)


def preview_codes() -> FrozenSet[str]:
    return frozenset(rule.code for rule in RULES if rule.preview)


def named_codes(selectors: Iterable[str]) -> FrozenSet[str]:
    """The codes of the rules that selectors name one by one (their code or name; not `ALL`, not a prefix)."""
    tokens = {selector.strip() for selector in selectors if isinstance(selector, str)}
    return frozenset(rule.code for rule in RULES if rule.code in {token.upper() for token in tokens} or rule.name in tokens)


def _rule_words() -> List[str]:
    # Names only: a code one digit away from another is a different rule, not a likely typo of it.
    return [rule.name for rule in RULES]


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    import difflib  # only for a config with a mistake in it

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


# ---------------------------------------------------------------- the schema


class Key(NamedTuple):
    """One key of `[tool.torchlint]`: what the loader checks and what the reference page says about it."""

    name: str
    type: type
    default: str
    description: str
    example: str


SCHEMA: Tuple[Key, ...] = (
    Key("select", list, "every rule that is not opt-in",
        "Exactly these rules: codes (`TL101`), prefixes (`TL1`, which select only the rules on by default), "
        "names (`backward-under-no-grad`) or `ALL`. An opt-in rule is selected only by its code, its name or `ALL`.",
        'select = ["TL1", "TL303"]'),
    Key("extend-select", list, "`[]`", "These rules too, on top of `select` (the opt-in ones, for example).",
        'extend-select = ["TL207"]'),
    Key("ignore", list, "`[]`", "Not these rules: codes, prefixes (every rule they match, opt-in ones included) or names.",
        'ignore = ["TL306"]'),
    Key("extend-ignore", list, "`[]`", "The same as `ignore`; the command line's `--ignore` adds to it.",
        'extend-ignore = ["TL205"]'),
    Key("per-file-ignores", dict, "`{}`", "Glob = rules not reported in the files the glob matches (globs relative to the config file's folder).",
        'per-file-ignores = { "tests/*.py" = ["TL501"] }'),
    Key("extend-per-file-ignores", dict, "`{}`", "More globs and rules, on top of `per-file-ignores`.",
        'extend-per-file-ignores = { "scripts/*" = ["TL302"] }'),
    Key("exclude", list, "the default excludes (see below)", "Folders and files never walked into; replaces the defaults.",
        'exclude = [".git", "build"]'),
    Key("extend-exclude", list, "`[]`", "More globs, on top of `exclude`.", 'extend-exclude = ["notebooks/scratch"]'),
    Key("preview", bool, "`false`",
        "Run the rules in preview too (`torchlint rule --all` marks them): rules that have not yet read at least 9 "
        "findings in 10 true at first sight on two held-out rounds in a row. Without it a preview rule does not run, "
        "even when selected by its code, as with ruff's preview.", "preview = true"),
    Key("fix", bool, "`false`", "Apply safe fixes, as `--fix`.", "fix = true"),
    Key("unsafe-fixes", bool, "`false`", "Apply unsafe fixes too, as `--unsafe-fixes`.", "unsafe-fixes = true"),
    Key("output-format", str, "`full` on a terminal, else `concise`", "One of " + ", ".join(f"`{name}`" for name in OUTPUT_FORMATS) + ".",
        'output-format = "json"'),
    Key("device-name", str, '`"device"`', "The variable that device fixes move tensors to (TL201, TL206).", 'device-name = "dev"'),
    Key("label-names", list, ", ".join(f"`{name}`" for name in DEFAULT_LABEL_NAMES), "Globs of label-like names (TL203).",
        'label-names = ["y", "*_ids"]'),
    Key("torch-version", str, 'the project\'s own torch requirement, else `"2.6"`',
        "The oldest torch the checked code must run on (a patch number is ignored).", 'torch-version = "2.1"'),
    Key(budget.BYTES_KEY, int, f"`{budget.DEFAULT_BYTES:_}` (20 MB)",
        "A file larger than this many bytes is not read: it is reported as one TL000 finding that says so, and the "
        "run goes on. Linting dense code takes about 210 bytes of memory per byte of source (generated files of "
        "literals much less), so the default keeps one file under about 4 GB. `0` means no limit.",
        "max-file-bytes = 50_000_000"),
    Key(budget.SECONDS_KEY, float, f"`{budget.DEFAULT_SECONDS:g}`",
        "A file whose lint takes longer than this many seconds (wall clock) is stopped and reported as one TL000 "
        "finding that says so, and the run goes on. A whole number or a decimal; `0` means no limit.",
        "max-file-seconds = 120"),
)
_KEYS = {key.name: key.type for key in SCHEMA}
# What a run was told on its command line: the option that set each override, for `--show-settings`.
CLI_OPTIONS = {
    "select": "--select", "extend-select": "--extend-select", "extend-ignore": "--ignore",
    "per-file-ignores": "--per-file-ignores", "extend-per-file-ignores": "--extend-per-file-ignores",
    "output-format": "--output-format", "fix": "--fix", "unsafe-fixes": "--unsafe-fixes", "ignore-noqa": "--ignore-noqa",
    "preview": "--preview", "exclude": "--exclude", "extend-exclude": "--extend-exclude",
}
# Lists and tables the command line adds to instead of replacing.
_EXTENDING = ("extend-select", "extend-ignore", "extend-per-file-ignores", "extend-exclude")


# ---------------------------------------------------------------- loading


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


class Resolved(NamedTuple):
    config: Config
    # Setting (as `--show-settings` names it) -> where its value came from.
    origins: Dict[str, str]


def load(config_path: Optional[Path], start: Path, overrides: Optional[dict] = None, isolated: bool = False) -> Config:
    """Build the run's Config from the config file (given or found from `start`) and CLI overrides."""
    return resolve(config_path, start, overrides, isolated).config


def resolve(
    config_path: Optional[Path], start: Path, overrides: Optional[dict] = None, isolated: bool = False,
    inline: Optional[dict] = None,
) -> Resolved:
    """The run's Config and where each setting came from; `isolated` reads no config file (`--isolated`).

    `inline`: keys given as `--config 'KEY = VALUE'`, which replace the file's (ruff's inline overrides); the
    other options (`overrides`) still apply on top of them."""
    if config_path is not None and not config_path.is_file():
        raise ConfigError(f"{config_path}: config file not found")
    path = None if isolated else config_path or find_config_file(start)
    table = load_table(path) if path else {}
    # Without a config file, globs are relative to where torchlint runs, as in ruff.
    root = path.parent.resolve() if path else Path.cwd().resolve()
    where = str(path) if path else "command line"
    for table_where, keys, table_name in ((where, table, _table_name(path)), ("--config", inline or {}, "an inline override")):
        for key, value in keys.items():
            expected = _KEYS.get(key)
            if expected is None:
                raise ConfigError(f"{table_where}: unknown key {key!r} in {table_name}{_did_you_mean(key, _KEYS)}")
            if not _has_type(value, expected):
                raise ConfigError(
                    f"{table_where}: {key!r} must be a {_TYPE_NAMES.get(expected, expected.__name__)}, got {type(value).__name__}"
                )
    merged = {**table, **(inline or {})}
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    for key, value in given.items():
        # Command-line extensions add to the file's lists and tables; everything else replaces.
        if key in _EXTENDING:
            merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else merged.get(key, []) + value
        else:
            merged[key] = value
    config = build(merged, root=root, path=path, where=where, torch_requirement_from=start.resolve())
    from_file = {key: value for key, value in table.items() if key not in (inline or {})}
    set_here = {**{key: "--config" for key in inline or {}}, **{key: CLI_OPTIONS[key] for key in given}}
    return Resolved(config, _origins(path, from_file, set_here, isolated))


_TYPE_NAMES = {float: "number", int: "whole number"}


def _has_type(value: object, expected: type) -> bool:
    if isinstance(value, bool) and expected is not bool:
        return False  # `max-file-bytes = true` is a mistake, though Python counts True as 1
    if expected is float:
        return isinstance(value, (int, float))
    return isinstance(value, expected)


def _table_name(path: Optional[Path]) -> str:
    return "[tool.torchlint]" if path is not None and path.name == "pyproject.toml" else "the config"


def _origins(path: Optional[Path], table: dict, given: Dict[str, str], isolated: bool) -> Dict[str, str]:
    """Where each setting came from, in `--show-settings`' words: `default`, `from <file> <key>`, `from --option`
    (`given`: each key the command line set -> the option that set it).

    The config file and the project root say where they come from themselves; `torch-version` has its source."""
    in_file = f"{path.name} [tool.torchlint]" if path is not None and path.name == "pyproject.toml" else path.name if path else ""

    def sources(*keys: str) -> List[str]:
        in_table = [key for key in keys if key in table]
        found = [f"{in_file} {', '.join(in_table)}"] if in_table else []
        return found + [given[key] for key in keys if key in given]

    def origin(key: str, *extensions: str) -> str:
        """`default`, `from ...`, or `default, then from ...` when only keys that extend the default were given."""
        found = sources(key, *extensions)
        if not found:
            return "default"
        return ("from " if key in table or key in given else "default, then from ") + ", ".join(found)

    origins = {"config file": "--isolated"} if isolated else {}
    return {
        **origins,
        "select": origin("select", "extend-select", "ignore", "extend-ignore"),
        "exclude": origin("exclude", "extend-exclude"),
        "per-file-ignores": origin("per-file-ignores", "extend-per-file-ignores"),
        "label-names": origin("label-names"),
        "device-name": origin("device-name"),
        "output-format": origin("output-format"),
        "fix": origin("fix"),
        "unsafe-fixes": origin("unsafe-fixes"),
        "ignore-noqa": origin("ignore-noqa"),
        "preview": origin("preview"),
        budget.BYTES_KEY: origin(budget.BYTES_KEY),
        budget.SECONDS_KEY: origin(budget.SECONDS_KEY),
    }


def build(table: dict, root: Path, path: Optional[Path], where: str, torch_requirement_from: Path) -> Config:
    def key_where(key: str) -> str:
        return f"{where}: {key!r}"

    if "select" in table:
        select = resolve_codes(table["select"], key_where("select"))
    else:
        select = default_codes()
    select |= resolve_codes(table.get("extend-select", []), key_where("extend-select"))
    select -= resolve_codes(table.get("ignore", []), key_where("ignore"), IGNORE)
    select -= resolve_codes(table.get("extend-ignore", []), key_where("extend-ignore"), IGNORE)
    preview = bool(table.get("preview", False))
    left_out: FrozenSet[str] = frozenset()
    if not preview:
        left_out = select & preview_codes() & named_codes([*table.get("select", []), *table.get("extend-select", [])])
        select -= preview_codes()

    per_file = []
    for key in ("per-file-ignores", "extend-per-file-ignores"):
        for pattern, codes in table.get(key, {}).items():
            if not isinstance(codes, list):
                raise ConfigError(f"{key_where(key)}: the value for {pattern!r} must be a list of codes")
            per_file.append((_spec([pattern], key_where(key)), resolve_codes(codes, key_where(key), IGNORE)))

    exclude_patterns = list(table.get("exclude", DEFAULT_EXCLUDES)) + list(table.get("extend-exclude", []))
    for key in ("exclude", "extend-exclude"):
        _spec(table.get(key, []), key_where(key))
    output_format = table.get("output-format")
    if output_format is not None and output_format not in OUTPUT_FORMATS:
        raise ConfigError(
            f"{key_where('output-format')}: must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}"
            f"{_did_you_mean(str(output_format), OUTPUT_FORMATS)}"
        )
    device_name = table.get("device-name", "device")
    if not device_name.isidentifier():
        raise ConfigError(f"{key_where('device-name')}: {device_name!r} is not a Python name")
    label_names = table.get("label-names", list(DEFAULT_LABEL_NAMES))
    if not all(isinstance(name, str) and name for name in label_names):
        raise ConfigError(f"{key_where('label-names')}: must be a list of non-empty strings")
    torch_version, torch_version_source = _torch_version(table, path, where, torch_requirement_from)
    max_file_bytes = table.get(budget.BYTES_KEY, budget.DEFAULT_BYTES)
    if max_file_bytes < 0:
        raise ConfigError(f"{key_where(budget.BYTES_KEY)}: must be 0 (no limit) or more, got {max_file_bytes}")
    max_file_seconds = table.get(budget.SECONDS_KEY, budget.DEFAULT_SECONDS)
    if not 0 <= max_file_seconds <= _MAX_SECONDS:
        raise ConfigError(f"{key_where(budget.SECONDS_KEY)}: must be 0 (no limit) to {_MAX_SECONDS:g}, got {max_file_seconds}")
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
        ignore_noqa=bool(table.get("ignore-noqa", False)),
        preview=preview,
        preview_left_out=left_out,
        max_file_bytes=max_file_bytes,
        max_file_seconds=float(max_file_seconds),
    )


# A timer takes at most this many seconds (a week; `nan` and `inf` are refused by the range check too).
_MAX_SECONDS = 7 * 24 * 3600


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


def settings_report(config: Config, origins: Optional[Dict[str, str]] = None) -> str:
    """The resolved settings, one `key = value  (where it came from)` line each, as `--show-settings` prints them."""
    origins = origins or {}
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
        ("ignore-noqa", str(config.ignore_noqa).lower()),
        ("preview", str(config.preview).lower()),
        (budget.BYTES_KEY, f"{config.max_file_bytes}" if config.max_file_bytes else "0 (no limit)"),
        (budget.SECONDS_KEY, f"{config.max_file_seconds:g}" if config.max_file_seconds else "0 (no limit)"),
    ]
    return "".join(f"{key} = {value}" + (f"  ({origins[key]})" if key in origins else "") + "\n" for key, value in settings)


def _listed(codes: FrozenSet[str]) -> str:
    return ", ".join(sorted(codes)) or "none"


def _patterns(spec: Optional[pathspec.PathSpec]) -> List[str]:
    return [pattern.pattern for pattern in spec.patterns] if spec is not None else []
