"""`torchlint server` fed bad input over raw stdio: it answers what it can and never dies of it.

A client library would refuse to send most of this, so these tests frame the
messages themselves. Each starts its own server, since some end it.
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


class RawClient:
    def __init__(self):
        pytest.importorskip("pygls")
        self.process = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages: "queue.Queue[dict]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self.process.stderr.read, daemon=True).start()

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
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            message = self.messages.get(timeout=max(deadline - time.monotonic(), 0.1))
            if message.get("id") == request_id and "method" not in message:
                return message

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
