"""Serving the HTTP API with uvicorn until SIGTERM or SIGINT, then stopping cleanly (`serve_http`).

On the signal: the listening socket closes (no new requests), every open
event stream ends (`SessionFeeds.close`: a client reconnects with its last
id to another server or this one restarted), requests in flight get up to
`grace` seconds to finish, then the host closes (a turn still running ends
interrupted, in the log) and `serve_http` returns. On a cluster (`cluster`:
the server is that `ClusterHost`'s front end, `places.ClusterPlaces`), the
cluster host closes first: its turns get `grace` too, then every lease it
holds is released, so another host takes its sessions at once. uvicorn's own signal
handling is replaced: it re-raises the signal after shutting down, which
would end the process by the signal instead of by a clean exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import socket
import threading
from collections.abc import Callable, Generator
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from cairn.actors.host.async_host import AsyncHost
from cairn.actors.http.app import HttpConfig, http_app
from cairn.actors.http.client_tools import ClientTools
from cairn.actors.http.places import ClusterPlaces

if TYPE_CHECKING:
    from cairn.actors.cluster.cluster_host import ClusterHost


class _Server(uvicorn.Server):
    """uvicorn's server with the signals handled here (see the module doc)."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stop = on_stop

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach the main thread only: a server in another thread is stopped by `stop`
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """Begin the shutdown (idempotent): streams end, the server stops taking requests."""
        self._on_stop()
        self.should_exit = True


def split_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8080` for IPv6) as (host, port); `ValueError` for anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host or int(port) > 65_535:
        raise ValueError(f"--http takes HOST:PORT (127.0.0.1:8080), not {address!r}")
    return host.strip("[]"), int(port)


def is_loopback(address: str) -> bool:
    """Whether `HOST:PORT` listens on loopback only (127.0.0.0/8, ::1, localhost)."""
    host, _ = split_address(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_socket(address: str) -> socket.socket:
    """A listening socket on `address` (`HOST:PORT`; port 0 picks a free one). `ValueError` for a bad
    address, `OSError` when it cannot be bound."""
    host, port = split_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say they are TCP;
    # with proto 0 every response waited 40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class HttpServer:
    """The API over a host on a bound, listening socket: `await serve()` until `stop()` (any thread)
    or SIGTERM/SIGINT; the host is closed on the way out (see the module doc)."""

    def __init__(
        self,
        host: AsyncHost,
        config: HttpConfig,
        sock: socket.socket,
        *,
        grace: float = 10.0,
        tools: ClientTools | None = None,
        cluster: ClusterHost | None = None,
    ) -> None:
        self.host = host
        self.sock = sock
        self.cluster = cluster
        self.grace = grace
        places = ClusterPlaces(host, cluster) if cluster is not None else None
        self.app = http_app(host, config, tools, places)
        settings = uvicorn.Config(
            self.app,
            lifespan="off",
            log_level="warning",
            timeout_graceful_shutdown=max(1, round(grace)),
            access_log=False,
        )
        self._server = _Server(settings, self.app.state.feeds.close)
        try:  # made on the loop it will serve on (as `HttpServer` usually is): `stop` works at once
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def address(self) -> str:
        """`http://HOST:PORT` of the socket."""
        host, port = self.sock.getsockname()[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    async def serve(self) -> None:
        """Serve until stopped; then close the host."""
        self._loop = asyncio.get_running_loop()
        try:
            await self._server.serve(sockets=[self.sock])
        finally:
            if self.cluster is not None:  # turns in flight end, then every lease is released
                await asyncio.get_running_loop().run_in_executor(None, self.cluster.close, self.grace)
            await self.host.close()

    def stop(self) -> None:
        """Begin the shutdown from any thread (idempotent)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._server.stop)
