"""`torchlint server` fed bad input over raw stdio: it answers what it can and never dies of it.

A client library would refuse to send most of this, so these tests frame the
messages themselves. Each starts its own server, since some end it. The waits are
generous timeouts that only catch a server that hangs; no test measures speed.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from typing import Optional

import pytest

SERVER = [sys.executable, "-m", "torchlint", "server"]
WAIT_SECONDS = 30
INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_CANCELLED = -32602, -32601, -32800
PARSE_ERROR, INVALID_REQUEST = -32700, -32600
# A document whose lint takes minutes and gigabytes (about 100,000 lines): the server must not wait for it.
HUGE_LINES = 100_000


class RawClient:
    def __init__(self):
        pytest.importorskip("pygls")
        self.process = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages: "queue.Queue[dict]" = queue.Queue()
        self.log: list = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_log, daemon=True).start()

    def _read_log(self) -> None:
        for line in self.process.stderr:
            self.log.append(line.decode("utf-8", "replace"))

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                header = stream.readline()
                if not header:
                    return
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
                if header in (b"\r\n", b"\n"):
                    break
            self.messages.put(json.loads(stream.read(length)))

    def send_bytes(self, body: bytes) -> None:
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def send(self, method: str, params=None, request_id=None) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request_id is not None:
            message["id"] = request_id
        self.send_bytes(json.dumps(message).encode())

    def response(self, request_id) -> dict:
        return self._next(lambda message: message.get("id") == request_id and "method" not in message)

    def diagnostics(self, uri: str) -> list:
        """The next diagnostics published for `uri`."""
        return self._next(
            lambda message: message.get("method") == "textDocument/publishDiagnostics" and message["params"]["uri"] == uri,
        )["params"]["diagnostics"]

    def _next(self, wanted) -> dict:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            message = self.messages.get(timeout=max(deadline - time.monotonic(), 0.1))
            if wanted(message):
                return message

    def open(self, path, text: str) -> str:
        uri = path.as_uri()
        self.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})
        return uri

    def initialize(self, process_id: Optional[int] = None) -> None:
        self.send("initialize", {"processId": process_id, "rootUri": None, "capabilities": {}}, request_id=1)
        assert "result" in self.response(1)
        self.send("initialized", {})

    def exit_code(self) -> int:
        return self.process.wait(timeout=WAIT_SECONDS)

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.process.kill()
        self.process.wait()


def test_bad_messages_get_errors_and_the_server_keeps_serving(tmp_path):
    # A process id this process cannot see (the client in another pid namespace) is not a client that went away.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with RawClient() as client:
        client.initialize(process_id=gone.pid)
        client.send_bytes(b"{this is not json")
        client.send("textDocument/codeAction", {"textDocument": 5}, request_id=2)
        assert client.response(2)["error"]["code"] == INVALID_PARAMS
        client.send("torchlint/noSuchMethod", {}, request_id=3)
        assert client.response(3)["error"]["code"] == METHOD_NOT_FOUND
        client.send("$/noSuchNotification", {})

        uri = (tmp_path / "train.py").as_uri()
        text = "import torch\nweights = torch.zeros(3)\nweights.require_grad = True\n"
        client.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})
        hover = {"textDocument": {"uri": uri}, "position": {"line": 2, "character": 0}}
        client.send("textDocument/hover", hover, request_id=4)
        client.send("$/cancelRequest", {"id": 4})
        cancelled = client.response(4)
        assert "result" in cancelled or cancelled["error"]["code"] == REQUEST_CANCELLED
        time.sleep(2.5)  # past the server's first look at the client's process
        client.send("textDocument/hover", hover, request_id=5)
        assert client.response(5)["result"]["contents"]["value"].startswith("# TL603 requires-grad-typo")

        client.send("shutdown", None, request_id=6)
        assert client.response(6)["result"] is None
        client.send("exit")
        assert client.exit_code() == 0


def test_exit_without_shutdown_is_exit_code_1():
    with RawClient() as client:
        client.initialize()
        client.send("exit")
        assert client.exit_code() == 1


def test_the_server_exits_when_the_client_closes_the_pipe():
    with RawClient() as client:
        client.initialize()
        client.process.stdin.close()
        assert client.exit_code() == 0


def test_the_server_exits_when_the_client_process_is_gone():
    editor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with RawClient() as client:
        client.initialize(process_id=editor.pid)
        editor.kill()
        editor.wait()
        assert client.exit_code() == 0


def test_the_command_without_pygls_says_what_to_install():
    code = "import sys; sys.modules['pygls'] = None; from torchlint.cli import main; sys.exit(main(['server']))"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_SECONDS)
    assert completed.returncode == 2
    assert "pip install 'torchlint[server]'" in completed.stderr


def test_the_other_commands_do_not_import_the_server():
    code = "import sys; from torchlint.cli import main; main(['rule', 'TL101']); print('pygls' in sys.modules)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_SECONDS)
    assert completed.stdout.splitlines()[-1] == "False"


def huge_document() -> str:
    """A training script of `HUGE_LINES` lines: one epoch loop, repeated."""
    part = (
        "def epoch_{index}(model, loader, optimizer, criterion):\n"
        "    total = 0\n"
        "    for inputs, labels in loader:\n"
        "        optimizer.zero_grad()\n"
        "        loss = criterion(model(inputs), labels)\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        total += loss\n"
        "    return total\n"
        "\n"
    )
    return "import torch\n\n" + "".join(part.format(index=index) for index in range(HUGE_LINES // 10))


SMALL = "import torch\nweights = torch.zeros(3)\nweights.require_grad = True\n"


# Each body, what it is answered, and with which id.
MALFORMED = {
    "not JSON": (b"{this is not json", PARSE_ERROR, None),
    "not UTF-8": (b'{"jsonrpc": "2.0", "id": 7, "method": "\xff\xfe"}', PARSE_ERROR, None),
    "a number": (b"5", INVALID_REQUEST, None),
    "an empty batch": (b"[]", INVALID_REQUEST, None),
    "a null id": (b'{"jsonrpc": "2.0", "id": null, "method": "textDocument/hover", "params": {}}', INVALID_REQUEST, None),
    "no jsonrpc": (b'{"id": 8, "method": "shutdown"}', INVALID_REQUEST, 8),
    "a method that is no string": (b'{"jsonrpc": "2.0", "id": 9, "method": 5}', INVALID_REQUEST, 9),
}


@pytest.mark.parametrize("body, code, request_id", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_message_gets_its_json_rpc_error(body: bytes, code: int, request_id):
    with RawClient() as client:
        client.initialize()
        client.send_bytes(body)
        error = client._next(lambda message: "error" in message)
        assert (error["id"], error["error"]["code"]) == (request_id, code)
        client.send("shutdown", None, request_id=2)
        assert client.response(2)["result"] is None


def test_changes_to_documents_never_opened_are_ignored_without_a_traceback(tmp_path):
    with RawClient() as client:
        client.initialize()
        uri = (tmp_path / "never_opened.py").as_uri()
        change = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "x"}
        client.send("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [change]})
        client.send("textDocument/didClose", {"textDocument": {"uri": uri}})
        notebook = {"notebook": {"uri": uri + ".ipynb", "version": 2}, "change": {}}
        client.send("notebookDocument/didChange", {"notebookDocument": notebook["notebook"], "change": notebook["change"]})
        opened = client.open(tmp_path / "train.py", SMALL)
        assert [item["code"] for item in client.diagnostics(opened)] == ["TL603"]
        client.send("shutdown", None, request_id=2)
        client.response(2)
        client.send("exit")
        assert client.exit_code() == 0
    assert not [line for line in client.log if "Traceback" in line or "KeyError" in line]


def test_a_request_after_shutdown_is_an_invalid_request():
    with RawClient() as client:
        client.initialize()
        client.send("shutdown", None, request_id=2)
        assert client.response(2)["result"] is None
        client.send("textDocument/hover", {"textDocument": {"uri": "file:///x.py"}, "position": {"line": 0, "character": 0}}, request_id=3)
        assert client.response(3)["error"]["code"] == INVALID_REQUEST
        client.send("exit")
        assert client.exit_code() == 0


def test_exit_is_honoured_while_a_huge_document_is_linted(tmp_path):
    with RawClient() as client:
        client.initialize()
        client.open(tmp_path / "huge.py", huge_document())
        client.send("shutdown", None, request_id=2)
        assert client.response(2)["result"] is None
        client.send("exit")
        assert client.exit_code() == 0


def test_a_small_document_is_linted_while_a_huge_one_is(tmp_path):
    with RawClient() as client:
        client.initialize()
        client.open(tmp_path / "huge.py", huge_document())
        small = client.open(tmp_path / "train.py", SMALL)
        assert [item["code"] for item in client.diagnostics(small)] == ["TL603"]
        hover = {"textDocument": {"uri": small}, "position": {"line": 2, "character": 0}}
        client.send("textDocument/hover", hover, request_id=2)
        assert client.response(2)["result"]["contents"]["value"].startswith("# TL603 requires-grad-typo")


def _workers(psutil, client: RawClient) -> list:
    """The server's worker processes (not multiprocessing's resource tracker, a helper that holds no document)."""
    server = psutil.Process(client.process.pid)
    return [child for child in server.children() if "resource_tracker" not in " ".join(child.cmdline())]


def _wait_for_workers(psutil, client: RawClient) -> list:
    deadline = time.monotonic() + WAIT_SECONDS
    while not _workers(psutil, client) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _workers(psutil, client)


def test_closing_a_huge_document_ends_the_work_and_memory_it_held(tmp_path):
    psutil = pytest.importorskip("psutil")
    with RawClient() as client:
        client.initialize()
        huge = client.open(tmp_path / "huge.py", huge_document())
        assert _wait_for_workers(psutil, client), "the huge document is linted in a process of its own"
        client.send("textDocument/didClose", {"textDocument": {"uri": huge}})
        assert client.diagnostics(huge) == []
        psutil.wait_procs(_workers(psutil, client), timeout=WAIT_SECONDS)
        assert _workers(psutil, client) == []


def test_a_change_to_a_huge_document_stops_its_stale_lint(tmp_path):
    psutil = pytest.importorskip("psutil")
    with RawClient() as client:
        client.initialize()
        huge = client.open(tmp_path / "huge.py", huge_document())
        stale = _wait_for_workers(psutil, client)
        assert stale
        change = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "#\n"}
        client.send("textDocument/didChange", {"textDocument": {"uri": huge, "version": 2}, "contentChanges": [change]})
        gone, alive = psutil.wait_procs(stale, timeout=WAIT_SECONDS)
        assert gone and not alive
