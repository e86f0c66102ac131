"""What an imported project file holds, for the questions other files ask of it.

Two kinds of summary live here.

The call graph with facts. A rule that meets a call of a function imported from a project
file (`from data import train_epoch`, found by the value model) asks `function_facts(origin)`:
the same facts ("starts-workers", "clears-grad", ...) the engine notes while walking a
linted file, for the imported file, built by one walk of it on first use and kept with its
parsed module (`analysis/project.py`), so a second importer reads them for free. The walk is
a plain one, not the engine's: the engine's walker lives in the runner, which imports the
rules, and the rules import this module; and an imported file needs the recognizers only,
not the rules' dispatch the runner's walk is tuned for.

The module summary (`ModuleSummary`), written to the cache. A fresh process that lints one
file (pre-commit, a CI step on the changed files) would otherwise parse every project file
that file imports, to answer questions most of which come out "no": is the imported base class
`BaseDataset` an `nn.Module`? Does the imported `run()` start DataLoader workers? The summary
records, for each module-level name, what the value model would follow it to (an import path,
the classes and functions that define it, or "a value": anything else), for each class what
its bases are, and for each function the facts it shows within `function_facts`'s reach. It is
a plain structure, written with `marshal` next to the cached findings and found by the file's
path and content digest (`cache.SummaryStore`), with the project files its facts were read
from and their digests: when one of those changes, it is built again.

The names, bases and facts only ever say "certainly not" (`no_module_class`, `shows_no_fact`):
when they cannot tell (a name bound by a value, a base that is a torch layer, a function that
shows the fact), the question goes to the value model and the parsed file, as before. A
section (`Summaries.section`) keeps what its rule computed from the file, the computation the
rule makes on the parsed file without a store. So an answer from a summary is the answer the
tree would give. Summaries are used only where findings are cached
(the command line without `--no-cache`): a run without a cache would parse the file to build
the summary and gain nothing.
"""

from __future__ import annotations

import marshal
import os
import re
from typing import TYPE_CHECKING, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

import libcst as cst

from torchlint.analysis import syntax
from torchlint.analysis.file_kind import FileKind
from torchlint.analysis.project import PROJECT
from torchlint.analysis import values
from torchlint.analysis.values import Values
from torchlint.cache import SummaryStore
from torchlint.engine import context
from torchlint.engine.callgraph import CallGraph
# Filled by analysis/facts.py and the families' _facts.py, which the rules asking these questions import.
from torchlint.engine.facts import RECOGNIZERS
from torchlint.engine.scopes import SCOPE_TYPES, scope_nodes_of
from torchlint.engine.walk import STATEMENT_TYPES, walk

if TYPE_CHECKING:
    from torchlint.analysis.project import ProjectModule
    from torchlint.analysis.values import Origin
    from torchlint.config import Config
    from torchlint.engine.context import FileContext


# The files being summarised now: a file that imports one that imports it back sees no facts the second time.
_IN_PROGRESS: Set[int] = set()


class _FactGraph:
    """One imported file's call graph with facts (`ctx.shared(_FactGraph)`), and the other project files its walk
    read (a worker count imported from a `settings.py`): its facts hold while those keep their bytes."""

    def __init__(self, ctx: "FileContext"):
        graph = ctx.callgraph = CallGraph()
        stack, scope_nodes = ctx.stack, ctx.scope_nodes

        def on_visit(node: cst.CSTNode) -> bool:
            stack.append(node)
            if type(node) in SCOPE_TYPES:
                scope_nodes.append(node)
                if type(node) is cst.FunctionDef:
                    graph.key_of(node, scope_nodes)
            for recognizer in RECOGNIZERS.get(type(node), ()):
                fact = recognizer(node, ctx)
                if fact:
                    graph.add_fact(fact, node, scope_nodes)
            if type(node) is cst.Call:
                callee = graph.callee_key(node, stack)
                if callee:
                    graph.add_call(node, callee, stack, scope_nodes)
            return True

        def on_leave(node: cst.CSTNode) -> None:
            stack.pop()
            if scope_nodes and scope_nodes[-1] is node:
                scope_nodes.pop()

        self.graph = graph
        _IN_PROGRESS.add(id(ctx))
        try:
            with PROJECT.recording() as read:
                walk(ctx.module, on_visit, on_leave)
        finally:
            _IN_PROGRESS.discard(id(ctx))
        self.read: Dict[str, bytes] = {path: digest for path, digest in read.items() if path != ctx.filename}


def _fact_graph(ctx: "FileContext") -> _FactGraph:
    """The file's fact graph, built again when a file its walk read has changed since (a process that outlives an
    edit: `--watch`). Checking them records them as read by the current lint and by any summary being built,
    whose answers depend on them however long ago the graph was built."""
    found = ctx.shared(_FactGraph)
    if not PROJECT.unchanged(found.read.items()):
        found = ctx.renew_shared(_FactGraph)
    return found


# How far `function_facts` follows a function's calls in its file.
_FACTS_DEPTH = 8


