"""No torchlint module imports itself back, at import time or from inside a function.

Each module's imports are read with `ast`, wherever they are written (module level,
functions, `try` blocks), except under `if TYPE_CHECKING:`, which never runs: a
type-only reference cannot make an import order matter. A cycle is reported as
the chain of modules that closes it.
"""

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

from conftest import ROOT

PACKAGE = ROOT / "torchlint"


def module_names() -> Dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST):
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                pending.extend(child.orelse)
            else:
                pending.append(child)


def _known(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The deepest module of ours that `name` (a dotted path) names or lies in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, modules: Dict[str, Path]) -> Set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from a import b` imports the module a.b when there is one, else names from a.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        found.update(known for known in (_known(target, modules) for target in targets) if known and known != name)
    return found


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The chains that close a cycle, as a depth-first search meets them: at least one wherever there is a cycle."""
    found, done, on_path = [], set(), []

    def visit(name: str) -> None:
        on_path.append(name)
        for target in sorted(graph[name]):
            if target in on_path:
                found.append(on_path[on_path.index(target):] + [target])
            elif target not in done:
                visit(target)
        on_path.pop()
        done.add(name)

    for name in sorted(graph):
        if name not in done:
            visit(name)
    return found


def test_no_module_imports_itself_back():
    modules = module_names()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert [" -> ".join(chain) for chain in cycles(graph)] == []


def test_the_check_sees_function_level_imports_and_skips_type_only_ones():
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles(graph) == [["a", "b", "a"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n")
    assert sorted(alias.name for node in _runtime_imports(tree) for alias in node.names) == ["TYPE_CHECKING", "y"]
