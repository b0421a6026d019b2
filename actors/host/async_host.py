"""The host for asyncio code: `AsyncHost`, the threaded `Host` behind awaitables that never block the loop.

    async with AsyncHost.open("./cairn-data", provider=my_adapter) as host:
        turn = await host.send("session-1", "fix the failing test", workspace="/repo")
        async for item in turn.events():     # records and text deltas, live
            ...
        result = await turn.result()         # the same TurnResult as Host's
        await host.fork("session-1", "session-2")
        await host.compact("session-1")      # a CompactResult
        page = await host.transcript("session-1", after=0, limit=100)  # what the user saw

How it stays off the loop. Sessions run in their actors' threads, as under
`Host`. Every call that may wait (opening the store, spawning a session by
replay, waiting for a live-session slot, reading the log, closing) runs on
the host's own small thread pool and is awaited as a wrapped future
(`loop.run_in_executor`); nothing calls a future's `.get()` or `.result()`
on the loop thread, and the loop takes no lock a session's thread may hold.
A turn's items and its result come from the session's thread through
`Turn.watch` (set up on the pool), handed to the loop through the host's
`LoopInbox` into the loop's own copy of the turn (`AsyncTurn`), which its
readers read: no thread waits on a turn. The inbox wakes the loop once for
whatever news has piled up since its last wake-up, not once per item: each
wake-up is the loop thread taking the GIL back from the session threads, a
wait of up to the switch interval when they are busy.

Cancellation never reaches a turn. Cancelling a task that awaits
`turn.result()` or iterates `turn.events()` only stops that wait: the turn
runs on in its actor, its result stays retrievable (`await turn.result()`
again, or a fresh `turn.events()`, which starts from the first item), and
its log is written as always. A `send` cancelled while the message was
already on its way still starts the turn: `host.last_turn(session)` gives
its handle. A cancelled `compact` still compacts; its answer is dropped.

Errors are the threaded host's: `InputError` and its kinds for bad
arguments, `UnknownSession`, `CompactionBlocked`, `HostClosed`,
`StorageFailed`, `HostTimeout`/`TurnTimeout`; a turn's own failure is its
`TurnResult` (failed, with its phase), as under `Host`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import os
import threading
from collections.abc import Callable, Generator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from cairn.actors.errors import HostClosed, HostTimeout
from cairn.actors.host.async_turn import AsyncTurn, LoopInbox
from cairn.actors.host.config import HostConfig
from cairn.actors.host.host import Host
from cairn.actors.host.interrupted import InterruptedTurn
from cairn.actors.host.transcript import TranscriptPage
from cairn.actors.session.machine import MidTurn
from cairn.actors.session.manual import CompactResult
from cairn.actors.session.request import AssembledRequest
from cairn.actors.session.settings import SessionSettings
from cairn.actors.tool_runner import TimedOut
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.events.errors import InputError
from cairn.events.model import Part, ToolCall
from cairn.events.state import SessionState

T = TypeVar("T")

#: threads of an AsyncHost's pool: calls that may wait on the store or for a session's slot
DEFAULT_WORKERS = 16
#: how long the pool's threads may take to start when the host opens
WARM_TIMEOUT_S = 30.0


class AsyncHost:
    """`Host` for asyncio code (see the module doc). Open with `AsyncHost.open(...)`."""

    def __init__(self, host: Host, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self.host = host
        self._pool = pool
        #: the loop's inbox of turn news, made by the first `send` (on the loop the host is used from)
        self._inbox: LoopInbox | None = None
        #: session -> its last turn's handle; written on the loop (`AsyncTurn._ready`) only
        self._latest: dict[str, AsyncTurn] = {}
        self._closed = False

    @classmethod
    def open(
        cls, root: str | os.PathLike[str], *, workers: int = DEFAULT_WORKERS, **options: Any
    ) -> _Opening:
        """Open (or create) the store at `root`: `async with AsyncHost.open(...) as host`, or `await` it.

        `options` are `Host.open`'s (config, settings, provider, tools, ...),
        and raise what it raises (`NoInputBudget`, `StoreLocked`, ...).
        `workers` threads run the calls that may wait (see the module doc).
        """
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InputError(f"workers must be a positive number of threads, got {workers!r}")
        return _Opening(cls, root, workers, options)

    # -- the calls ----------------------------------------------------------------------------

    async def send(
        self,
        session: str,
        text: str | Sequence[Part],
        *,
        workspace: str | os.PathLike[str] | None = None,
        settings: SessionSettings | None = None,
        idempotency_key: str | None = None,
        mid_turn: MidTurn = "steer",
    ) -> AsyncTurn:
        """`Host.send`: the handle of the turn the message starts (or steers); `idempotency_key` and
        `mid_turn` as there.

        If the awaiting task is cancelled after the message left, the turn
        still runs: `last_turn(session)` gives its handle.
        """

        inbox = self._loop_inbox()

        def send() -> AsyncTurn:
            handle = self.host.send(
                session,
                text,
                workspace=workspace,
                settings=settings,
                idempotency_key=idempotency_key,
                mid_turn=mid_turn,
            )
            return AsyncTurn(handle, inbox, functools.partial(self._latest.__setitem__, session))

        return await self._run(send)

    def _loop_inbox(self) -> LoopInbox:
        """The inbox of the running loop (a new one when the host is used from another loop)."""
        loop = asyncio.get_running_loop()
        if self._inbox is None or self._inbox.loop is not loop:
            self._inbox = LoopInbox(loop)
        return self._inbox

    def last_turn(self, session: str) -> AsyncTurn | None:
        """The handle of the last turn sent to `session` through this host (None when none was)."""
        return self._latest.get(session)

    async def compact(self, session: str, *, timeout: float | None = 600.0) -> CompactResult:
        """`Host.compact`: a `CompactResult` (the checkpoint, or why none); `HostTimeout` after `timeout`."""
        future = await self._run(self.host.compact_future, session)
        answer = asyncio.wrap_future(future)  # shielded: a cancelled wait leaves the session's future be
        try:
            async with asyncio.timeout(timeout):  # not wait_for: see `AsyncTurn.events`
                return await asyncio.shield(answer)
        except TimeoutError:
            raise HostTimeout(f"session {session}: no compaction result within {timeout} s") from None

    async def fork(self, source: str, target: str) -> int:
        """`Host.fork`: `source`'s history copied into the new `target`; its last seq."""
        return await self._run(self.host.fork, source, target)

    async def sessions(self) -> list[str]:
        """Every session in the store, in id order."""
        return await self._run(lambda: list(self.host.sessions()))

    async def interrupted_turns(self) -> list[InterruptedTurn]:
        """`Host.interrupted_turns`: the turns a crash interrupted, with the message to send again."""
        return await self._run(self.host.interrupted_turns)

    async def continue_turn(self, session: str, turn_id: str) -> AsyncTurn:
        """`Host.continue_turn`: a new turn on the interrupted one's message; its handle."""
        inbox = self._loop_inbox()

        def continued() -> AsyncTurn:  # on the pool, as `send`: the handle is watched from there
            return AsyncTurn(self.host.continue_turn(session, turn_id), inbox)

        return await self._run(continued)

    async def dismiss_interrupted(self, session: str, turn_id: str, reason: str = "") -> None:
        """`Host.dismiss_interrupted`: the interrupted turn will not be continued (`turn-dismissed`)."""
        await self._run(self.host.dismiss_interrupted, session, turn_id, reason)

    async def transcript(
        self, session: str, *, after: int = 0, limit: int = 100, images: bool = False
    ) -> TranscriptPage:
        """`Host.transcript`: a page of what the session's user saw, read on the pool."""
        read = functools.partial(self.host.transcript, session, after=after, limit=limit, images=images)
        return await self._run(read)

    async def state(self, session: str) -> SessionState:
        """`Host.state`: the session's state (loaded by replay if needed)."""
        return await self._run(self.host.state, session)

    async def next_request(self, session: str) -> AssembledRequest:
        """`Host.next_request`: what its next request would send now."""
        return await self._run(self.host.next_request, session)

    async def waiting_tools(self, session: str) -> tuple[ToolCall, ...]:
        """`Host.waiting_tools`: the deferred calls of its running turn that wait for a result."""
        return await self._run(self.host.waiting_tools, session)

    async def resolve_tool(
        self, session: str, call_id: str, outcome: ToolOutcome, *, timeout: float | None = 30.0
    ) -> None:
        """`Host.resolve_tool`: post a deferred call's result (`ToolNotWaiting` when none waits)."""
        await self._run(functools.partial(self.host.resolve_tool, timeout=timeout), session, call_id, outcome)

    async def stop_session(self, session: str) -> bool:
        """`Host.stop_session`: stop its actor now (a running turn ends interrupted)."""
        return await self._run(self.host.stop_session, session)

    async def passivate_idle(self) -> int:
        """`Host.passivate_idle`: stop the sessions idle longer than the idle timeout."""
        return await self._run(self.host.passivate_idle)

    @property
    def live_sessions(self) -> list[str]:
        """Sessions with a live actor, least recently used first."""
        return self.host.live_sessions

    async def close(self) -> None:
        """`Host.close` (every session stopped, running turns interrupted, the store closed). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self.host.close)
        finally:
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> AsyncHost:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- inside -------------------------------------------------------------------------------

    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)` on the pool, awaited (its exception raised here, unchanged)."""
        if self._closed:
            raise HostClosed("the host is closed")
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(call, *args))