def function_facts(function: "Origin", fact: str) -> List[cst.CSTNode]:
    """The nodes showing `fact` in the function `function` (an origin in an imported project file) or in the
    functions of that file it calls, `_FACTS_DEPTH` calls deep; [] for a function of the linted file itself."""
    ctx = function.place.context
    if type(function.node) is not cst.FunctionDef or id(ctx) in _IN_PROGRESS:
        return []
    found = _fact_graph(ctx)
    key = found.graph.key_of(function.node, function.place.scopes + (function.node,))
    with PROJECT.recording() as read:
        nodes = found.graph.facts_of(key, fact, _FACTS_DEPTH)
    # A deferred fact judged now read its files now: the graph's facts hold while those keep their bytes too.
    found.read.update((path, digest) for path, digest in read.items() if path != ctx.filename)
    return nodes


def imported_function_showing(ctx: "FileContext", func: cst.BaseExpression, stack, fact: str) -> Optional[Tuple["Origin", str]]:
    """The function of another project file that `func` (a callee evaluated inside `stack`) names, and its name, when
    it shows `fact` (`function_facts`)."""
    values = Values.of(ctx)
    path = values.import_path(func, scope_nodes_of(stack))
    if path is not None and shows_no_fact(ctx, path, fact):
        return None
    found = imported_function(values.origins(func, stack), ctx)
    return found if found is not None and function_facts(found[0], fact) else None


def imported_function(origins: List["Origin"], ctx: "FileContext") -> Optional[Tuple["Origin", str]]:
    """The function of another project file among `origins` (what a callee name may be), and its name."""
    for origin in origins:
        if type(origin.node) is cst.FunctionDef and origin.place.context is not ctx:
            return origin, origin.node.name.value
    return None


# ---------------------------------------------------------------- module summaries

# A base or a name as the summary refers to it: ("name", local name), ("import", import path) or ("none",) for one the
# value model follows to nothing (a call, an attribute of something not imported).
Reference = Tuple[str, ...]


class ModuleSummary(NamedTuple):
    """What a project file's module-level names are, in plain values `marshal` writes.

    `names`: name -> ("import", import path), ("defined", indices into `definitions`) or ("value",) when any binding
    assigns a value (the summary does not follow values); a name bound nowhere in the module is absent.
    `definitions`: ("class", ((qualified name of a base or "", its Reference), ...)), ("function", facts) or
    ("other",). `sections`: what a rule asked of the file through `Summaries.section`, by the name it gave.
    `dependencies`: (path, digest) of each other project file read to build any of it.
    """

    names: Dict[str, tuple]
    definitions: Tuple[tuple, ...]
    sections: Dict[str, object]
    dependencies: Tuple[Tuple[str, bytes], ...]


def summarise(ctx: "FileContext") -> Optional[ModuleSummary]:
    """The summary of a parsed project file; None while its call graph is being built (a file that imports itself
    back), or when building it fails: it walks more of the file than a lint's questions may (every function's
    facts), and what the tree path would not have met must not end the lint (a cycle of imports too deep to follow)."""
    if id(ctx) in _IN_PROGRESS:
        return None
    try:
        return _summarise(ctx)
    except Exception:  # RecursionError included: the questions then go to the tree, as without a summary
        return None


def _summarise(ctx: "FileContext") -> ModuleSummary:
    module = ctx.module
    scope = ctx.scopes.scope_of(module)
    values = Values.of(ctx)
    flow = values.flow(module)
    graph: Optional[CallGraph] = None
    definitions: List[tuple] = []
    indices: Dict[int, int] = {}
    names: Dict[str, tuple] = {}
    with PROJECT.recording() as read:
        _record_star_dependencies(ctx)
        for name in sorted(scope.imports.keys() | scope.variables):
            if name in scope.imports:  # as `Values._name`: an import hides the name's other bindings
                names[name] = ("import", scope.imports[name])
                continue
            defined: Optional[List[int]] = []
            for binding in flow.reaching(name, None):
                if binding.definition is not None:
                    if id(binding.definition) not in indices:
                        if type(binding.definition) is cst.FunctionDef and graph is None:
                            graph = _fact_graph(ctx).graph
                        indices[id(binding.definition)] = len(definitions)
                        definitions.append(_definition(binding.definition, ctx, values, graph))
                    defined.append(indices[id(binding.definition)])
                elif binding.value is not None:
                    defined = None
                    break
            names[name] = ("defined", tuple(defined)) if defined is not None else ("value",)
    return ModuleSummary(names, tuple(definitions), {}, _dependencies(read, ctx.filename))


def _dependencies(read: Dict[str, bytes], own: str, earlier: Tuple[Tuple[str, bytes], ...] = ()) -> Tuple[Tuple[str, bytes], ...]:
    return tuple(sorted({**dict(earlier), **{path: digest for path, digest in read.items() if path != own}}.items()))


