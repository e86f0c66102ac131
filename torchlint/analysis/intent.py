"""Where a program means to run: on CUDA machines only, or also without a GPU (TL205's project intent).

Whether code "has no CPU fallback" is a fact about the program, not one line: a helper module whose only importer
initialises NCCL never runs on a laptop. So each project is read once per process, as text (no parsing: a scan
linear in its size), for two kinds of evidence per file, the first that matches deciding:

- a CPU path: a device fallback (`"cuda" if torch.cuda.is_available() else "cpu"`);
- CUDA-only design: an NCCL backend, `assert torch.cuda.is_available()`, `torch.cuda.set_device(...)`,
  `dist.get_rank()` at module level (a program that needs a launcher), a CUDA extension (`CUDAExtension(`, `.cu`
  sources), an import at module level of a library that runs only on NVIDIA GPUs (`CUDA_ONLY_LIBRARIES`), or of a
  module that a build script anywhere in the project makes as a `CUDAExtension` (found by the extension's name:
  `extension/adjacency_matrix/setup.py` building `build_adjacency_matrix`);
- a CPU path again, weaker: a `--device` argument or `device=` parameter defaulting to `"cpu"`, `device = "cpu"`.

Not evidence: `map_location="cpu"`. A CUDA-only program loads its checkpoints on the CPU to spare GPU memory
(wvangansbeke/Unsupervised-Classification does in every script), so it says nothing of where the program runs.

A GitHub workflow of the project that calls pytest on a hosted runner (`runs-on: ubuntu-...`) or installs the CPU
torch wheel (`download.pytorch.org/whl/cpu`) is evidence of a CPU path for the project's test files.

Each scanned file also lists the project files it imports (resolved as the value model resolves them,
`PROJECT.locate`) and the names it imports from each (`prepare_task` for `from pkg.core import prepare_task`; none in
particular for `import pkg.core`, `from pkg import core` or `from pkg.core import *`, which may reach anything in the
module). A file without evidence of its own that imports a project module importing a CUDA-only library or one of
the project's CUDA extensions at its top (a CuPy kernel of the program's own, a wrapper of its `.cu` kernels) is
CUDA-only too. Else a file is judged by what reaches it (`ProjectIntent.decide`). Code inside a module-level function or class
is judged by the importers that import that function or class, or one of the file's others whose code names it, or
import the whole module and use one of them as their text shows (`Sites`, `ProjectIntent._reaching`); a package's
`__init__.py` passes the question on to its own importers: a helper that only CUDA-only programs import is not
reported merely because a test imports its module for another function. The scan is capped
(`_MAX_FILES` files, `_MAX_TOTAL_BYTES` bytes, files over `project._MAX_BYTES` skipped, hidden and environment
folders not entered), and kept in the summaries store (`Summaries.kept`) for the listing it was made from (every
scanned file's path, size and modification time), so a fresh process linting one file reads the folder's listing,
not its files. A process that outlives edits (the language server, `--watch`) keeps the scan it made first.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Dict, FrozenSet, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint import source as sources
from torchlint.analysis.file_kind import is_test_path
from torchlint.analysis.project import _MAX_BYTES, PROJECT
from torchlint.analysis.summaries import SUMMARIES
from torchlint.engine.walk import walk

if TYPE_CHECKING:
    from torchlint.config import Config
    from torchlint.engine.context import FileContext

# Libraries that run only on NVIDIA GPUs (FP8 training, fused kernels, CUDA bindings). Modules and their submodules.
CUDA_ONLY_LIBRARIES = (
    "transformer_engine", "msamp", "apex", "flash_attn", "pycuda", "cupy", "tensorrt", "torch_tensorrt", "numba.cuda",
)

CPU = "cpu"
CUDA = "cuda"
# The evidence of a module-level import of a library of `CUDA_ONLY_LIBRARIES`: its importers need a GPU too.
CUDA_ONLY_LIBRARY = "a CUDA-only library"
# ... and of a module-level import of a CUDA extension a build script of the project makes: so do its importers.
CUDA_EXTENSION_IMPORT = "an import of a CUDA extension the project builds"
# What the message calls the strongest CPU evidence: a file showing it checks for CUDA (TL205 cites it apart).
FALLBACK = "a device fallback"

_STRING = r"[\"']"
# What every pattern below that ends in a `"cpu"` string holds.
_QUOTED_CPU = ("'cpu'", '"cpu"')
# (kind, what the message says of it, pattern), in the order they decide: an explicit fallback first, then CUDA-only
# design (a program that falls back nowhere but takes a `device="cpu"` parameter somewhere is still CUDA-only), then
# the rest.
_EVIDENCE: Tuple[Tuple[str, str, "re.Pattern[str]", Tuple[str, ...]], ...] = tuple(
    # The last item: text one of which each match contains, looked for first (a plain `in` is far cheaper than a
    # search, and most files show none of it: the project scan reads every file of the project).
    (kind, what, re.compile(pattern, re.MULTILINE), needs) for kind, what, pattern, needs in (
        (CPU, FALLBACK, rf"is_available\(\)[^\n#]*\belse\b[^\n#]*{_STRING}cpu{_STRING}", ("is_available()",)),
        (CPU, FALLBACK, rf"{_STRING}cpu{_STRING}[^\n#]*\bif\b[^\n#]*\bnot\b[^\n#]*is_available\(\)", ("is_available()",)),
        (CUDA, "an NCCL process group", rf"{_STRING}nccl{_STRING}", ("nccl",)),
        (CUDA, "an assertion that CUDA is there", r"^[ \t]*assert[ \t]+torch\.cuda\.is_available\(\)", ("is_available()",)),
        (CUDA, "`torch.cuda.set_device`", r"\btorch\.cuda\.set_device\(", ("set_device(",)),
        (CUDA, "a process rank read at import", r"^(?:\w+[ \t]*=[ \t]*)?(?:dist|torch\.distributed)\.get_rank\(\)", ("get_rank()",)),
        (CUDA, "a CUDA extension", rf"\bCUDAExtension\(|{_STRING}[\w/.-]+\.cuh?{_STRING}",
         ("CUDAExtension(", ".cu'", '.cu"', ".cuh'", '.cuh"')),
        (CUDA, CUDA_ONLY_LIBRARY, r"^(?:import|from)[ \t]+(?:%s)\b" % "|".join(
            re.escape(library) for library in CUDA_ONLY_LIBRARIES), CUDA_ONLY_LIBRARIES),
        (CPU, "a `--device` default of \"cpu\"", rf"add_argument\([^\n]*device[^\n]*default[ \t]*=[ \t]*{_STRING}cpu{_STRING}", _QUOTED_CPU),
        (CPU, "a `device` parameter defaulting to \"cpu\"",
         rf"^[ \t]*def[ \t][^\n]*\bdevice[ \t]*(?::[^=\n]*)?=[ \t]*{_STRING}cpu{_STRING}", _QUOTED_CPU),
        (CPU, "a `device` parameter defaulting to \"cpu\"", rf"^[ \t]*device[ \t]*:[^=\n]*=[ \t]*{_STRING}cpu{_STRING}[ \t]*,?[ \t]*(?:#.*)?$", _QUOTED_CPU),
        (CPU, "a `device = \"cpu\"` setting",
         rf"^[ \t]*(?:self\.)?device[ \t]*=[ \t]*(?:torch\.device\()?{_STRING}cpu{_STRING}\)?[ \t]*(?:#.*)?$", _QUOTED_CPU),
    )
)
# Where the weaker CPU paths begin in `_EVIDENCE`: an import of a project's CUDA extension decides before them.
_WEAK_CPU_FROM = next(index for index, (kind, what, _, _) in enumerate(_EVIDENCE) if kind == CPU and what != FALLBACK)
# The module a build script makes as a CUDA extension: `CUDAExtension("pkg._C", ...)`, `CUDAExtension(name="pkg._C", ...)`.
_CUDA_EXTENSION_NAME = re.compile(rf"\bCUDAExtension\(\s*(?:name\s*=\s*)?{_STRING}([\w.]+){_STRING}")
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)|import[ \t]+([^\n#;]+))", re.MULTILINE
)


def _import_statements(text: str) -> Iterator["re.Match[str]"]:
    """`_IMPORT.finditer(text)`, tried only where it can match: every import statement holds the word `import` on the
    line it starts, so only the starts of those lines are tried, where the regex alone tries every position of the
    file (its `^` is no literal the regex engine can jump to). Matches are taken in order and do not overlap, as
    `finditer` takes them (an import list in brackets may run over several lines)."""
    end = 0
    for start in _starts_of_lines_holding("import", text):
        if start >= end:
            found = _IMPORT.match(text, start)
            if found is not None:
                yield found
                end = found.end()


_CI_PYTEST = re.compile(r"\bpytest\b")
_CI_CPU = re.compile(
    r"download\.pytorch\.org/whl/cpu|torch[^\s]*\+cpu|^[ \t]*runs-on:[ \t]*\[?[ \t]*[\"']?(?:ubuntu|macos|windows)-[\w.]+[\"']?[ \t]*\]?[ \t]*$",
    re.MULTILINE,
)

# The shape of the stored scan: a scan kept in another shape is a miss in the store, made again and kept anew.
_FORMAT = 3
_MAX_FILES = 3000
_MAX_TOTAL_BYTES = 30_000_000
# How many importers deep, and how many files at most, `decide` follows what reaches a file.
_MAX_REACH_DEPTH = 6
_MAX_REACH_FILES = 200
# How many whole-module imports down a CUDA-only import is looked for (`_imports_cuda_only_module`).
_MAX_WHOLE_IMPORT_DEPTH = 3
_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg", ".github")
_SKIPPED_FOLDERS = frozenset({"node_modules", "site-packages", "__pycache__", "build", "dist", "venv", "env"})


class Evidence(NamedTuple):
    """One piece of evidence: its kind (`CPU`, `CUDA`), what it is, the text that shows it, and where."""

    kind: str
    what: str
    text: str
    path: str
    line: int

    def describe(self, root: str) -> str:
        text = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        # A notebook's line is one of its code cells joined, which no editor shows: its name says enough.
        line = "" if self.path.endswith(".ipynb") else f":{self.line}"
        return f"{self.what}, `{text}` in {os.path.relpath(self.path, root)}{line}"


class Verdict(NamedTuple):
    """Whether the file's hard-coded CUDA is to be reported, and the evidence that decided it (None: no evidence)."""

    report: bool
    evidence: Optional[Evidence]


