"""Meaning-preserving rewrites of a fixture program (issue 34's metamorphic suite).

Each rewrite takes the source of one fixture file, whose `# expect:` comments were first replaced by unique
marker comments (`mark`), and returns the rewritten program as files (`Program`), or None where it does not
apply (no module-level loop to move, no import to alias). A marker is a comment, and libcst keeps a comment
with the statement it ends, so wherever a rewrite moves a statement (into a function, a class, another file, a
notebook cell) its marker moves with it: `locate` finds each marker afterwards and the logical line around it
is "the same statement". A rewrite that changes what a rule means (a `__main__` guard is what TL302 asks for)
names that rule in `declines`, and its findings are not counted.

Every rewrite keeps the program running as before: each one below says what it checks to be sure of that,
and every output must compile (`Program.compile`).
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import ClassScope, GlobalScope, MetadataWrapper, QualifiedNameProvider, ScopeProvider

from torchlint.engine.expectations import EXPECT_COMMENT
from torchlint.engine.scopes import Scopes, cell_returns

MARK = "# metamorphic-mark: {}"
MARK_COMMENT = re.compile(r"#\s*metamorphic-mark:\s*(\d+)")
# A marked statement a rewrite had to copy (an import into a second file): findings there are explained, not required.
COPY_COMMENT = re.compile(r"#\s*metamorphic-copy:\s*(\d+)")


@dataclass(frozen=True)
class Marked:
    """A fixture's source with each `# expect:` comment replaced by a numbered marker."""

    source: str
    codes: Dict[int, Tuple[str, ...]]  # marker -> the codes expected on its statement
    rows: Dict[int, int]  # marker -> the row it was on in the fixture


def mark(text: str) -> Marked:
    lines = text.splitlines(keepends=True)
    codes: Dict[int, Tuple[str, ...]] = {}
    rows: Dict[int, int] = {}
    for index, line in enumerate(lines):
        match = EXPECT_COMMENT.search(line.rstrip("\r\n"))
        if not match:
            continue
        number = len(codes) + 1
        codes[number] = tuple(item.strip().partition(":")[0] for item in match.group("items").split(","))
        rows[number] = index + 1
        ending = line[len(line.rstrip("\r\n")):]
        lines[index] = line[: match.start()] + "  " + MARK.format(number) + ending
    return Marked("".join(lines), codes, rows)


@dataclass(frozen=True)
class Place:
    """Where a marker ended up: a file, a notebook cell (None in a .py file), and its statements' rows (first, last):
    one statement, or two where a rewrite made one statement into two (`for` into an iterator and a `while`)."""

    path: str
    cell: Optional[int]
    rows: Tuple[Tuple[int, int], ...]

    def holds(self, finding) -> bool:
        row = finding.location.row
        return finding.cell == self.cell and any(first <= row <= last for first, last in self.rows)


@dataclass
class Program:
    """The rewritten program: files by path relative to the project folder; `target` is the rewritten fixture."""

    files: Dict[str, str]
    target: str

    def compile(self) -> None:
        """Raise SyntaxError unless every output is Python (a notebook: its cells in order)."""
        for path, text in self.files.items():
            compile(python_of(path, text), path, "exec", dont_inherit=True)

    def places(self, comment: "re.Pattern" = MARK_COMMENT) -> Dict[int, Place]:
        """Where each marker is (`COPY_COMMENT`: each copy of a marked statement)."""
        found: Dict[int, Place] = {}
        for path, text in self.files.items():
            if path.endswith(".ipynb"):
                cells = json.loads(text)["cells"]
                for number, cell in enumerate(cells, start=1):
                    if cell["cell_type"] == "code":
                        for marker, rows in _marked_statements("".join(cell["source"]), comment).items():
                            found[marker] = Place(path, number, tuple(rows))
            else:
                for marker, rows in _marked_statements(text, comment).items():
                    found[marker] = Place(path, None, tuple(rows))
        return found


def python_of(path: str, text: str) -> str:
    if not path.endswith(".ipynb"):
        return text
    return "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"] if cell["cell_type"] == "code")


def _marked_statements(text: str, comment: "re.Pattern") -> Dict[int, List[Tuple[int, int]]]:
    """Each marker's logical lines (first and last row): a finding anywhere on one is on the marked statement."""
    found: Dict[int, List[Tuple[int, int]]] = {}
    start: Optional[int] = None
    pending: List[int] = []
    skipped = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            match = comment.search(token.string)
            if match:
                if start is None:
                    raise ValueError(f"marker {match.group(1)} lost its statement (now on a line of its own)")
                pending.append(int(match.group(1)))
        elif token.type == tokenize.NEWLINE:
            for marker in pending:
                found.setdefault(marker, []).append((start, token.start[0]))
            start, pending = None, []
        elif token.type not in skipped and start is None:
            start = token.start[0]
    return found


# ---------------------------------------------------------------------------------------------------------------
# Shared helpers