def _definition(node: cst.CSTNode, ctx: "FileContext", values: Values, graph: Optional[CallGraph]) -> tuple:
    around = (ctx.module,)
    if type(node) is cst.ClassDef:
        bases = []
        for base in node.bases:
            value = base.value.value if type(base.value) is cst.Subscript else base.value
            qualified = ctx.qualified_name(value, around) or ""
            if type(value) is cst.Name:
                reference: Reference = ("name", value.value)
            else:  # an attribute of an imported module, or something the value model follows to nothing
                path = values.import_path(value, around)
                reference = ("import", path) if path is not None else ("none",)
            bases.append((qualified, reference))
        return ("class", tuple(bases))
    if type(node) is cst.FunctionDef and graph is not None:
        key = graph.key_of(node, around + (node,))
        # What it may show: a fact whose deferred nodes are not judged yet counts (`shows_no_fact` asks "surely not").
        shown = {fact for function in graph.reachable(key, _FACTS_DEPTH) for fact in function.may_show()}
        return ("function", tuple(sorted(shown)))
    return ("other",)


class Summaries:
    """The module summaries one process has used, and the cache they are kept in (`use_store`)."""

    def __init__(self):
        self._store: Optional[SummaryStore] = None
        self._store_config: Optional["Config"] = None
        # path -> (digest, summary or None when the file does not parse)
        self._known: Dict[str, Tuple[bytes, Optional[ModuleSummary]]] = {}

    def use_store(self, config: Optional["Config"]) -> None:
        """Keep summaries in the cache of `config`'s settings; None: use none (a run that caches no findings)."""
        if config is None:
            self._store = self._store_config = None
        elif config is not self._store_config:
            # Another config's summaries may differ (its settings name another folder): none is carried over.
            self._store, self._store_config, self._known = SummaryStore.for_config(config), config, {}

    def of(self, path: str, config: "Config") -> Optional[ModuleSummary]:
        """The summary of the project file `path`, its reading recorded for the current lint; None without a store,
        or when the file cannot be read or parsed."""
        if self._store is None:
            return None
        read = PROJECT.read(path)
        if read is None:
            return None
        data, digest = read
        known = self._known.get(path)
        if known is not None and known[0] == digest and (known[1] is None or PROJECT.unchanged(known[1].dependencies)):
            return known[1]
        summary = self._load(path, digest)
        if summary is None:
            summary = self._build(path, data, digest, config)
        self._known[path] = (digest, summary)
        return summary

    def section(self, path: str, config: "Config", name: str, compute: Callable[["FileContext"], object]) -> Optional[object]:
        """What `compute` (a function of a parsed file, returning a value `marshal` writes) says of the project file
        `path`, kept in its summary under `name` for the next process; None when the file cannot be read or parsed.
        For a question a rule asks of the files a linted one imports (`TL205`: does importing it compile CUDA code?)."""
        summary = self.of(path, config)
        if summary is not None and name in summary.sections:
            return summary.sections[name]
        read = PROJECT.read(path)
        if read is None or (summary is not None and read[1] != self._known[path][0]):
            return None  # unreadable, or edited since `of` read it: the caller asks the tree next time
        module = PROJECT.parsed(path, read[0], read[1], config)
        if module is None:
            return None
        if summary is None:  # no store: the parsed file keeps the answer for this process
            return module.context.shared(_Sections).answer(name, compute)
        with PROJECT.recording() as used:
            value = compute(module.context)
        summary = summary._replace(
            sections={**summary.sections, name: value}, dependencies=_dependencies(used, path, summary.dependencies)
        )
        self._keep(path, read[1], summary)
        return value

    def kept(self, key: str, digest: bytes, compute: Callable[[], object]) -> object:
        """What `compute` (a value `marshal` writes) says of many files at once, kept in the store under `key` (a path
        no project file has) for the `digest` of what it was computed from: TL205's project intent, by its project
        folder and the listing of its files. Computed again without a store, or when the stored one cannot be read."""
        if self._store is not None:
            payload = self._store.load(key, digest)
            if payload is not None:
                try:
                    return marshal.loads(payload)
                except (EOFError, ValueError, TypeError):
                    pass
        value = compute()
        if self._store is not None:
            self._store.save(key, digest, marshal.dumps(value))
        return value

    def _load(self, path: str, digest: bytes) -> Optional[ModuleSummary]:
        payload = self._store.load(path, digest)
        if payload is None:
            return None
        try:
            summary = ModuleSummary(*marshal.loads(payload))
        except (EOFError, ValueError, TypeError):  # a damaged summary is built again
            return None
        return summary if _well_formed(summary) and PROJECT.unchanged(summary.dependencies) else None

    def _build(self, path: str, data: bytes, digest: bytes, config: "Config") -> Optional[ModuleSummary]:
        module = PROJECT.parsed(path, data, digest, config)
        summary = summarise(module.context) if module is not None else None
        if summary is not None:
            self._keep(path, digest, summary)
        return summary

    def _keep(self, path: str, digest: bytes, summary: ModuleSummary) -> None:
        self._known[path] = (digest, summary)
        self._store.save(path, digest, marshal.dumps(tuple(summary)))


