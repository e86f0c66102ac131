"""A light name resolver: what each name in a scope is bound to.

libcst's QualifiedNameProvider and ScopeProvider analyse the whole module up
front, which costs many times the parse. Rules only ask about a few names, so
each scope (module, function, lambda, class) is scanned on first use and cached.

Python's rules, kept: a name assigned anywhere in a function is local to all of
it; class bodies do not enclose their methods; an import binds a module path,
anything else binds a local value that is never the module (`torch = None`
after no import is a variable, not torch). One departure, for precision: a `def` or
`class` with the name of an import of the same scope takes the name everywhere in it,
also before the definition (a notebook that redefines what an earlier cell imported).

A module-level `from X import *` binds what another file holds. When the file's context can
read it (`star_bindings`: a module of the project, `analysis/project.py`), each name it binds
there is an import of the module scope like any other, to the path that file binds it to
(`numpy` for `np` when common.py does `import numpy as np`), unless the module binds the name
itself: every question about imports (`resolve`, `imported_names`, the value model) sees it.

A marimo notebook (`import marimo`, `app = marimo.App(...)`) keeps each cell in a function decorated
`@app.cell`: the names a cell defines are the ones it returns, and they reach every other cell as
that cell's parameters (`def _(torch, nn):`). marimo lets one cell only define a name, so such a
parameter is the name the defining cell binds, as a module global would be: an import there is
an import of the parameter's cell too (`torch.norm` in any cell is `torch.norm`), and the value
model follows any other binding into the defining cell (`cell_definition`). A name two cells
return stays a parameter of unknown value. A `with app.setup:` block is module code already.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.engine.walk import statement_structure, walk_visitor

ScopeNode = (cst.Module, cst.FunctionDef, cst.Lambda, cst.ClassDef)
# Exact types: libcst's node classes are abstract base classes, and `isinstance` on those is slow.
SCOPE_TYPES = frozenset(ScopeNode)


@dataclass
class Scope:
    node: cst.CSTNode
    # local name -> dotted path of what an import bound to it ("torch.nn.functional")
    imports: Dict[str, str] = field(default_factory=dict)
    # for the module: the part of `imports` that its star imports bind (`Scopes`' `star_bindings`)
    star_bound: Dict[str, str] = field(default_factory=dict)
    # names bound by anything but an import (assignments, parameters, defs, loops, ...)
    variables: set = field(default_factory=set)
    # simple `name = value` assignments, in source order
    assignments: Dict[str, List[cst.BaseExpression]] = field(default_factory=dict)
    # for classes: `self.name = value` in any method
    attributes: Dict[str, List[cst.BaseExpression]] = field(default_factory=dict)
    # for classes: id of each value in `attributes` -> the method that assigns it
    attribute_methods: Dict[int, cst.FunctionDef] = field(default_factory=dict)


def dotted_name(node: cst.CSTNode) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


# Names that are not references to what they spell: definitions and assignment targets, keywords, import parts.
# (Exact types: `isinstance` on libcst's abstract node classes is slow, and this runs for every name.)
# A dotted name in an import is the child of its ImportAlias, or of the ImportFrom it names the module of.
_DEFINING_PARENTS = frozenset({
    cst.FunctionDef, cst.ClassDef, cst.Param, cst.AsName, cst.ImportAlias, cst.ImportFrom, cst.NameItem, cst.AssignTarget,
})


def is_outermost_reference(node: cst.CSTNode, stack: Sequence[cst.CSTNode]) -> bool:
    """True for the whole of `a.b.c` used as an expression; False for its parts and for non-references."""
    parent = stack[-2] if len(stack) > 1 else None
    parent_type = type(parent)
    if parent_type is cst.Attribute:
        return False  # `node` is the receiver or the attribute name of a longer chain
    if parent_type is cst.Arg and parent.keyword is node:
        return False
    return parent_type not in _DEFINING_PARENTS


def import_bindings(node: cst.CSTNode) -> Iterator[Tuple[str, str]]:
    """(local name, dotted path) for each name an `import` or `from ... import` statement binds."""
    if type(node) is cst.Import:
        for alias in node.names:
            full = dotted_name(alias.name)
            if alias.asname is not None:
                yield alias.asname.name.value, full
            else:
                top = full.split(".")[0]
                yield top, top
    elif type(node) is cst.ImportFrom and not isinstance(node.names, cst.ImportStar):
        module = "." * len(node.relative) + (dotted_name(node.module) if node.module else "")
        for alias in node.names:
            name = alias.name.value if isinstance(alias.name, cst.Name) else dotted_name(alias.name)
            local = alias.asname.name.value if alias.asname is not None else name
            yield local, f"{module}.{name}" if module and not module.endswith(".") else module + name


class _BindingCollector(cst.CSTVisitor):
    """Collects one scope's bindings without entering nested scopes."""

    def __init__(self, scope: Scope):
        self.scope = scope
        # Inside `except ...:` an import is a fallback for an older torch; the try body's import wins.
        self.handler_depth = 0
        # Names a `def` or `class` of the scope binds (`finish`).
        self.defined: Set[str] = set()

    def finish(self) -> None:
        """A `def` or `class` named like an import of the same scope is the code's own replacement for it (a
        notebook cell's `def ToTensor(): ...` after `from torchvision.transforms.v2 import ToTensor`): the name is
        the definition's, not the import's, wherever it is used."""
        for name in self.defined:
            self.scope.imports.pop(name, None)

    def _bind_import(self, local: str, path: str) -> None:
        if self.handler_depth and local in self.scope.imports:
            return
        self.scope.imports[local] = path

    def _bind(self, target: cst.CSTNode, value: Optional[cst.BaseExpression] = None) -> None:
        if isinstance(target, cst.Name):
            self.scope.variables.add(target.value)
            if value is not None:
                self.scope.assignments.setdefault(target.value, []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value)

    # Nested scopes: only their own name is bound here.
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._bind(node.name)
        self.defined.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._bind(node.name)
        self.defined.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def _comprehension(self, node) -> bool:
        # Comprehension targets live in their own scope; only the first iterable is evaluated here.
        walk_visitor(node.for_in.iter, self)
        return False

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Import(self, node: cst.Import) -> None:
        for local, path in import_bindings(node):
            self._bind_import(local, path)

    visit_ImportFrom = visit_Import

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind(node.asname.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node.value)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.handler_depth += 1
        if node.name is not None:
            self._bind(node.name.name)

    def leave_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self.handler_depth -= 1

    def visit_Global(self, node: cst.Global) -> None:
        self.scope.variables.difference_update(item.name.value for item in node.names)

    visit_Nonlocal = visit_Global


