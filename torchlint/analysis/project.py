"""The project around a linted file: the modules its imports name, when they are project files.

A training script rarely defines everything it uses: the model class lives in
`model.py`, the loaders in `data.py`. When the value model meets a name imported
from a module that is a file of the project (`from model import Net`,
`from .data import make_loaders`, `import utils` then `utils.build()`), it follows the
name into that file, so what `Net.forward` returns is known in `train.py`.

Which files count. A module path is looked up as a `.py` file (or a package's
`__init__.py`) from the importing file's own folder, then from each folder above it
up to the top of its package (the first folder above without an `__init__.py`), the
places Python's own search finds a project's modules when a script is run from its
folder or a package with `python -m`. A dotted path not found there whose first part is
a folder (`from TCN.word_cnn.model import TCN`, where `TCN/word_cnn/` has no
`__init__.py`: a namespace package, PEP 420) is then looked up from each folder above
the importer up to the project root (`Config.root`: the config file's folder, else
where torchlint runs), nearest first: where Python finds it when the program is run
from the repository's root (`python -m`) or an ancestor is put on `sys.path`, as such
layouts do. A single name (`import utils`) is not looked up above the importer's package:
run from its own folder, a script does not find it there. Relative imports resolve against
the package. Installed packages (torch, numpy) are never read: a path that is not a file there is
not followed. This works the same whether one file or the whole project is given on
the command line, since the files are read from disk when an import names them.

A script or notebook that puts a folder on `sys.path` at its top level before an import
(`sys.path.append("../semi-supervised")`, then `from models import VAE`, at the top or in a
function) has that import looked up in the folder too, after the places above. The edit is a
line of its own at the file's top level (column 0): `sys.path.append(P)` or
`sys.path.insert(I, P)` (taken as an append: looked up after the usual places), where P is
built only of string literals that are not absolute paths, `__file__`, `os.getcwd()`,
`os.path.join`, `os.path.dirname`, `os.path.abspath`, `os.path.realpath`,
`os.path.normpath`, `Path(...)`/`pathlib.Path(...)`, `.parent`, `.resolve()`,
`.absolute()`, `/` and `str(...)`; anything else (a variable, an f-string,
`os.environ[...]`) adds nothing; names are read through the file's top-level import aliases
(`import sys as system`, `import os.path as osp`, `from pathlib import Path as P`). A relative path is taken from the importing file's
folder: a script is assumed to be run from its own folder, as a notebook's kernel starts in
its folder. An edit counts for the imports of a first name (`models`) when it comes before
the file's first import of that name (Python keeps the module the first import found). At
most `_MAX_ADDED_FOLDERS` edits of a file count. The edits of the file being linted are read
from the text linted (`use_text`: an editor's buffer, a notebook's cells), those of an
imported file from disk, once per process (again after it changes and is parsed again).

What is not seen: modules found only through other `sys.path` edits, `PYTHONPATH` or an
installed copy of the project, names assigned in the imported module through anything
but plain statements, and modules over `_MAX_BYTES`. (What a star import of a project
module binds is read through its summary: `analysis/summaries.py`, `star_bindings`.)

Each imported file is read and parsed once per process, kept while its bytes stay the
same (a content digest), and at most `_MAX_MODULES` are held. The parse is shared with
the linter (`parsing.TREES`): a file both linted and imported in one run is parsed once. Every file a lint reads
this way is recorded (`Project.consulted`), so a cached result can be checked against
them: editing `model.py` re-lints `train.py`.
"""

from __future__ import annotations

import ast
import os
import re
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from torchlint import source as sources
from torchlint.engine import parsing

if TYPE_CHECKING:
    import libcst as cst

    from torchlint.config import Config
    from torchlint.engine.context import FileContext