def _well_formed(summary: ModuleSummary) -> bool:
    """The stored values have the shapes the questions read (a file that passed its checksum but came from elsewhere
    is built again, as a damaged one is)."""
    names, definitions, sections, dependencies = summary
    if not (isinstance(names, dict) and isinstance(definitions, tuple) and isinstance(sections, dict)):
        return False
    if not all(isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], bytes)
               for item in (dependencies if isinstance(dependencies, tuple) else [None])):
        return False
    if not all(isinstance(definition, tuple) and len(definition) >= 1 and _well_formed_definition(definition) for definition in definitions):
        return False
    for entry in names.values():
        if not isinstance(entry, tuple) or not entry or entry[0] not in _NAME_KINDS:
            return False
        if entry[0] == "import" and not (len(entry) == 2 and isinstance(entry[1], str)):
            return False
        if entry[0] == "defined" and not (
            len(entry) == 2 and isinstance(entry[1], tuple)
            and all(type(index) is int and 0 <= index < len(definitions) for index in entry[1])
        ):
            return False
    return True


def _well_formed_definition(definition: tuple) -> bool:
    kind = definition[0]
    if kind == "other":
        return True
    if len(definition) != 2 or not isinstance(definition[1], tuple):
        return False
    if kind == "function":
        return all(isinstance(fact, str) for fact in definition[1])
    return kind == "class" and all(
        isinstance(base, tuple) and len(base) == 2 and isinstance(base[0], str) and isinstance(base[1], tuple)
        and base[1] and base[1][0] in _REFERENCE_KINDS and all(isinstance(part, str) for part in base[1])
        for base in definition[1]
    )


_NAME_KINDS = frozenset({"import", "defined", "value"})
_REFERENCE_KINDS = frozenset({"name", "import", "none"})


class _Sections:
    """The answers `Summaries.section` computed on one parsed file when there is no store (`ctx.shared`)."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self._answers: Dict[str, object] = {}

    def answer(self, name: str, compute: Callable[["FileContext"], object]) -> object:
        if name not in self._answers:
            self._answers[name] = compute(self.ctx)
        return self._answers[name]


# One per process, like `PROJECT`.
SUMMARIES = Summaries()


def no_module_class(ctx: "FileContext", path: str, is_module_base: Callable[[str], bool]) -> bool:
    """The import path `path`, followed by the value model from `ctx`'s file, certainly names no class with a base for
    which `is_module_base` (a qualified name) holds, at any depth of project classes; False when unsure."""
    visited: Set[Tuple[str, str]] = set()

    def none_among(definitions: Optional[list]) -> bool:
        if definitions is None:
            return False
        for summary, where, definition in definitions:
            if definition[0] != "class":
                continue
            for qualified, reference in definition[1]:
                if qualified and is_module_base(qualified):
                    return False
                if reference[0] == "name":
                    found = _named(summary, where, reference[1], ctx.config, visited)
                elif reference[0] == "import":
                    found = _definitions(where, reference[1], ctx.config, visited)
                else:
                    continue
                if not none_among(found):
                    return False
        return True

    try:
        return none_among(_definitions(ctx.filename, path, ctx.config, visited))
    finally:
        # A recursive closure refers to itself, and through `ctx` to the file's tree: unlinked, the tree is freed when
        # the lint returns rather than at the next cycle collection.
        none_among = None  # noqa: F841


def shows_no_fact(ctx: "FileContext", path: str, fact: str) -> bool:
    """No function the import path `path` names from `ctx`'s file shows `fact` (`function_facts`); False when unsure."""
    definitions = _definitions(ctx.filename, path, ctx.config, set())
    return definitions is not None and all(
        definition[0] != "function" or fact not in definition[1] for _, _, definition in definitions
    )


def _definitions(importer: str, dotted: str, config: "Config", visited: Set[Tuple[str, str]]) -> Optional[list]:
    """(summary, path, definition) for what an import path names, as `Values._in_project_file` follows it: [] when it
    names nothing the model follows (an installed package, a module rather than a name in it); None when unsure."""
    located = PROJECT.locate_name(importer, dotted)
    if located is None:
        return []
    path, name = located
    summary = SUMMARIES.of(path, config)
    return _named(summary, path, name, config, visited) if summary is not None else None


def _named(summary: ModuleSummary, path: str, name: str, config: "Config", visited: Set[Tuple[str, str]]) -> Optional[list]:
    if (path, name) in visited:  # met again (a cycle, or two routes to one class): the tree answers
        return None
    visited.add((path, name))
    entry = summary.names.get(name)
    if entry is None:
        return []
    if entry[0] == "import":
        return _definitions(path, entry[1], config, visited)
    if entry[0] == "value":
        return None
    return [(summary, path, summary.definitions[index]) for index in entry[1]]


# How many re-exports deep `defining_file` follows an import path (`from .modules import Norm`, itself imported there).
_MAX_REEXPORTS = 8
_MODULE_IMPORTS = "module-imports"