class _Opening:
    """What `AsyncHost.open` returns: awaitable (`host = await ...`) and an async context manager."""

    def __init__(
        self, cls: type[AsyncHost], root: str | os.PathLike[str], workers: int, options: dict[str, Any]
    ) -> None:
        self._cls = cls
        self._root = root
        self._workers = workers
        self._options = options
        self._host: AsyncHost | None = None

    async def _open(self) -> AsyncHost:
        pool = concurrent.futures.ThreadPoolExecutor(self._workers, thread_name_prefix="cairn-async")
        loop = asyncio.get_running_loop()
        options = dict(self._options)
        if is_async_executor(options.get("tools")):
            config = options.get("config") or HostConfig()
            options["tools"] = LoopTools(options["tools"], loop, config.tool_timeout_s)
        opening = loop.run_in_executor(pool, _open_warm, pool, self._workers, self._root, options)
        try:
            host = await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(functools.partial(_close_unwanted, pool))  # opened for nobody
            raise
        except BaseException:
            pool.shutdown(wait=False)
            raise
        return self._cls(host, pool)

    def __await__(self) -> Generator[Any, None, AsyncHost]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncHost:
        self._host = await self._open()
        return self._host

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._host is not None:
            await self._host.close()


def is_async_executor(tools: object) -> bool:
    """Whether `tools` is an `async def` executor (a coroutine function, or an object whose
    `__call__` is one)."""
    if tools is None:
        return False
    if inspect.iscoroutinefunction(tools):
        return True
    return callable(tools) and inspect.iscoroutinefunction(type(tools).__call__)