_MAX_MODULES = 64
_UNKNOWN = object()
_MAX_BYTES = 1_000_000
_MAX_NEIGHBOURS = 100
_MAX_ADDED_FOLDERS = 8
# `sys.path.append(...)` or `sys.path.insert(...)` making up a line at the file's top level, its call on the line.
# The first group is the name `sys` has in the file (`import sys as system`).
_SYS_PATH_EDIT = re.compile(r"^(\w+)\.path\.(append|insert)(\(.*\))[ \t]*(?:#[^\r\n]*)?\r?$", re.MULTILINE)
# Text without which a file makes no `sys.path` edit: most files are passed over on it.
_EDIT_WORDS = (".path.append(", ".path.insert(")
# The first name an absolute import statement names (`from models.vae import X`), or the list of `import a.b, c as d`.
# A whole top-level import statement on one line, for the aliases it binds.
_TOP_LEVEL_IMPORT = re.compile(r"^(?:from[ \t]+[\w.]+[ \t]+import[ \t]+[\w \t,]+|import[ \t]+[\w. \t,]+)$", re.MULTILINE)
_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+(\w+)|import[ \t]+(\w[\w. \t,]*))", re.MULTILINE)


@dataclass(frozen=True)
class ProjectModule:
    path: str
    digest: bytes
    context: "FileContext"


