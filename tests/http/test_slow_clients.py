"""Slow clients (issue 25 point 5): a client that stops reading its stream is dropped after a bound, costs
no more than the socket's buffers meanwhile (the stream is pulled an event at a time), and neither it nor
a client that hangs up stops the turn; both can resume with their last id."""

from __future__ import annotations

import logging
import re
import socket
import threading
from pathlib import Path

from cairn import Reply, ScriptedProvider
from tests.http.helpers import WAIT_S, ApiServer, read_sse

TEXT_CHARS = 12_000_000  # far more than the socket buffers hold (4 MiB at most here, tcp_wmem)


class _Dropped(logging.Handler):
    """Set when the server says it dropped a stream."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "dropped an event stream" in record.getMessage():
            self.seen.set()


def test_a_client_that_stops_reading_is_dropped_and_the_turn_goes_on(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        turns=(Reply(text="Hello."), Reply(text="x" * TEXT_CHARS)), chunk_chars=256 * 1024
    )
    api = ApiServer(tmp_path / "store", tmp_path / "ws", provider, write_timeout_s=0.5)
    dropped = _Dropped()
    logging.getLogger("cairn.http").addHandler(dropped)
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        first = api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "hi"}).json()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        host, port = api.url.removeprefix("http://").split(":")
        slow.connect((host, int(port)))
        after = first["last_seq"]
        slow.sendall(f"GET /v1/sessions/s1/events?after={after} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        big = api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "write a lot"}).json()
        assert big["ok"] and len(big["text"]) == TEXT_CHARS  # the turn did not wait for the slow reader
        assert dropped.seen.wait(WAIT_S), "the slow client was never dropped"
        slow.settimeout(WAIT_S)
        got = bytearray()
        while chunk := slow.recv(1 << 20):  # what the buffers held, then the end the server made
            got.extend(chunk)
        assert len(got) < TEXT_CHARS and b"turn-completed" not in got
        ids = re.findall(rb"^id: (\S+)$", bytes(got), flags=re.M)
        rest = read_sse(
            api.client,
            "/v1/sessions/s1/events",
            lambda e: e.event == "turn-completed",
            headers={"Last-Event-ID": ids[-1].decode()},
        )
        assert rest[-1].data["turn_id"] == big["turn_id"]
        assert api.client.get("/v1/health").json() == {"ok": True}
    finally:
        slow.close()
        logging.getLogger("cairn.http").removeHandler(dropped)
        api.stop()
