"""Writing a qualified name the way a file can reach it: through its own imports, or a new `import`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import libcst as cst

from torchlint.finding import Edit

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


def spell(ctx: "FileContext", qualified: str, stack: Sequence[cst.CSTNode]) -> Optional[str]:
    """`T.amp.autocast` for `torch.amp.autocast` in a file that did `import torch as T`; None when no import reaches it.

    The import covering the longest part of the name wins (`F.interpolate` over
    `torch.nn.functional.interpolate`), so the file's own aliases are kept.
    """
    candidates = []
    for scope in ctx.scopes.chain(stack):
        for local, path in scope.imports.items():
            if qualified != path and not qualified.startswith(path + "."):
                continue
            if ctx.scopes.resolve(local, stack) != path:
                continue  # shadowed where the name is used
            candidates.append((-len(path), local, local + qualified[len(path):]))
    return min(candidates)[2] if candidates else None


def import_edit(ctx: "FileContext", qualified: str, stack: Sequence[cst.CSTNode]) -> Optional[Edit]:
    """An edit adding `import torch` (the top package of `qualified`) so the full name can be written.

    None when that name is already bound to something else in the module or where it is used.
    """
    top = qualified.split(".")[0]
    module_scope = ctx.scopes.scope_of(ctx.module)
    if top in module_scope.imports or top in module_scope.variables or ctx.scopes.binding_scope(top, stack) is not None:
        return None
    anchor = _first_plain_statement(ctx.module)
    return ctx.insert_before(anchor, f"import {top}\n") if anchor is not None else None


def _first_plain_statement(module: cst.Module) -> Optional[cst.CSTNode]:
    """The first statement after the docstring and `from __future__` imports: where a new import may go."""
    for index, statement in enumerate(module.body):
        if isinstance(statement, cst.SimpleStatementLine):
            first = statement.body[0]
            if index == 0 and isinstance(first, cst.Expr) and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString)):
                continue
            if isinstance(first, cst.ImportFrom) and isinstance(first.module, cst.Name) and first.module.value == "__future__":
                continue
        return statement
    return None
