"""The API table (`torchlint/data/api.toml`) and the rule shape TL601, TL602 and TL605 share.

Each of those rules reports the references to the table's names of its own kind:
every import of one, and every use (call or attribute access) whose name resolves
to one through the file's imports. The table says what to write instead and
whether a fix can rewrite the use. References in compatibility code for older
torch (see `_compat.py`) are left alone.
"""

from __future__ import annotations

import pkgutil
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.engine.scopes import Scope, dotted_name
from torchlint.finding import Fix
from torchlint.rules.api._compat import compat_imports, in_compat_branch, overridden_by_probe
from torchlint.rules.api._names import import_edit, spell
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

KINDS = ("removed", "deprecated", "private")
REWRITES = ("rename", "prepend-device", "unwrap")
Version = Tuple[int, ...]


@dataclass(frozen=True)
class ApiEntry:
    name: str
    kind: str
    instead: str
    mechanical: bool
    # Absent only for a removed name torch replaced with nothing of its own (`instead` says what to use).
    replacement: Optional[str] = None
    replacement_since: Optional[Version] = None
    deprecated_in: Optional[Version] = None
    removed_in: Optional[Version] = None
    rewrite: Optional[str] = None
    device: Optional[str] = None
    observed: Optional[str] = None


def parse_version(text: str) -> Version:
    if not isinstance(text, str) or not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
        raise ValueError(f"expected a version like \"2.4\", got {text!r}")
    return tuple(int(part) for part in text.split("."))


def show_version(version: Version) -> str:
    return ".".join(str(part) for part in version)


def read_table() -> List[dict]:
    """The raw `[[api]]` tables, as the test that validates them sees them."""
    data = pkgutil.get_data("torchlint", "data/api.toml")
    return tomllib.loads(data.decode("utf-8"))["api"]


def _entry(raw: dict) -> ApiEntry:
    def version(key: str) -> Optional[Version]:
        return parse_version(raw[key]) if key in raw else None

    return ApiEntry(
        name=raw["name"],
        kind=raw["kind"],
        replacement=raw.get("replacement"),
        replacement_since=version("replacement-since"),
        instead=raw["instead"],
        mechanical=raw["mechanical"],
        deprecated_in=version("deprecated-in"),
        removed_in=version("removed-in"),
        rewrite=raw.get("rewrite"),
        device=raw.get("device"),
        observed=raw.get("observed"),
    )


@lru_cache(maxsize=None)
def api_table() -> Dict[str, ApiEntry]:
    return {raw["name"]: _entry(raw) for raw in read_table()}


def lookup(qualified: str) -> Optional[ApiEntry]:
    """The entry for `qualified` or for the closest module above it."""
    table = api_table()
    parts = qualified.split(".")
    for end in range(len(parts), 0, -1):
        entry = table.get(".".join(parts[:end]))
        if entry is not None:
            return entry
    return None