def _names_in(node: cst.CSTNode) -> Set[str]:
    """Every identifier written in the node (over-approximates what it reads)."""
    names: Set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            names.add(name.value)

    node.visit(Collect())
    return names


def _bound_at_top(statement: cst.CSTNode) -> Set[str]:
    """Names a module-level statement binds in the module (not inside the functions or classes it holds)."""
    bound: Set[str] = set()

    def targets(node: cst.CSTNode) -> None:
        if isinstance(node, cst.Name):
            bound.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                targets(element.value)
        elif isinstance(node, cst.StarredElement):
            targets(node.value)

    class Collect(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            targets(node.target)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            targets(node.target)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            targets(node.target)

        def visit_For(self, node: cst.For) -> None:
            targets(node.target)

        def visit_AsName(self, node: cst.AsName) -> None:
            targets(node.name)

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            targets(node.target)

        def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
            if node.asname is None:
                bound.add(cst.Module([]).code_for_node(node.name).split(".")[0])

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            bound.add(node.name.value)
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            bound.add(node.name.value)
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_CompFor(self, node: cst.CompFor) -> bool:
            return False

    statement.visit(Collect())
    return bound


def _is_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _is_future(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.ImportFrom)
        and isinstance(statement.body[0].module, cst.Name)
        and statement.body[0].module.value == "__future__"
    )


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_main_guard(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.If) and "__main__" in cst.Module([]).code_for_node(statement.test)


def _preamble_end(module: cst.Module) -> int:
    """Index after the docstring, `from __future__` imports and the first block of imports: where to add imports."""
    index = 0
    body = module.body
    if body and _is_docstring(body[0]):
        index = 1
    while index < len(body) and _is_import(body[index]):
        index += 1
    return index


def _insert(module: cst.Module, index: int, statements: Sequence[cst.BaseStatement]) -> cst.Module:
    body = list(module.body)
    if index == 0 and body:
        # The module's first statement keeps its leading comments (fixture-config lines) at the top of the file.
        first = body[0]
        statements = list(statements)
        statements[0] = statements[0].with_changes(leading_lines=first.leading_lines)
        body[0] = first.with_changes(leading_lines=())
    return module.with_changes(body=body[:index] + list(statements) + body[index:])


def _fresh(preferred: Iterable[str], taken: Set[str]) -> str:
    for name in preferred:
        if name not in taken:
            return name
    base = list(preferred)[-1]
    number = 2
    while f"{base}{number}" in taken:
        number += 1
    return f"{base}{number}"


def _identifiers(source: str) -> Set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))


def _statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


def _module_bindings(module: cst.Module) -> Dict[str, List[cst.CSTNode]]:
    """Module-level names and the top-level statements that bind them."""
    bindings: Dict[str, List[cst.CSTNode]] = {}
    for statement in module.body:
        for name in _bound_at_top(statement):
            bindings.setdefault(name, []).append(statement)
    return bindings


class Rewrite:
    """A meaning-preserving rewrite; `apply` returns None where it does not apply."""

    name: str = ""
    # Rules whose meaning this rewrite changes, with why: their findings are neither required nor counted.
    declines: Dict[str, str] = {}

    def apply(self, source: str, target: str, taken_paths: FrozenSet[str], config=None) -> Optional[Program]:
        """`taken_paths`: the project's other files; `config`: the fixture's (torchlint.config.Config)."""
        self.config = config
        module = cst.parse_module(source)
        rewritten = self.rewrite(module, source)
        if rewritten is None:
            return None
        if isinstance(rewritten, Program):
            return rewritten
        return Program({target: rewritten.code}, target)

    def rewrite(self, module: cst.Module, source: str):
        raise NotImplementedError


class Identity(Rewrite):
    """The control: the marked fixture as it is, linted the way every rewrite's output is (from a temp folder)."""

    name = "identity"

    def rewrite(self, module, source):
        return module


# ---------------------------------------------------------------------------------------------------------------
# Loop wrappers: tqdm(...) and enumerate(...) around every `for` loop's iterable.


class _ForLoops(cst.CSTTransformer):
    def __init__(self, change):
        self.change = change
        self.changed = 0

    def leave_For(self, original: cst.For, updated: cst.For):
        if updated.asynchronous is not None:
            return updated
        self.changed += 1
        return self.change(updated)


class Tqdm(Rewrite):
    name = "tqdm"

    def rewrite(self, module, source):
        imported = re.search(r"^from tqdm(\.\w+)? import .*\btqdm\b", source, re.M) is not None
        if not imported and "tqdm" in _identifiers(source):
            return None
        loops = _ForLoops(lambda loop: loop.with_changes(iter=cst.Call(cst.Name("tqdm"), [cst.Arg(loop.iter)])))
        module = module.visit(loops)
        if not loops.changed:
            return None
        return module if imported else _insert(module, _preamble_end(module), [_statement("from tqdm import tqdm\n")])