class Project:
    """The project modules one process has read, shared by every file it lints."""

    def __init__(self):
        self._modules: "OrderedDict[str, Optional[ProjectModule]]" = OrderedDict()
        # (importing folder, import path, project root) -> (module file, name in it), or None: most paths name
        # installed packages
        self._paths: Dict[Tuple[str, str, str], Optional[Tuple[str, str]]] = {}
        # the project root of the lint under way (`use_root`): how far above an importer a dotted path is looked up
        self._root = ""
        self._folders = _Folders()
        # importing file -> its folder and its absolute path (`_where`)
        self._importer_places: Dict[Tuple[str, str], Tuple[str, str]] = {}
        # importing file (absolute) -> {first name of an import path: the folders its `sys.path` edits add for it}
        self._added_folders: Dict[str, Dict[str, Tuple[str, ...]]] = {}
        # path -> digest of every project file read since `start_recording` (what the current lint depended on)
        self.consulted: Dict[str, bytes] = {}
        # what the `recording` blocks now open have read
        self._recorders: List[Dict[str, bytes]] = []
        # path -> the module `_load` checked against the file's bytes in the lint under way (`one_lint`)
        self._checked: Dict[str, ProjectModule] = {}
        # how many `one_lint` blocks are open (a notebook's lint lints its cells inside its own)
        self._lints = 0

    def forget_layout(self) -> None:
        """Forget which files exist, for a process that outlives a change to them (the language server, when a
        file is created or deleted): lookups are cached per process. Parsed modules stay, checked by digest."""
        self._paths = {}
        self._folders = _Folders()
        self._added_folders = {}

    def start_recording(self) -> None:
        self.consulted = {}

    def use_root(self, root: "os.PathLike[str] | str") -> None:
        """The project root (`Config.root`) of the file about to be linted: a dotted import whose first part is a
        folder is looked up in the folders above its importer up to here (the module's docstring)."""
        self._root = os.path.abspath(root)

    def use_text(self, filename: str, text: str) -> None:
        """The text of the file about to be linted: the folders its `sys.path` edits add to its imports (the module's
        docstring) are read from it rather than from disk (an editor's buffer, a notebook's cells)."""
        path = self._where(filename)[1]
        self._added_folders[path] = _folders_added(text, path) if any(word in text for word in _EDIT_WORDS) else {}

    def resolve(self, importer: str, dotted: str, config: "Config") -> Optional[Tuple[ProjectModule, str]]:
        """For an import path as `import_bindings` writes it (`model.Net`, `.data.make_loaders`, `utils`): the
        project module it is in and the name within it ("" for the module itself), or None."""
        located = self.locate(importer, dotted)
        if located is None:
            return None
        module = self._load(located[0], config)
        return (module, located[1]) if module is not None else None

    def locate(self, importer: str, dotted: str) -> Optional[Tuple[str, str]]:
        """The project file an import path names and the name within it, as `resolve` finds them, without reading the
        file; None for a path that names no project file or names the importer itself."""
        located = self._located(importer, dotted)
        return None if located is None or located[0] == os.path.abspath(importer) else located

    def locate_name(self, importer: str, dotted: str) -> Optional[Tuple[str, str]]:
        """The project file and the module-level name in it that an import path names (`model.Net`); None for a
        path that names a module itself (`utils`), a name inside a name (`utils.Config.load`), or no project file."""
        located = self.locate(importer, dotted)
        return located if located is not None and located[1] and "." not in located[1] else None

    def read(self, path: str) -> Optional[Tuple[bytes, bytes]]:
        """A project file's bytes and digest, recorded as read by the current lint (`consulted`); None when it cannot
        be read or is over the size a project file may have."""
        try:
            data = sources.read_bytes(path)
        except OSError:
            return None
        if len(data) > _MAX_BYTES:
            return None
        digest = sources.content_digest(data)
        self.record(path, digest)
        return data, digest

    def unchanged(self, read: Iterable[Tuple[str, bytes]]) -> bool:
        """Every (path, digest) of `read` still names the bytes the file has (each recorded as read)."""
        for path, digest in read:
            found = self.read(path)
            if found is None or found[1] != digest:
                return False
        return True

    def record(self, path: str, digest: bytes) -> None:
        self.consulted[path] = digest
        for recorder in self._recorders:
            recorder[path] = digest

    @contextmanager
    def one_lint(self) -> Iterator[None]:
        """While one file is linted, each project file its imports name is read and checked against its parse once,
        however many names the lint follows into it (a file's `from model import Net, init_weights` and every use of
        them): the lint sees one version of each file, and does not read and digest it again at every name."""
        self._lints += 1
        try:
            yield
        finally:
            self._lints -= 1
            if not self._lints:
                self._checked = {}

    @contextmanager
    def recording(self) -> Iterator[Dict[str, bytes]]:
        """The project files read inside the block (besides `consulted`, which keeps them too): what an answer built
        there depends on."""
        recorder: Dict[str, bytes] = {}
        self._recorders.append(recorder)
        try:
            yield recorder
        finally:
            self._recorders.remove(recorder)

    def holds(self, importer: str, dotted: str) -> bool:
        """The import path names a file of the project (without reading it)."""
        return self._located(importer, dotted) is not None

    def imported_by(self, importer: str, modules) -> bool:
        """One of the module paths a file imports (`FileText.imported_modules`) is a file of the project."""
        return any(self.holds(importer, module) for module in modules)

    def neighbours_hold(self, importer: str, accepts: Callable[[bytes], bool]) -> bool:
        """Another `.py` file in the importer's folder has bytes that `accepts`: for a verdict that depends on what
        the files next to it do (a script that loads what the linted one saves). Each file read is recorded
        (`consulted`), so a cached result is checked against it; at most `_MAX_NEIGHBOURS` files are read."""
        folder = self._folder_of(importer)
        own = os.path.abspath(importer)
        for name in self._folders.python_files(folder)[:_MAX_NEIGHBOURS]:
            path = os.path.join(folder, name)
            if path == own:
                continue
            try:
                data = sources.read_bytes(path)
            except OSError:
                continue
            if len(data) > _MAX_BYTES:
                continue
            self.record(path, sources.content_digest(data))
            if accepts(data):
                return True
        return False

    def files_above(self, path: str) -> List[str]:
        """The `.py` files of the folder of `path` (itself included) and of each folder above it up to the project root
        (`use_root`; for a file outside it, up to the top of its package), nearest folder first, at most
        `_MAX_NEIGHBOURS`: where the files that import it usually are, for a question answered by finding one of them
        (a file that initialises a class this one defines), not by reading them all."""
        folder = self._folder_of(path)
        folders = _folders_up_to(folder, self._root) or self._folders.search_folders(folder, 0)
        found: List[str] = []
        for each in folders:
            found += [os.path.join(each, name) for name in self._folders.python_files(each)]
            if len(found) >= _MAX_NEIGHBOURS:
                return found[:_MAX_NEIGHBOURS]
        return found

    def package_inits(self, path: str) -> List[str]:
        """The `__init__.py` files Python runs before it imports the module at `path` as part of its package: of its
        folder and of each folder above while that is a package, innermost first (read from the folders' listings)."""
        # `search_folders` ends with the first folder above the top package, which has no `__init__.py`.
        folders = self._folders.search_folders(self._folder_of(path), 0)[:-1]
        own = os.path.abspath(path)
        return [init for init in (os.path.join(folder, "__init__.py") for folder in folders) if init != own]

    def kept_tree(self, path: str, text: str) -> Optional[cst.Module]:
        """The tree of `text` when it is the text of the module read for an import of `path` (absolute), still held:
        `parsing.ELSEWHERE`."""
        module = self._modules.get(path)
        return module.context.module if module is not None and module.context.text == text else None

    def followed_into(self, ctx: "FileContext") -> bool:
        """`ctx` is the context of a project file read for an import (`resolve`), not of a file being linted."""
        module = self._modules.get(ctx.filename)
        return module is not None and module.context is ctx

    def importers(self, path: str) -> Optional[List[str]]:
        """The other `.py` files of the folder of the project file `path` whose text has an import line naming its
        module (`import trainer`, `from trainer import train`, `from .trainer import BERTTrainer`), each read and
        recorded (`consulted`); None when a file this does not read could import it, as `locate` finds modules:
        `path` is in a package not below the project root (any file above may import it by a dotted path), a folder
        beside it is a package (its files find this folder's modules too), a notebook is beside it, or the folder
        holds more than `_MAX_NEIGHBOURS` files. A file in a folder below the project root, a package's or not, can
        be imported by a dotted path from any file under the root (`locate`): there every `.py` file under the root
        is read, and the answer is None when the root holds a notebook or more than `_MAX_NEIGHBOURS` files.
        Importers outside the project (a package installed and used elsewhere) are not seen, as for any module."""
        candidates = self.importer_candidates(path)
        if candidates is None:
            return None
        stem = os.path.splitext(os.path.basename(path))[0]
        # Any line of an import naming it (`import os, trainer`, `from trainer import train`): the parse decides.
        pattern = re.compile(rb"\b(?:import|from)\b[^\n]*\b" + re.escape(stem.encode()) + rb"\b")
        own = os.path.abspath(path)
        found = []
        for other in candidates:
            if other == own:
                continue
            read = self.read(other)
            if read is None:
                return None  # unreadable or too large: what it calls is not known
            if pattern.search(read[0]) is not None:
                found.append(other)
        return found

    def importer_candidates(self, path: str) -> Optional[List[str]]:
        """The files `importers` reads for the project file `path`, told from the folders' listings alone (nothing is
        read or recorded); None when a file it would not read could import it (`importers` says when)."""
        folder = self._folder_of(path)
        listing = self._folders.listing(folder)
        below_root = folder != self._root and bool(_folders_up_to(folder, self._root))
        if any(name.endswith(".ipynb") for name in listing) or ("__init__.py" in listing and not below_root):
            return None
        if any(is_folder and self._folders.listing(os.path.join(folder, name)).get("__init__.py") is False
               for name, is_folder in listing.items()):
            return None
        if below_root:
            return self._folders.python_files_under(self._root, _MAX_NEIGHBOURS)
        names = self._folders.python_files(folder)
        return [os.path.join(folder, name) for name in names] if len(names) <= _MAX_NEIGHBOURS else None

    def importers_around(self, path: str, depth: int = 3) -> List[str]:
        """The files that may import the module `path` (`importers`), and those that may import them (re-exports:
        `from layers import KVCache` in a module others import), up to `depth` files deep; the files of a step whose
        importers are not known (None) are left out."""
        found: List[str] = []
        wave = [path]
        for _ in range(depth):
            wave = sorted({other for each in wave for other in self.importers(each) or () if other not in found and other != path})
            found += wave
        return found

    def _located(self, importer: str, dotted: str) -> Optional[Tuple[str, str]]:
        folder, path = self._where(importer)
        added = () if dotted.startswith(".") else self._folders_added_to(path).get(dotted.partition(".")[0], ())
        key = (folder, dotted, self._root, added)
        found = self._paths.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._paths[key] = self._folders.locate(folder, dotted, self._root, added)
        return found

    def _folders_added_to(self, path: str) -> Dict[str, Tuple[str, ...]]:
        """What the `sys.path` edits of the importing file `path` add (`_folders_added`): of the text linted
        (`use_text`), else of the file on disk, read once."""
        found = self._added_folders.get(path)
        if found is None:
            found = {}
            try:
                data = sources.read_bytes(path)
                if len(data) <= _MAX_BYTES and any(word.encode() in data for word in _EDIT_WORDS):
                    found = _folders_added(sources.decode(data).text, path)
            except (OSError, sources.SourceError):
                pass
            self._added_folders[path] = found
        return found

    def _folder_of(self, importer: str) -> str:
        return self._where(importer)[0]

    def _where(self, importer: str) -> Tuple[str, str]:
        """The importing file's folder and absolute path."""
        # Kept with the working folder: a relative name means another file once that changes.
        key = (os.getcwd(), importer) if not os.path.isabs(importer) else ("", importer)
        found = self._importer_places.get(key)
        if found is None:
            path = os.path.abspath(importer)
            found = self._importer_places[key] = (os.path.dirname(path), path)
        return found

    def _load(self, path: str, config: "Config") -> Optional[ProjectModule]:
        checked = self._checked.get(path)
        if checked is not None:
            self.record(path, checked.digest)
            return checked
        read = self.read(path)
        module = self.parsed(path, read[0], read[1], config) if read is not None else None
        if module is not None and self._lints:
            self._checked[path] = module
        return module

    def parsed(self, path: str, data: bytes, digest: bytes, config: "Config") -> Optional[ProjectModule]:
        """The project file `path` with these bytes (`read`), parsed once while they stay the same, and the files its
        star imports bound names from too (`FileContext.star_dependencies`); None when it does not parse."""
        cached = self._modules.get(path)
        if cached is not None and cached.digest == digest and self.unchanged(cached.context.star_dependencies.items()):
            self._modules.move_to_end(path)
            return cached
        module = _parse(path, data, digest, config)
        self._added_folders.pop(path, None)  # its `sys.path` edits may have changed too
        self._modules[path] = module
        self._modules.move_to_end(path)
        while len(self._modules) > _MAX_MODULES:
            self._modules.popitem(last=False)
        return module