class _ImportedNames(cst.CSTVisitor):
    """The local names the imports of a module bind, in every scope, with the paths they bind them to."""

    def __init__(self):
        self.paths: Dict[str, Set[str]] = {}

    def visit_Import(self, node: cst.Import) -> None:
        for local, path in import_bindings(node):
            self.paths.setdefault(local, set()).add(path)

    visit_ImportFrom = visit_Import


class _AttributeCollector(cst.CSTVisitor):
    """`self.x = value` in a method body (the instance attributes a class sets)."""

    def __init__(self, scope: Scope, method: cst.FunctionDef, self_name: str):
        self.scope = scope
        self.method = method
        self.self_name = self_name

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            attribute = target.target
            if (
                isinstance(attribute, cst.Attribute)
                and isinstance(attribute.value, cst.Name)
                and attribute.value.value == self.self_name
            ):
                self.scope.attributes.setdefault(attribute.attr.value, []).append(node.value)
                self.scope.attribute_methods[id(node.value)] = self.method


def _is_cell(statement: cst.CSTNode, apps: FrozenSet[str]) -> bool:
    """`statement` is a module-level `def` decorated `@app.cell` or `@app.cell(...)` (`apps`: `Scopes._marimo_apps`)."""
    if type(statement) is not cst.FunctionDef:
        return False
    for decorator in statement.decorators:
        written = decorator.decorator
        written = written.func if type(written) is cst.Call else written
        if type(written) is cst.Attribute and written.attr.value == "cell" and type(written.value) is cst.Name and written.value.value in apps:
            return True
    return False