class Enumerate(Rewrite):
    name = "enumerate"

    def rewrite(self, module, source):
        if "enumerate" in _bound_names(module):
            return None
        step = _fresh(["step_index"], _identifiers(source))

        def change(loop: cst.For) -> cst.For:
            target = loop.target
            if isinstance(target, cst.Tuple) and not target.lpar:
                target = target.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            pair = cst.Tuple([cst.Element(cst.Name(step)), cst.Element(target)], lpar=[], rpar=[])
            return loop.with_changes(target=pair, iter=cst.Call(cst.Name("enumerate"), [cst.Arg(loop.iter)]))

        loops = _ForLoops(change)
        module = module.visit(loops)
        return module if loops.changed else None


def _qualified(resolved, node):
    """Qualified names from a resolved QualifiedNameProvider (its values load lazily)."""
    value = resolved.get(node, ())
    return value() if callable(value) else value


def _bound_names(module: cst.Module) -> Set[str]:
    names: Set[str] = set()
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    for scope in set(wrapper.resolve(ScopeProvider).values()):
        if scope is not None:
            names.update(assignment.name for assignment in scope.assignments)
    return names


# ---------------------------------------------------------------------------------------------------------------
# `for` into `while` over an iterator.


class WhileLoop(Rewrite):
    name = "while"

    def rewrite(self, module, source):
        taken = _identifiers(source)
        if {"iter", "next", "StopIteration"} & _bound_names(module):
            return None
        changed = []

        class Loops(cst.CSTTransformer):
            def leave_For(self, original: cst.For, updated: cst.For):
                if updated.asynchronous is not None or updated.orelse is not None:
                    return updated
                iterator = _fresh([f"batches_iterator_{len(changed) + 1}"], taken)
                taken.add(iterator)
                changed.append(iterator)
                # The `for` statement becomes two: its header comment (the marker) goes on both.
                header = updated.body.header if isinstance(updated.body, cst.IndentedBlock) else cst.TrailingWhitespace()
                start = cst.SimpleStatementLine(
                    [cst.Assign([cst.AssignTarget(cst.Name(iterator))], cst.Call(cst.Name("iter"), [cst.Arg(updated.iter)]))],
                    leading_lines=updated.leading_lines,
                    trailing_whitespace=header,
                )
                step = _statement(f"try:\n    placeholder = next({iterator})\nexcept StopIteration:\n    break\n")
                placeholder = step.body.body[0].body[0].targets[0]
                target = updated.target
                if isinstance(target, cst.Tuple) and target.lpar:
                    target = target.with_changes(lpar=[], rpar=[])
                step = step.deep_replace(placeholder, placeholder.with_changes(target=target))
                if isinstance(updated.body, cst.IndentedBlock):
                    body = list(updated.body.body)
                else:
                    body = [cst.SimpleStatementLine(list(updated.body.body))]
                loop = cst.While(cst.Name("True"), cst.IndentedBlock([step, *body], header=header))
                return cst.FlattenSentinel([start, loop])

        module = module.visit(Loops())
        return module if changed else None


# ---------------------------------------------------------------------------------------------------------------
# A module-level loop into `def train(...)` called from `main()` under a `__main__` guard, or into `Trainer.fit()`.

_GUARD_CHANGES = {
    "TL302": "a `__main__` guard is what TL302 asks for: the loop no longer runs on import",
    "TL311": "the guard makes the file a script (FileKind.SCRIPT), which TL311 reads",
}
_PREFERRED_PARAMETERS = ("model", "loader", "criterion", "optimizer", "device")


def _holds_loop(statement: cst.CSTNode) -> bool:
    found = []

    class Find(cst.CSTVisitor):
        def visit_For(self, node):
            found.append(node)

        def visit_While(self, node):
            found.append(node)

        def visit_FunctionDef(self, node):
            return False

        def visit_ClassDef(self, node):
            return False

    statement.visit(Find())
    return bool(found)


@dataclass
class _Split:
    """A module whose script part from its first module-level loop on can move into a function."""

    kept: List[cst.BaseStatement]
    moved: List[cst.BaseStatement]
    parameters: List[str]
    taken: Set[str] = field(default_factory=set)


def _split_script(module: cst.Module, source: str) -> Optional[_Split]:
    body = list(module.body)
    if any(_is_main_guard(statement) for statement in body) or re.search(r"\b(global|nonlocal)\b", source):
        return None

    def is_script(index: int, statement) -> bool:
        return not (
            _is_import(statement)
            or isinstance(statement, (cst.FunctionDef, cst.ClassDef))
            or (index == 0 and _is_docstring(statement))
        )

    first_loop = next((index for index, statement in enumerate(body) if _holds_loop(statement)), None)
    if first_loop is None or not is_script(first_loop, body[first_loop]):
        return None
    moved = [statement for index, statement in enumerate(body) if index >= first_loop and is_script(index, statement)]
    kept = [statement for statement in body if not any(statement is other for other in moved)]
    # Names the functions and classes read stay module globals: a moved statement binding one would hide it.
    read_elsewhere: Set[str] = set()
    for statement in body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            read_elsewhere |= _names_in(statement)
    for statement in moved:
        if _bound_at_top(statement) & read_elsewhere:
            return None
    kept_variables: Set[str] = set()
    for index, statement in enumerate(body):
        if index < first_loop and is_script(index, statement):
            kept_variables |= _bound_at_top(statement)
    read = set().union(*(_names_in(statement) for statement in moved))
    parameters = [name for name in _PREFERRED_PARAMETERS if name in read & kept_variables]
    parameters += sorted((read & kept_variables) - set(parameters))
    return _Split(kept, moved, parameters, _identifiers(source))