def _folders_up_to(folder: str, root: str) -> List[str]:
    """`folder` and each folder above it up to `root`, nearest first; [] when `folder` is not under `root`."""
    if not root or not (folder == root or folder.startswith(root.rstrip(os.sep) + os.sep)):
        return []
    found = [folder]
    while folder != root:
        folder = os.path.dirname(folder)
        found.append(folder)
    return found


def _folders_added(text: str, path: str) -> Dict[str, Tuple[str, ...]]:
    """{first name of an absolute import path in `text`: the folders the top-level `sys.path` edits before the first
    import of that name add} for the file at `path` (the module's docstring)."""
    edits: List[Tuple[int, str]] = []
    aliases = _top_level_aliases(text)
    for match in _SYS_PATH_EDIT.finditer(text):
        if aliases.get(match.group(1), match.group(1)) != "sys":
            continue
        folder = _added_folder(match.group(2), match.group(3), path, aliases)
        if folder is not None:
            edits.append((match.start(), folder))
            if len(edits) == _MAX_ADDED_FOLDERS:
                break
    if not edits:
        return {}
    first_imports: Dict[str, int] = {}
    for match in _IMPORT_LINE.finditer(text):
        names = [match.group(1)] if match.group(1) else [
            part.split()[0].split(".")[0] for part in match.group(2).split(",") if part.split()
        ]
        for name in names:
            first_imports.setdefault(name, match.start())
    found = {}
    for name, position in first_imports.items():
        folders = tuple(dict.fromkeys(folder for start, folder in edits if start < position))
        if folders:
            found[name] = folders
    return found