def evidence_in(text: str, path: str, extensions: FrozenSet[str] = frozenset()) -> Optional[Evidence]:
    """The evidence a file's text shows (the first kind of `_EVIDENCE` that matches, at its first match), an import
    at its top of one of `extensions` (the CUDA extensions its project builds) counting as CUDA-only design, after
    the other CUDA-only evidence and before the weaker CPU paths."""
    # Several kinds need the same text (`is_available()`, a quoted "cpu"): where it occurs is found once.
    lines_holding: Dict[str, List[int]] = {}
    for index, (kind, what, pattern, needs) in enumerate(_EVIDENCE):
        if index == _WEAK_CPU_FROM and extensions:
            found = _imports_cuda_extension(text, path, extensions)
            if found is not None:
                return found
        found = _first_match(pattern, needs, text, lines_holding)
        if found is not None:
            start, matched = found
            return Evidence(kind, what, matched.strip(), path, text.count("\n", 0, start) + 1)
    return None


def _first_match(
    pattern: "re.Pattern[str]", needs: Tuple[str, ...], text: str, lines_holding: Optional[Dict[str, List[int]]] = None,
) -> Optional[Tuple[int, str]]:
    """Where `pattern` first matches in `text`, and what it matches, searched only in the lines that hold one of
    `needs`: every pattern of `_EVIDENCE` matches within one line (none matches a line break) and every match holds
    one of its needs, so the first match is on the first such line where the pattern matches (a search of the whole
    text tried the pattern at every character of the scan's every file). `lines_holding`: the starts of the lines
    holding each need, found so far in this text."""
    known = {} if lines_holding is None else lines_holding
    starts = set()
    for need in needs:
        found = known.get(need)
        if found is None:
            found = known[need] = _starts_of_lines_holding(need, text)
        starts.update(found)
    for start in sorted(starts):
        end = text.find("\n", start)
        found = pattern.search(text[start:end] if end >= 0 else text[start:])
        if found is not None:
            return start + found.start(), found.group(0)
    return None


