"""`torchlint server` driven over stdio by a real LSP client (pytest-lsp, on pygls's client).

One server runs for the module, as an editor's would; each test opens documents of
its own in a workspace folder made for the module. Edits are applied the way a client
applies them: positions read in UTF-16 code units, by tests/test_server_units.py's
helpers (not the server's), so a wrong position fails here.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional

import pytest

pytest.importorskip("pytest_lsp")

import pytest_lsp  # noqa: E402 (after the skip for installs without the server extra)
from lsprotocol import types  # noqa: E402
from pygls.protocol import default_converter  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features  # noqa: E402

from test_server_units import apply_edits, utf16  # noqa: E402
from torchlint.config import load  # noqa: E402
from torchlint.engine.parallel import lint_file_bytes  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVER = [sys.executable, "-m", "torchlint", "server"]
WAIT_SECONDS = 30

TRAIN = textwrap.dedent('''\
    import torch
    import torch.nn as nn

    weights = torch.zeros(3)
    label = "😀é"; weights.require_grad = True
    criterion = nn.CrossEntropyLoss()


    def step(x, y):
        out = criterion(torch.softmax(x, dim=1), y)
        return out
    ''')
# Where TL603 starts on the emoji line: 14 characters before it, one of them two UTF-16 units.
TL603_LINE, TL603_CHARACTER = 4, 15

MODEL = textwrap.dedent('''\
    import torch.nn as nn
    import torch.nn.functional as F


    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            return F.softmax(self.fc(x), dim=1)
    ''')
USES_MODEL = textwrap.dedent('''\
    import torch.nn as nn

    from refresh_model import Classifier

    criterion = nn.CrossEntropyLoss()
    net = Classifier()


    def step(images, labels):
        return criterion(net(images), labels)
    ''')


def _record_publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.published.append(params)


def _record_registration(client: LanguageClient, params: types.RegistrationParams) -> None:
    client.registrations.extend(params.registrations)


def _make_client() -> LanguageClient:
    client = LanguageClient(converter_factory=default_converter)
    client.published = []
    client.registrations = []
    features = dict(DEFAULT_CLIENT_FEATURES)
    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = _record_publish
    features[types.CLIENT_REGISTER_CAPABILITY] = _record_registration
    register_lsp_features(client, features)
    return client


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("workspace")
    (root / "pyproject.toml").write_text('[tool.torchlint]\ntorch-version = "2.6"\n')
    (root / "refresh_model.py").write_text(MODEL)
    strict = root / "strict"
    strict.mkdir()
    (strict / "pyproject.toml").write_text('[tool.torchlint]\nextend-ignore = ["TL603"]\n')
    return root


def _capabilities() -> types.ClientCapabilities:
    capabilities = client_capabilities("visual-studio-code")
    # The recorded VS Code (1.65) predates LSP 3.17's notebooks; today's says it syncs them.
    capabilities.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities(dynamic_registration=False),
    )
    return capabilities


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, client_factory=_make_client))
async def client(lsp_client: LanguageClient, workspace: Path):
    folder = types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")
    lsp_client.initialize_result = await lsp_client.initialize_session(
        types.InitializeParams(capabilities=_capabilities(), workspace_folders=[folder]),
    )
    yield
    await lsp_client.shutdown_session()


class Document:
    """A text document as the client holds it."""

    def __init__(self, client: LanguageClient, path: Path, text: str):
        self.client, self.uri, self.text, self.version = client, path.as_uri(), text, 1
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=self.uri, language_id="python", version=1, text=text),
        ))

    def replace(self, text: str) -> None:
        self.version += 1
        self.text = text
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        ))

    def apply(self, edit: types.WorkspaceEdit) -> None:
        (change,) = edit.document_changes
        assert change.text_document.uri == self.uri and change.text_document.version == self.version
        self.replace(apply_edits(self.text, change.edits))

    async def diagnostics(self) -> List[types.Diagnostic]:
        """The diagnostics published for the current version."""
        return await published(self.client, self.uri, self.version)

    async def actions(self, diagnostic: Optional[types.Diagnostic] = None, only=None) -> List[types.CodeAction]:
        whole = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))
        context = types.CodeActionContext(diagnostics=[diagnostic] if diagnostic else [], only=only)
        params = types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=self.uri), range=diagnostic.range if diagnostic else whole, context=context,
        )
        return await self.client.text_document_code_action_async(params) or []

    def close(self) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=self.uri)))


async def published(client: LanguageClient, uri: str, version: Optional[int]) -> List[types.Diagnostic]:
    async def arrived() -> List[types.Diagnostic]:
        while True:
            for params in reversed(client.published):
                if params.uri == uri and (version is None or params.version == version):
                    return list(params.diagnostics)
            await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    return await asyncio.wait_for(arrived(), WAIT_SECONDS)


async def republished(client: LanguageClient, uri: str, before: int) -> List[types.Diagnostic]:
    """The diagnostics of the first publish for `uri` after the first `before` ones (a re-lint of the same version)."""
    async def arrived() -> List[types.Diagnostic]:
        while True:
            for params in client.published[before:]:
                if params.uri == uri:
                    return list(params.diagnostics)
            await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    return await asyncio.wait_for(arrived(), WAIT_SECONDS)


def _codes(diagnostics) -> List[str]:
    return sorted(diagnostic.code for diagnostic in diagnostics)


def _one(diagnostics, code: str) -> types.Diagnostic:
    (found,) = [diagnostic for diagnostic in diagnostics if diagnostic.code == code]
    return found


# ---------------------------------------------------------------- the session


async def test_initialize_advertises_what_the_server_does(client: LanguageClient):
    capabilities = client.initialize_result.capabilities
    assert capabilities.position_encoding == types.PositionEncodingKind.Utf16
    assert set(capabilities.code_action_provider.code_action_kinds) == {"quickfix", "source.fixAll.torchlint"}
    assert capabilities.code_action_provider.resolve_provider
    assert capabilities.hover_provider
    assert capabilities.notebook_document_sync is not None
    assert "torchlint.rule" in capabilities.execute_command_provider.commands
    # Asked for once the client said `initialized`, since this client registers capabilities dynamically.
    for _ in range(WAIT_SECONDS * 10):
        if client.registrations:
            break
        await asyncio.sleep(0.1)
    assert [registration.method for registration in client.registrations] == [types.WORKSPACE_DID_CHANGE_WATCHED_FILES]


async def test_a_buggy_training_script_gets_what_check_reports(client: LanguageClient, workspace: Path):
    path = workspace / "train.py"
    path.write_text(TRAIN)
    document = Document(client, path, TRAIN)
    diagnostics = await document.diagnostics()
    expected = lint_file_bytes(TRAIN.encode(), str(path), load(None, workspace)).findings
    assert _codes(diagnostics) == sorted(finding.code for finding in expected) == ["TL401", "TL603"]
    for finding in expected:
        diagnostic = _one(diagnostics, finding.code)
        assert diagnostic.range.start.line == finding.location.row - 1
        assert diagnostic.source == "torchlint"
        assert diagnostic.message == f"{finding.message} ({finding.name})"
        assert diagnostic.code_description.href.endswith(f"docs/rules/{finding.code}.md")
        assert diagnostic.severity == types.DiagnosticSeverity.Warning
    typo = _one(diagnostics, "TL603")
    # UTF-16: the emoji before it counts twice, so the character is one more than the column in code points.
    assert (typo.range.start.line, typo.range.start.character) == (TL603_LINE, TL603_CHARACTER)
    assert _one(expected, "TL603").location.column - 1 == TL603_CHARACTER - 1
    assert typo.range.end.character == TL603_CHARACTER + len("weights.require_grad")


async def test_a_quick_fix_removes_its_diagnostic(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "quick_fix.py", TRAIN)
    typo = _one(await document.diagnostics(), "TL603")
    actions = await document.actions(typo)
    fix = next(action for action in actions if action.title.startswith("Fix TL603"))
    assert fix.kind == types.CodeActionKind.QuickFix and fix.is_preferred and "unsafe" not in fix.title
    assert [diagnostic.code for diagnostic in fix.diagnostics] == ["TL603"]
    document.apply(fix.edit)
    assert "weights.requires_grad = True" in document.text
    assert _codes(await document.diagnostics()) == ["TL401"]


async def test_an_unsafe_fix_says_so_and_noqa_suppresses(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "noqa.py", TRAIN)
    loss = _one(await document.diagnostics(), "TL401")
    actions = await document.actions(loss)
    unsafe = next(action for action in actions if action.title.startswith("Fix TL401"))
    assert "unsafe" in unsafe.title and not unsafe.is_preferred
    suppress = next(action for action in actions if action.title.startswith("Suppress TL401"))
    document.apply(suppress.edit)
    assert "out = criterion(torch.softmax(x, dim=1), y)  # noqa: TL401\n" in document.text
    assert _codes(await document.diagnostics()) == ["TL603"]
    # A second code joins the existing comment.
    typo = _one(await document.diagnostics(), "TL603")
    document.replace(document.text.replace("weights.require_grad = True", "weights.require_grad = True  # noqa: E702"))
    typo = _one(await document.diagnostics(), "TL603")
    suppress = next(action for action in await document.actions(typo) if action.title.startswith("Suppress TL603"))
    document.apply(suppress.edit)
    assert "weights.require_grad = True  # noqa: E702, TL603\n" in document.text
    assert await document.diagnostics() == []


async def test_fix_all_applies_the_safe_fixes(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "fix_all.py", TRAIN)
    await document.diagnostics()
    (action,) = await document.actions(only=[types.CodeActionKind.SourceFixAll])
    assert action.kind == "source.fixAll.torchlint" and action.edit is None  # the client resolves it
    resolved = await client.code_action_resolve_async(action)
    document.apply(resolved.edit)
    assert "weights.requires_grad = True" in document.text
    assert "torch.softmax" in document.text  # an unsafe fix is not part of it
    assert _codes(await document.diagnostics()) == ["TL401"]
    assert await document.actions(only=["source.fixAll"]) == []


async def test_hover_shows_the_rule_page(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "hover.py", TRAIN)
    typo = _one(await document.diagnostics(), "TL603")
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=document.uri), position=typo.range.start,
    ))
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert hover.contents.value.startswith("# TL603 requires-grad-typo\n")
    assert "## Fix safety" in hover.contents.value
    page = await client.workspace_execute_command_async(types.ExecuteCommandParams(command="torchlint.rule", arguments=["TL401"]))
    assert page.startswith("# TL401 softmax-before-cross-entropy\n")


async def test_each_document_has_the_config_nearest_to_it(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "strict" / "train.py", TRAIN)
    assert _codes(await document.diagnostics()) == ["TL401"]


async def test_a_changed_config_applies_to_the_open_documents(client: LanguageClient, workspace: Path):
    folder = workspace / "changing"
    folder.mkdir()
    settings = folder / "pyproject.toml"
    settings.write_text("[tool.torchlint]\n")
    document = Document(client, folder / "train.py", TRAIN)
    assert _codes(await document.diagnostics()) == ["TL401", "TL603"]
    settings.write_text('[tool.torchlint]\nextend-ignore = ["TL401"]\n')
    before = len(client.published)
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
        types.FileEvent(uri=settings.as_uri(), type=types.FileChangeType.Changed),
    ]))

    assert _codes(await republished(client, document.uri, before)) == ["TL603"]


async def test_a_syntax_error_is_tl000_and_the_server_goes_on(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "broken.py", "import torch\n\ndef train(:\n    pass\n")
    (error,) = await document.diagnostics()
    assert error.code == "TL000" and error.severity == types.DiagnosticSeverity.Error
    assert error.range.start.line == 2
    document.replace(TRAIN)
    assert _codes(await document.diagnostics()) == ["TL401", "TL603"]


async def test_saving_a_project_file_refreshes_the_files_that_import_it(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "uses_model.py", USES_MODEL)
    assert _codes(await document.diagnostics()) == ["TL401"]
    model = workspace / "refresh_model.py"
    model.write_text(MODEL.replace("F.softmax(self.fc(x), dim=1)", "self.fc(x)"))
    before = len(client.published)
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=model.as_uri())))

    assert not await republished(client, document.uri, before)


async def test_a_new_project_file_is_followed_once_it_exists(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "uses_new_model.py", USES_MODEL.replace("refresh_model", "new_model"))
    assert _codes(await document.diagnostics()) == []  # `new_model` is no file of the project yet
    model = workspace / "new_model.py"
    model.write_text(MODEL)
    before = len(client.published)
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
        types.FileEvent(uri=model.as_uri(), type=types.FileChangeType.Created),
    ]))
    assert _codes(await republished(client, document.uri, before)) == ["TL401"]


async def test_rapid_edits_end_with_the_last_text(client: LanguageClient, workspace: Path):
    document = Document(client, workspace / "rapid.py", TRAIN)
    await document.diagnostics()
    before = len(client.published)
    # Typing `label = "😀é"; weights.require_grad = True` again at the end, one character per change.
    line = 'label = "😀é"; weights.require_grad = True'
    document.replace(document.text + "\n")
    end_line = document.text.count("\n")
    for index in range(len(line)):
        document.version += 1
        position = types.Position(line=end_line, character=utf16(line[:index]))
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=document.uri, version=document.version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=position, end=position), text=line[index])],
        ))
    document.text += line
    diagnostics = await document.diagnostics()
    assert _codes(diagnostics) == ["TL401", "TL603", "TL603"]
    last = max((diagnostic for diagnostic in diagnostics if diagnostic.code == "TL603"), key=lambda item: item.range.start.line)
    assert (last.range.start.line, last.range.start.character) == (end_line, TL603_CHARACTER)
    assert len([params for params in client.published[before:] if params.uri == document.uri]) < len(line) // 2


async def test_a_request_after_an_edit_waits_for_its_lint_instead_of_repeating_it(client: LanguageClient, workspace: Path):
    # Long enough for its lint to be under way when the request comes.
    text = TRAIN + "".join(f"\n\ndef step_{index}(x):\n    return x * {index}\n" for index in range(1000))
    document = Document(client, workspace / "request_after_edit.py", text)
    await document.diagnostics()
    document.replace(text + "\n")
    await asyncio.sleep(0.1)  # past the debounce: the lint has started
    assert [action.title for action in await document.actions() if action.kind == "source.fixAll.torchlint"]
    await document.diagnostics()
    assert len([params for params in client.published if params.uri == document.uri and params.version == document.version]) == 1


async def test_lines_are_counted_as_lsp_counts_them(client: LanguageClient, workspace: Path):
    # A form feed is not a line break for LSP (nor for Python): an edit after it must land where the client says.
    text = "import torch\n\x0c\nweights = torch.zeros(3)\nweights.requires_grad = True\n"
    document = Document(client, workspace / "form_feed.py", text)
    assert await document.diagnostics() == []
    document.version += 1
    start = types.Position(line=3, character=len("weights.require"))
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=document.uri, version=document.version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=start, end=types.Position(line=3, character=start.character + 1)), text="",
        )],
    ))
    (typo,) = await document.diagnostics()
    assert typo.code == "TL603" and (typo.range.start.line, typo.range.start.character) == (3, 0)


async def test_a_large_document_is_linted_while_requests_are_answered(client: LanguageClient, workspace: Path):
    body = "".join(f"def step_{index}(x):\n    return x * {index}\n\n\n" for index in range(2500))
    text = "import torch\n\n" + body + "weights = torch.zeros(3)\nweights.require_grad = True\n"
    document = Document(client, workspace / "large.py", text)
    # Answered whatever the lint thread is doing: a hover on a document with nothing at the cursor.
    small = Document(client, workspace / "small.py", "x = 1\n")
    hover = await asyncio.wait_for(client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=small.uri), position=types.Position(line=0, character=0),
    )), WAIT_SECONDS)
    assert hover is None
    (typo,) = await document.diagnostics()
    assert typo.code == "TL603" and typo.range.start.line == text.count("\n") - 1


# ---------------------------------------------------------------- notebooks


def _cell(uri: str, text: str, kind=types.NotebookCellKind.Code, language="python") -> tuple:
    return types.NotebookCell(kind=kind, document=uri), types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)


async def test_a_notebook_gets_diagnostics_and_fixes_per_cell(client: LanguageClient, workspace: Path):
    notebook_uri = (workspace / "explore.ipynb").as_uri()
    texts = {
        f"{notebook_uri}#cell1": "# Training\n",
        f"{notebook_uri}#cell2": "import torch\n%matplotlib inline\nweights = torch.zeros(3)\nweights.require_grad = True\n",
        f"{notebook_uri}#cell3": "import torch.nn as nn\ncriterion = nn.CrossEntropyLoss()\nloss = criterion(torch.softmax(x, dim=1), y)\n",
    }
    markdown, code, loss = texts
    cells = [
        _cell(markdown, texts[markdown], types.NotebookCellKind.Markup, "markdown"),
        _cell(code, texts[code]),
        _cell(loss, texts[loss]),
    ]
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=notebook_uri, notebook_type="jupyter-notebook", version=1, cells=[cell for cell, _ in cells]),
        cell_text_documents=[document for _, document in cells],
    ))
    diagnostics = {uri: await published(client, uri, 1) for uri in texts}
    assert not diagnostics[markdown]
    # The magic line keeps its place: the finding is on the cell's fourth line.
    (typo,) = diagnostics[code]
    assert typo.code == "TL603" and (typo.range.start.line, typo.range.start.character) == (3, 0)
    assert _codes(diagnostics[loss]) == ["TL401"]

    everything = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=loss), range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
        context=types.CodeActionContext(diagnostics=[], only=["source.fixAll"]),
    )
    (fix_all,) = await client.text_document_code_action_async(everything)
    (change,) = (await client.code_action_resolve_async(fix_all)).edit.document_changes
    assert change.text_document.uri == code and change.text_document.version == 1  # the other cell's safe fix

    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=code), range=typo.range,
        context=types.CodeActionContext(diagnostics=[typo]),
    )
    fix = next(action for action in await client.text_document_code_action_async(params) if action.title.startswith("Fix TL603"))
    (change,) = fix.edit.document_changes
    assert change.text_document.uri == code
    fixed = apply_edits(texts[code], change.edits)
    assert fixed == texts[code].replace("require_grad", "requires_grad")
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook_uri, version=2),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
            types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(uri=code, version=2),
                changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
            ),
        ])),
    ))
    assert not await published(client, code, 2)
    assert _codes(await published(client, loss, 1)) == ["TL401"]

    assert list(await client.text_document_code_action_async(everything)) == []  # no safe fix left in any cell
    client.notebook_document_did_close(types.DidCloseNotebookDocumentParams(
        notebook_document=types.NotebookDocumentIdentifier(uri=notebook_uri),
        cell_text_documents=[types.TextDocumentIdentifier(uri=uri) for uri in texts],
    ))


async def test_a_notebook_fix_may_edit_another_cell(client: LanguageClient, workspace: Path):
    """TL606's fix writes `torch.log1p` and, `torch` not being imported, adds `import torch` where `--fix` does: in the first cell."""
    notebook_uri = (workspace / "other_cell.ipynb").as_uri()
    first, second = f"{notebook_uri}#a", f"{notebook_uri}#b"
    texts: Dict[str, str] = {first: "import numpy as np\nfrom torch import log\n", second: "y = log(1 + x)\n"}
    cells = [_cell(first, texts[first]), _cell(second, texts[second])]
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=notebook_uri, notebook_type="jupyter-notebook", version=1, cells=[cell for cell, _ in cells]),
        cell_text_documents=[document for _, document in cells],
    ))
    diagnostics = await published(client, second, 1)
    assert _codes(diagnostics) == ["TL606"]
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=second), range=diagnostics[0].range,
        context=types.CodeActionContext(diagnostics=diagnostics),
    )
    fix = next(action for action in await client.text_document_code_action_async(params) if action.title.startswith("Fix TL606"))
    edited = {change.text_document.uri: apply_edits(texts[change.text_document.uri], change.edits) for change in fix.edit.document_changes}
    assert edited == {first: "import torch\nimport numpy as np\nfrom torch import log\n", second: "y = torch.log1p(x)\n"}