def _function_def(name: str, parameters: Sequence[str], body: Sequence[cst.BaseStatement]) -> cst.FunctionDef:
    header = _statement(f"def {name}({', '.join(parameters)}):\n    pass\n")
    return header.with_changes(body=cst.IndentedBlock(list(body)), leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


def _with_main(kept: List[cst.BaseStatement], definitions: List[cst.BaseStatement], call: str, taken: Set[str]):
    main = _fresh(["main", "run_main"], taken)
    main_def = _statement(f"def {main}():\n    {call}\n").with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    guard = _statement(f'if __name__ == "__main__":\n    {main}()\n').with_changes(
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()]
    )
    return cst.Module(body=[*kept, *definitions, main_def, guard])


class IntoFunction(Rewrite):
    name = "function"
    declines = _GUARD_CHANGES

    def rewrite(self, module, source):
        split = _split_script(module, source)
        if split is None:
            return None
        train = _fresh(["train", "train_loop"], split.taken)
        function = _function_def(train, split.parameters, split.moved)
        call = f"{train}({', '.join(split.parameters)})"
        return module.with_changes(body=_with_main(split.kept, [function], call, split.taken).body)


class IntoTrainer(Rewrite):
    name = "trainer"
    declines = _GUARD_CHANGES

    def rewrite(self, module, source):
        split = _split_script(module, source)
        if split is None:
            return None
        name = _fresh(["Trainer", "LoopTrainer"], split.taken)
        fit = _function_def("fit", ["self", *split.parameters], split.moved).with_changes(leading_lines=[cst.EmptyLine()])
        fit = _parameters_into_attributes(fit, split.parameters)
        if fit is None:
            return None
        fit = fit.with_changes(params=cst.Parameters([cst.Param(cst.Name("self"))]))
        init_body = "".join(f"        self.{parameter} = {parameter}\n" for parameter in split.parameters) or "        pass\n"
        init = _statement(f"class C:\n    def __init__({', '.join(['self', *split.parameters])}):\n{init_body}").body.body[0]
        trainer = cst.ClassDef(cst.Name(name), cst.IndentedBlock([init, fit]), leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        call = f"{name}({', '.join(split.parameters)}).fit()"
        return module.with_changes(body=_with_main(split.kept, [trainer], call, split.taken).body)


def _parameters_into_attributes(function: cst.FunctionDef, parameters: Sequence[str]) -> Optional[cst.FunctionDef]:
    """Every use of a parameter in the function as `self.<parameter>`; None where a use cannot be an attribute."""
    wrapper = MetadataWrapper(cst.Module([function]))
    scopes = wrapper.resolve(ScopeProvider)
    function = wrapper.module.body[0]
    scope = scopes[function.body.body[0]]
    replaced: Set[int] = set()
    for parameter in parameters:
        for assignment in scope.assignments[parameter]:
            if isinstance(assignment.node, cst.Name):
                replaced.add(id(assignment.node))
            elif not isinstance(assignment.node, cst.Param):
                return None
            replaced.update(id(access.node) for access in assignment.references)
    unassignable = []

    class Check(cst.CSTVisitor):
        def visit_NamedExpr(self, node):
            if id(node.target) in replaced:
                unassignable.append(node)

        def visit_AsName(self, node):
            if id(node.name) in replaced:
                unassignable.append(node)

    function.visit(Check())
    if unassignable:
        return None

    class Replace(cst.CSTTransformer):
        def leave_Name(self, original, updated):
            if id(original) in replaced:
                return cst.Attribute(cst.Name("self"), updated)
            return updated

    return function.visit(Replace())


# ---------------------------------------------------------------------------------------------------------------
# Names: local variables renamed; imports aliased.


# Module variables that pytest reads by their name: they are not the program's own names to choose.
_READ_BY_NAME = frozenset({"pytestmark", "pytest_plugins"})


class Rename(Rewrite):
    """Variables (not parameters, imports, functions or classes) get opaque names, consistently in every scope.

    The names the configuration gives a meaning to (`device-name`, `label-names`) keep theirs: renaming them
    would change what the rules are told, not how the code is written. So do the module variables a tool reads by
    name (`pytestmark`, `__all__`), and the names a marimo notebook's cells return (marimo passes them to the other
    cells by name): renaming them changes what the program means.
    """

    name = "rename"

    def rewrite(self, module, source):
        import fnmatch

        from torchlint.config import DEFAULT_LABEL_NAMES

        meaningful = (self.config.device_name, *self.config.label_names) if self.config else ("device", *DEFAULT_LABEL_NAMES)
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        scopes = set(wrapper.resolve(ScopeProvider).values())
        taken = _identifiers(source)
        cells = Scopes(module)
        returned = {name.value for cell in module.body if cells.is_cell(cell) for name in cell_returns(cell)[1]}
        renamed: Dict[int, str] = {}
        for scope in scopes:
            if scope is None or isinstance(scope, ClassScope):
                continue
            for name in sorted({assignment.name for assignment in scope.assignments}):
                if name.startswith("__") or name in _READ_BY_NAME or name in returned or any(fnmatch.fnmatchcase(name, pattern) for pattern in meaningful):
                    continue
                assignments = list(scope.assignments[name])
                if not assignments or not all(
                    type(assignment).__name__ == "Assignment" and isinstance(assignment.node, cst.Name)
                    for assignment in assignments
                ):
                    continue
                new = _fresh([f"v{len(renamed) + 1}"], taken)
                taken.add(new)
                for assignment in assignments:
                    renamed[id(assignment.node)] = new
                    for access in assignment.references:
                        if isinstance(access.node, cst.Name):
                            renamed[id(access.node)] = new
        if not renamed:
            return None

        class Replace(cst.CSTTransformer):
            def leave_Name(self, original, updated):
                return updated.with_changes(value=renamed[id(original)]) if id(original) in renamed else updated

        return wrapper.module.visit(Replace())


_ALIASES = {"torch": "T", "nn": "tnn", "F": "TF", "functional": "TF", "optim": "topt", "np": "onp", "numpy": "onp"}


class AliasImports(Rewrite):
    """`import torch` -> `import torch as T`, `import torch.nn as nn` -> `from torch import nn as tnn`,
    `from m import x` -> `from m import x as x_alias`; every use of the name follows."""

    name = "alias"

    def rewrite(self, module, source):
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        scopes = wrapper.resolve(ScopeProvider)
        module = wrapper.module
        global_scope = next(scope for scope in scopes.values() if isinstance(scope, GlobalScope))
        taken = _identifiers(source)
        if re.search(r"\b(global|nonlocal)\b|__all__", source):
            return None
        renamed: Dict[int, str] = {}
        new_statements: Dict[int, cst.SimpleStatementLine] = {}

        def alias_for(name: str) -> Optional[str]:
            assignments = list(global_scope.assignments[name])
            if len(assignments) != 1:
                return None
            accesses = list(assignments[0].references)
            if not all(isinstance(access.node, cst.Name) for access in accesses):
                return None
            new = _fresh([_ALIASES.get(name, f"{name}_alias")], taken)
            taken.add(new)
            for access in accesses:
                renamed[id(access.node)] = new
            return new

        for statement in module.body:
            if not _is_import(statement) or _is_future(statement):
                continue
            parts = []
            for small in statement.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        dotted = cst.Module([]).code_for_node(alias.name)
                        bound = alias.asname.name.value if alias.asname else dotted
                        if "." in bound:
                            parts.append(f"import {dotted}")
                            continue
                        new = alias_for(bound)
                        if new is None:
                            parts.append(cst.Module([]).code_for_node(cst.Import([alias.with_changes(comma=cst.MaybeSentinel.DEFAULT)])))
                        elif "." in dotted:
                            package, _, last = dotted.rpartition(".")
                            parts.append(f"from {package} import {last} as {new}")
                        else:
                            parts.append(f"import {dotted} as {new}")
                elif isinstance(small.names, cst.ImportStar) or small.relative:
                    parts.append(cst.Module([]).code_for_node(small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)))
                else:
                    package = cst.Module([]).code_for_node(small.module)
                    for alias in small.names:
                        original = alias.name.value
                        bound = alias.asname.name.value if alias.asname else original
                        new = alias_for(bound)
                        alias_as = new or (bound if bound != original else None)
                        parts.append(f"from {package} import {original}" + (f" as {alias_as}" if alias_as else ""))
            replacement = _statement("; ".join(parts) + "\n")
            new_statements[id(statement)] = replacement.with_changes(
                leading_lines=statement.leading_lines, trailing_whitespace=statement.trailing_whitespace
            )
        if not renamed:
            return None

        class Replace(cst.CSTTransformer):
            def leave_Name(self, original, updated):
                return updated.with_changes(value=renamed[id(original)]) if id(original) in renamed else updated

        module = module.visit(Replace())
        body = [new_statements.get(id(original), statement) for original, statement in zip(wrapper.module.body, module.body)]
        return module.with_changes(body=body)