def _starts_of_lines_holding(need: str, text: str) -> List[int]:
    """Where each line of `text` that holds `need` starts, in order (once per line)."""
    found = []
    position = text.find(need)
    while position >= 0:
        found.append(text.rfind("\n", 0, position) + 1)
        end = text.find("\n", position)
        position = text.find(need, end + 1) if end >= 0 else -1
    return found


def names_module(built: str, imported: str) -> bool:
    """The import path names the extension module `built`: `import pkg._C` / `from pkg._C import f` / `from . import
    _C` name `pkg._C`."""
    if imported == built or imported.startswith(built + "."):
        return True
    if not imported.startswith("."):
        return False
    parts, ends = imported.lstrip(".").split("."), built.split(".")
    return any(parts[:count] == ends[-count:] for count in range(1, min(len(parts), len(ends)) + 1))


def _imports_cuda_extension(text: str, path: str, extensions: FrozenSet[str]) -> Optional[Evidence]:
    """An import at the top of the file (at column 0: not in a function, a branch or a `try`, which may fall back) of
    a module of `extensions`: without CUDA the import fails (the extension links torch's CUDA library). An absolute
    path that names a Python file of the project is that file, not the extension."""
    for found in _import_statements(text):
        if found.group(0)[:1] in " \t":
            continue
        for imported, _ in _items_of(found):
            if not any(names_module(built, imported) for built in extensions):
                continue
            if not imported.startswith("."):
                located = PROJECT.locate(path, imported)
                if located is not None and not located[1]:
                    continue
            return Evidence(CUDA, CUDA_EXTENSION_IMPORT, found.group(0).strip(), path, text.count("\n", 0, found.start()) + 1)
    return None


