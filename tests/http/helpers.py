"""A real HTTP API server on 127.0.0.1 for the tests (uvicorn in a thread of its own), and an SSE reader.

`ApiServer` opens an `AsyncHost` on a store, serves `HttpServer` on a free
port from its own event loop in a thread, and stops it cleanly; tests talk
to it with httpx, as any client would. `read_sse` parses the event stream
(the `id`, `event` and `data` fields, comment lines skipped) until a
condition holds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from cairn.actors.host.async_host import AsyncHost
from cairn.actors.http.app import HttpConfig
from cairn.actors.http.client_tools import ClientTools
from cairn.actors.http.serve import HttpServer, bind_socket
from cairn.actors.http.tenants import Tenants
from cairn.actors.provider.base import Provider

WAIT_S = 30.0


class ApiServer:
    """The API on `store`, served from a thread until `stop()` (see the module doc)."""

    def __init__(
        self,
        store: Path,
        workspaces: Path,
        provider: Provider,
        *,
        heartbeat_s: float = 0.5,
        tools: ClientTools | None = None,
        tenants: Tenants | None = None,
        write_timeout_s: float = 30.0,
    ) -> None:
        self.store = store
        self._tools = tools
        self._opened: concurrent.futures.Future[HttpServer] = concurrent.futures.Future()
        self._provider = provider
        self._config = HttpConfig(
            workspaces=workspaces, heartbeat_s=heartbeat_s, tenants=tenants, write_timeout_s=write_timeout_s
        )
        self._thread = threading.Thread(target=self._run, name="api-server", daemon=True)
        self._thread.start()
        self.server = self._opened.result(WAIT_S)
        self.url = self.server.address
        self.client = httpx.Client(base_url=self.url, timeout=WAIT_S)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            if not self._opened.done():
                self._opened.set_exception(exc)
            raise

    async def _main(self) -> None:
        host = await AsyncHost.open(self.store, provider=self._provider, tools=self._tools)
        server = HttpServer(host, self._config, bind_socket("127.0.0.1:0"), grace=2.0, tools=self._tools)
        self._opened.set_result(server)
        await server.serve()

    def stop(self) -> None:
        self.client.close()
        self.server.stop()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the server did not stop"


class SseEvent:
    """One event of the stream."""

    def __init__(self, id: str, event: str, data: dict[str, Any]) -> None:
        self.id = id
        self.event = event
        self.data = data

    def __repr__(self) -> str:
        return f"<{self.id} {self.event}>"


def sse_events(lines: Iterator[str]) -> Iterator[SseEvent]:
    """The events of an SSE body given line by line."""
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in fields:
                yield SseEvent(
                    fields.get("id", ""), fields.get("event", "message"), json.loads(fields["data"])
                )
            fields = {}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def read_sse(
    client: httpx.Client,
    path: str,
    until: Callable[[SseEvent], bool],
    *,
    headers: dict[str, str] | None = None,
    on_open: Callable[[], None] | None = None,
) -> list[SseEvent]:
    """The events of `path` up to and including the first for which `until` holds; then hang up.
    `on_open` runs once the stream's headers came (to send while it is open)."""
    seen: list[SseEvent] = []
    with client.stream("GET", path, headers=headers or {}) as reply:
        assert reply.status_code == 200, reply.read()
        assert reply.headers["content-type"].startswith("text/event-stream")
        if on_open is not None:
            on_open()
        deadline = time.monotonic() + WAIT_S  # heartbeats would keep a read timeout from firing

        def lines() -> Iterator[str]:
            for line in reply.iter_lines():
                assert time.monotonic() < deadline, f"no end of the stream within {WAIT_S} s: {seen}"
                yield line

        for event in sse_events(lines()):
            seen.append(event)
            if until(event):
                break
    return seen