def cell_returns(cell: cst.FunctionDef) -> Tuple[Optional[cst.Return], Tuple[cst.Name, ...]]:
    """The closing `return a, b` (`return (a,)`) of a marimo cell and the names it lists: those the cell defines."""
    body = cell.body.body if type(cell.body) is cst.IndentedBlock else ()
    last = body[-1] if body else None
    if type(last) is not cst.SimpleStatementLine or type(last.body[-1]) is not cst.Return:
        return None, ()
    returned = last.body[-1]
    value = returned.value
    elements = (element.value for element in value.elements) if type(value) is cst.Tuple else (() if value is None else (value,))
    return returned, tuple(element for element in elements if type(element) is cst.Name)


def _scan_walk(root: cst.CSTNode, visitor, enter_expressions: bool, enter_definitions: bool = False) -> None:
    walk_visitor(root, visitor, None if enter_expressions else statement_structure(type(root), enter_definitions))


class Scopes:
    """Per-file cache of scanned scopes."""

    def __init__(
        self, module: cst.Module, has_walrus: bool = True, star_bindings: Optional[Callable[[], Dict[str, str]]] = None,
    ):
        self.module = module
        self.has_walrus = has_walrus
        # What the module's star imports bind (local name -> import path), asked once, when the module scope is
        # scanned and it has one; None where nothing can read the files they name.
        self._star_bindings = star_bindings
        self._scopes: Dict[int, Scope] = {}
        # innermost scope node's id -> the chain seen from it: fixed by the tree, asked for at every name
        self._chains: Dict[int, List[Scope]] = {}
        self._imported: Optional[Dict[str, Set[str]]] = None
        self._importing: Optional[Dict[str, Set[str]]] = None
        self._parts_of: Dict[str, FrozenSet[str]] = {}
        self._stars: Optional[Tuple[str, ...]] = None
        # marimo: name -> the one cell that returns it (None where several do); the cells (`_marimo`)
        self._cell_of: Optional[Dict[str, Optional[cst.FunctionDef]]] = None
        self._cells: FrozenSet[int] = frozenset()
        self._cell_bodies: Dict[int, Dict[str, str]] = {}

    def imported_names(self) -> FrozenSet[str]:
        """The names any import of the module binds, in whatever scope.

        Most names a rule asks about are locals, `self` or builtins; this answers them
        without scanning the scopes, from one pass over the module's statements.
        """
        return frozenset(self._import_paths())

    def star_imports(self) -> Tuple[str, ...]:
        """The module paths of the module-level `from X import *` statements, in source order (`.imports` for
        `from .imports import *`): what they bind is not in the file."""
        if self._stars is None:
            found = []
            for statement in self.module.body:
                if type(statement) is cst.SimpleStatementLine:
                    for small in statement.body:
                        if type(small) is cst.ImportFrom and isinstance(small.names, cst.ImportStar):
                            module = (dotted_name(small.module) or "") if small.module is not None else ""
                            found.append("." * len(small.relative) + module)
            self._stars = tuple(found)
        return self._stars

    def star_bound(self) -> Dict[str, str]:
        """What the module-level star imports bind (local name -> import path), as the module scope holds them: {} for
        a module without one."""
        return self.scope_of(self.module).star_bound if self._star_bindings is not None and self.star_imports() else {}

    def is_imported_anywhere(self, name: str) -> bool:
        """Some import of the module binds `name`, in whatever scope (`imported_names`, without the set)."""
        return name in self._import_paths()

    def names_importing(self, parts: FrozenSet[str]) -> FrozenSet[str]:
        """The local names some import binds to a path with one of `parts` (`F` for `import torch.nn.functional as F`
        and the part `functional`)."""
        if self._importing is None:
            # part -> the local names imported from a path holding it: asked for many sets of parts per file.
            self._importing = {}
            for local, paths in self._import_paths().items():
                for path in paths:
                    for part in path.split("."):
                        self._importing.setdefault(part, set()).add(local)
        return frozenset().union(*(self._importing.get(part, ()) for part in parts))

    def import_parts(self, name: str) -> FrozenSet[str]:
        """The parts of the paths the module's imports bind `name` to (`{"torch", "nn", "functional"}` for `F` after
        `import torch.nn.functional as F`), empty for a name no import binds."""
        found = self._parts_of.get(name)
        if found is None:
            found = self._parts_of[name] = frozenset(
                part for path in self._import_paths().get(name, ()) for part in path.split(".")
            )
        return found

    def names_imported_from(self, accepts) -> FrozenSet[str]:
        """The local names some import binds to a path that `accepts(path)` accepts."""
        return frozenset(local for local, paths in self._import_paths().items() if any(map(accepts, paths)))

    def _import_paths(self) -> Dict[str, Set[str]]:
        if self._imported is None:
            collector = _ImportedNames()
            walk_visitor(self.module, collector, statement_structure(cst.Module, enter_definitions=True))
            for local, path in self.star_bound().items():
                collector.paths.setdefault(local, set()).add(path)
            self._imported = collector.paths
        return self._imported

    def _marimo(self) -> Dict[str, Optional[cst.FunctionDef]]:
        if self._cell_of is None:
            self._cell_of = {}
            apps = self._marimo_apps()
            cells = [statement for statement in self.module.body if apps and _is_cell(statement, apps)]
            self._cells = frozenset(map(id, cells))
            for cell in cells:
                for name in {name.value for name in cell_returns(cell)[1]}:
                    self._cell_of[name] = None if name in self._cell_of else cell
        return self._cell_of

    def _marimo_apps(self) -> FrozenSet[str]:
        """The module-level names bound to a `marimo.App(...)` (under any import of it): what a marimo notebook's cells
        are decorated with (`@app.cell`). Empty for any other module."""
        if not self.names_imported_from(lambda path: path == "marimo" or path == "marimo.App"):
            return frozenset()
        module = self.scope_of(self.module)
        apps = set()
        for name, values in module.assignments.items():
            for value in values:
                head, _, rest = (dotted_name(value.func) or "").partition(".") if type(value) is cst.Call else ("", "", "")
                if head in module.imports and f"{module.imports[head]}.{rest}".rstrip(".") == "marimo.App":
                    apps.add(name)
        return frozenset(apps)

    def is_cell(self, function: cst.CSTNode) -> bool:
        """`function` is a cell of a marimo notebook (`@app.cell`)."""
        self._marimo()
        return id(function) in self._cells

    def cell_definition(self, name: str, cell: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The cell of a marimo notebook that defines the parameter `name` of the cell `cell`: the one cell that returns
        it; None when `cell` is no cell, or no other cell or several return `name`."""
        defining = self._marimo().get(name) if self.is_cell(cell) else None
        return defining if defining is not cell else None

    def scope_of(self, node: cst.CSTNode) -> Scope:
        scope = self._scopes.get(id(node))
        if scope is None:
            scope = self._scopes[id(node)] = self._scan(node)
        return scope

    def _scan(self, node: cst.CSTNode) -> Scope:
        scope = Scope(node)
        collector = _BindingCollector(scope)
        if isinstance(node, (cst.FunctionDef, cst.Lambda)):
            _scan_walk(node.body, collector, self.has_walrus)
            cell_imports = self._cell_imports(node, scope) if type(node) is cst.FunctionDef and self.is_cell(node) else {}
            for param in parameters(node.params):
                name = param.name.value
                if name in cell_imports:
                    scope.imports[name] = cell_imports[name]
                else:
                    scope.variables.add(name)
        elif isinstance(node, cst.ClassDef):
            _scan_walk(node.body, collector, self.has_walrus)
            for statement in node.body.body:
                if isinstance(statement, cst.FunctionDef):
                    params = parameters(statement.params)
                    if params:
                        _scan_walk(statement.body, _AttributeCollector(scope, statement, params[0].name.value), False, enter_definitions=True)
        else:
            _scan_walk(node, collector, self.has_walrus)
        collector.finish()
        if node is self.module and self._star_bindings is not None and self.star_imports():
            for local, path in self._star_bindings().items():
                # The module's own binding of a name replaces what a star import bound to it.
                if local not in scope.imports and local not in scope.variables:
                    scope.imports[local] = scope.star_bound[local] = path
        return scope

    def _cell_imports(self, cell: cst.FunctionDef, scope: Scope) -> Dict[str, str]:
        """The parameters of a marimo cell that the cell defining each binds to an import, with the import's path;
        not those the cell's own body binds (`scope`, scanned without its parameters)."""
        found = {}
        for param in parameters(cell.params):
            name = param.name.value
            defining = self.cell_definition(name, cell)
            if defining is None or name in scope.imports or name in scope.variables:
                continue
            path = self._imports_of_body(defining).get(name)
            if path is not None:
                found[name] = path
        return found

    def _imports_of_body(self, cell: cst.FunctionDef) -> Dict[str, str]:
        """The names the body of a marimo cell binds to an import and to nothing else. The body alone: the cell's own
        parameters are another cell's names, and cells that take each other's names would scan each other for ever."""
        found = self._cell_bodies.get(id(cell))
        if found is None:
            body = Scope(cell)
            collector = _BindingCollector(body)
            _scan_walk(cell.body, collector, self.has_walrus)
            collector.finish()
            found = self._cell_bodies[id(cell)] = {name: path for name, path in body.imports.items() if name not in body.variables}
        return found

    def chain(self, nodes: Sequence[cst.CSTNode]) -> List[Scope]:
        """Scopes visible at the innermost of `nodes` (enclosing nodes, outermost first), innermost first.

        `nodes` may be a whole stack or only its scope nodes (`FileContext.scope_nodes`, cheaper).
        """
        innermost = next((node for node in reversed(nodes) if type(node) in SCOPE_TYPES), None)
        chain = self._chains.get(id(innermost))
        if chain is not None:
            return chain
        scope_nodes = scope_nodes_of(nodes)
        chain = self._chains[id(innermost)] = []
        for index in range(len(scope_nodes) - 1, -1, -1):
            node = scope_nodes[index]
            # A class body is visible only to code directly in it, not to its methods.
            if isinstance(node, cst.ClassDef) and index != len(scope_nodes) - 1:
                continue
            chain.append(self.scope_of(node))
        return chain

    def resolve(self, name: str, scope_nodes: Sequence[cst.CSTNode]) -> Optional[str]:
        """The dotted path an import bound to `name`, or None for a variable or an unknown name."""
        if not self.is_imported_anywhere(name):
            return None
        for scope in self.chain(scope_nodes):
            if name in scope.imports:
                return scope.imports[name]
            if name in scope.variables:
                return None
        return None

    def binding_scope(self, name: str, scope_nodes: Sequence[cst.CSTNode]) -> Optional[Scope]:
        for scope in self.chain(scope_nodes):
            if name in scope.imports or name in scope.variables:
                return scope
        return None


def scope_nodes_of(stack: Sequence[cst.CSTNode]) -> List[cst.CSTNode]:
    return [node for node in stack if type(node) in SCOPE_TYPES]


def parameters(params: cst.Parameters) -> list:
    """Every parameter of a signature, `*args` and `**kwargs` included."""
    found = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            found.append(star)
    return found
