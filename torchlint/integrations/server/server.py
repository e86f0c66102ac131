"""The language server: protocol handlers, lints in their lanes, refreshes, a clean exit.

Linting runs off the event loop (`scheduler.py`: a thread for documents of ordinary
size, a worker process for large ones), so the loop keeps reading the client
(cancellations, further edits, other documents) while a document is linted. A change
to a document of ordinary size is linted at once: a snapshot whose document changed
again before its lint starts is dropped, and a result for a version that is no longer
the document's is never published, so rapid edits cost at most one lint of a stale
text and one of the latest, and no edit waits for a timer. A change to a large
document waits for the typing to pause (`scheduler.LARGE_SETTLE_SECONDS`), since
each change ends its lint under way.

The server never answers bad input with a crash: a document that does not parse is
its TL000 diagnostic, every malformed message gets its JSON-RPC error (`jsonrpc.py`:
pygls alone drops them, leaving the client waiting), an unknown method
MethodNotFound, a change to a document that is not open a line in the log, and an
exception in a handler is logged. It exits on `exit` at once, whatever is being
linted (code 0 after `shutdown`, 1 without, as LSP asks), when the client closes its
end of the pipe, and when the client's process (the `processId` of `initialize`) is
gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from typing import Dict, List, Optional, Set, Tuple
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.capabilities import get_capability
from pygls.io_ import StdinAsyncReader, StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import lsp_method
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument, Workspace

from torchlint import __version__
from torchlint.integrations.server.actions import ACTION_KINDS, FIX_ALL, code_actions, resolve_fix_all
from torchlint.integrations.server.coordinates import lines_with_endings
from torchlint.integrations.server.diagnostics import diagnostics, hover, rule_page
from torchlint.integrations.server.documents import (
    CODE, MARKDOWN, PYTHON_SUFFIXES, RAW, Cell, Configs, Linted, Snapshot, changes_settings, normalised,
)
from torchlint.integrations.server.jsonrpc import Protocol, read_messages
from torchlint.integrations.server.scheduler import Lanes

CLIENT_POLL_SECONDS = 1.0
RULE_COMMAND = "torchlint.rule"
SYNC_KIND = types.TextDocumentSyncKind.Incremental
# The Python cells of every notebook (`"*"`: any notebook type; the filter without one is valid LSP, but
# lsprotocol's converter, which Python clients use, cannot read it).
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithNotebook(notebook="*", cells=[types.NotebookCellLanguage(language="python")])],
    save=True,
)
# What a settings or project file change is watched for, where the client lets the server ask.
WATCHED = ("**/*.py", "**/torchlint.toml", "**/pyproject.toml", "**/setup.cfg", "**/setup.py", "**/requirements*.txt",
           "**/environment.yml", "**/environment.yaml")

logger = logging.getLogger(__name__)


class _Document(TextDocument):
    """A document whose lines are LSP's: pygls splits with `str.splitlines`, which also breaks at form
    feeds and Unicode separators, so an incremental change after one would land on the wrong line."""

    @property
    def lines(self):
        return tuple(lines_with_endings(self.source))


class _Workspace(Workspace):
    def _create_text_document(self, doc_uri, source=None, version=None, language_id=None):
        return _Document(
            doc_uri, source=source, version=version, language_id=language_id,
            sync_kind=self._sync_kind, position_codec=self.position_codec,
        )


class _Protocol(Protocol):
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        result = yield from super().lsp_initialize(params)
        # No document is open yet: the workspace pygls made is replaced by one that splits lines as LSP does.
        made = self._workspace
        self._workspace = _Workspace(made.root_uri, SYNC_KIND, list(made.folders.values()), made.position_encoding)
        return result

    # A change to a document that is not open (a client's bug, or a race with its close) has nothing to apply
    # to: pygls would fail on it with a KeyError and its traceback.
    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        if unquote(params.text_document.uri) not in self.workspace.text_documents:
            logger.warning("a change to %s, which is not open: ignored", params.text_document.uri)
            return
        yield from super().lsp_text_document__did_change(params)

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params: types.DidChangeNotebookDocumentParams):
        if self.workspace.get_notebook_document(notebook_uri=params.notebook_document.uri) is None:
            logger.warning("a change to notebook %s, which is not open: ignored", params.notebook_document.uri)
            return
        yield from super().lsp_notebook_document__did_change(params)


class TorchlintServer(LanguageServer):
    def __init__(self):
        super().__init__(
            "torchlint", __version__, text_document_sync_kind=SYNC_KIND, notebook_document_sync=NOTEBOOK_SYNC,
            protocol_cls=_Protocol,
        )
        self.configs = Configs()
        self.exit_code = 0
        self._shutdown_requested = False
        # The server's own change count of each open document or notebook, by the URI the client gave.
        self._versions: Dict[str, int] = {}
        self._results: Dict[str, Linted] = {}
        self._timers: Dict[str, asyncio.TimerHandle] = {}
        # The lint under way for each document: the version it lints, and its result to come.
        self._running: Dict[str, Tuple[int, "asyncio.Future[Optional[Linted]]"]] = {}
        self._lanes = Lanes(self.configs)
        # The open documents linted in the large documents' lane.
        self._large: Set[str] = set()
        self._register()

    def _register(self) -> None:
        handlers = {
            types.INITIALIZE: self._initialize,
            types.INITIALIZED: self._initialized,
            types.SHUTDOWN: self._shutdown,
            types.EXIT: self._exit,
            types.TEXT_DOCUMENT_DID_OPEN: self._did_open,
            types.TEXT_DOCUMENT_DID_CHANGE: self._did_change,
            types.TEXT_DOCUMENT_DID_CLOSE: self._did_close,
            types.NOTEBOOK_DOCUMENT_DID_OPEN: self._notebook_did_open,
            types.NOTEBOOK_DOCUMENT_DID_CHANGE: self._notebook_did_change,
            types.NOTEBOOK_DOCUMENT_DID_SAVE: self._notebook_did_save,
            types.NOTEBOOK_DOCUMENT_DID_CLOSE: self._notebook_did_close,
            types.WORKSPACE_DID_CHANGE_WATCHED_FILES: self._watched_files_changed,
            types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS: self._folders_changed,
            types.TEXT_DOCUMENT_HOVER: self._hover,
            types.CODE_ACTION_RESOLVE: self._resolve_code_action,
        }
        for method, handler in handlers.items():
            self.feature(method)(_plain(handler))
        options = types.CodeActionOptions(code_action_kinds=ACTION_KINDS, resolve_provider=True)
        self.feature(types.TEXT_DOCUMENT_CODE_ACTION, options)(_plain(self._code_action))
        self.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))(_plain(self._did_save))
        self.command(RULE_COMMAND)(_plain(self._rule))

    def start_io(self, stdin=None, stdout=None) -> None:
        """pygls's server over stdio, reading with `jsonrpc.read_messages`, which answers every malformed message."""
        self._stop_event = threading.Event()
        reader = StdinAsyncReader(stdin or sys.stdin.buffer, self.thread_pool)
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        try:
            asyncio.run(read_messages(self._stop_event, reader, self.protocol))
        except BrokenPipeError:
            logger.error("the client closed the pipe; exiting")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self._lanes.close()
            self.shutdown()

    def report_server_error(self, error: Exception, source) -> None:
        # pygls would show every error to the user in a pop-up; a linter's belong in its log.
        logger.error("%s", error)

    # ------------------------------------------------------------ lifecycle

    def _initialize(self, params: types.InitializeParams) -> None:
        # A client in another process namespace (a server run in a container) gives a pid this process cannot see.
        if params.process_id and os.name == "posix" and _alive(params.process_id):
            threading.Thread(target=_exit_when_gone, args=(params.process_id,), daemon=True).start()

    def _initialized(self, params: types.InitializedParams) -> None:
        if get_capability(self.client_capabilities, "workspace.did_change_watched_files.dynamic_registration", False):
            watchers = [types.FileSystemWatcher(glob_pattern=pattern) for pattern in WATCHED]
            registration = types.Registration(
                id="torchlint-watched-files", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers),
            )
            self.client_register_capability(types.RegistrationParams(registrations=[registration]))

    def _shutdown(self, params: None) -> None:
        self._shutdown_requested = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._lanes.close()

    def _exit(self, params: None) -> None:
        """Exit now. Not through pygls, which ends the process once its threads end: a lint under way, and the
        thread reading standard input, which waits until the client closes the pipe."""
        self.exit_code = 0 if self._shutdown_requested else 1
        self._lanes.close()
        logging.shutdown()
        sys.stdout.flush()
        os._exit(self.exit_code)

    # ------------------------------------------------------------ documents

    def _did_open(self, params: types.DidOpenTextDocumentParams) -> None:
        document = params.text_document
        if document.language_id == "python" or self._path_of(document.uri).endswith(PYTHON_SUFFIXES):
            self._changed(document.uri)

    def _did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        if params.text_document.uri in self._versions:
            self._changed(params.text_document.uri, edited=True)

    def _did_save(self, params: types.DidSaveTextDocumentParams) -> None:
        self._saved(params.text_document.uri)

    def _did_close(self, params: types.DidCloseTextDocumentParams) -> None:
        self._closed(params.text_document.uri, [params.text_document.uri])

    def _notebook_did_open(self, params: types.DidOpenNotebookDocumentParams) -> None:
        self._changed(params.notebook_document.uri)

    def _notebook_did_change(self, params: types.DidChangeNotebookDocumentParams) -> None:
        if params.notebook_document.uri not in self._versions:
            return
        structure = params.change.cells.structure if params.change.cells else None
        if structure is not None:
            self._clear([cell.uri for cell in structure.did_close or []])
        self._changed(params.notebook_document.uri, edited=True)

    def _notebook_did_save(self, params: types.DidSaveNotebookDocumentParams) -> None:
        self._saved(params.notebook_document.uri)

    def _notebook_did_close(self, params: types.DidCloseNotebookDocumentParams) -> None:
        self._closed(params.notebook_document.uri, [cell.uri for cell in params.cell_text_documents])

    def _changed(self, key: str, edited: bool = False) -> None:
        self._versions[key] = self._versions.get(key, 0) + 1
        self._lanes.cancel(key)
        snapshot = self._snapshot(key) if edited else None
        self._schedule(key, self._lanes.settle_seconds(snapshot) if snapshot is not None else 0)

    def _saved(self, uri: str) -> None:
        self._file_changed(self._path_of(uri), created=False)
        linted = self._results.get(uri)
        if uri in self._versions and (linted is None or not self._is_current(linted)):
            self._schedule(uri, 0)

    def _closed(self, key: str, uris: List[str]) -> None:
        self._versions.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._lanes.cancel(key)
        if key in self._large:
            self._large.discard(key)
            if not self._large:
                self._lanes.release()
        linted = self._results.pop(key, None)
        self._clear(list(linted.snapshot.texts()) if linted is not None else uris)

    def _clear(self, uris: List[str]) -> None:
        for uri in uris:
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    # ------------------------------------------------------------ files that change others

    def _watched_files_changed(self, params: types.DidChangeWatchedFilesParams) -> None:
        for change in params.changes:
            path = to_fs_path(change.uri)
            if path is not None:
                self._file_changed(path, created=change.type == types.FileChangeType.Created)

    def _folders_changed(self, params: types.DidChangeWorkspaceFoldersParams) -> None:
        # Configs without a config file are rooted at their workspace folder.
        self._relint(self._versions)

    def _file_changed(self, path: str, created: bool) -> None:
        """A file changed on disk: a settings file re-lints every document, a project file those that read it."""
        if changes_settings(path):
            self._relint(self._versions)
            return
        if not path.endswith(PYTHON_SUFFIXES):
            return
        if created:
            self._lanes.forget_project_layout()
            self._relint(self._versions)
            return
        changed = normalised(path)
        self._relint([key for key, linted in self._results.items() if changed in linted.dependencies])

    def _relint(self, keys) -> None:
        for key in list(keys):
            if key in self._versions:
                self._schedule(key, 0)

    # ------------------------------------------------------------ linting

    def _schedule(self, key: str, delay: float) -> None:
        if self._shutdown_requested:
            return
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._start_lint, key)

    def _start_lint(self, key: str) -> None:
        self._timers.pop(key, None)
        asyncio.ensure_future(self._lint(key))

    async def _lint(self, key: str, join: bool = False) -> Optional[Linted]:
        """The latest text's lint, stored and published; None when the document changed or closed meanwhile.

        With `join`, a lint of the same version already under way is awaited instead of repeated: editors ask
        for code actions after every change, as the lint of that change starts. A re-lint because another
        file changed never joins one, which may have read that file before it changed.
        """
        snapshot = self._snapshot(key)
        if snapshot is None or self._shutdown_requested:
            return None
        running = self._running.get(key)
        if join and running is not None and running[0] == snapshot.version:
            future = running[1]
        else:
            if self._lanes.is_large(snapshot):
                self._large.add(key)
            elif key in self._large:
                self._large.discard(key)
                if not self._large:
                    self._lanes.release()
            future = asyncio.ensure_future(self._lanes.lint(snapshot, self._workspace_folders(), self._is_current_snapshot))
            self._running[key] = (snapshot.version, future)
        try:
            # Shielded: a cancelled request must not cancel a lint that others wait for.
            linted = await asyncio.shield(future)
        finally:
            if self._running.get(key, (None, None))[1] is future and future.done():
                del self._running[key]
        if linted is None or not self._is_current(linted):
            return None
        if self._results.get(key) is not linted:
            self._results[key] = linted
            self._publish(linted)
        return linted

    async def _current(self, key: str) -> Optional[Linted]:
        """The lint of the document as it is now, for a request: stored, under way, or made now."""
        linted = self._results.get(key)
        if linted is not None and self._is_current(linted):
            return linted
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        return await self._lint(key, join=True)

    async def _where_linted(self, key: str, function, *args):
        """`function(*args)` where the document `key` is linted (scheduler.py)."""
        return await self._lanes.run(function, *args, large=key in self._large)

    def _is_current_snapshot(self, snapshot: Snapshot) -> bool:
        """The document has not changed since `snapshot` (asked from a lint lane's thread, before it lints)."""
        return self._versions.get(snapshot.uri) == snapshot.version

    def _is_current(self, linted: Linted) -> bool:
        return self._is_current_snapshot(linted.snapshot)

    def _publish(self, linted: Linted) -> None:
        versions = linted.snapshot.versions()
        for uri, items in diagnostics(linted, self._units).items():
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=items, version=versions.get(uri)),
            )

    def _snapshot(self, key: str) -> Optional[Snapshot]:
        version = self._versions.get(key)
        if version is None:
            return None
        notebook = self.workspace.get_notebook_document(notebook_uri=key)
        if notebook is not None:
            cells = tuple(self._cell(cell) for cell in notebook.cells)
            return Snapshot(key, version, self._path_of(key), lsp_version=notebook.version, cells=cells)
        document = self.workspace.text_documents.get(unquote(key))
        if document is None:
            return None
        return Snapshot(key, version, self._path_of(key), text=document.source, lsp_version=document.version)

    def _cell(self, cell: types.NotebookCell) -> Cell:
        document = self.workspace.text_documents.get(unquote(cell.document))
        if cell.kind == types.NotebookCellKind.Markup:
            kind = MARKDOWN
        else:
            kind = CODE if document is None or document.language_id in (None, "python") else RAW
        if document is None:
            return Cell(cell.document, kind, "", None)
        return Cell(cell.document, kind, document.source, document.version)

    def _path_of(self, uri: str) -> str:
        """The file name the engine sees: the file's path, or for an unsaved document its name in the first workspace folder."""
        path = to_fs_path(uri) if urlparse(uri).scheme == "file" else None
        if path:
            return os.path.abspath(path)
        name = unquote(urlparse(uri).path).rstrip("/").rsplit("/", 1)[-1] or "untitled"
        folders = self._workspace_folders()
        return os.path.join(folders[0] if folders else os.getcwd(), name)

    def _workspace_folders(self) -> List[str]:
        try:
            workspace = self.workspace
        except RuntimeError:  # before `initialize`
            return []
        uris = [folder.uri for folder in workspace.folders.values()] or ([workspace.root_uri] if workspace.root_uri else [])
        return [os.path.abspath(path) for path in map(to_fs_path, uris) if path]

    def _units(self, text: str) -> int:
        return self.workspace.position_codec.client_num_units(text)

    def _codec_units(self):
        """`_units` as a function a worker process can be sent (the codec's own method)."""
        return self.workspace.position_codec.client_num_units

    def _key_of(self, uri: str) -> Optional[str]:
        """The open document a request's URI belongs to: itself, or the notebook of a cell."""
        if uri in self._versions:
            return uri
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None and notebook.uri in self._versions:
            return notebook.uri
        return None

    # ------------------------------------------------------------ requests

    async def _code_action(self, params: types.CodeActionParams) -> Optional[List[types.CodeAction]]:
        key = self._key_of(params.text_document.uri)
        linted = await self._current(key) if key is not None else None
        if linted is None:
            return None
        resolves = "edit" in get_capability(self.client_capabilities, "text_document.code_action.resolve_support.properties", [])
        data = {"uri": key} if resolves else None
        return await self._where_linted(
            key, code_actions, linted, params.text_document.uri, params.range, params.context, self._codec_units(), data,
        )

    async def _resolve_code_action(self, action: types.CodeAction) -> types.CodeAction:
        key = action.data.get("uri") if action.kind == FIX_ALL and isinstance(action.data, dict) else None
        linted = await self._current(key) if key in self._versions else None
        if linted is None:
            return action
        return await self._where_linted(key, resolve_fix_all, linted, action, self._codec_units())

    async def _hover(self, params: types.HoverParams) -> Optional[types.Hover]:
        key = self._key_of(params.text_document.uri)
        linted = await self._current(key) if key is not None else None
        return hover(linted, params.text_document.uri, params.position, self._units) if linted is not None else None

    def _rule(self, code=None) -> Optional[str]:
        """`torchlint rule CODE` as a command: the rule's page in Markdown, None for what names no rule."""
        return rule_page(code) if isinstance(code, str) else None


def _plain(method):
    """A function calling the bound method: pygls marks its handlers with attributes, which a method cannot take."""
    if asyncio.iscoroutinefunction(method):
        async def handler(*args):
            return await method(*args)
    else:
        def handler(*args):
            return method(*args)
    return handler


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, and someone else's
    return True


def _exit_when_gone(pid: int) -> None:
    """Exit once the client's process is gone: an editor that crashed leaves no server behind.

    At once, not through the event loop: its reader may be blocked on a pipe the dead client never closed.
    """
    while _alive(pid):
        time.sleep(CLIENT_POLL_SECONDS)
    logger.info("the client (process %d) is gone; exiting", pid)
    os._exit(0)


def serve() -> int:
    server = TorchlintServer()
    server.start_io()
    return server.exit_code