def defining_file(importer: str, dotted: str, config: "Config") -> Optional[Tuple[str, str]]:
    """The project file and the name an import path written in `importer` stands for, through the module-level imports
    that re-export it (`from .lp_norm import L1BatchNorm2d`, where lp_norm.py has `from model import L1BatchNorm2d`:
    model.py's), as `Values._in_project_file` follows it; where a module binds the name otherwise, or the import names
    no project file, there; None when the path names no project file's name."""
    located = PROJECT.locate_name(importer, dotted)
    for _ in range(_MAX_REEXPORTS):
        if located is None or not located[1]:
            break
        imports = SUMMARIES.section(located[0], config, _MODULE_IMPORTS, _module_imports)
        onward = (imports or {}).get(located[1])
        further = PROJECT.locate_name(located[0], onward) if onward is not None else None
        if further is None:
            break
        located = further
    return located


def _module_imports(ctx: "FileContext") -> Dict[str, str]:
    """The module-level names only an import binds (`Values._name`: the import is what the name is), to its path."""
    _record_star_dependencies(ctx)
    scope = ctx.scopes.scope_of(ctx.module)
    return {name: path for name, path in sorted(scope.imports.items()) if name not in scope.variables}


# ---------------------------------------------------------------- star imports

# How many star-imported modules deep the names a star import binds are followed (common.py doing `from base import *`).
_MAX_STAR_DEPTH = 4
# The files whose star imports are being read now: one met again (a cycle of star imports) binds nothing more there.
_STAR_IN_PROGRESS: List[str] = []


def star_bindings(ctx: "FileContext") -> Dict[str, str]:
    """What the module-level star imports of `ctx`'s file bind, for its scopes (`engine/scopes.py`): each name a
    star-imported project module exports (listed in a literal `__all__`, or public when there is none), to the import
    path that module binds it to (`numpy` for `np` after `import numpy as np` there), or to the name in that module
    (`common.Net`) for one it defines, or whose path means another file from here. A later star import wins, as in
    Python. Read from the module's summary (`star exports`), kept with the other summaries; an installed package's
    star import binds nothing known, nor does a chain of them deeper than `_MAX_STAR_DEPTH`, nor a cycle."""
    found: Dict[str, str] = {}
    own = os.path.abspath(ctx.filename)
    if own in _STAR_IN_PROGRESS or len(_STAR_IN_PROGRESS) >= _MAX_STAR_DEPTH:
        return found
    _STAR_IN_PROGRESS.append(own)
    try:
        with PROJECT.recording() as read:
            for star in ctx.scopes.star_imports():
                located = PROJECT.locate(ctx.filename, star) if star.strip(".") else None
                if located is None or located[1]:
                    continue  # an installed package, or a name in a module rather than a module
                exports = SUMMARIES.section(located[0], ctx.config, "star exports", _star_exports)
                for name, path in (exports or {}).items():
                    found[name] = _seen_from(ctx.filename, located[0], path) or f"{star}.{name}"
    finally:
        _STAR_IN_PROGRESS.pop()
    if "torch" not in found and _torch_from_installed_star(ctx):
        found["torch"] = "torch"
    ctx.star_dependencies = {path: digest for path, digest in read.items() if path != ctx.filename}
    return found


# torch's submodules and names that code most often reaches through `torch.`: a file that writes one of them on a
# `torch` it never imports (`torch.cuda.is_available()`, `torch.Tensor(rois)`) means torch's.
_TORCH_ATTRIBUTE = re.compile(
    r"\btorch[ \t]*\.[ \t]*(?:cuda|nn|optim|utils|backends|distributed|autograd|Tensor|tensor|device|no_grad|"
    r"from_numpy|float32|float64|int64|long|zeros|ones|randn|rand|randint|arange|cat|stack|save|load|manual_seed|"
    r"FloatTensor|LongTensor)\b"
)


def _torch_from_installed_star(ctx: "FileContext") -> bool:
    """The file's module-level star import of an installed package binds `torch` to torch: one of its star imports
    names a module that is not a file of the project (`from torch_snippets import *`, `from fastai.vision.all import
    *`, which re-export `torch`), and the file writes a name of torch's on `torch` (`_TORCH_ATTRIBUTE`). Where the
    module binds `torch` itself (`import torch`), that binding wins (`Scopes`); where it does not, the name it reads
    can only come from the star import (`from torch.utils.data import DataLoader` binds no `torch`). What else such a
    package exports (`nn`, `F`, `np`) stays unknown: those names are not torch's alone."""
    if _TORCH_ATTRIBUTE.search(ctx.text) is None:
        return False
    return any(not star.startswith(".") and PROJECT.locate(ctx.filename, star) is None for star in ctx.scopes.star_imports())


def _record_star_dependencies(ctx: "FileContext") -> None:
    """Record, for the summary or section being built, the files `ctx`'s star bindings came from: its scopes may have
    been scanned before the recording began."""
    ctx.scopes.scope_of(ctx.module)
    for path, digest in ctx.star_dependencies.items():
        PROJECT.record(path, digest)