# ---------------------------------------------------------------------------------------------------------------
# Hyper-parameters from argparse.

_HYPER_PARAMETERS = ("lr", "batch_size", "momentum", "weight_decay", "epochs", "max_epochs", "gamma", "step_size")


class Argparse(Rewrite):
    """Numeric literals given as `lr=`, `batch_size=`, ... and the epoch count of `for epoch in range(N)` become
    `args.<name>`, an argparse option whose default is the literal. Never a literal a rule reads as such
    (num_workers, pin_memory, device indexes): those stay written out."""

    name = "argparse"

    def rewrite(self, module, source):
        taken = _identifiers(source)
        args = _fresh(["args", "hparams", "options"], taken)
        parser = _fresh(["parser", "argument_parser"], taken)
        if "argparse" in taken:
            return None
        options: Dict[str, Tuple[str, str]] = {}  # option -> (type, default)

        def option(name: str, literal: cst.BaseExpression) -> cst.Attribute:
            text = cst.Module([]).code_for_node(literal)
            kind = "int" if isinstance(literal, cst.Integer) else "float"
            chosen = name
            number = 2
            while chosen in options and options[chosen] != (kind, text):
                chosen = f"{name}_{number}"
                number += 1
            options[chosen] = (kind, text)
            return cst.Attribute(cst.Name(args), cst.Name(chosen))

        def is_number(node) -> bool:
            if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
                node = node.expression
            return isinstance(node, (cst.Integer, cst.Float))

        class Replace(cst.CSTTransformer):
            def leave_Arg(self, original, updated):
                if updated.keyword is not None and updated.keyword.value in _HYPER_PARAMETERS and is_number(updated.value):
                    return updated.with_changes(value=option(updated.keyword.value, updated.value))
                return updated

            def leave_For(self, original, updated):
                target = cst.Module([]).code_for_node(updated.target)
                call = updated.iter
                if (
                    "epoch" in target
                    and isinstance(call, cst.Call)
                    and isinstance(call.func, cst.Name)
                    and call.func.value == "range"
                    and len(call.args) == 1
                    and isinstance(call.args[0].value, cst.Integer)
                ):
                    arg = call.args[0].with_changes(value=option("epochs", call.args[0].value))
                    return updated.with_changes(iter=call.with_changes(args=[arg]))
                return updated

        module = module.visit(Replace())
        if not options:
            return None
        lines = ["import argparse\n", f"{parser} = argparse.ArgumentParser()\n"]
        lines += [
            f'{parser}.add_argument("--{name.replace("_", "-")}", type={kind}, default={text})\n'
            for name, (kind, text) in options.items()
        ]
        lines.append(f"{args} = {parser}.parse_args()\n")
        return _insert(module, _preamble_end(module), [_statement(line) for line in lines])


