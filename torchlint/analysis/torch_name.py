"""How the linted file names torch itself (`torch`, or `T` after `import torch as T`), for code a fix writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext


def torch_name(ctx: "FileContext", stack=None) -> Optional[str]:
    """The name under which torch itself is reachable at `stack` (`torch`, `T`), or None."""
    stack = ctx.stack if stack is None else stack
    candidates = []
    for scope in ctx.scopes.chain(stack):
        candidates.extend(name for name, path in scope.imports.items() if path == "torch")
    candidates.sort(key=lambda name: name != "torch")
    for name in candidates:
        if ctx.scopes.resolve(name, stack) == "torch":
            return name
    return None


def torch_attribute(ctx: "FileContext", attribute: Optional[str], stack=None) -> Optional[str]:
    """`T.float32` for attribute "float32" in a file that did `import torch as T`; None when torch has no name."""
    if attribute is None:
        return None
    module = torch_name(ctx, stack)
    return f"{module}.{attribute}" if module else None
