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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import msgspec
from starlette.responses import StreamingResponse
from starlette.types import Send

from cairn.actors.host.async_turn import AsyncTurn
from cairn.actors.host.client_view import client_view
from cairn.actors.host.host import Host
from cairn.actors.session.stream import StreamItem, format_position, parse_position
from cairn.events.codec import Record
from cairn.store.backend import JournalBackend

T = TypeVar("T")

log = logging.getLogger("cairn.http")

#: records read from the log per batch when catching up
CATCH_UP_BATCH = 256
#: seconds between comment lines on a quiet stream
HEARTBEAT_S = 15.0
#: the most bytes of one write of a stream's waiting items (an item larger than this goes alone)
BATCH_BYTES = 64 * 1024
#: the most bytes of encoded live items kept for the streams that send them (`SessionFeeds.encoded`)
ENCODED_BYTES = 16 * 1024 * 1024
#: how long one write to a stream's client may wait before the client is dropped
WRITE_TIMEOUT_S = 30.0


class SessionFeeds:
    """The turns the API started, per session, and the wake-ups of the streams that follow them.

    Used on the event loop only."""

    def __init__(self) -> None:
        self._turns: dict[str, list[AsyncTurn]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._unfollow: Callable[[], None] | None = None
        #: each session's last seq, as `follow` heard of it (absent: not heard of since)
        self.heads: dict[str, int] = {}
        self._encoded: dict[tuple[str, tuple[int, int], bool, str], bytes] = {}
        self._encoded_bytes = 0
        self.closing = asyncio.Event()
        self._waking: set[asyncio.Event] = set()

    def started(self, session: str, turn: AsyncTurn) -> None:
        """`turn` (from a send or a continue) is the session's: its streams follow it. (A stream that
        read the log just before the turn's last records, then found the turn ended, hears of those
        records through `follow`, like any append.)"""
        turns = [t for t in self._turns.get(session, ()) if not t.done() and t is not turn]
        turns.append(turn)
        self._turns[session] = turns
        self.touched(session)

    def touched(self, session: str) -> None:
        """The session's log grew outside a turn (a compaction, a dismissal): wake its streams."""
        event = self._changed.pop(session, None)
        if event is not None:
            event.set()

    def heard(self, session: str, seq: int) -> None:
        """Another host stored record `seq` of the session (on a cluster: `places.ClusterPlaces`)."""
        if seq > self.heads.get(session, 0):
            self.heads[session] = seq
        self.touched(session)

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
            self.heads[session] = records[-1].seq  # before the wake-up, which reads it
            if session in self._changed and not loop.is_closed():
                loop.call_soon_threadsafe(self.touched, session)

        self._unfollow = host.add_record_listener(appended)

    def encoded(self, key: tuple[str, tuple[int, int], bool, str], make: Callable[[], bytes]) -> bytes:
        """The SSE bytes of one live item as one kind of viewer sees it (`key`: session, position,
        images, the viewer's id prefix), made once for all the streams that send it: a session's
        streams all send the same items. The oldest go past `ENCODED_BYTES` in all."""
        found = self._encoded.get(key)
        if found is None:
            found = self._encoded[key] = make()
            self._encoded_bytes += len(found)
            while self._encoded_bytes > ENCODED_BYTES and self._encoded:
                self._encoded_bytes -= len(self._encoded.pop(next(iter(self._encoded))))
        return found

    @contextlib.contextmanager
    def news_of(self, turn: AsyncTurn) -> Iterator[asyncio.Event]:
        """`turn.news()`, an event set at each item and at the end of the turn, which the server's
        close sets too while the block runs (a live stream's one wake-up)."""
        with turn.news() as news:
            self._waking.add(news)
            try:
                yield news
            finally:
                self._waking.discard(news)

    def close(self) -> None:
        """The server stops: every stream ends."""
        if self._unfollow is not None:
            self._unfollow()
            self._unfollow = None
        self.closing.set()
        for event in [*self._changed.values(), *self._waking]:
            event.set()
        self._changed.clear()


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
    viewer: str = "",
) -> AsyncIterator[bytes]:
    """The SSE bytes of `session` after position `after` (see the module doc); ends at `feeds.close`.
    `shown` rewrites each view for the client (its own session ids, under a tenant), the same for
    every stream of the same `viewer` (the tenant's id prefix)."""
    loop = asyncio.get_running_loop()
    at = parse_position(after)
    while not feeds.closing.is_set():
        news = feeds.changed(session)
        while True:  # 1: the log (not read when nothing was appended past what was sent, or
            # when the running turn holds all of it: a session's streams all wake at a new turn)
            head, turn = feeds.heads.get(session), feeds.running(session)
            first = turn.first_seq() if turn is not None else None
            if (head is not None and head <= at[0]) or (first is not None and first <= at[0] + 1):
                break
            if turn is not None and first is None and not turn.done():
                # its first record is on its way to the loop, and the turn brings every one after:
                # wait for it rather than read the log (a new turn wakes all the session's streams)
                with feeds.news_of(turn) as started:
                    waiting = turn.first_seq() is None and not turn.done() and not feeds.closing.is_set()
                    if waiting and not await _within(started.wait(), heartbeat_s):
                        yield HEARTBEAT
                continue
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
            encode = _Encoder(feeds, session, images, shown, viewer)
            async for chunk in _follow(turn, at, feeds, heartbeat_s, encode):
                if isinstance(chunk, tuple):
                    at = chunk
                else:
                    yield chunk
            continue
        while not news.is_set() and not feeds.closing.is_set():  # 3: wait for news
            if not await _within(news.wait(), heartbeat_s):
                yield HEARTBEAT


