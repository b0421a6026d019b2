"""A small chat-completions server on 127.0.0.1 for the adapter tests.

It answers `POST /v1/chat/completions` with the next planned reply (then
what its `responder` makes of the request, then its default), records
every request (path, headers, JSON body), and speaks real HTTP/1.1:
streams go out with chunked transfer encoding, one HTTP chunk per SSE
event, so a connection dropped mid-stream is an incomplete body to the
client, exactly as with a real server. Every response closes its
connection, so no handler thread waits on an idle keep-alive.

| reply            | what the client gets                                               |
|------------------|--------------------------------------------------------------------|
| `Sse(events)`    | 200, `text/event-stream`, each event as `data: <json>` (or raw)    |
|   `done=False`   | ... without the final `data: [DONE]`                               |
|   `drop_after=n` | ... the connection closed after n events, the body left incomplete |
|   `stall_after=n`| ... nothing more after n events until the server is closed         |
| `Error(status)`  | that status with a JSON (or text) body, not streamed (200 too)     |
|   `headers=...`  | ... with these extra response headers (`Retry-After`, ...)         |

The server binds port 0 and is serving before `start()` returns, so tests
never wait for it. `close()` releases stalled handlers, stops serving and
joins every thread it started.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

#: the longest a stalled handler waits when nobody closes the server
STALL_LIMIT_S = 30.0


@dataclass(frozen=True)
class Sse:
    """A streamed reply. A dict event is sent as `data: <json>`; a str event is sent as is."""

    events: tuple[dict[str, Any] | str, ...] = ()
    done: bool = True
    drop_after: int | None = None
    stall_after: int | None = None


@dataclass(frozen=True)
class Error:
    """A reply that is not streamed: an error status, or 200 from a server that ignores
    `stream=true`. A dict body is sent as JSON."""

    status: int
    body: dict[str, Any] | str = field(default_factory=dict)
    #: extra response headers, sent as given (e.g. `("Retry-After", "5")`)
    headers: tuple[tuple[str, str], ...] = ()


Reply = Sse | Error


@dataclass(frozen=True)
class Received:
    """One request as the server saw it (header names lower-cased)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


# --- chunk builders ----------------------------------------------------------


def chunk(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    reasoning_key: str = "reasoning_content",
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
    role: str | None = None,
) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice."""
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta[reasoning_key] = reasoning
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def call_start(index: int, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    """The first fragment of a tool call: its id and name."""
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def call_more(index: int, arguments: str) -> dict[str, Any]:
    """A later fragment of a tool call: more of its argument string."""
    return {"index": index, "function": {"arguments": arguments}}


def usage_chunk(
    prompt: int | None, completion: int | None, total: int | None, **extra: Any
) -> dict[str, Any]:
    """The final chunk of `include_usage`: no choices, the usage."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    usage.update(extra)
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [],
        "usage": usage,
    }


def text_reply(text: str, *, usage: tuple[int, int, int] | None = (10, 5, 15)) -> Sse:
    """A plain streamed answer, split into two content chunks."""
    half = len(text) // 2
    events: list[dict[str, Any] | str] = [
        chunk(role="assistant", content=text[:half]),
        chunk(content=text[half:]),
        chunk(finish="stop"),
    ]
    if usage is not None:
        events.append(usage_chunk(*usage))
    return Sse(tuple(events))


def api_error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    kind: str = "invalid_request_error",
    headers: tuple[tuple[str, str], ...] = (),
) -> Error:
    """An error in the OpenAI shape: `{"error": {"message", "type", "code"}}`."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Error(status, body, headers)


# --- the server --------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    # Handler threads are joined by server_close(), so none outlives the test.
    daemon_threads = False
    block_on_close = True
    chat: ChatServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read `ChatServer.requests` instead."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self.server.chat._take(Received(self.path, headers, body))
        self.close_connection = True
        try:
            if isinstance(reply, Error):
                self._error(reply)
            else:
                self._stream(reply)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a timeout on its side): nothing to finish

    def _error(self, reply: Error) -> None:
        if isinstance(reply.body, str):
            data, kind = reply.body.encode(), "text/plain"
        else:
            data, kind = json.dumps(reply.body).encode(), "application/json"
        self.send_response(reply.status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers:
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream(self, reply: Sse) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        for sent, event in enumerate(reply.events):
            if reply.drop_after is not None and sent >= reply.drop_after:
                return  # close without the last chunk: an incomplete body
            if reply.stall_after is not None and sent >= reply.stall_after:
                self.server.chat.released.wait(STALL_LIMIT_S)
                return
            text = event if isinstance(event, str) else f"data: {json.dumps(event)}\n\n"
            self._chunk(text.encode())
        if reply.stall_after is not None and reply.stall_after >= len(reply.events):
            self.server.chat.released.wait(STALL_LIMIT_S)
            return
        if reply.drop_after is not None:
            return
        if reply.done:
            self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class ChatServer:
    """A chat-completions endpoint on loopback that plays planned replies. Thread-safe."""

    def __init__(
        self,
        *replies: Reply,
        default: Reply | None = None,
        responder: Callable[[Received], Reply | None] | None = None,
    ) -> None:
        self._plan: deque[Reply] = deque(replies)
        self._default = default if default is not None else text_reply("Done.")
        #: answers by the request's content once the plan is used up (None: the default)
        self._responder = responder
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self.released = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ChatServer:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.chat = self
        self._httpd = httpd
        # The socket is listening once bound: a client may connect before serve_forever runs.
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="chat-server", daemon=False
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self.released.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "the server is not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def plan(self, *replies: Reply) -> ChatServer:
        with self._lock:
            self._plan.extend(replies)
        return self

    @property
    def requests(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def _take(self, received: Received) -> Reply:
        with self._lock:
            self._received.append(received)
            if self._plan:
                return self._plan.popleft()
            responder = self._responder
        reply = responder(received) if responder is not None else None  # outside the lock
        return reply if reply is not None else self._default
