"""Applying the fixes rules compute: `--fix`, `--unsafe-fixes`, `--diff`.

`edits` turns one round's fixes into new text, `rounds` repeats lint-and-fix until
the text settles and checks it still parses, `files` reads and writes files safely,
`diff` shows what would change; `rewrites` writes the code of a node a rule's fix
rebuilds.

The names below are loaded on first use: `rounds` and `files` bring the engine and
libcst, which the reporters, showing a fix as a diff (`edits`, `diff`), do not need.
"""

from importlib import import_module

_HOMES = {
    "unified_diff": "diff",
    "Applied": "edits", "EditError": "edits", "apply_fixes": "edits",
    "FileFix": "files", "fix_bytes": "files", "fix_file": "files", "write": "files",
    "MAX_ROUNDS": "rounds", "FixResult": "rounds", "applicable": "rounds", "fix_text": "rounds",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