class ProjectIntent:
    """The evidence of each file of one project, who imports whom (and which names), and the evidence of its CI."""

    def __init__(self, root: str, evidence: Dict[str, Evidence],
                 importers: Dict[str, Dict[str, Optional[Tuple[str, ...]]]], ci: Optional[Evidence],
                 digests: Dict[str, bytes], extensions: Dict[str, str]):
        self.root = root
        self.evidence = evidence
        # the module names of the project's CUDA extensions -> the build script that makes each
        self.extensions = extensions
        # file -> the project files that import it -> the names each imports from it (None: the whole module)
        self.importers = importers
        self.ci = ci
        self.digests = digests
        # importer -> the project files it imports (`importers` turned round), on first need
        self.imported: Optional[Dict[str, List[str]]] = None

    def evidence_in(self, text: str, filename: str) -> Optional[Evidence]:
        """The evidence of a file of the project, as the scan reads it (`evidence_in`, with the project's extensions)."""
        return evidence_in(text, filename, frozenset(self.extensions))

    def decide(self, filename: str, own: Optional[Evidence], definitions: Optional[FrozenSet[str]] = None) -> Verdict:
        """Whether hard-coded CUDA in `filename` (whose own evidence is `own`) runs where the program means to run
        without a GPU. Its own evidence decides first; a test file, where CI runs the tests on CPUs; then what reaches
        it: importers followed up `_MAX_REACH_DEPTH` deep until each route meets evidence. Not reported when every
        route ends at CUDA-only evidence (a helper module of a CUDA-only program); reported when one meets a CPU path,
        or one ends at a file that shows neither (an entry point nothing tells about: reported as without intent).

        `definitions`, the module-level functions and classes through which the code is reached (`Sites.reaching`),
        narrow the first step to the importers that import one of them or the whole module (a test importing
        `create_label` never runs `prepare_task`); where none does, the code is reached some way the scan does not see,
        and every importer counts.
        Each file whose evidence decided is recorded as read, so a cached result is checked against it, and so is
        every importer of the file when it is not reported (one may come to import the definition)."""
        path = os.path.abspath(filename)
        if own is not None:
            return Verdict(own.kind == CPU, own)
        if self.ci is not None and is_test_path(path):
            return self._cited(Verdict(True, self.ci))
        library, looked_at = self._imports_cuda_only_module(path)
        if library is not None:
            return self._cited(Verdict(False, library), looked_at)
        # Whatever is decided below also rests on none of those modules importing a CUDA-only one.
        self._depend_on(looked_at)
        importers = self.importers.get(path, {})
        # Files whose text `_reaching` read to narrow a route: a cached result depends on them too.
        read: Set[str] = set()
        paths = None if definitions is None else frozenset((name,) for name in definitions)
        seen = {path}
        pending = self._reaching(path, paths, 1, read)
        cuda: Optional[Evidence] = None
        unknown = not pending
        while pending and len(seen) < _MAX_REACH_FILES:
            importer, depth, reached = pending.pop(0)
            if importer in seen:
                continue
            seen.add(importer)
            found = self.evidence.get(importer)
            if found is None and self.ci is not None and is_test_path(importer):
                found = self.ci
            if found is not None and found.kind == CPU:
                return self._cited(Verdict(True, found))
            if found is not None:
                cuda = cuda or found
                continue
            above = self.importers.get(importer, {})
            if not above or depth >= _MAX_REACH_DEPTH:
                unknown = True
            else:
                pending.extend(self._reaching(importer, reached, depth + 1, read))
        if pending:  # too many files to follow: as without intent
            unknown = True
        if cuda is not None and not unknown:
            return self._cited(Verdict(False, cuda), {*seen, *importers, *read})
        return Verdict(True, None)

    def _imports_cuda_only_module(self, path: str) -> Tuple[Optional[Evidence], Set[str]]:
        """The evidence of a project module `path` imports that imports a CUDA-only library or a CUDA extension of
        the project at its top (a CuPy kernel of the program's own, `correlation.py` doing `import cupy`; a wrapper
        of the project's `.cu` kernels): the program cannot do its work without a GPU. With the modules looked at,
        which the answer depends on."""
        if self.imported is None:
            self.imported = {}
            for module, importers in self.importers.items():
                for importer in importers:
                    self.imported.setdefault(importer, []).append(module)
        # A module imported whole (`import common`, `from common import *`) runs its own imports first: a project
        # module it imports that way counts as well, a bounded number of steps down.
        pending = [(module, path, 1) for module in sorted(self.imported.get(path, ()))]
        seen = {path}
        while pending:
            module, importer, depth = pending.pop(0)
            if module in seen:
                continue
            seen.add(module)
            found = self.evidence.get(module)
            if found is not None and found.what in (CUDA_ONLY_LIBRARY, CUDA_EXTENSION_IMPORT):
                return found, seen
            imported_whole = self.importers.get(module, {}).get(importer, ()) is None
            if imported_whole and depth < _MAX_WHOLE_IMPORT_DEPTH:
                pending += [(below, module, depth + 1) for below in sorted(self.imported.get(module, ()))]
        return None, seen

    def _reaching(
        self, module: str, paths: Optional[FrozenSet[Tuple[str, ...]]], depth: int, read: Set[str],
    ) -> List[Tuple[str, int, Optional[FrozenSet[Tuple[str, ...]]]]]:
        """The importers of `module` through which the code is reached, each with the paths of names in it that reach
        the code (None: any of its code may). `paths` are those of `module` (`("barrier",)`; `("distributed",
        "barrier")` in a package's `__init__.py` doing `from . import distributed`). An importer counts when it imports
        one of the first names, or the whole module and uses one of the paths, as its text shows (`utils.distributed
        .barrier`, or `utils.distributed` passed on whole: `_uses_paths`). A package's `__init__.py` re-exports what it
        imports, so its importers are narrowed again to the names it binds; any other importer's code may reach it
        anywhere. Where none counts, the code is reached some way the scan does not see, and every importer counts."""
        importers = self.importers.get(module, {})
        if paths is None:
            return [(importer, depth, None) for importer in importers]
        found = []
        for importer, names in importers.items():
            re_exports = os.path.basename(importer) == "__init__.py"
            if names is not None:
                reached = frozenset(each for each in paths if each[0] in names)
                if reached:
                    found.append((importer, depth, reached if re_exports else None))
                continue
            read.add(importer)
            bound = _whole_module_names(importer, module)
            if bound is None:
                found.append((importer, depth, None))
            elif re_exports and len(bound) == 1 and "." not in next(iter(bound)):
                found.append((importer, depth, frozenset((next(iter(bound)),) + each for each in paths)))
            elif _uses_paths(importer, bound, paths):
                found.append((importer, depth, None))
        return found or [(importer, depth, None) for importer in importers]

    def _cited(self, verdict: Verdict, followed=()) -> Verdict:
        evidence = verdict.evidence
        # An import of an extension is evidence while a build script makes it: the result depends on those too.
        builds = set(self.extensions.values()) if evidence is not None and evidence.what == CUDA_EXTENSION_IMPORT else set()
        self._depend_on({*followed, *builds, *([evidence.path] if evidence is not None else [])})
        return verdict

    def _depend_on(self, paths) -> None:
        """A result kept for the next run holds while these project files stay as they were read."""
        for path in paths:
            digest = self.digests.get(path)
            if digest is not None:
                PROJECT.record(path, digest)


