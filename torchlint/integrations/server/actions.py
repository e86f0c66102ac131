"""Code actions over one lint: a quick fix per fixable finding, `# noqa`, fix-all.

Each action is first the new text of the documents it changes, made by what
`check --fix` uses: `apply_fixes` for one finding's fix, the fix rounds for
fix-all (safe fixes only, re-linted until they settle, refused if the code would
stop parsing), and for a notebook the adapter's `fix_notebook`, which applies a fix
to the cells' script and gives back each cell's source (a fix may add an import in
another cell than its finding's). The new texts then become line edits, each tied
to the version of the document it was computed on, so a client never applies one
to text that changed since.
"""

from __future__ import annotations

import io
import json
import tokenize
from typing import Dict, List, Optional, Sequence, Set

from lsprotocol import types

from torchlint.engine.noqa import LINE_NOQA
from torchlint.engine.runner import lint_text
from torchlint.finding import Finding, Fix
from torchlint.fixes import apply_fixes, fix_text
from torchlint.fixes.files import fix_notebook_bytes
from torchlint.integrations.server.coordinates import Units, lines_with_endings
from torchlint.integrations.server.diagnostics import diagnostic
from torchlint.integrations.server.documents import Linted
from torchlint.notebook import Part, fix_notebook
from torchlint.rules.syntax.parse_error import ParseError

QUICK_FIX = types.CodeActionKind.QuickFix
FIX_ALL = "source.fixAll.torchlint"
ACTION_KINDS = [QUICK_FIX, FIX_ALL]
FIX_ALL_TITLE = "torchlint: fix all safe fixes"

# New text by document URI.
Texts = Dict[str, str]


def wanted(kind: str, only: Optional[Sequence[str]]) -> bool:
    """A kind the request asks for: `only` lists kinds and their parents (`source.fixAll` asks for ours)."""
    return not only or any(kind == asked or kind.startswith(asked + ".") for asked in only)


def code_actions(
    linted: Linted, uri: str, requested: types.Range, context: types.CodeActionContext, units: Units,
    fix_all_data: Optional[dict],
) -> List[types.CodeAction]:
    """The actions for the findings in `requested` (or named by the request's diagnostics), and fix-all.

    With `fix_all_data` the fix-all action goes without its edit, which `codeAction/resolve` computes
    from that data; without it (a client that cannot resolve) the edit is computed here.
    """
    lines = linted.lines(uri, units)
    start, end = lines.location(requested.start), lines.location(requested.end)
    named = {(item.code, item.range.start.line, item.range.start.character) for item in context.diagnostics}
    chosen = []
    for finding in linted.findings:
        if linted.snapshot.uri_of(finding) != uri:
            continue
        position = lines.position(finding.location)
        if (finding.location <= end and start <= finding.end_location) or (finding.code, position.line, position.character) in named:
            chosen.append(finding)
    actions: List[types.CodeAction] = []
    if wanted(QUICK_FIX, context.only):
        fixes = _NotebookFixes(linted) if linted.snapshot.is_notebook else None
        # Safe fixes first: a client that applies the first (or preferred) action applies a safe one.
        for finding in sorted(chosen, key=lambda finding: finding.fix is None or finding.fix.applicability != "safe"):
            if finding.fix is not None:
                texts = fixes.one(finding) if fixes is not None else _fixed(linted, finding.fix)
                actions += _action(linted, units, _fix_title(finding), QUICK_FIX, texts, [finding], finding.fix.applicability == "safe")
        for finding in chosen:
            actions += _action(linted, units, f"Suppress {finding.code} ({finding.name}) with # noqa", QUICK_FIX, _noqa(linted, finding), [finding])
    if wanted(FIX_ALL, context.only) and any(_safe(finding) for finding in linted.findings):
        if fix_all_data is not None:
            actions.append(types.CodeAction(title=FIX_ALL_TITLE, kind=FIX_ALL, data=fix_all_data))
        else:
            actions += _action(linted, units, FIX_ALL_TITLE, FIX_ALL, fix_all(linted), [])
    return actions


def resolve_fix_all(linted: Linted, action: types.CodeAction, units: Units) -> types.CodeAction:
    texts = fix_all(linted)
    if texts:
        action.edit = workspace_edit(linted, texts, units)
    return action


def fix_all(linted: Linted) -> Texts:
    """Every safe fix, applied as `check --fix` applies them: round after round until the text settles."""
    snapshot, config = linted.snapshot, linted.config
    if config is None:
        return {}
    if snapshot.is_notebook:
        fixed = fix_notebook_bytes(snapshot.notebook_bytes(), snapshot.path, config, unsafe=False)
        if fixed.result.broken or not fixed.changed:
            return {}
        return _changed_cells(linted, fixed.result.text)
    result = fix_text(snapshot.text, lambda text: lint_text(text, snapshot.path, config), False, snapshot.path)
    if result.broken or not result.changed:
        return {}
    return {snapshot.uri: result.text}


def workspace_edit(linted: Linted, texts: Texts, units: Units) -> types.WorkspaceEdit:
    versions = linted.snapshot.versions()
    changes = []
    for uri, text in texts.items():
        edits = linted.lines(uri, units).edits_to(text)
        document = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=versions.get(uri))
        changes.append(types.TextDocumentEdit(text_document=document, edits=edits))
    return types.WorkspaceEdit(document_changes=changes)