# ---------------------------------------------------------------------------------------------------------------
# The model class in another file of the project.

_MODULE_BASES = re.compile(r"(^|\.)(Module|LightningModule|Sequential|ModuleList|ModuleDict)$")


class ModelInAnotherFile(Rewrite):
    """Every module-level `nn.Module` subclass moves to `model.py` (with the file's imports); the fixture imports
    them back: `from model import Net`. Only where the classes read no module-level variable of the fixture."""

    name = "model-file"
    declines = {
        "TL205": "TL205 reads a file's own device choice: the classes leave the file's `is_available()` fallback behind",
    }

    def apply(self, source, target, taken_paths, config=None):
        module = cst.parse_module(source)
        folder, _, _ = target.rpartition("/")
        stem = _fresh(["model", "network", "networks"], {path.rpartition("/")[2][:-3] for path in taken_paths} | _identifiers(source))
        classes = [
            statement for statement in module.body
            if isinstance(statement, cst.ClassDef)
            and any(_MODULE_BASES.search(cst.Module([]).code_for_node(base.value)) for base in statement.bases)
        ]
        if not classes:
            return None
        class_names = {statement.name.value for statement in classes}
        bindings = _module_bindings(module)
        for statement in classes:
            for name in _names_in(statement) - class_names:
                if any(not _is_import(binder) for binder in bindings.get(name, [])):
                    return None
        read = set().union(*(_names_in(statement) for statement in classes))
        imports = [
            statement for statement in module.body
            if _is_import(statement) and (_is_future(statement) or _bound_at_top(statement) & read)
        ]
        if any(
            isinstance(small, cst.ImportFrom) and small.relative for statement in imports for small in statement.body
        ):
            return None
        # An import both files need is now two statements: a finding on the copy repeats the marked one's.
        copied_code = "".join(module.code_for_node(statement) for statement in imports)
        copied = cst.parse_module(copied_code.replace("metamorphic-mark", "metamorphic-copy"))
        model_file = cst.Module(body=[*copied.body, *[_spaced(statement) for statement in classes]])
        kept = [statement for statement in module.body if not any(statement is other for other in classes)]
        fixture = module.with_changes(body=kept)
        fixture = _insert(fixture, _preamble_end(fixture), [_statement(f"from {stem} import {', '.join(sorted(class_names))}\n")])
        model_path = f"{folder}/{stem}.py" if folder else f"{stem}.py"
        return Program({target: fixture.code, model_path: model_file.code}, target)


def _spaced(statement: cst.BaseStatement) -> cst.BaseStatement:
    comments = [line for line in statement.leading_lines if line.comment is not None]
    return statement.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *comments])