class LoopTools:
    """An `async def` tool executor, run on the host's event loop.

    Each call is scheduled on the loop as a task; the tool thread that runs
    the call (the host's tool runner) waits for it within `timeout_s` (the
    host's `tool_timeout_s`), then cancels the task: unlike a blocking tool,
    a hung coroutine does not keep a thread. `schemas` and `read_only` are
    the executor's.
    """

    def __init__(self, tools: Any, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._tools = tools
        self._loop = loop
        self._timeout_s = timeout_s

    @property
    def schemas(self) -> tuple[str, ...]:
        """The executor's schemas as they are now (an MCP executor's list may change)."""
        return tuple(getattr(self._tools, "schemas", ()) or ())

    @property
    def read_only(self) -> Any:
        return getattr(self._tools, "read_only", None)

    #: a call past its timeout is cancelled, not left running (the session's error result says so)
    cancels_on_timeout = True

    def __call__(self, invocation: ToolInvocation) -> Any:
        future = asyncio.run_coroutine_threadsafe(self._tools(invocation), self._loop)
        try:
            return future.result(timeout=self._timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            # as the tool runner answers a call past its timeout, whichever of the two waits ends
            # first: the session words it once (`cancels_on_timeout`)
            return TimedOut(self._timeout_s, started=True, hung=0)


def _close_unwanted(pool: concurrent.futures.ThreadPoolExecutor, opening: asyncio.Future[Host]) -> None:
    """A host whose opener was cancelled: closed on the pool (off the loop), then the pool."""
    if not opening.cancelled() and opening.exception() is None:
        pool.submit(opening.result().close)
    pool.shutdown(wait=False)


def _open_warm(
    pool: concurrent.futures.ThreadPoolExecutor,
    workers: int,
    root: str | os.PathLike[str],
    options: dict[str, Any],
) -> Host:
    """`Host.open`, on the pool, after starting every thread of the pool there.

    A pool starts its threads one per `submit` while none is idle, and
    `Thread.start` waits for the new thread to run: done on the loop, that
    is a wait of the loop on the scheduler (measured: tens of ms on a loaded
    machine). Started here, off the loop, `submit` never starts a thread.
    """
    started = threading.Barrier(workers, timeout=WARM_TIMEOUT_S)
    waits = [pool.submit(started.wait) for _ in range(workers - 1)]
    started.wait()
    for wait in waits:
        wait.result(timeout=WARM_TIMEOUT_S)
    return Host.open(root, **options)