class Sites:
    """The verdicts of one file's sites: `ProjectIntent.decide` for the file, and where the file's importers decided
    and one of them reports it, again for the module-level function or class each site lies in (once per definition)."""

    def __init__(self, intent: ProjectIntent, ctx: "FileContext", own: Optional[Evidence]):
        self.intent = intent
        self.ctx = ctx
        self.own = own
        self.whole = intent.decide(ctx.filename, own)
        path = os.path.abspath(ctx.filename)
        # Reported, as its importers decided (no evidence of its own, not a test file that CI decides): where every
        # importer ends at CUDA-only evidence, so do those of each definition. One importer narrows too where it
        # imports the whole module (it may use none of a definition, or re-export it from a package).
        importers = intent.importers.get(path, {})
        self.by_definition = (
            self.whole.report and own is None and not (intent.ci is not None and is_test_path(path))
            and (len(importers) > 1 or None in importers.values())
        )
        self.verdicts: Dict[Optional[FrozenSet[str]], Verdict] = {None: self.whole}
        # name -> the module-level definitions whose code names it (None: code at module level), on first need
        self.mentions: Optional[Dict[str, Set[Optional[str]]]] = None

    def verdict(self, site: cst.CSTNode) -> Verdict:
        if not self.by_definition:
            return self.whole
        names = self.reaching(self.ctx.stack_to(site))
        found = self.verdicts.get(names)
        if found is None:
            found = self.verdicts[names] = self.intent.decide(self.ctx.filename, self.own, names)
        return found

    def reaching(self, stack: Sequence[cst.CSTNode]) -> Optional[FrozenSet[str]]:
        """The names through which an importer reaches the code at the end of `stack`: the module-level function or
        class it lies in, and those of the file whose code names one of them, and so on (`MatchingNetwork` building an
        `AttentionLSTM`: `forward` of the latter runs wherever the former is used). None for code at module level,
        or for a definition module-level code names (`prepare = prepare_task`, `main()` under a `__main__` guard):
        every importer reaches it."""
        outermost = next((node for node in stack if type(node) in _DEFINITIONS), None)
        if outermost is None:
            return None
        if self.mentions is None:
            self.mentions = _mentions(self.ctx.module)
        names = {outermost.name.value}
        pending = [outermost.name.value]
        while pending:
            for holder in self.mentions.get(pending.pop(), ()):
                if holder is None:
                    return None
                if holder not in names:
                    names.add(holder)
                    pending.append(holder)
        return frozenset(names)