def _top_level_aliases(text: str) -> Dict[str, str]:
    """{name a top-level import statement of `text` binds: what it names}: `osp` -> `os.path` after `import os.path as
    osp`, `P` -> `pathlib.Path` after `from pathlib import Path as P`, so an edit's path reads the same under aliases."""
    found: Dict[str, str] = {}
    for match in _TOP_LEVEL_IMPORT.finditer(text):
        try:
            statement = ast.parse(match.group(0).strip()).body[0]
        except (SyntaxError, ValueError, RecursionError, IndexError):
            continue
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    found[alias.asname] = alias.name
        elif isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
            for alias in statement.names:
                found[alias.asname or alias.name] = f"{statement.module}.{alias.name}"
    return found


def _added_folder(method: str, call: str, path: str, aliases: Dict[str, str]) -> Optional[str]:
    """The absolute folder `sys.path.<method><call>` adds in the file at `path`, when its argument is a path built
    only of the forms the module's docstring names (under the file's import `aliases`); None otherwise."""
    try:
        arguments = ast.parse("f" + call, mode="eval").body.args  # type: ignore[attr-defined]
    except (SyntaxError, ValueError, RecursionError):
        return None
    if len(arguments) != (2 if method == "insert" else 1):
        return None
    folder = os.path.dirname(path)
    found = _path_value(arguments[-1], path, folder, aliases)
    return os.path.normpath(os.path.join(folder, found)) if found is not None else None