class _Encoder:
    """A live item's SSE bytes for one stream's viewer, through the feeds' shared cache."""

    def __init__(
        self,
        feeds: SessionFeeds,
        session: str,
        images: bool,
        shown: Callable[[dict[str, Any]], dict[str, Any]],
        viewer: str,
    ) -> None:
        self.feeds, self.session, self.images, self.shown, self.viewer = feeds, session, images, shown, viewer

    def __call__(self, position: tuple[int, int], item: StreamItem) -> bytes:
        def make() -> bytes:
            view = client_view(item, images=self.images)
            if view is None:
                return b""
            return sse(format_position(position), str(view["kind"]), self.shown(view))

        return self.feeds.encoded((self.session, position, self.images, self.viewer), make)


async def _follow(
    turn: AsyncTurn,
    at: tuple[int, int],
    feeds: SessionFeeds,
    heartbeat_s: float,
    encode: _Encoder,
) -> AsyncIterator[bytes | tuple[int, int]]:
    """The live items of `turn` after `at`: SSE bytes, then the position they reach as a tuple.

    What reached the loop meanwhile goes in as few writes as it can (a turn's deltas come in bursts,
    and a session's streams all wake together), each of at most `BATCH_BYTES` (or one item, if
    larger), so that a client that stopped reading holds up one write, not the rest of the turn.
    It waits on one event for the whole turn (`SessionFeeds.news_of`)."""
    with feeds.news_of(turn) as news:
        while not feeds.closing.is_set():
            news.clear()  # before taking: an item that comes after the take sets it again
            batch = turn.taken_after(at)
            if batch:
                parts: list[bytes] = []
                size = 0
                for position, item in batch:
                    part = encode(position, item)
                    parts.append(part)
                    size += len(part)
                    at = position
                    if size >= BATCH_BYTES:
                        break
                if size:
                    yield b"".join(parts)
                yield at
                continue
            if turn.done():
                return
            if not await _within(news.wait(), heartbeat_s):
                yield HEARTBEAT


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
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as write_bound:  # one bound, re-armed for each write
                async for chunk in self.body_iterator:
                    data = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
                    write_bound.reschedule(loop.time() + self.write_timeout_s)
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                    write_bound.reschedule(None)
        except TimeoutError:
            if not write_bound.expired():  # not the write bound's: the stream's own error
                raise
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