def _star_exports(ctx: "FileContext") -> Dict[str, str]:
    """The names a star import of this module binds, each to the import path it is bound to here ("" for a name the
    module binds otherwise: a definition, an assignment)."""
    _record_star_dependencies(ctx)
    scope = ctx.scopes.scope_of(ctx.module)
    return {name: scope.imports.get(name, "") for name in sorted(_exported_names(ctx) or ())}


def _exported_names(ctx: "FileContext") -> Optional[List[str]]:
    """The module-level names of `ctx`'s file that a star import of it binds: those a literal `__all__` lists, or the
    public ones where there is none. None when `__all__` is built some other way: what it lists is not known."""
    scope = ctx.scopes.scope_of(ctx.module)
    listed = scope.assignments.get("__all__")
    if listed is None:
        if "__all__" in scope.variables:
            return None
        return [name for name in scope.imports.keys() | scope.variables if not name.startswith("_")]
    value = syntax.literal(listed[-1], None)
    if len(listed) != 1 or not isinstance(value, (list, tuple)):
        return None
    return [name for name in value if isinstance(name, str) and (name in scope.imports or name in scope.variables)]


def _seen_from(importer: str, module: str, path: str) -> Optional[str]:
    """The import path `path` as written in the project file `module`, when it names the same thing from `importer`
    (torch's names, a project module both reach alike); else None."""
    if not path:
        return None
    there = PROJECT.locate(module, path)
    if there != PROJECT.locate(importer, path) or (there is None and path.startswith(".")):
        return None
    return path


# The engine's scopes ask this for the names a star import binds.
context.STAR_IMPORTS = star_bindings


# ---------------------------------------------------------------- calls from the files that import a module
# A function's parameters hold what its calls pass (`Values._parameter`); for a module-level function or class that
# other files of the project import, those calls are in the importers (`from trainer import train` in main.py). The
# importers are the files of its folder that name its module in an import (`Project.importers`); each one's section
# "imported-uses" says how it uses each import path it binds, so a file that only reads the name as a value is known
# without its tree. The arguments themselves are followed in the importer's tree (`calls_from_importers`), as any
# imported name is followed, so every question of the value model reads them unchanged.

_IMPORTED_USES = "imported-uses"


def calls_from_importers(ctx: "FileContext", name: str) -> Optional[List[Tuple["FileContext", cst.Call, Tuple[cst.CSTNode, ...], Optional[cst.CSTNode]]]]:
    """Every call of the module-level name `name` of `ctx`'s file made in another project file: (that file's context,
    the call, the scopes around it, its statement). A star import of the module (`from utils import *`) binds the
    names it exports in the importer (`star_bindings`), so the importer's uses of `name` are counted by its path as
    those of a name imported by name. None when some use there is not a call by the imported name (passed, wrapped,
    rebound, reached through the module object `trainer` read alone), when a file that imports it could itself be
    imported for it (a module-level import of the name in a file another file imports; a star import is one), when a
    star import of the module binds what is not known (an `__all__` built some other way) or what the importer's own
    scopes do not bind to it (a definition of the name there, a star import met in a cycle), or when the files that
    may import it are not all known (`Project.importers`), or when no project file imports the module: then it is
    a library, and any importer outside the project may call its public names (a script, which runs its own
    functions, is not asked: `Values._only_called_here`)."""
    own = os.path.abspath(ctx.filename)
    importers = PROJECT.importers(ctx.filename)
    if not importers:
        return None
    sites = []
    for path in importers:
        uses = SUMMARIES.section(path, ctx.config, _IMPORTED_USES, _imported_uses)
        if not isinstance(uses, dict):
            return None  # does not parse: what it calls is not known
        module = None
        stars = [dotted for dotted in uses if dotted.startswith("*") and PROJECT.locate(path, dotted[1:]) == (own, "")]
        if stars:
            exported = _exported_names(ctx)
            if exported is None:
                return None
            if name in exported:
                module = _parsed(path, ctx.config)
                bound = module.context.scopes.star_bound().get(name) if module is not None else None
                if bound is None or PROJECT.locate(path, bound) != (own, name):
                    return None  # shadowed there, or bound elsewhere: its reads of the name are not all known
                # Counted again on the tree the check read, which the section may not have seen alike (a cycle).
                uses = _ImportUses(module.context).counts
        called = set()
        for dotted, (calls, reads, at_top) in uses.items():
            if dotted in stars:
                continue  # what it binds is counted by each name's path
            located = PROJECT.locate(path, dotted.lstrip("*"))
            if located is None or located[0] != own or located[1] not in ("", name):
                continue
            if reads or dotted.startswith("*"):
                return None
            if at_top and PROJECT.importers(path) != []:
                return None  # `from main import train` elsewhere would call it too
            if calls:
                called.add(dotted)
        if called:
            module = module or _parsed(path, ctx.config)
            if module is None:
                return None
            uses_there = _ImportUses(module.context)
            sites += [(module.context, call, scopes, statement) for dotted, call, scopes, statement in uses_there.sites if dotted in called]
    return sites