_DEFINITIONS = (cst.FunctionDef, cst.ClassDef)


def _mentions(module: cst.Module) -> Dict[str, Set[Optional[str]]]:
    """Each name the module's code holds (read, bound, an attribute's: more than it reads, which only widens who reaches
    a definition; not a plain name module-level code assigns to), with the names of the outermost functions and
    classes it is in (None for code at module level): one walk, for every definition of the file at once."""
    mentions: Dict[str, Set[Optional[str]]] = {}
    outermost: List[str] = []
    # ids of the names module-level code only assigns to (`barrier = dummy` in the branch without torch.distributed):
    # binding the name runs nothing of a definition spelled alike.
    targets: Set[int] = set()

    def on_visit(node: cst.CSTNode) -> bool:
        if type(node) is cst.Name:
            if id(node) not in targets:
                mentions.setdefault(node.value, set()).add(outermost[0] if outermost else None)
        elif type(node) is cst.AssignTarget:
            if not outermost and type(node.target) is cst.Name:
                targets.add(id(node.target))
        elif type(node) in _DEFINITIONS:
            outermost.append(node.name.value)
        return True

    def on_leave(node: cst.CSTNode) -> None:
        if type(node) in _DEFINITIONS:
            outermost.pop()

    walk(module, on_visit, on_leave)
    return mentions


# project root -> its intent, for this process
_INTENTS: Dict[str, ProjectIntent] = {}


def project_intent(filename: str, config: "Config") -> ProjectIntent:
    """The intent of the project `filename` belongs to (`project_root`), scanned once per process."""
    root = project_root(filename, str(config.root))
    found = _INTENTS.get(root)
    if found is None:
        found = _INTENTS[root] = _scan(root)
    return found


def project_root(filename: str, configured: str) -> str:
    """The nearest folder above the file with a project marker (`.git`, `pyproject.toml`, `setup.py`, ...), or the
    configured project root, whichever comes first; but never one the file is hidden from (a folder on the way whose
    name starts with a dot, or an environment's: `.cache/training/...` vendored under a project is a project of its
    own, rooted just below that folder). Without any, the file's folder."""
    folder = os.path.dirname(os.path.abspath(filename))
    configured = os.path.abspath(configured)
    current, child = folder, None
    while True:
        name = os.path.basename(current)
        if child is not None and (name.startswith(".") or name in _SKIPPED_FOLDERS):
            return child
        if current == configured or any(os.path.exists(os.path.join(current, marker)) for marker in _MARKERS):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return folder
        current, child = parent, current


