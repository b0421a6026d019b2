"""A session's events as Server-Sent Events: caught up from the log, then live, resumable at any position.

Each SSE event is one item a client may see (`client_view`: never the
hidden hand-off or owner change, none of the host's private data): its
`id` is the item's stream position (`"42"` for the record of seq 42,
`"42.3"` for the third text delta after it), its `event` the kind
(`user-message`, `assistant-message`, `text-delta`, `turn-completed` ...),
its `data` the view as one line of JSON.

How a stream runs (`session_events`), from a position `after` (the
client's `Last-Event-ID`, or `?after=`, or 0):

1. read the log after `after`'s seq, a batch at a time (on a thread), and
   send each record's view; a hidden record is skipped, its seq passed;
2. if a turn the API started is running, follow it live from the last
   position sent (`AsyncTurn.stream(after=...)`): deltas as they stream,
   records once durable; at its end go back to 1 (a queued message's turn
   may follow);
3. else wait for news of the session (`SessionFeeds.changed`: a turn
   started, any record appended, by whatever wrote it: `SessionFeeds.follow`
   hears of every append of the host), sending a comment line every
   `heartbeat_s` so proxies keep the connection; then go back to 1.

So a client that reconnects with the last id it saw gets everything after
it, once: records from the log (written before a restart too), deltas from
the live turn while it runs. A delta position of a turn no longer live
(`"42.3"` after a restart) resumes at the records after seq 42: deltas are
not in the log, the `assistant-message` record holds their whole text.

A stream ends when the client goes or the server stops (`SessionFeeds.close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from starlette.responses import StreamingResponse
from starlette.types import Send

from cairn.actors.host.async_turn import AsyncTurn
from cairn.actors.host.client_view import client_view
from cairn.actors.host.host import Host
from cairn.actors.session.stream import Positioned, format_position, parse_position
from cairn.events.codec import Record
from cairn.store.backend import JournalBackend

T = TypeVar("T")

log = logging.getLogger("cairn.http")

#: records read from the log per batch when catching up
CATCH_UP_BATCH = 256
#: seconds between comment lines on a quiet stream
HEARTBEAT_S = 15.0
#: how long one write to a stream's client may wait before the client is dropped
WRITE_TIMEOUT_S = 30.0


class SessionFeeds:
    """The turns the API started, per session, and the wake-ups of the streams that follow them.

    Used on the event loop only."""

    def __init__(self) -> None:
        self._turns: dict[str, list[AsyncTurn]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._watching: set[asyncio.Task[None]] = set()
        self._unfollow: Callable[[], None] | None = None
        self.closing = asyncio.Event()

    def started(self, session: str, turn: AsyncTurn) -> None:
        """`turn` (from a send or a continue) is the session's: its streams follow it, and are woken
        again at its end (a stream that read the log just before the turn's last records, and found
        the turn ended, would otherwise wait for news that never comes)."""
        turns = [t for t in self._turns.get(session, ()) if not t.done() and t is not turn]
        turns.append(turn)
        self._turns[session] = turns
        watch = asyncio.ensure_future(self._wake_at_end(session, turn))
        self._watching.add(watch)
        watch.add_done_callback(self._watching.discard)
        self.touched(session)

    async def _wake_at_end(self, session: str, turn: AsyncTurn) -> None:
        await turn.result(None)
        self.touched(session)

    def touched(self, session: str) -> None:
        """The session's log grew outside a turn (a compaction, a dismissal): wake its streams."""
        event = self._changed.pop(session, None)
        if event is not None:
            event.set()

    def running(self, session: str) -> AsyncTurn | None:
        """The earliest turn of the session the API started that has not ended."""
        turns = [t for t in self._turns.get(session, ()) if not t.done()]
        if turns:
            self._turns[session] = turns
        else:
            self._turns.pop(session, None)
        return turns[0] if turns else None

    def changed(self, session: str) -> asyncio.Event:
        """An event set at the session's next news (take it before reading, so no news is missed)."""
        return self._changed.setdefault(session, asyncio.Event())

    def follow(self, host: Host) -> None:
        """Hear of every append of `host`'s sessions (once; call on the loop): a stream waiting for
        news of a session wakes at its next record, whoever wrote it (a turn resumed after a restart,
        a compaction, another caller of the host)."""
        if self._unfollow is not None:
            return
        loop = asyncio.get_running_loop()

        def appended(session: str, records: list[Record]) -> None:  # on the session's thread
            if session in self._changed and not loop.is_closed():
                loop.call_soon_threadsafe(self.touched, session)

        self._unfollow = host.add_record_listener(appended)

    def close(self) -> None:
        """The server stops: every stream ends."""
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
        self.closing.set()
        for event in self._changed.values():
            event.set()
        self._changed.clear()
        for watch in self._watching:
            watch.cancel()


