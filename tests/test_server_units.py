"""The language server's pieces without a client: positions in code units, text edits, `# noqa` placement.

The client's side (`apply_edits`, `utf16`) is written here from the LSP text, not from
the server's code, and tests/test_server.py applies the server's edits with it too.
"""

from __future__ import annotations

import re
import textwrap

import pytest

pytest.importorskip("lsprotocol")

from lsprotocol import types  # noqa: E402 (after the skip for installs without the server extra)

from torchlint.finding import Location  # noqa: E402
from torchlint.integrations.server.actions import code_actions  # noqa: E402
from torchlint.integrations.server.coordinates import Lines, lines_with_endings  # noqa: E402
from torchlint.integrations.server.documents import Configs, Snapshot, lint  # noqa: E402


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def _offset(text: str, position: types.Position) -> int:
    """A client position (line, UTF-16 units) as an index into the text; LSP breaks lines at \\r\\n, \\r, \\n only."""
    starts = [0] + [match.end() for match in re.finditer(r"\r\n|\r|\n", text)]
    index = starts[position.line] if position.line < len(starts) else len(text)
    counted = 0
    while counted < position.character and index < len(text) and text[index] not in "\r\n":
        counted += utf16(text[index])
        index += 1
    return index


def apply_edits(text: str, edits) -> str:
    """What a client does with a list of text edits (positions in the original text, applied at once)."""
    spans = sorted(((_offset(text, edit.range.start), _offset(text, edit.range.end), edit.new_text) for edit in edits), reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


@pytest.mark.parametrize("units, expected", [(utf16, [0, 2, 3, 4, 6, 7]), (utf8, [0, 4, 6, 9, 13, 14]), (len, [0, 1, 2, 3, 4, 5])])
def test_columns_count_the_agreed_code_units(units, expected):
    line = "😀é中😀x"
    lines = Lines("first\n" + line + "\n", units)
    assert [lines.position(Location(2, column)).character for column in range(1, len(line) + 2)] == expected
    # Back again; a position between the two halves of a UTF-16 pair stands for the character after it.
    assert [lines.location(types.Position(line=1, character=units(line[:index]))).column for index in range(len(line) + 1)] == list(range(1, len(line) + 2))
    if units is utf16:
        assert lines.location(types.Position(line=1, character=1)) == Location(2, 2)


def test_positions_outside_the_text_are_clamped():
    lines = Lines("ab\ncd", utf16)
    assert lines.position(Location(9, 9)) == types.Position(line=1, character=2)
    assert lines.location(types.Position(line=7, character=0)) == Location(2, 3)
    assert lines.location(types.Position(line=0, character=99)) == Location(1, 3)


def test_lines_break_where_lsp_breaks_them():
    assert lines_with_endings("a\r\nb\rc\x0cd\ne") == ["a\r\n", "b\r", "c\x0cd\n", "e"]
    assert lines_with_endings("a\n") == ["a\n"]
    assert lines_with_endings("") == []


@pytest.mark.parametrize("before, after", [
    ("a\nb\nc\n", "a\nB\nc\n"),
    ("a\nb\nc\n", "import torch\na\nb\nc\n"),
    ("a\r\nb\r\nc", "a\r\nb\r\nc\r\nd"),
    ("a\nb", "a"),
    ("", "x = 1\n"),
    ("x = 1\n", ""),
    ("😀 = 1\nkeep\nkeep\n😀 = 2\n", "😀 = 10\nkeep\nkeep\n😀 = 20\n"),
])
def test_edits_turn_one_text_into_the_other(before, after):
    edits = Lines(before, utf16).edits_to(after)
    assert apply_edits(before, edits) == after


def test_edits_leave_unchanged_lines_alone():
    before = "".join(f"line {index}\n" for index in range(100))
    after = before.replace("line 3\n", "line three\n").replace("line 90\n", "line ninety\n")
    edits = Lines(before, utf16).edits_to(after)
    assert [(edit.range.start.line, edit.range.end.line, edit.new_text) for edit in edits] == [(3, 4, "line three\n"), (90, 91, "line ninety\n")]


def _actions(code: str, row: int):
    snapshot = Snapshot("file:///example.py", 1, "/example.py", text=textwrap.dedent(code), lsp_version=1)
    linted = lint(snapshot, Configs(), [])
    position = types.Position(line=row - 1, character=0)
    context = types.CodeActionContext(diagnostics=[])
    actions = code_actions(linted, snapshot.uri, types.Range(start=position, end=types.Position(line=row - 1, character=99)), context, utf16, None)
    return snapshot, [action for action in actions if action.title.startswith("Suppress")]


def test_noqa_goes_at_the_end_of_the_findings_first_line():
    snapshot, (action,) = _actions("""\
        import torch
        weights = torch.zeros(3)
        weights.require_grad = True  # frozen
    """, 3)
    (change,) = action.edit.document_changes
    assert apply_edits(snapshot.text, change.edits).splitlines()[2] == "weights.require_grad = True  # frozen  # noqa: TL603"


def test_no_noqa_where_a_comment_would_change_the_code():
    # The finding's first line ends inside a triple-quoted string: a comment there would be part of the string.
    snapshot, actions = _actions('''\
        import torch
        weights = torch.zeros(3)
        weights.require_grad, note = True, """frozen
        layers"""
    ''', 3)
    assert actions == []


def test_a_large_document_is_linted_and_fixed_in_the_worker_as_on_the_lint_thread(tmp_path):
    """The two lanes of scheduler.py give the same findings and code actions; with a threshold of one character,
    every document takes the worker's."""
    import asyncio
    import multiprocessing

    from lsprotocol.types import PositionEncodingKind
    from pygls.workspace.position_codec import PositionCodec

    from torchlint.integrations.server.actions import resolve_fix_all
    from torchlint.integrations.server.scheduler import Lanes

    path = tmp_path / "train.py"
    text = "import torch\nweights = torch.zeros(3)\nweights.require_grad = True\n"
    snapshot = Snapshot(path.as_uri(), 1, str(path), text=text)
    units = PositionCodec(PositionEncodingKind.Utf16).client_num_units
    whole = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=3, character=0))
    context = types.CodeActionContext(diagnostics=[])

    async def both():
        found = []
        for lanes in (Lanes(Configs()), Lanes(Configs(), large_chars=1)):
            try:
                large = lanes.is_large(snapshot)
                linted = await lanes.lint(snapshot, [str(tmp_path)], lambda _: True)
                actions = await lanes.run(code_actions, linted, snapshot.uri, whole, context, units, None, large=large)
                fix_all = [action for action in actions if action.kind == "source.fixAll.torchlint"][0]
                resolved = await lanes.run(resolve_fix_all, linted, fix_all, units, large=large)
                in_worker = "torchlint-large-documents" in [child.name for child in multiprocessing.active_children()]
                found.append((in_worker, [finding.code for finding in linted.findings], actions, resolved))
            finally:
                lanes.close()
        return found

    (thread_lane, small, small_actions, small_fix), (worker_lane, large, large_actions, large_fix) = asyncio.run(both())
    assert (thread_lane, worker_lane) == (False, True)
    assert small == large == ["TL603"]
    assert small_actions == large_actions
    assert small_fix == large_fix and small_fix.edit is not None