def _listing(root: str) -> Tuple[List[Tuple[str, int]], List[str]]:
    """The project's Python files (with their sizes) and GitHub workflow files, within the caps, in a stable order."""
    files: List[Tuple[str, int]] = []
    total = 0
    folders = [root]
    while folders and len(files) < _MAX_FILES:
        folder = folders.pop(0)
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not entry.name.startswith(".") and entry.name not in _SKIPPED_FOLDERS:
                        folders.append(entry.path)
                elif entry.name.endswith(".py") and entry.is_file():
                    size = entry.stat().st_size
                    if size <= _MAX_BYTES and total + size <= _MAX_TOTAL_BYTES and len(files) < _MAX_FILES:
                        files.append((entry.path, entry.stat().st_mtime_ns))
                        total += size
            except OSError:
                continue
    workflows_folder = os.path.join(root, ".github", "workflows")
    try:
        workflows = sorted(
            entry.path for entry in os.scandir(workflows_folder) if entry.name.endswith((".yml", ".yaml")) and entry.is_file()
        )
    except OSError:
        workflows = []
    return files, workflows


def _scan(root: str) -> ProjectIntent:
    files, workflows = _listing(root)
    digest = hashlib.blake2b(marshal.dumps((_FORMAT, files, workflows)), digest_size=16).digest()
    found = SUMMARIES.kept(os.path.join(root, ".torchlint-project-intent"), digest, lambda: _read(root, files, workflows))
    if not _well_formed(found):
        found = _read(root, files, workflows)
    evidence, importers, ci, digests, extensions = found
    return ProjectIntent(
        root, {path: Evidence(*item) for path, item in evidence.items()}, importers,
        Evidence(*ci) if ci is not None else None, digests, extensions,
    )


def _read(root: str, files: List[Tuple[str, int]], workflows: List[str]) -> tuple:
    """What the scan keeps, in plain values `marshal` writes: evidence by file, importers by file (with the names each
    imports, `ProjectIntent.importers`), the CI evidence, the digests of the files read and the project's CUDA
    extensions (`ProjectIntent.extensions`), found first: an import of one is evidence in any file."""
    evidence: Dict[str, tuple] = {}
    # imported file -> importer -> the names it imports from it; None once it imports the whole module
    importers: Dict[str, Dict[str, Optional[set]]] = {}
    digests: Dict[str, bytes] = {}
    # The names an absolute import must start with to name a file of the project (a module's or a folder's): the
    # others (`torch`, `numpy`, ...) are not looked up.
    local_names = {
        part for path, _ in files
        for part in os.path.splitext(os.path.relpath(path, root))[0].split(os.sep)
    }
    texts: List[Tuple[str, str]] = []
    extensions: Dict[str, str] = {}
    for path, _ in files:
        try:
            data = sources.read_bytes(path)
        except OSError:
            continue
        digests[path] = sources.content_digest(data)
        text = data.decode("utf-8", "replace")
        texts.append((path, text))
        if "CUDAExtension(" in text:
            for built in _CUDA_EXTENSION_NAME.finditer(text):
                extensions.setdefault(built.group(1), path)
    built_names = frozenset(extensions)
    for path, text in texts:
        found = evidence_in(text, path, built_names)
        if found is not None:
            evidence[path] = tuple(found)
        for dotted in _imported_paths(text):
            if not dotted.startswith(".") and dotted.partition(".")[0] not in local_names:
                continue
            located = PROJECT.locate(path, dotted)
            if located is None or located[0] == path:
                continue
            names = importers.setdefault(os.path.abspath(located[0]), {})
            name = located[1].partition(".")[0]
            if not name:
                names[path] = None
            elif names.setdefault(path, set()) is not None:
                names[path].add(name)
    return evidence, {
        path: {importer: None if names is None else tuple(sorted(names)) for importer, names in sorted(found.items())}
        for path, found in importers.items()
    }, _ci_evidence(workflows), digests, extensions


def _ci_evidence(workflows: List[str]) -> Optional[tuple]:
    """A workflow that calls pytest on a GitHub-hosted runner or with the CPU torch wheel: the tests run without a GPU."""
    for path in workflows:
        try:
            text = sources.read_bytes(path).decode("utf-8", "replace")
        except OSError:
            continue
        if len(text) > _MAX_BYTES or _CI_PYTEST.search(text) is None:
            continue
        found = _CI_CPU.search(text)
        if found is not None:
            return (CPU, "CI running the tests without a GPU", found.group(0).strip(), path, text.count("\n", 0, found.start()) + 1)
    return None


