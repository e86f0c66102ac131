"""Compatibility code for older torch: where an old name is reached only on a torch that still has it.

Libraries that support several torch releases pick the API at run time: a
version test (`if pytorch_after(1, 11): ... else: ...`), a feature test
(`hasattr(nn.utils.parametrizations, "weight_norm")`), or a fallback in
`except ImportError:`. The old name in such code is not the path a current torch
takes, so TL601, TL602, TL605 and TL608 leave it alone.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Set

import libcst as cst

from torchlint.engine.scopes import ScopeNode, import_bindings
from torchlint.engine.walk import statement_structure, walk, walk_visitor

# Names that announce a torch (or torchvision) version test: `torch.__version__`, `Version(...)`,
# `pytorch_after(1, 11)`, `is_torch_greater_or_equal_than_2_0`, `_TORCH_GREATER_EQUAL_2_1`,
# `is_torch_version(">=", "2.0")`, `_TORCHVISION_LESS_THAN_0_13`.
_VERSION_NAME = re.compile(r"version|pytorch_after|torch(vision)?_(greater|less)", re.IGNORECASE)
# ... except these, which test the Python release (`sys.version_info >= (3, 11)`), not torch's.
_PYTHON_VERSION_NAMES = frozenset({"version_info", "python_version"})
FALLBACK_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError"})

# Whether an expression names something the file imported (`nn.utils.parametrizations`), as opposed to a
# local value (`model_kwargs`): `hasattr` on the first asks which torch is running, on the second it does not.
Imported = Callable[[cst.BaseExpression], bool]


class _ProbeFinder(cst.CSTVisitor):
    def __init__(self, imported: Imported, version_names: FrozenSet[str] = frozenset()):
        self.imported = imported
        # Module-level names bound to a version (`TORCH_MAJOR = int(torch.__version__.split(".")[0])`).
        self.version_names = version_names
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        # Attribute names are Name nodes too: `torch.__version__` is seen through `__version__`.
        name = node.value
        if name not in _PYTHON_VERSION_NAMES and (_VERSION_NAME.search(name) or name in self.version_names):
            self.found = True

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "hasattr" and node.args and self.imported(node.args[0].value):
            self.found = True


def is_version_or_feature_test(test: cst.BaseExpression, imported: Imported, module: Optional[cst.Module] = None) -> bool:
    """A condition that asks which torch is running: a version comparison or `hasattr(<imported module>, ...)`; with
    the `module` the test is in, also one through the names it binds to a version (`_version_names`)."""
    finder = _ProbeFinder(imported, _version_names(module) if module is not None else frozenset())
    walk_visitor(test, finder)
    return finder.found


@lru_cache(maxsize=1)  # the module being linted: its tests are asked about one after another
def _version_names(module: cst.Module) -> FrozenSet[str]:
    """The names the module's top-level assignments bind to a version or to what is computed from one:
    `TORCH_MAJOR, TORCH_MINOR = ...torch.__version__...`, then `NEW_TORCH = TORCH_MAJOR >= 2` (round 52: SlowFast
    tests `if TORCH_MAJOR >= 1 and TORCH_MINOR >= 8:` around an import of `torch._six`)."""
    assignments = [
        statement for line in module.body if type(line) is cst.SimpleStatementLine
        for statement in line.body if type(statement) is cst.Assign
    ]
    found: Set[str] = set()
    while True:  # until no name is added: each round follows one more step from a version
        finder = _ProbeFinder(lambda expr: False, frozenset(found))
        added = set()
        for assign in assignments:
            targets = {
                name.value for target in assign.targets for name in _assigned_names(target.target)
            } - found
            if targets:
                finder.found = False
                walk_visitor(assign.value, finder)
                if finder.found:
                    added |= targets
        if not added:
            return frozenset(found)
        found |= added


def _assigned_names(target: cst.BaseExpression) -> List[cst.Name]:
    if type(target) is cst.Name:
        return [target]
    if type(target) in (cst.Tuple, cst.List):
        return [name for element in target.elements for name in _assigned_names(element.value)]
    return []


def catches_fallback(handler: cst.ExceptHandler) -> bool:
    """`except ImportError:`, `except (ModuleNotFoundError, AttributeError):`: the handler of a failed probe."""
    caught = handler.type
    elements = [element.value for element in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
    return any(isinstance(element, cst.Name) and element.value in FALLBACK_ERRORS for element in elements)


def _catches_import_error(handler: cst.ExceptHandler) -> bool:
    """The handler runs when an import in its `try` fails: it names a fallback error, `Exception`, or nothing."""
    caught = handler.type
    return caught is None or catches_fallback(handler) or (isinstance(caught, cst.Name) and caught.value in ("Exception", "BaseException"))


def _binds_any(block: cst.BaseSuite, names: Set[str]) -> bool:
    """A statement directly in `block` imports or assigns one of `names` (the replacement a probe falls back to)."""
    for line in block.body:
        for statement in (line.body if isinstance(line, cst.SimpleStatementLine) else [line]):
            if isinstance(statement, (cst.Import, cst.ImportFrom)) and not isinstance(getattr(statement, "names", None), cst.ImportStar):
                if names & {local for local, _ in import_bindings(statement)}:
                    return True
            elif isinstance(statement, cst.Assign) and any(
                isinstance(target.target, cst.Name) and target.target.value in names for target in statement.targets
            ):
                return True
    return False


def in_compat_branch(stack: Sequence[cst.CSTNode], imported: Imported, probes: bool = False) -> bool:
    """True when the innermost node of `stack` sits in code chosen by the running torch.

    Either arm of an `if` or conditional expression that tests a version or a feature,
    or the body of an `except ImportError`/`ModuleNotFoundError`/`AttributeError` handler.
    With `probes` (for names whose import fails on a current torch), also an import in the
    body of a `try` with a handler that catches its failure (`try: from torch._six import
    inf` / `except ImportError: from torch import inf`).
    """
    module = stack[0] if stack and type(stack[0]) is cst.Module else None
    for index, (parent, child) in enumerate(zip(stack, stack[1:])):
        if isinstance(parent, (cst.If, cst.IfExp)) and child is not parent.test and is_version_or_feature_test(parent.test, imported, module):
            return True
        if isinstance(parent, cst.ExceptHandler) and child is parent.body and catches_fallback(parent):
            return True
        if probes and isinstance(parent, cst.Try) and child is parent.body:
            imported_here = next((node for node in stack[index + 2:] if isinstance(node, (cst.Import, cst.ImportFrom))), None)
            if imported_here is not None and any(
                _catches_import_error(handler) and _binds_any(handler.body, {local for local, _ in import_bindings(imported_here)})
                for handler in parent.handlers
            ):
                return True
    return False


def overridden_by_probe(stack: Sequence[cst.CSTNode], imported: Imported) -> bool:
    """`x = old` holding the innermost node of `stack`, followed in its block by `if hasattr(...): x = new`."""
    for index in range(len(stack) - 2, 1, -1):
        node = stack[index]
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return False
        if isinstance(node, cst.Assign) and stack[index + 1] is node.value:
            line, block = stack[index - 1], stack[index - 2]
            if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name) or not isinstance(line, cst.SimpleStatementLine):
                return False  # also `if c: x = old` on one line, which has no block to read on from
            module = stack[0] if type(stack[0]) is cst.Module else None
            return any(
                isinstance(statement, cst.If) and is_version_or_feature_test(statement.test, imported, module)
                and _assigns(statement.body, node.targets[0].target.value)
                for statement in _after(block.body, line)
            )
    return False


def _after(statements: Sequence[cst.CSTNode], line: cst.CSTNode) -> List[cst.CSTNode]:
    for index, statement in enumerate(statements):
        if statement is line:
            return list(statements[index + 1:])
    return []


def _assigns(block: cst.BaseSuite, name: str) -> bool:
    lines = block.body if isinstance(block, cst.IndentedBlock) else [block]
    return any(
        isinstance(small, cst.Assign)
        and any(isinstance(target.target, cst.Name) and target.target.value == name for target in small.targets)
        for line in lines if isinstance(line, cst.SimpleStatementLine)
        for small in line.body
    )


def compat_imports(scope_node: cst.CSTNode, imported: Imported, probes: bool = False) -> Dict[str, Set[str]]:
    """Local name -> the paths that imports in compatibility branches of one scope bind to it.

    A name imported in both arms of a version test resolves to the import that comes
    last; when that import is a compatibility one, the uses of the name are too.
    """
    found: Dict[str, Set[str]] = {}
    stack: List[cst.CSTNode] = []

    def on_visit(node: cst.CSTNode) -> bool:
        stack.append(node)
        if isinstance(node, ScopeNode) and node is not scope_node:
            return False  # a nested scope's imports bind its own names
        if isinstance(node, (cst.Import, cst.ImportFrom)) and in_compat_branch(stack, imported, probes):
            for local, path in import_bindings(node):
                if not path.startswith("."):  # a relative import never reaches torch
                    found.setdefault(local, set()).add(path)
        return True

    def on_leave(node: cst.CSTNode) -> None:
        stack.pop()

    # Imports are statements, and so is all that makes a compatibility branch around one: expressions are not entered.
    walk(scope_node, on_visit, on_leave, descend=statement_structure(type(scope_node)))
    return found
