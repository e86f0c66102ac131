"""Which files a run lints.

Folders are walked recursively for `*.py`, `*.pyi` and `*.ipynb` (Jupyter
notebooks, see `torchlint.notebook`); the config's `exclude`/`extend-exclude` globs (by default
`config.DEFAULT_EXCLUDES`, Jupyter's `.ipynb_checkpoints` copies among them) and, inside
a git repository, `.gitignore` files prune the walk. Paths named on the command
line, files and folders alike, are always linted, as in ruff and flake8, unless
`force_exclude` is set (pre-commit passes every staged file explicitly). Inside a
named folder, excludes apply to what the walk finds below it, never to the folder's
own path: `torchlint check build/pkg` lints `build/pkg` although `build` is
excluded, as ruff does (see `_below`). A folder that cannot be listed
is not skipped quietly: its files would go unchecked, so the walk hands it to the
caller (see `UnreadableFolder`) and goes on.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pathspec

from torchlint.config import Config

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")


class MissingPath(Exception):
    pass


@dataclass(frozen=True)
class UnreadableFolder:
    """A folder the walk could not list, under the name it is reported by, with the system's reason."""

    path: str
    name: str
    reason: str


@dataclass(frozen=True)
class _Ignore:
    base: str
    spec: pathspec.PathSpec

    def matches(self, path: str, is_dir: bool) -> bool:
        relative = os.path.relpath(path, self.base).replace(os.sep, "/")
        if relative.startswith(".."):
            return False
        return self.spec.match_file(relative + "/" if is_dir else relative)


def _git_root(directory: str) -> Optional[str]:
    current = os.path.abspath(directory)
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _gitignore(directory: str) -> Optional[_Ignore]:
    path = os.path.join(directory, ".gitignore")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return _Ignore(directory, pathspec.GitIgnoreSpec.from_lines(handle))
    except OSError:
        return None
    except Exception:  # a malformed pattern in someone's .gitignore must not stop the run
        return None


def _gitignores_above(path: str) -> List[_Ignore]:
    """The .gitignore files of `path`'s ancestor folders inside its git repository, outermost first."""
    absolute = os.path.abspath(path)
    root = _git_root(os.path.dirname(absolute))
    if root is None:
        return []
    found = []
    current = absolute
    while current != root:
        current = os.path.dirname(current)
        ignore = _gitignore(current)
        if ignore:
            found.append(ignore)
    return list(reversed(found))


def _below(folder: str, config: Config, ignores: List[_Ignore]) -> Tuple[Config, List[_Ignore]]:
    """The excludes and .gitignore files for the walk of a folder named on the command line.

    A pattern that matches the folder itself or one of its ancestors would exclude everything in it: it is taken
    out, so that naming a folder lints it. Taken out, a pattern without a slash (`build`, `*.tmp`), which matches
    at any depth, still applies below the folder, matched from the folder down (`build/pkg/build` stays excluded
    when `build/pkg` is named); one anchored by a slash could only match below the folder through the folder.
    """
    absolute = os.path.abspath(folder)
    below: List[pathspec.Pattern] = []

    def kept(spec: pathspec.PathSpec, base: str) -> pathspec.PathSpec:
        relative = os.path.relpath(absolute, base).replace(os.sep, "/")
        if relative.startswith(".."):
            return spec
        matching = [pattern for pattern in spec.patterns if pattern.match_file(relative + "/") is not None]
        below.extend(pattern for pattern in matching if _at_any_depth(pattern.pattern))
        return pathspec.GitIgnoreSpec([pattern for pattern in spec.patterns if pattern not in matching])

    if config.exclude is not None:
        config = dataclasses.replace(config, exclude=kept(config.exclude, str(config.root)))
    ignores = [_Ignore(ignore.base, kept(ignore.spec, ignore.base)) for ignore in ignores]
    if below:
        ignores.append(_Ignore(absolute, pathspec.GitIgnoreSpec(below)))
    return config, ignores


def _at_any_depth(pattern: str) -> bool:
    """Whether a gitignore pattern matches at any depth: it has no slash but a trailing one, or starts with `**/`."""
    pattern = pattern.lstrip("!")
    return pattern.startswith("**/") or "/" not in pattern.rstrip("/")


def _ignored(path: str, is_dir: bool, config: Config, ignores: List[_Ignore]) -> bool:
    absolute = os.path.abspath(path)
    return config.is_excluded(path, is_dir) or any(ignore.matches(absolute, is_dir) for ignore in ignores)


def discover(
    paths: List[str],
    config: Config,
    suffixes: Tuple[str, ...] = SOURCE_SUFFIXES,
    respect_gitignore: bool = True,
    force_exclude: bool = False,
    unreadable: Optional[List[UnreadableFolder]] = None,
) -> Iterator[Tuple[str, str]]:
    """Yield (path on disk, name to report) for every file to lint, each once, in a stable order.

    Folders that cannot be listed are appended to `unreadable`, each once, when it is given.
    """
    seen = set()
    real_folders: Dict[str, str] = {}

    def real_path(path: str) -> str:
        # One realpath per folder instead of one per file (each walks every component with lstat).
        if os.path.islink(path):
            return os.path.realpath(path)
        folder, name = os.path.split(path)
        real = real_folders.get(folder)
        if real is None:
            real = real_folders[folder] = os.path.realpath(folder)
        return os.path.join(real, name)

    def refused(folder: str, error: OSError) -> None:
        key = os.path.realpath(folder)
        if unreadable is not None and key not in seen:
            seen.add(key)
            unreadable.append(UnreadableFolder(folder, os.path.normpath(folder), error.strerror or str(error)))

    for given in paths:
        if not os.path.lexists(given):
            raise MissingPath(given)
        is_dir = os.path.isdir(given)
        ignores = _gitignores_above(given) if respect_gitignore else []
        if force_exclude and _ignored(given, is_dir, config, ignores):
            continue
        in_repository = respect_gitignore and _git_root(given) is not None
        if is_dir:
            inside, inside_ignores = _below(given, config, ignores)
            found = _walk(given, inside, suffixes, inside_ignores, in_repository, refused)
        else:
            found = [given]
        for path in found:
            key = real_path(path)
            if key not in seen:
                seen.add(key)
                yield path, os.path.normpath(path)


def _walk(
    directory: str, config: Config, suffixes, ignores: List[_Ignore], use_gitignore: bool,
    refused: Callable[[str, OSError], None],
) -> Iterator[str]:
    if use_gitignore:
        own = _gitignore(directory)
        if own:
            ignores = ignores + [own]
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as error:
        refused(directory, error)
        return
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = entry.is_file()
        except OSError:
            continue
        path = entry.path
        if _ignored(path, is_dir, config, ignores):
            continue
        if is_dir:
            yield from _walk(path, config, suffixes, ignores, use_gitignore, refused)
        elif is_file and entry.name.endswith(suffixes):
            yield path