# ---------------------------------------------------------------------------------------------------------------
# The model wrapped: nn.DataParallel(model) / torch.compile(model).

# What a wrapped model still answers as the model did: DataParallel forwards none of the model's own attributes.
_MODULE_METHODS = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children", "modules",
    "named_modules", "state_dict", "load_state_dict", "train", "eval", "to", "cuda", "cpu", "zero_grad",
    "requires_grad_", "apply", "half", "float", "double", "bfloat16", "training", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook",
})
_MODEL_CHAIN = frozenset({"to", "cuda", "cpu", "train", "eval", "float", "half", "double"})


class WrapModel(Rewrite):
    def __init__(self, name: str, wrapper: str, forwards_attributes: bool):
        self.name = name
        self.wrapper = wrapper
        self.forwards_attributes = forwards_attributes

    def rewrite(self, module, source):
        if not re.search(r"\b(nn|Module|models)\b", source):
            return None  # no model class, layer or torchvision model to wrap
        local_modules = {
            statement.name.value for statement in module.body
            if isinstance(statement, cst.ClassDef)
            and any(_MODULE_BASES.search(cst.Module([]).code_for_node(base.value)) for base in statement.bases)
        }
        torch_bound = re.search(r"^import torch\s*$", source, re.M) is not None
        if not torch_bound and "torch" in _bound_names(module):
            return None
        attributes_used: Dict[str, Set[str]] = {}

        class Attributes(cst.CSTVisitor):
            def visit_Attribute(self, node):
                if isinstance(node.value, cst.Name):
                    attributes_used.setdefault(node.value.value, set()).add(node.attr.value)

        module.visit(Attributes())

        def is_model(value: cst.BaseExpression) -> bool:
            while (
                isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _MODEL_CHAIN
            ):
                value = value.func.value
            if not isinstance(value, cst.Call):
                return False
            if isinstance(value.func, cst.Name) and value.func.value in local_modules:
                return True
            # A layer or a torchvision model as written (`nn.Linear`, `torch.nn.Sequential`, `models.resnet18`).
            callee = cst.Module([]).code_for_node(value.func)
            return (
                re.fullmatch(r"(torch\.)?nn\.[A-Z]\w*|(torchvision\.)?models\.\w+", callee) is not None
                and not callee.endswith("Loss")
                and not re.search(r"\.(Parameter\w*|Buffer)$", callee)  # tensors, not modules
            )

        wrapped = []
        outer = self

        class Wrap(cst.CSTTransformer):
            # Not in a class: a wrapper built in `forward` is a module built on every call (TL702's finding).
            def visit_ClassDef(self, node):
                return False

            def _wrap_in(self, statements):
                body = []
                for statement in statements:
                    body.append(statement)
                    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
                        continue
                    small = statement.body[0]
                    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
                        continue
                    name = small.targets[0].target.value
                    if not is_model(small.value):
                        continue
                    if not outer.forwards_attributes and attributes_used.get(name, set()) - _MODULE_METHODS:
                        continue
                    wrapped.append(name)
                    body.append(_statement(f"{name} = {outer.wrapper}({name})\n"))
                return body

            def leave_Module(self, original, updated):
                return updated.with_changes(body=self._wrap_in(updated.body))

            def leave_IndentedBlock(self, original, updated):
                return updated.with_changes(body=self._wrap_in(updated.body))

        module = module.visit(Wrap())
        if not wrapped:
            return None
        return module if torch_bound else _insert(module, _preamble_end(module), [_statement("import torch\n")])


# ---------------------------------------------------------------------------------------------------------------
# A loss module into the functional loss, as a value.

_FUNCTIONAL_LOSSES = {
    "CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss", "BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
    "BCELoss": "binary_cross_entropy", "MSELoss": "mse_loss", "L1Loss": "l1_loss", "SmoothL1Loss": "smooth_l1_loss",
    "HuberLoss": "huber_loss", "KLDivLoss": "kl_div",
}


class FunctionalLoss(Rewrite):
    """`criterion = nn.CrossEntropyLoss()` -> `criterion = F.cross_entropy`: only a loss built without arguments
    and never used but by calling it (a function has no `.to()`)."""

    name = "functional"

    def rewrite(self, module, source):
        if not re.search(r"\b(" + "|".join(_FUNCTIONAL_LOSSES) + r")\b", source):
            return None
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        qualified = wrapper.resolve(QualifiedNameProvider)
        module = wrapper.module
        functional = re.search(
            r"^import torch\.nn\.functional as (\w+)\s*$|^from torch\.nn import functional as (\w+)\s*$", source, re.M
        )
        name = (functional.group(1) or functional.group(2)) if functional else _fresh(["F", "functional"], _identifiers(source))
        if functional and len(_module_bindings(module).get(name, [])) != 1:
            return None
        targets_used: Set[str] = set()

        class Uses(cst.CSTVisitor):
            def visit_Attribute(self, node):
                targets_used.add(cst.Module([]).code_for_node(node.value))

        module.visit(Uses())
        changed = []

        class Replace(cst.CSTTransformer):
            def leave_Assign(self, original, updated):
                value = original.value
                if len(original.targets) != 1 or not isinstance(value, cst.Call) or value.args:
                    return updated
                target = cst.Module([]).code_for_node(original.targets[0].target)
                if target in targets_used:
                    return updated
                for q in _qualified(qualified, value.func):
                    match = re.fullmatch(r"torch\.nn(?:\.modules\.loss)?\.(\w+)", q.name)
                    if match and match.group(1) in _FUNCTIONAL_LOSSES:
                        changed.append(target)
                        loss = cst.Attribute(cst.Name(name), cst.Name(_FUNCTIONAL_LOSSES[match.group(1)]))
                        return updated.with_changes(value=loss)
                return updated

        module = module.visit(Replace())
        if not changed:
            return None
        if functional:
            return module
        return _insert(module, _preamble_end(module), [_statement(f"import torch.nn.functional as {name}\n")])


