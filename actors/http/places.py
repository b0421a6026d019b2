"""Where the HTTP API's operations on a session run: on its own host (a local store), or, on a cluster,
on the host that holds the session.

`LocalPlaces` (`cairn serve --http --store`): every operation runs on the
server's `AsyncHost`; streams hear of appends through the host's record
listener alone.

`ClusterPlaces` (`cairn serve --http --nats`): the server is one host of
the cluster (`ClusterHost`: it also serves cluster clients' messages and
other hosts' forwards). An operation on a session runs here when this host
holds it or claims it (nobody did): then exactly as on a local store, with
the turn's text deltas live on the server's streams. When another host
holds it, the operation is sent to that host (`OpPort`, `actors.host.ops`) and
its answer given to the client; a turn run there reaches this server's
streams as records (from the cluster's log, `SessionWatch`), without text
deltas. A holder that no longer holds the session makes the server place it
again; one that does not answer, wait for its lease to end (a dead host's
TTL, 15 s by default), then claim it. Reads of the log (sessions,
transcripts, checkpoints, a session not held here) need no lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from cairn.actors.errors import SessionUnavailable
from cairn.actors.host.async_host import AsyncHost
from cairn.actors.host.interrupted import InterruptedTurn
from cairn.actors.http.feed import SessionFeeds
from cairn.actors.session.stream import Turn
from cairn.events.state import SessionState

if TYPE_CHECKING:
    from cairn.actors.cluster.cluster_host import ClusterHost
    from cairn.actors.host.ops import Op

T = TypeVar("T")

#: how many times an operation looks for its session's holder before `SessionUnavailable`
MAX_PLACINGS = 5


class LocalPlaces:
    """A local store: everything runs on the server's host."""

    def __init__(self, host: AsyncHost) -> None:
        self.host = host

    async def on_holder(
        self, sid: str, op: Op, here: Callable[[], Awaitable[T]], there: Callable[[Any], T]
    ) -> T:
        """`here()`: the operation on this server's host (on a cluster: where `sid` is held, else
        `there(value)` with the holder's answer to `op`)."""
        return await here()

    async def state(self, sid: str) -> tuple[SessionState, bool]:
        """The session's state, and whether this server runs it (its actor is here)."""
        return await self.host.state(sid), True

    async def fork(self, source: str, target: str) -> int:
        """`Host.fork`: `source`'s history copied into the new `target`; its last seq."""
        return await self.host.fork(source, target)

    def running(self, sid: str) -> Turn | None:
        """A turn of `sid` running on this server that the API did not start (a cluster client's)."""
        return None

    async def interrupted(self) -> list[InterruptedTurn]:
        return await self.host.interrupted_turns()

    def watched(self, sid: str, feeds: SessionFeeds, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`stream`, with news of `sid`'s appends by other hosts reaching `feeds` while it runs."""
        return stream

    def track(self, sid: str, turn: Any) -> None:
        """A turn this server started on `sid` (on a cluster: cancellable from any host)."""


class ClusterPlaces(LocalPlaces):
    """A cluster: operations run where their session is held (see the module doc)."""

    def __init__(self, host: AsyncHost, cluster: ClusterHost) -> None:
        super().__init__(host)
        self.cluster = cluster

    async def _blocking(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, call, *args)

    async def on_holder(
        self, sid: str, op: Op, here: Callable[[], Awaitable[T]], there: Callable[[Any], T]
    ) -> T:
        from cairn.actors.cluster.op_port import ASK_TIMEOUT_S, LONG_ASK_TIMEOUT_S
        from cairn.actors.host.ops import CancelOp, CompactOp, ContinueOp, SendOp

        ports = self.cluster.ops
        use = self.cluster.use
        long = isinstance(op, CancelOp | CompactOp) or (isinstance(op, SendOp | ContinueOp) and op.wait)
        timeout_s = LONG_ASK_TIMEOUT_S if long else ASK_TIMEOUT_S
        previous: str | None = None
        for _ in range(MAX_PLACINGS):
            await self._entered(sid)
            try:
                forward = await self._blocking(ports.place, sid, previous)
                if forward is None:
                    return await here()
            finally:
                use.leave(sid)
            done, value = await self._blocking(ports.run_remote, forward, sid, op, timeout_s)
            if done:
                return there(value)
            previous = forward.holder
        raise SessionUnavailable(f"session {sid}: no host answered for it after {MAX_PLACINGS} tries")

    async def _entered(self, sid: str) -> None:
        """`sid` held in use (not released while an operation on it runs here); `leave` it after. A
        request cancelled meanwhile leaves it again once the wait for a release of it is over."""
        use = self.cluster.use
        entering = asyncio.get_running_loop().run_in_executor(None, use.enter, sid)
        try:
            await asyncio.shield(entering)
        except asyncio.CancelledError:

            def left(done: asyncio.Future[None]) -> None:
                if done.exception() is None:
                    use.leave(sid)

            entering.add_done_callback(left)
            raise

    async def state(self, sid: str) -> tuple[SessionState, bool]:
        if self.cluster.ownership.holds(sid):
            return await self.host.state(sid), True
        return await self._blocking(self.cluster.journal.load, sid), False

    async def fork(self, source: str, target: str) -> int:
        """The fork written straight to the cluster's log, with no lease: the target's history is
        appended only while it has none (`SessionExists` else), and the first message to it claims it
        like any session."""
        from cairn.actors.host.fork import copy_history, source_to_fork
        from cairn.events.codec import validate_session_id
        from cairn.events.errors import InputError

        validate_session_id(source)
        validate_session_id(target)
        if source == target:
            raise InputError("a session cannot be forked onto itself")
        journal = self.cluster.journal

        def fork() -> int:
            return copy_history(journal, source, target, source_to_fork(journal, source, target))

        return await self._blocking(fork)

    def running(self, sid: str) -> Turn | None:
        return self.cluster.ops.running(sid)

    async def interrupted(self) -> list[InterruptedTurn]:
        turns = await self.host.interrupted_turns()
        elsewhere = await self._blocking(self._held_elsewhere, [turn.session for turn in turns])
        return [turn for turn in turns if turn.session not in elsewhere]

    def _held_elsewhere(self, sids: list[str]) -> set[str]:
        """Of `sids`, those another host holds: their turns may be running there, not interrupted."""
        me = self.cluster.host_id
        found = set()
        for sid in sids:
            holder = getattr(self.cluster.bucket.observe(sid), "holder", None)
            if holder is not None and holder != me:
                found.add(sid)
        return found

    def watched(self, sid: str, feeds: SessionFeeds, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        return self._watched(sid, feeds, stream)

    async def _watched(
        self, sid: str, feeds: SessionFeeds, stream: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()

        def heard(session: str, seq: int) -> None:  # on the cluster connection's loop
            if not loop.is_closed():
                loop.call_soon_threadsafe(feeds.heard, session, seq)

        remove = await self._blocking(self.cluster.watch.watch, sid, heard)
        feeds.heads.pop(sid, None)  # heard of before the watch: other hosts may have appended since
        try:
            async for chunk in stream:
                yield chunk
        finally:
            loop.run_in_executor(None, remove)

    def track(self, sid: str, turn: Any) -> None:
        self.cluster.ops.track(turn.handle)