def _parsed(path: str, config: "Config") -> Optional["ProjectModule"]:
    read = PROJECT.read(path)
    return PROJECT.parsed(path, read[0], read[1], config) if read is not None else None


def _imported_uses(ctx: "FileContext") -> Dict[str, Tuple[int, int, bool]]:
    """What `ctx`'s file does with each import path it binds, including the attributes it reads of an imported module
    (`trainer.train`): {path: (calls by it, other reads, bound at module level)}; a star import is `*path`, read (the
    names it binds are counted by their own paths too)."""
    _record_star_dependencies(ctx)
    return _ImportUses(ctx).counts


class _ImportUses:
    """One walk of a file: each read of a name an import binds, counted by the import path it stands for."""

    def __init__(self, ctx: "FileContext"):
        self.counts: Dict[str, Tuple[int, int, bool]] = {}
        self.sites: List[Tuple[str, cst.Call, Tuple[cst.CSTNode, ...], Optional[cst.CSTNode]]] = []
        top = ctx.scopes.scope_of(ctx.module)
        for path in ctx.scopes.star_imports():
            self.counts["*" + path] = (0, 1, True)
        # A module-level import the file never reads still binds the name for the files that import this one (a
        # re-export: `from layers import KVCache` in a package's module): counted as bound at the top.
        for local, path in top.imports.items():
            if local not in top.variables:
                self.counts.setdefault(path, (0, 0, True))
        def count(path: str, called: bool, local: str) -> None:
            calls, reads, at_top = self.counts.get(path, (0, 0, False))
            self.counts[path] = (calls + called, reads + (not called), at_top or top.imports.get(local) is not None)

        def on_visit(node: cst.CSTNode, stack: List[cst.CSTNode], scope_nodes: List[cst.CSTNode]) -> bool:
            if type(node) is not cst.Name or len(stack) < 2 or type(stack[-2]) in _NOT_READ_PARENTS:
                return type(node) not in (cst.Import, cst.ImportFrom)
            parent = stack[-2]
            if (type(parent) is cst.Attribute and parent.attr is node) or (type(parent) is cst.Arg and parent.keyword is node):
                return True
            scope = ctx.scopes.binding_scope(node.value, scope_nodes)
            path = scope.imports.get(node.value) if scope is not None else None
            if path is None:
                return True
            if node.value in scope.variables:  # rebound too (`train = wrap(train)`): not only called
                count(path, False, node.value)
                return True
            used, called_node = path, node
            if type(parent) is cst.Attribute and parent.value is node:
                used, called_node = f"{path}.{parent.attr.value}", parent
            caller = stack[-3] if called_node is parent and len(stack) >= 3 else parent
            called = type(caller) is cst.Call and caller.func is called_node
            count(used, called, node.value)
            if called:
                statement = next((item for item in reversed(stack) if type(item) in STATEMENT_TYPES), None)
                self.sites.append((used, caller, tuple(scope_nodes), statement))
            return True

        _walk_in_scopes(ctx.module, on_visit)


# Parents of a name that defines rather than reads it (an import's own names are not entered).
_NOT_READ_PARENTS = (cst.FunctionDef, cst.ClassDef, cst.Param, cst.AsName, cst.NameItem)


values.CALLS_FROM_IMPORTERS = calls_from_importers


# ---------------------------------------------------------------- method calls from the files that import a class
# A method's callers are also the calls through instances of its class that other files make (`model = RNN(4)`, then
# `model.init_hidden(n)` in train.py's batch loop, with `from model import RNN`). The files asked are those that may
# import the class's module, or a file re-exporting it (`Project.importers_around`); each one's section
# "imported-uses" says, without its tree, whether it names the class at all and whether it only calls it.


class CallStack(NamedTuple):
    """A call and the file that makes it: that file's context (its call graph built) and every node around the call,
    outermost first, ending with it (a rule's stack there)."""

    context: "FileContext"
    stack: Tuple[cst.CSTNode, ...]


def method_calls_from_importers(ctx: "FileContext", model_class: cst.ClassDef, name: str) -> List[CallStack]:
    """The calls `obj.name(...)` that the files importing `ctx`'s module make of the method `name` of `model_class`
    (a class at the top of the module), each through a receiver that is, by every origin, an
    instance of the class built in that file (`Values.instance_class`). A file is given up, its calls not counted,
    where it does not parse, reads the class or its module otherwise than to call the class (passed on, subclassed,
    patched: its instances may then run another method) or reads the method's name without calling it (a bound
    method passed on, an attribute assigned). Kept for the file (`ctx.shared`) while the files read keep their bytes."""
    if id(ctx) in _IN_PROGRESS or ctx.file_kind in (FileKind.TEST, FileKind.NOTEBOOK):
        return []
    body = list(ctx.module.body)
    if not any(statement is model_class for statement in body):
        return []
    return ctx.shared(_MethodCallsFromImporters).answer(body.index(model_class), model_class.name.value, name)


