"""Applying the fixes rules compute: `--fix`, `--unsafe-fixes`, `--diff`.

`edits` turns one round's fixes into new text, `rounds` repeats lint-and-fix until
the text settles and checks it still parses, `files` reads and writes files safely,
`diff` shows what would change.
"""

from torchlint.fixes.diff import unified_diff
from torchlint.fixes.edits import Applied, EditError, apply_fixes
from torchlint.fixes.files import FileFix, fix_bytes, fix_file, write
from torchlint.fixes.rounds import MAX_ROUNDS, FixResult, applicable, fix_text

__all__ = [
    "MAX_ROUNDS", "Applied", "EditError", "FileFix", "FixResult", "applicable", "apply_fixes",
    "fix_bytes", "fix_file", "fix_text", "unified_diff", "write",
]
