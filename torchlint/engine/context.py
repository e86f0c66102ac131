"""What every rule sees of the file being linted: one object per file, shared by all rules."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import libcst as cst

from torchlint.analysis.file_kind import FileKind, source_file_kind
from torchlint.engine.callgraph import CallGraph
from torchlint.engine.file_text import FileText
from torchlint.engine.positions import Positions
from torchlint.engine.reparse import Layout, StatementParents
from torchlint.engine.scopes import Scopes, dotted_name, scope_nodes_of
from torchlint.engine.walk import child_nodes
from torchlint.finding import Edit, Finding, Fix, Location

if TYPE_CHECKING:
    from torchlint.config import Config
    from torchlint.rules.base import Rule


# What the star imports of a file bind (local name -> import path: `torch` for `torch` after `from .imports import *`):
# set by the project index (`analysis/project.py`), which can read the imported modules; until then they bind nothing.
STAR_IMPORTS: Optional[Callable[["FileContext"], Dict[str, str]]] = None


class FileContext:
    def __init__(
        self, filename: str, text: str, module: cst.Module, config: "Config", with_callgraph: bool = True,
        file_text: Optional[FileText] = None, use_prefilter: bool = True, file_kind: Optional[FileKind] = None,
        layout: Optional[Layout] = None, statement_parents: Optional[StatementParents] = None,
        kind_name: Optional[str] = None,
    ):
        self.filename = filename
        self.text = text
        # The words the prefilter read from the text (`may_name`).
        self.file_text = file_text or FileText(text)
        # The prefilter is switched for the whole lint: off, nothing is ruled out from the text alone here either
        # (`may_name`, the call graph's callees), so benchmarks/run.py can compare findings with and without it.
        self.use_prefilter = use_prefilter
        # Given by an adapter that knows (a notebook's); otherwise decided on first use (`file_kind`).
        self._file_kind = file_kind
        # The name the kind is judged from when the text is not `filename`'s own (a file a notebook cell writes).
        self._kind_name = kind_name or filename
        self.module = module
        self.config = config
        # The nodes enclosing the one being visited, outermost first; the visited node is last.
        self.stack: List[cst.CSTNode] = []
        # The module, functions, lambdas and classes among `stack`, kept by the walker.
        self.scope_nodes: List[cst.CSTNode] = []
        self.scopes = Scopes(module, has_walrus=":=" in text, star_bindings=self._star_bindings)
        # Built only when a rule that reads it runs (`Rule.uses_callgraph`); None otherwise, so a rule reading it
        # without saying so fails loudly instead of seeing an empty graph.
        self.callgraph: Optional[CallGraph] = None
        if with_callgraph:
            # Only a function the file defines can be called within it: names written after `def` (part of the
            # prefilter, so off with it).
            self.callgraph = CallGraph(self.file_text.defined if use_prefilter else None)
        self.findings: List[Finding] = []
        self._positions = None
        # Where the top-level statements lie in the text, when the parse worked it out (engine/reparse.py).
        self._layout = layout
        # The position pass's parent maps kept with the file's tree (engine/parsing.TREES), filled and reused there.
        self._statement_parents = statement_parents
        self._qualified: Dict[Tuple[int, Optional[int]], Tuple[cst.CSTNode, Optional[str]]] = {}
        self._shared: Dict[type, object] = {}
        # path -> digest of each project file read to know what the star imports bind (`STAR_IMPORTS`): what the
        # file's scopes depend on besides its own text.
        self.star_dependencies: Dict[str, bytes] = {}

    # ------------------------------------------------------------ names

    def qualified_name(self, node: cst.CSTNode, stack: Optional[Sequence[cst.CSTNode]] = None) -> Optional[str]:
        """`torch.nn.functional.cross_entropy` for `F.cross_entropy` when the file did `import torch.nn.functional as F`.

        None when the chain does not start at an imported name (a local variable
        named `torch` is not torch).
        """
        head = node
        while type(head) is cst.Attribute:
            head = head.value
        # Most chains start at a local, `self` or a builtin: no import binds them anywhere in the file.
        if type(head) is not cst.Name:
            return None
        if not self.scopes.is_imported_anywhere(head.value):
            return None
        scope_nodes = self._scope_nodes(stack)
        # Several rules ask about the same name in a row; the answer depends only on the node and its scope.
        key = (id(node), id(scope_nodes[-1]) if scope_nodes else None)
        cached = self._qualified.get(key)
        # The node is kept with its answer: a rule may ask about a node it built, and once that is
        # freed a new one can get its id.
        if cached is not None and cached[0] is node:
            return cached[1]
        dotted = dotted_name(node)
        qualified = None
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            base = self.scopes.resolve(head, scope_nodes)
            if base is not None:
                qualified = f"{base}.{rest}" if rest else base
        self._qualified[key] = (node, qualified)
        return qualified

    def _star_bindings(self) -> Dict[str, str]:
        return STAR_IMPORTS(self) if STAR_IMPORTS is not None else {}

    def imports_module(self, module: str) -> bool:
        """An import statement of the file names `module` (`FileText.imported_modules`), or one of its star imports
        binds a name to it or to something in it (`pytest` when common.py does `import pytest`)."""
        return module in self.file_text.imported_modules or any(
            path == module or path.startswith(module + ".") for path in self.scopes.star_bound().values()
        )

    def qualified_name_in(self, node: cst.CSTNode, names: FrozenSet[str], stack: Optional[Sequence[cst.CSTNode]] = None) -> bool:
        """`qualified_name(node) in names`, answered without resolving when `node` cannot be any of them.

        An attribute chain ends with the last part of what it names (`nn.functional.softmax`);
        only a bare name can be an alias (`from torch.nn.functional import softmax as sm`).
        """
        if type(node) is cst.Attribute and node.attr.value not in last_parts(names):
            return False
        return self.may_name(names) and self.qualified_name(node, stack) in names

    def may_name(self, names: FrozenSet[str]) -> bool:
        """False when no qualified name in this file can be one of `names`, read from the text alone.

        A qualified name's last part is written in the file, in the import that binds it or at the end of the
        attribute chain that uses it (the reasoning of the rules' `words` triggers), so a file without any of
        the last parts never resolves to one of `names`. Part of the prefilter: off when it is.
        """
        return not self.use_prefilter or not last_parts(names).isdisjoint(self.file_text.words)

    # ------------------------------------------------------------ the file

    @property
    def file_kind(self) -> FileKind:
        """Notebook, test, script or library (torchlint/analysis/file_kind.py), from the name and top-level statements."""
        if self._file_kind is None:
            self._file_kind = source_file_kind(self._kind_name, self.text, self.module)
        return self._file_kind

    def close(self) -> None:
        """Drop the per-file helpers, which refer back to this context: with that cycle gone, the file's tree is
        freed by reference counting as soon as the lint returns, instead of by a later cycle collection that
        walks all of it. So are the scopes (they read star imports through this context) and the call graph (its
        deferred checks hold it): left linked, every linted file's tree stayed until the next collection, a third
        of a one-process run's memory on the benchmark sample."""
        self._shared.clear()
        self.scopes = self.callgraph = None

    def shared(self, kind: type):
        """One `kind(ctx)` per file, for state several rules build the same way (the autograd rules' loop index)."""
        found = self._shared.get(kind)
        if found is None:
            found = self._shared[kind] = kind(self)
        return found

    def renew_shared(self, kind: type):
        """`kind(ctx)` built again in place of the one `shared` kept: for state read from other files that changed
        since (a project file's facts, in a process that outlives an edit)."""
        found = self._shared[kind] = kind(self)
        return found

    def assigned_values(self, node: cst.CSTNode, stack: Optional[Sequence[cst.CSTNode]] = None) -> List[cst.BaseExpression]:
        """Values assigned to a variable (`x = ...`) or an instance attribute (`self.x = ...`) in its scope."""
        scope_nodes = self._scope_nodes(stack)
        if isinstance(node, cst.Name):
            scope = self.scopes.binding_scope(node.value, scope_nodes)
            return scope.assignments.get(node.value, []) if scope else []
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
            for owner in reversed(scope_nodes):
                if isinstance(owner, cst.ClassDef):
                    return self.scopes.scope_of(owner).attributes.get(node.attr.value, [])
        return []

    def _scope_nodes(self, stack: Optional[Sequence[cst.CSTNode]]) -> Sequence[cst.CSTNode]:
        return self.scope_nodes if stack is None else scope_nodes_of(stack)

    def enclosing(self, *types, stack: Optional[Sequence[cst.CSTNode]] = None) -> Optional[cst.CSTNode]:
        """The innermost ancestor (not the visited node itself) of one of `types`."""
        stack = self.stack if stack is None else stack
        for node in reversed(stack[:-1]):
            if isinstance(node, types):
                return node
        return None

    # ------------------------------------------------------------ source

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def _positions_of_file(self) -> Positions:
        # Positions cost code generation: paid only by files that report something, statement by statement.
        if self._positions is None:
            self._positions = Positions(self.module, self.text, self._layout, self._statement_parents)
        return self._positions

    def _range(self, node: cst.CSTNode):
        return self._positions_of_file().range_of(node, self.stack)

    def stack_to(self, node: cst.CSTNode) -> Sequence[cst.CSTNode]:
        """The nodes from the module down to `node`, outermost first (empty when `node` is not in the module): the
        walk's stack while `node` is the visited node or lies in it (a rule reporting the callee of the call it
        visits), else found in the tree as positions after the walk are."""
        if self.stack:
            if self.stack[-1] is node:
                return self.stack
            below = _path_below(self.stack[-1], node)
            if below is not None:
                return self.stack + below
        return self._positions_of_file().stack_to(node)

    def location(self, node: cst.CSTNode):
        code_range = self._range(node)
        return (
            Location(code_range.start.line, code_range.start.column + 1),
            Location(code_range.end.line, code_range.end.column + 1),
        )

    def replace(self, node: cst.CSTNode, content: str) -> Edit:
        start, end = self.location(node)
        return Edit(content, start, end)

    def insert_before(self, node: cst.CSTNode, content: str) -> Edit:
        start, _ = self.location(node)
        return Edit(content, start, start)

    # ------------------------------------------------------------ reporting

    def report(self, rule: "Rule", node: cst.CSTNode, message: str, fix: Optional[Fix] = None) -> None:
        start, end = self.location(node)
        self.findings.append(Finding(rule.code, rule.name, message, self.filename, start, end, fix))


def _path_below(root: cst.CSTNode, node: cst.CSTNode) -> Optional[List[cst.CSTNode]]:
    """The nodes below `root` down to `node`, outermost first; None when `node` is not below `root`."""
    for child in child_nodes(root):
        if child is node:
            return [child]
        found = _path_below(child, node)
        if found is not None:
            found.insert(0, child)
            return found
    return None


@lru_cache(maxsize=None)
def last_parts(names: FrozenSet[str]) -> FrozenSet[str]:
    """`{"load"}` for `{"torch.load", "torch.serialization.load"}`: what a use of one of `names` writes last."""
    return frozenset(name.rpartition(".")[2] for name in names)