class _MethodCallsFromImporters:
    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        # (the class's index in the module's statements, method name) -> (the files read for it, with their digests,
        # and the calls)
        self._known: Dict[Tuple[str, str], Tuple[Dict[str, bytes], List[CallStack]]] = {}

    def answer(self, index: int, class_name: str, name: str) -> List[CallStack]:
        known = self._known.get((index, name))
        if known is not None and PROJECT.unchanged(known[0].items()):
            return known[1]
        with PROJECT.recording() as read:
            found = self._find(index, class_name, name)
        self._known[(index, name)] = (read, found)
        return found

    def _find(self, index: int, class_name: str, name: str) -> List[CallStack]:
        """`index`: where the class stands in the module's statements, which tells it from another class of its name
        (one the module defines again later) in the importer's view of the module, parsed apart from `ctx`."""
        ctx = self.ctx
        own = os.path.abspath(ctx.filename)
        found: List[CallStack] = []
        for path in PROJECT.importers_around(ctx.filename):
            if not _only_calls_class(path, own, class_name, ctx.config):
                continue
            module = _parsed(path, ctx.config)
            if module is None or id(module.context) in _IN_PROGRESS:
                continue
            there = module.context
            calls = there.shared(_AttributeCalls)
            if name in calls.reads:
                continue
            _fact_graph(there)  # the call graph a per-step question asks there
            values_there = Values.of(there)
            for call, scopes, statement in calls.calls.get(name, ()):
                receiver = call.func.value
                if type(receiver) is cst.Name and receiver.value in ("self", "cls"):
                    continue  # a method of the file's own class: its call graph's
                built = values_there.instance_class(receiver, values.Place(there, scopes, statement).stack)
                if built is not None and os.path.abspath(built.place.context.filename) == own and _stands_at(
                    built, index, class_name,
                ):
                    found.append(CallStack(there, values.path_to(call, scopes)))
        return found


def _stands_at(built: "Origin", index: int, class_name: str) -> bool:
    body = built.place.context.module.body
    return index < len(body) and body[index] is built.node and built.node.name.value == class_name


def _only_calls_class(path: str, own: str, class_name: str, config: "Config") -> bool:
    """The project file `path` names the class `class_name` of the module `own` (through a re-export too:
    `defining_file`) and reads it, and the module, only to call the class (`model = RNN(4)`); by its section
    "imported-uses", without its tree."""
    uses = SUMMARIES.section(path, config, _IMPORTED_USES, _imported_uses)
    if not isinstance(uses, dict):
        return False  # does not parse
    called = False
    for dotted, (calls, reads, _) in uses.items():
        if dotted.startswith("*"):
            continue  # the names a star import binds are counted by their own paths
        located = defining_file(path, dotted, config)
        if located is None or located[0] != own or located[1].partition(".")[0] not in ("", class_name):
            continue  # not the class, nor its module, nor an attribute of the class (`RNN.init_state = ...`)
        if reads or located[1] != class_name:
            return False
        called = called or calls > 0
    return called


class _AttributeCalls:
    """One walk of a file (`ctx.shared`): the calls `obj.name(...)` by each attribute name, with the scopes around each
    and its statement, and the attribute names read otherwise (`fit = trainer.fit`, `model.init_hidden = ...`)."""

    def __init__(self, ctx: "FileContext"):
        self.calls: Dict[str, List[Tuple[cst.Call, Tuple[cst.CSTNode, ...], Optional[cst.CSTNode]]]] = {}
        self.reads: Set[str] = set()

        def on_visit(node: cst.CSTNode, stack: List[cst.CSTNode], scope_nodes: List[cst.CSTNode]) -> bool:
            if type(node) is cst.Attribute:
                parent = stack[-2] if len(stack) >= 2 else None
                if type(parent) is cst.Call and parent.func is node:
                    statement = next((item for item in reversed(stack) if type(item) in STATEMENT_TYPES), None)
                    self.calls.setdefault(node.attr.value, []).append((parent, tuple(scope_nodes), statement))
                else:
                    self.reads.add(node.attr.value)
            return True

        _walk_in_scopes(ctx.module, on_visit)


def _walk_in_scopes(module: cst.Module, visit: Callable[[cst.CSTNode, List[cst.CSTNode], List[cst.CSTNode]], bool]) -> None:
    """One walk of `module`: `visit(node, stack, scope_nodes)` for each node entered, with the nodes and the scopes
    around it (the node itself last in `stack`, and in `scope_nodes` when it is a scope); False skips its children."""
    stack: List[cst.CSTNode] = []
    scope_nodes: List[cst.CSTNode] = []

    def on_visit(node: cst.CSTNode) -> bool:
        stack.append(node)
        if type(node) in SCOPE_TYPES:
            scope_nodes.append(node)
        return visit(node, stack, scope_nodes)

    def on_leave(node: cst.CSTNode) -> None:
        stack.pop()
        if scope_nodes and scope_nodes[-1] is node:
            scope_nodes.pop()

    walk(module, on_visit, on_leave)