# ---------------------------------------------------------------------------------------------------------------
# Notebook cells.


class NotebookCells(Rewrite):
    """The file as a notebook: a markdown cell, then one code cell for the leading imports and one per other
    module-level statement (the same code, run top to bottom)."""

    name = "notebook"
    declines = {
        "TL302": "a notebook's module-level DataLoader loop runs in the kernel, never on a worker's import",
        "TL304": "a notebook's own definitions do not pickle by name into spawn workers: TL304 says so only there",
        "TL208": "a notebook cell's last expression is displayed, not discarded",
        "TL311": "the file becomes a notebook (FileKind.NOTEBOOK), which TL311 reads",
        "TL205": "TL205 reads whether the file is a library (FileKind.LIBRARY): a notebook is not one",
    }

    def apply(self, source, target, taken_paths, config=None):
        import nbformat

        module = cst.parse_module(source)
        if not module.body:
            return None
        cells: List[str] = []
        imports: List[str] = []
        for index, statement in enumerate(module.body):
            code = module.code_for_node(statement)
            if index == 0:
                code = module.header and "".join(module.code_for_node(line) for line in module.header) + code or code
            if _is_import(statement) and len(cells) == 0:
                imports.append(code)
                continue
            if imports:
                cells.append("".join(imports))
                imports = []
            cells.append(code)
        if imports:
            cells.append("".join(imports))
        notebook = nbformat.v4.new_notebook()
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        notebook.metadata["language_info"] = {"name": "python"}
        notebook.cells.append(nbformat.v4.new_markdown_cell("A fixture as notebook cells (metamorphic suite)."))
        for code in cells:
            notebook.cells.append(nbformat.v4.new_code_cell(code.lstrip("\n").rstrip("\n")))
        path = target[:-3] + ".ipynb"
        return Program({path: nbformat.writes(notebook)}, path)


# ---------------------------------------------------------------------------------------------------------------
# Star import of a project module.


class StarImport(Rewrite):
    """The file's module-level imports move to `common.py`; the file reads them back with `from common import *`."""

    name = "star-import"

    def apply(self, source, target, taken_paths, config=None):
        module = cst.parse_module(source)
        folder, _, _ = target.rpartition("/")
        taken = {path.rpartition("/")[2][:-3] for path in taken_paths} | _identifiers(source)
        stem = _fresh(["common", "shared_imports"], taken)
        imports = [statement for statement in module.body if _is_import(statement) and not _is_future(statement)]
        if not imports:
            return None
        bound = set().union(*(_bound_at_top(statement) for statement in imports))
        relative = any(isinstance(small, cst.ImportFrom) and small.relative for statement in imports for small in statement.body)
        star = any(
            isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar)
            for statement in imports for small in statement.body
        )
        if relative or star or any(name.startswith("_") for name in bound) or "__all__" in source:
            return None
        first = next(index for index, statement in enumerate(module.body) if any(statement is other for other in imports))
        body = []
        for index, statement in enumerate(module.body):
            if index == first:
                body.append(_statement(f"from {stem} import *\n").with_changes(leading_lines=statement.leading_lines))
            if not any(statement is other for other in imports):
                body.append(statement)
        common = cst.Module(body=[statement.with_changes(leading_lines=()) for statement in imports])
        common_path = f"{folder}/{stem}.py" if folder else f"{stem}.py"
        return Program({target: module.with_changes(body=body).code, common_path: common.code}, target)


def all_rewrites() -> List[Rewrite]:
    """Every rewrite, the control first."""
    return [
        Identity(),
        Tqdm(),
        Enumerate(),
        IntoFunction(),
        IntoTrainer(),
        Rename(),
        AliasImports(),
        Argparse(),
        ModelInAnotherFile(),
        WrapModel("data-parallel", "torch.nn.DataParallel", forwards_attributes=False),
        WrapModel("compile", "torch.compile", forwards_attributes=True),
        WhileLoop(),
        FunctionalLoss(),
        NotebookCells(),
        StarImport(),
    ]