def _path_value(node: ast.expr, path: str, folder: str, aliases: Dict[str, str]) -> Optional[str]:
    """The path `node` evaluates to, with `__file__` the file at `path` and the working folder its `folder`; None for
    anything but the forms the module's docstring names."""
    if isinstance(node, ast.Constant):
        text = node.value
        # An absolute path names a folder of the author's machine, not of the project.
        return text if isinstance(text, str) and not os.path.isabs(text) and not text.startswith("~") else None
    if isinstance(node, ast.Name):
        return path if node.id == "__file__" else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # `Path(...) / "models"`
        left, right = _path_value(node.left, path, folder, aliases), _path_value(node.right, path, folder, aliases)
        return os.path.join(left, right) if left is not None and right is not None else None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        found = _path_value(node.value, path, folder, aliases)
        return os.path.dirname(os.path.join(folder, found)) if found is not None else None
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    function = _dotted_name(node.func, aliases)
    values = [_path_value(argument, path, folder, aliases) for argument in node.args]
    if function == "os.getcwd" and not values:
        return folder
    if function is None and isinstance(node.func, ast.Attribute) and node.func.attr in ("resolve", "absolute"):
        # `Path(__file__).resolve()`: the receiver must be a path itself.
        found = _path_value(node.func.value, path, folder, aliases) if not values else None
        return os.path.join(folder, found) if found is not None else None
    if not values or any(value is None for value in values):
        return None
    if function == "os.path.join":
        return os.path.join(*values)  # type: ignore[arg-type]
    if len(values) != 1:
        return None
    value: str = values[0]  # type: ignore[assignment]
    if function == "os.path.dirname":
        return os.path.dirname(value)
    if function in ("os.path.abspath", "os.path.realpath", "os.path.normpath"):
        return os.path.normpath(os.path.join(folder, value))
    if function in ("Path", "pathlib.Path", "str"):
        return value
    return None