def _action(
    linted: Linted, units: Units, title: str, kind: str, texts: Optional[Texts], findings: List[Finding], preferred: bool = False,
) -> List[types.CodeAction]:
    """The action as a list of one, or none when it would change nothing."""
    if not texts:
        return []
    return [types.CodeAction(
        title=title,
        kind=kind,
        diagnostics=[diagnostic(finding, linted.lines(linted.snapshot.uri_of(finding), units)) for finding in findings] or None,
        edit=workspace_edit(linted, texts, units),
        is_preferred=preferred or None,
    )]


def _fix_title(finding: Finding) -> str:
    title = f"Fix {finding.code}: {finding.fix.message}"
    return title if finding.fix.applicability == "safe" else title + " (unsafe fix: may change behaviour)"


def _safe(finding: Finding) -> bool:
    return finding.fix is not None and finding.fix.applicability == "safe"


def _fixed(linted: Linted, fix: Fix) -> Optional[Texts]:
    applied = apply_fixes(linted.snapshot.text, [fix])
    return {linted.snapshot.uri: applied.text} if applied.applied else None


def _changed_cells(linted: Linted, notebook_text: str) -> Texts:
    """The cells whose source differs in a fixed notebook (written by `fix_notebook`, cells in the same order)."""
    changed = {}
    for cell, entry in zip(linted.snapshot.cells or (), json.loads(notebook_text).get("cells", [])):
        source = entry.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        if source != cell.text:
            changed[cell.uri] = source
    return changed


class _NotebookFixes:
    """One finding's fix in a notebook, applied to the text it was found in and read back per cell.

    The adapter's findings give each edit in cell coordinates, which cannot say another
    cell; so the fix applied is that of the same finding in the text the adapter linted
    (the cells' script, or the `.py` file a cell writes: its `Part`), which that text's
    own lint gives in the same order (checked by code and messages).
    """

    def __init__(self, linted: Linted):
        self.linted = linted
        self.data = linted.snapshot.notebook_bytes()
        self.fixable = [finding for finding in linted.findings if finding.fix is not None]
        # By part (its cell; None for the script): the fixes of its own lint.
        self._part_fixes: Dict[Optional[int], List[Fix]] = {}

    def one(self, finding: Finding) -> Optional[Texts]:
        if self.linted.config is None or not any(fixable is finding for fixable in self.fixable):
            return None

        def fix_part(text: str, part: Part) -> str:
            if not part.holds(finding):
                return text
            held = [fixable for fixable in self.fixable if part.holds(fixable)]
            index = next(number for number, fixable in enumerate(held) if fixable is finding)
            fixes = self._fixes_in(text, part, held)
            return apply_fixes(text, [fixes[index]]).text if fixes else text

        fixed = fix_notebook(self.data, fix_part)
        return _changed_cells(self.linted, fixed.decode("utf-8-sig")) if fixed != self.data else None

    def _fixes_in(self, text: str, part: Part, held: List[Finding]) -> List[Fix]:
        if part.cell not in self._part_fixes:
            path, config = self.linted.snapshot.path, self.linted.config
            found = sorted(part.lint(text, path, config), key=Finding.sort_key)
            found = [finding for finding in found if finding.fix is not None]
            same = [_identity(finding) for finding in found] == [_identity(finding) for finding in held]
            self._part_fixes[part.cell] = [finding.fix for finding in found] if same else []
        return self._part_fixes[part.cell]


def _identity(finding: Finding) -> tuple:
    return finding.code, finding.message, finding.fix.message if finding.fix else None


# ---------------------------------------------------------------- # noqa


def _noqa(linted: Linted, finding: Finding) -> Optional[Texts]:
    """The finding's document with `# noqa: CODE` on the finding's first line (the line noqa is read on).

    None for a parse error (nothing to suppress: the file is not read) and where a comment cannot go:
    a line that ends inside a string, or continues with a backslash.
    """
    if finding.code == ParseError.code:
        return None
    uri = linted.snapshot.uri_of(finding)
    text = linted.snapshot.texts().get(uri, "")
    lines = lines_with_endings(text)
    row = finding.location.row
    if not 1 <= row <= len(lines) or row in _rows_ending_in_a_token(text):
        return None
    body = lines[row - 1].rstrip("\r\n")
    ending = lines[row - 1][len(body):]
    if body.rstrip().endswith("\\"):
        return None
    match = LINE_NOQA.search(body)
    if match is None:
        body = f"{body.rstrip()}  # noqa: {finding.code}"
    elif match.group("codes") is None:
        return None  # a bare `# noqa` already silences every code
    else:
        body = f"{body[:match.end('codes')]}, {finding.code}{body[match.end('codes'):]}"
    lines[row - 1] = body + ending
    return {uri: "".join(lines)}


def _rows_ending_in_a_token(text: str) -> Set[int]:
    """Rows whose end lies inside a token (a triple-quoted string, an f-string's text): no comment can go there."""
    rows: Set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.start[0] < token.end[0] and token.type not in (tokenize.NEWLINE, tokenize.NL):
                rows.update(range(token.start[0], token.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass  # the rows read so far are known; a text that stops tokenizing has its parse error to fix first
    return rows
