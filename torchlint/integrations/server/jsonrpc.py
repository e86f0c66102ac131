"""JSON-RPC as the LSP base protocol asks it, where pygls alone would answer nothing.

pygls's reader hands each body to `json.loads` and only logs what fails, so a body
that is not JSON or not UTF-8, or is JSON but no message (`5`, `[]`, a request whose
`id` is null), gets no reply and a client waiting for one waits forever. Here each
body is read and checked before pygls sees it (JSON-RPC 2.0, section 5.1):

- a body that does not decode (not UTF-8, not JSON) is answered -32700 Parse error,
  with a null id (none can be read);
- JSON that is not a message object is answered -32600 Invalid Request, with the
  message's id when it has a usable one (a number or a string) and null otherwise;
  a batch (an array) is not part of LSP and gets one such answer;
- a request whose params do not fit its method is answered -32602 Invalid params
  (pygls raises while reading it and answers nothing);
- after `shutdown`, a request is answered -32600 Invalid Request, as LSP asks, and a
  notification other than `exit` is dropped.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Optional

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
VERSION = "2.0"

logger = logging.getLogger(__name__)


def usable_id(data: Any) -> Optional[Any]:
    """The message's id where it is one JSON-RPC allows (a number or a string; a boolean is neither)."""
    if not isinstance(data, dict):
        return None
    found = data.get("id")
    return found if isinstance(found, (int, float, str)) and not isinstance(found, bool) else None


def why_not_a_message(data: Any) -> Optional[str]:
    """Why `data` (a decoded body) is not a JSON-RPC 2.0 message; None when it is one."""
    if isinstance(data, list):
        return "a batch is not part of LSP: send each message on its own"
    if not isinstance(data, dict):
        return f"a message is a JSON object, not {type(data).__name__}"
    if data.get("jsonrpc") != VERSION:
        return 'a message has "jsonrpc": "2.0"'
    if "method" in data:
        if not isinstance(data["method"], str):
            return '"method" is a string'
        if "id" in data and usable_id(data) is None:
            return 'a request\'s "id" is a number or a string'
        if not isinstance(data.get("params"), (dict, list, type(None))):
            return '"params" is an object or an array'
        return None
    if "id" in data and ("result" in data or "error" in data):
        return None  # a response to one of the server's requests (its id may be null after an error)
    return 'a message has a "method", or is a response with an "id" and a "result" or "error"'


class Protocol(LanguageServerProtocol):
    """pygls's protocol, answering each message that pygls would leave unanswered."""

    def reply_error(self, request_id: Any, code: int, message: str) -> None:
        # Written as a plain object: a null id must be sent as null, not left out.
        self._send_data({"jsonrpc": VERSION, "id": request_id, "error": {"code": code, "message": message}})

    def receive(self, body: bytes) -> None:
        """One message's body, as read from the client: checked, then handled as pygls handles it."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            logger.warning("a message that is not JSON: %s", error)
            self.reply_error(None, PARSE_ERROR, f"Parse error: {error}")
            return
        problem = why_not_a_message(data)
        if problem is not None:
            logger.warning("an invalid message: %s", problem)
            self.reply_error(usable_id(data), INVALID_REQUEST, f"Invalid Request: {problem}")
            return
        try:
            # pygls structures every object that has "jsonrpc" as it decodes; only a message's own has it.
            self.handle_message(self.structure_message(data))
        except JsonRpcException:
            pass  # answered in `structure_message`
        except Exception:
            logger.exception("handling a message failed")

    def structure_message(self, data):
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if "method" in data and "id" in data:
                self._send_response(usable_id(data), error=error.to_response_error())
            raise

    def handle_message(self, message) -> None:
        method = getattr(message, "method", None)
        if self._shutdown and method is not None and method != types.EXIT:
            if getattr(message, "id", None) is not None:
                self.reply_error(message.id, INVALID_REQUEST, f"Invalid Request: {method} after shutdown")
            else:
                logger.info("%s after shutdown: ignored", method)
            return
        super().handle_message(message)


async def read_messages(stop: threading.Event, reader, protocol: Protocol) -> None:
    """Read framed messages (`Content-Length` headers, a blank line, the body) until the input ends."""
    length: Optional[int] = None
    while not stop.is_set():
        header = await reader.readline()
        if not header:
            return
        if header.strip():
            name, _, value = header.partition(b":")
            if name.strip().lower() == b"content-length":
                text = value.strip()
                length = int(text) if text.isdigit() else None
                if length is None:
                    logger.warning("a Content-Length that is not a number: %r", text)
            continue
        if length is None:
            continue  # a blank line outside a message's headers
        body = await reader.readexactly(length) if length else b""
        if len(body) < length:
            return  # the input ended inside a message
        length = None
        protocol.receive(body)