class ApiTableRule(Rule):
    """Reports the table's names of one kind; subclasses set `kind` and word the message."""

    kind: ClassVar[str]
    # Importing one of the kind's names fails on a current torch (removed APIs): an import of one in a `try` whose
    # handler catches that is a probe, and its handler's name is the one used (`in_compat_branch`).
    import_fails: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A reported name is an entry of the rule's kind or a name under one, and each part of a resolved name is
        # written in the file (in the import or the attribute chain): so is the entry's last part.
        cls.reference_parts = frozenset(entry.name.rsplit(".", 1)[-1] for entry in api_table().values() if entry.kind == cls.kind)
        cls.triggers = words(*cls.reference_parts)

    def __init__(self, ctx):
        super().__init__(ctx)
        self._compat_imports: Dict[int, Dict[str, Set[str]]] = {}

    def applies(self, entry: ApiEntry) -> bool:
        return entry.kind == self.kind

    def describe(self, entry: ApiEntry, qualified: str) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------ imports

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            self._report_import(alias, dotted_name(alias.name))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted_name(node.module)
        for alias in node.names:
            self._report_import(alias, f"{module}.{dotted_name(alias.name)}")

    def _report_import(self, alias: cst.ImportAlias, qualified: Optional[str]) -> None:
        entry = lookup(qualified) if qualified else None
        if entry is not None and self.applies(entry) and not in_compat_branch(self.ctx.stack, self._imported, self.import_fails):
            self.report(alias, self.describe(entry, qualified))

    # ------------------------------------------------------------ uses

    def visit_reference(self, node: cst.BaseExpression, qualified: str) -> None:
        stack = self.ctx.stack
        entry = lookup(qualified)
        if entry is None or not self.applies(entry) or self._in_compat_code(node, stack):
            return
        self.report(node, self.describe_use(entry, qualified, stack), self._fix(node, entry, qualified))

    def describe_use(self, entry: ApiEntry, qualified: str, stack: Sequence[cst.CSTNode]) -> str:
        """The message for a use of the name (the innermost node of `stack`), where its place changes the advice."""
        return self.describe(entry, qualified)

    def _in_compat_code(self, node: cst.BaseExpression, stack: Sequence[cst.CSTNode]) -> bool:
        head = dotted_name(node).split(".")[0]
        scope = self.ctx.scopes.binding_scope(head, self.ctx.scope_nodes)
        path = scope.imports.get(head) if scope is not None else None
        if path is not None:
            if path in self._compat_imports_of(scope).get(head, ()):
                return True  # `else: from ... import _LRScheduler as LRScheduler`: its uses are compatibility code too
            entry = lookup(path)
            if entry is not None and self.applies(entry):
                return False  # the name's own import is reported, and so is each use, in whatever branch
        return in_compat_branch(stack, self._imported, self.import_fails) or overridden_by_probe(stack, self._imported)

    def _imported(self, expr: cst.BaseExpression) -> bool:
        return self.ctx.qualified_name(expr) is not None

    def _compat_imports_of(self, scope: Scope) -> Dict[str, Set[str]]:
        found = self._compat_imports.get(id(scope.node))
        if found is None:
            # Names in the scope's tests resolve as they do in the scope itself.
            scope_nodes = self.ctx.scope_nodes[: self.ctx.scope_nodes.index(scope.node) + 1]
            found = compat_imports(scope.node, lambda expr: self.ctx.qualified_name(expr, scope_nodes) is not None, self.import_fails)
            self._compat_imports[id(scope.node)] = found
        return found

    # ------------------------------------------------------------ fixes

    def _fix(self, node: cst.BaseExpression, entry: ApiEntry, qualified: str) -> Optional[Fix]:
        if entry.rewrite is None:
            return None
        stack = self.ctx.stack
        parent = stack[-2] if len(stack) > 1 else None
        call = parent if isinstance(parent, cst.Call) and parent.func is node else None
        if entry.rewrite == "unwrap":
            edits = self._unwrap(call)
        else:
            new_name = entry.replacement + qualified[len(entry.name):]
            spelled = spell(self.ctx, new_name, stack)
            extra = None
            if spelled is None:
                extra = import_edit(self.ctx, new_name, stack)
                if extra is None:
                    return None
                spelled = new_name
            edits = self._rename(node, call, entry, spelled)
            if edits and extra is not None:
                edits.append(extra)
        if not edits:
            return None
        make = Fix.safe if entry.mechanical else Fix.unsafe
        return make(f"Replace with {entry.instead}", *edits)

    def _rename(self, node, call: Optional[cst.Call], entry: ApiEntry, spelled: str) -> list:
        if entry.rewrite == "rename":
            return [self.ctx.replace(node, spelled)]
        # prepend-device: keyword-only calls, since positional parameters shift (autocast's first is `enabled`).
        if call is None or any(arg.keyword is None for arg in call.args):
            return []
        device = f'"{entry.device}"'
        if call.args:
            return [self.ctx.replace(node, spelled), self.ctx.insert_before(call.args[0], f"{device}, ")]
        bare_call = call.with_changes(func=cst.parse_expression(spelled), args=[cst.Arg(cst.SimpleString(device))], lpar=[], rpar=[])
        return [self.ctx.replace(call, self.ctx.code(bare_call))]

    def _unwrap(self, call: Optional[cst.Call]) -> list:
        if call is None or len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return []
        value = call.args[0].value
        text = self.ctx.code(value)
        atomic = isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or bool(getattr(value, "lpar", ()))
        return [self.ctx.replace(call, text if atomic else f"({text})")]