def _dotted_name(node: ast.expr, aliases: Dict[str, str]) -> Optional[str]:
    """`os.path.join` for the expression naming it, its first name read through the file's import `aliases`; None
    for anything but names and attributes of names."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value, aliases)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def _parse(path: str, data: bytes, digest: bytes, config: "Config") -> Optional[ProjectModule]:
    # Imported here: the engine's context builds on the vocabulary, which builds on the value model.
    from torchlint.engine.context import FileContext

    try:
        text = sources.decode(data).text
        # (The parse refuses text libcst's parser could crash the process on: `parsing.check_parseable`.)
        module = parsing.TREES.parse(path, text)
    except Exception:  # an imported file that does not parse is reported when it is linted itself
        return None
    return ProjectModule(path, digest, FileContext(path, text, module, config, with_callgraph=False))


class _Folders:
    """What the folders a lookup passes hold, listed once each: most import paths (`torch.nn`, `numpy`) name no
    file of the project, which one look at the first part's entry tells, where asking the file system for every
    candidate file took a dozen `stat` calls per path."""

    def __init__(self):
        # folder -> {entry name: is a folder}; empty for a folder that does not exist
        self._entries: Dict[str, Dict[str, bool]] = {}
        # (top folder, limit) -> `python_files_under`: walked once, however many modules ask
        self._trees: Dict[Tuple[str, int], Optional[List[str]]] = {}

    def locate(self, folder: str, dotted: str, root: str, added: Tuple[str, ...] = ()) -> Optional[Tuple[str, str]]:
        """The module file `dotted` names and the name within it, imported from `folder`: from the usual places, then
        from the folders the importer's `sys.path` edits `added` (the module's docstring)."""
        found = self._locate_usual(folder, dotted, root)
        if found is None:
            for base in added:
                found = self._longest_module(base, [part for part in dotted.split(".") if part])
                if found is not None:
                    break
        return found

    def _locate_usual(self, folder: str, dotted: str, root: str) -> Optional[Tuple[str, str]]:
        level = len(dotted) - len(dotted.lstrip("."))
        parts = [part for part in dotted[level:].split(".") if part]
        if not parts:
            return None
        searched = self.search_folders(folder, level)
        for base in searched:
            found = self._longest_module(base, parts)
            if found is not None:
                return found
        if level or len(parts) < 2:
            return None
        # A dotted path through a folder (a namespace package or a package): from the folders above, up to the root.
        for base in _folders_up_to(folder, root):
            if base not in searched and self._listing(base).get(parts[0], False):
                found = self._longest_module(base, parts)
                if found is not None:
                    return found
        return None

    def _longest_module(self, base: str, parts: List[str]) -> Optional[Tuple[str, str]]:
        # The longest prefix that is a file: `pkg.model.Net` is the name Net in pkg/model.py.
        for length in range(len(parts), 0, -1):
            path = self._module_file(base, parts[:length])
            if path is not None:
                return path, ".".join(parts[length:])
        return None

    def search_folders(self, folder: str, level: int) -> List[str]:
        """The folders an import at `level` (its leading dots) is looked up from, before the folders above (`locate`)."""
        if level:  # a relative import has one base: its package, or a package above it
            for _ in range(level - 1):
                folder = os.path.dirname(folder)
            return [folder]
        found = [folder]
        while self._is_file(folder, "__init__.py"):
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
            found.append(folder)
        return found

    def _module_file(self, base: str, parts: List[str]) -> Optional[str]:
        folder = base
        for part in parts[:-1]:
            if not self._listing(folder).get(part, False):
                return None
            folder = os.path.join(folder, part)
        last = parts[-1]
        if self._is_file(folder, last + ".py"):
            return os.path.join(folder, last + ".py")
        if self._listing(folder).get(last, False) and self._is_file(os.path.join(folder, last), "__init__.py"):
            return os.path.join(folder, last, "__init__.py")
        return None

    def _is_file(self, folder: str, name: str) -> bool:
        return self._listing(folder).get(name) is False

    def listing(self, folder: str) -> Dict[str, bool]:
        """{entry name: is a folder} of `folder`, listed once; empty for a folder that does not exist."""
        return self._listing(folder)

    def python_files(self, folder: str) -> List[str]:
        """The names of the `.py` files in `folder`, sorted."""
        return sorted(name for name, is_folder in self._listing(folder).items() if not is_folder and name.endswith(".py"))

    def python_files_under(self, top: str, limit: int) -> Optional[List[str]]:
        """The paths of the `.py` files in `top` and the folders below it (but hidden ones, `.git`, `.venv`), sorted;
        None when there are more than `limit`, or a notebook (which imports as a script does)."""
        key = (top, limit)
        if key not in self._trees:
            self._trees[key] = self._python_files_under(top, limit)
        return self._trees[key]

    def _python_files_under(self, top: str, limit: int) -> Optional[List[str]]:
        found: List[str] = []
        folders = [top]
        while folders:
            folder = folders.pop()
            for name, is_folder in sorted(self._listing(folder).items()):
                if is_folder:
                    if not name.startswith(".") and name != "__pycache__":
                        folders.append(os.path.join(folder, name))
                elif name.endswith(".ipynb"):
                    return None
                elif name.endswith(".py"):
                    found.append(os.path.join(folder, name))
                    if len(found) > limit:
                        return None
        return sorted(found)

    def _listing(self, folder: str) -> Dict[str, bool]:
        found = self._entries.get(folder)
        if found is None:
            found = {}
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        try:
                            found[entry.name] = entry.is_dir()
                        except OSError:
                            continue
            except OSError:
                pass
            self._entries[folder] = found
        return found


# One per process: the pool's workers each keep their own.
PROJECT = Project()
parsing.ELSEWHERE.append(PROJECT.kept_tree)