def sse(position: str, kind: str, data: dict[str, Any]) -> bytes:
    """One SSE event (JSON has no raw newline, so `data` is one line)."""
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (position.encode(), kind.encode(), msgspec.json.encode(data))


HEARTBEAT = b": keep-alive\n\n"


def _read(journal: JournalBackend, session: str, after: int) -> list[Record]:
    return list(itertools.islice(journal.read(session, after + 1, journal.last_seq(session)), CATCH_UP_BATCH))


async def session_events(
    journal: JournalBackend,
    feeds: SessionFeeds,
    session: str,
    after: str,
    *,
    heartbeat_s: float = HEARTBEAT_S,
    images: bool = False,
    shown: Callable[[dict[str, Any]], dict[str, Any]] = lambda view: view,
) -> AsyncIterator[bytes]:
    """The SSE bytes of `session` after position `after` (see the module doc); ends at `feeds.close`.
    `shown` rewrites each view for the client (its own session ids, under a tenant)."""
    loop = asyncio.get_running_loop()
    at = parse_position(after)
    closing = asyncio.ensure_future(feeds.closing.wait())
    try:
        while not feeds.closing.is_set():
            news = feeds.changed(session)
            while True:  # 1: the log
                records = await loop.run_in_executor(None, _read, journal, session, at[0])
                for record in records:
                    at = (record.seq, 0)
                    view = client_view(record, images=images)
                    if view is not None:
                        yield sse(str(record.seq), record.kind, shown(view))
                if len(records) < CATCH_UP_BATCH:
                    break
            turn = feeds.running(session)
            if turn is not None:  # 2: the live turn
                async for chunk in _follow(turn, at, closing, heartbeat_s, images, shown):
                    if isinstance(chunk, tuple):
                        at = chunk
                    else:
                        yield chunk
                continue
            while not news.is_set() and not feeds.closing.is_set():  # 3: wait for news
                if not await _within(news.wait(), heartbeat_s):
                    yield HEARTBEAT
    finally:
        closing.cancel()


async def _follow(
    turn: AsyncTurn,
    at: tuple[int, int],
    closing: asyncio.Future[Any],
    heartbeat_s: float,
    images: bool,
    shown: Callable[[dict[str, Any]], dict[str, Any]],
) -> AsyncIterator[bytes | tuple[int, int]]:
    """The live items of `turn` after `at`: SSE bytes, each followed by its position as a tuple."""
    items = turn.stream(None, after=format_position(at))
    pending: asyncio.Future[Positioned] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait(
                {pending, closing}, timeout=heartbeat_s, return_when="FIRST_COMPLETED"
            )
            if pending in done:
                try:
                    positioned = pending.result()
                except StopAsyncIteration:
                    pending = None
                    return
                pending = None
                view = client_view(positioned.item, images=images)
                if view is not None:
                    yield sse(positioned.position, str(view["kind"]), shown(view))
                yield parse_position(positioned.position)
            elif closing in done:
                return
            else:
                yield HEARTBEAT
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending  # the generator is not running any more: it can be closed
        await items.aclose()


async def _within(awaitable: Awaitable[T], seconds: float) -> bool:
    """Whether `awaitable` finished within `seconds` (it is cancelled when not)."""
    try:
        async with asyncio.timeout(seconds):
            await awaitable
        return True
    except TimeoutError:
        return False


class EventStream(StreamingResponse):
    """An SSE response that drops a client which stops reading (issue 25 point 5).

    uvicorn holds what the socket has not taken in its write buffer and, past
    its high-water mark, makes each write wait: a client that stops reading
    costs that buffer, never more, since the stream is pulled an event at a
    time. A write that waits longer than `write_timeout_s` ends the response:
    the connection is closed, a warning names the session, and the client may
    resume with its last id. The turn goes on either way.
    """

    def __init__(self, content: AsyncIterator[bytes], *, session: str, write_timeout_s: float) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.session = session
        self.write_timeout_s = write_timeout_s

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            data = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            except TimeoutError:
                log.warning(
                    "cairn: dropped an event stream of session %s: its client read nothing for %g s",
                    self.session,
                    self.write_timeout_s,
                )
                return  # incomplete: uvicorn closes the connection (its own message is filtered)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _DroppedStreams(logging.Filter):
    """uvicorn's error line for a response ended early: said better by `EventStream`'s warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


logging.getLogger("uvicorn.error").addFilter(_DroppedStreams())