def _imported_items(text: str) -> Iterator[Tuple[str, Optional[str]]]:
    """Each name a file's import statements bind, as its import path and the local name (`pkg.mod.name`, `.name`;
    `c` for `import pkg.core as c`); a star import as its module and None."""
    for found in _import_statements(text):
        yield from _items_of(found)


def _items_of(found: "re.Match[str]") -> Iterator[Tuple[str, Optional[str]]]:
    """The names one import statement `_IMPORT` matched binds, as `_imported_items` gives them."""
    module, names, plain = found.groups()
    if plain is not None:
        for part in plain.split(","):
            words = part.split()
            if words:
                yield words[0], words[-1]
        return
    for part in names.strip("()").replace("\\", " ").split(","):
        words = part.split()
        if not words:  # after a trailing comma
            continue
        if words[0] == "*":
            yield module, None
            continue
        yield (module + words[0] if module.endswith(".") or not module else f"{module}.{words[0]}"), words[-1]


def _imported_paths(text: str) -> List[str]:
    """The module paths a file's import statements name, as `TL205`'s import paths (`pkg.mod.name`, `.name`)."""
    return [path for path, local in _imported_items(text) if local is not None or path.strip(".")]


# Kept for the process, as the scan is (a process that outlives edits keeps what it read first): each definition of a
# file with sites asks of the same importers.
@lru_cache(maxsize=256)
def _text_of(path: str) -> Optional[str]:
    """A project file's text, as the scan reads it; None when it cannot be read or is over `_MAX_BYTES`."""
    try:
        data = sources.read_bytes(path)
    except OSError:
        return None
    return data.decode("utf-8", "replace") if len(data) <= _MAX_BYTES else None


@lru_cache(maxsize=1024)
def _whole_module_names(importer: str, module: str) -> Optional[FrozenSet[str]]:
    """The names (dotted for `import pkg.core`) under which `importer` binds the project file `module` as a whole
    (`distributed` for `from . import distributed`, `utils` for `import utils`, `c` for `import pkg.core as c`);
    None when its text cannot be read, or it star-imports the module (its names are bound one by one)."""
    text = _text_of(importer)
    if text is None:
        return None
    bound: Set[str] = set()
    for dotted, local in _imported_items(text):
        if PROJECT.locate(importer, dotted) == (module, ""):
            if local is None:  # a star import
                return None
            bound.add(local)
    return frozenset(bound) or None


def _uses_paths(importer: str, bound: FrozenSet[str], paths: FrozenSet[Tuple[str, ...]]) -> bool:
    """`importer`'s text uses one of `paths` of a module it binds under one of `bound`: a use `bound.a.b` whose
    attribute chain and a path agree as far as both go (`utils.distributed.barrier()` or `utils.distributed`
    passed on whole for `("distributed", "barrier")`; not `utils.distributed.all_reduce_mean(...)` nor `utils.io`).
    The import lines themselves are no use."""
    text = _text_of(importer)
    if text is None:
        return True
    statements = {found.start() for found in _import_statements(text)}
    for name in bound:
        for found in re.finditer(r"(?<![\w.])%s\b((?:[ \t]*\.[ \t]*\w+)*)" % re.escape(name), text):
            line_start = text.rfind("\n", 0, found.start()) + 1
            if line_start in statements or text[line_start:found.start()].strip().startswith(("import ", "from ")):
                continue
            chain = tuple(part.strip() for part in found.group(1).split(".")[1:])
            if any(chain[:len(each)] == each[:len(chain)] for each in paths):
                return True
    return False


def _well_formed(found: object) -> bool:
    """The stored scan has the shapes `_scan` reads (one from elsewhere, or damaged, is made again)."""
    if not (isinstance(found, tuple) and len(found) == 5):
        return False
    evidence, importers, ci, digests, extensions = found
    return (
        isinstance(evidence, dict) and all(isinstance(item, tuple) and len(item) == 5 for item in evidence.values())
        and isinstance(importers, dict) and all(
            isinstance(item, dict) and all(names is None or isinstance(names, tuple) for names in item.values())
            for item in importers.values()
        )
        and (ci is None or isinstance(ci, tuple) and len(ci) == 5) and isinstance(digests, dict)
        and isinstance(extensions, dict) and all(isinstance(path, str) for path in extensions.values())
    )
