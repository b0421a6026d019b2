"""`JetStreamJournal`: the cluster backend of `JournalBackend` (DESIGN §5).

Open it by URL (`JetStreamJournal.open("nats://a:4222,nats://b:4222")`) and
pass it to `Host.open(root, journal=...)`: the host runs unchanged on it.
The layout (one stream, a subject per session, R3, append-only, atomic
batches) is in `layout`; the guarded, idempotent batch publish in `writer`
and `batch`; the reads in `reads` and `lines`; the checkpoint pointer that
makes `load` O(tail) in `pointer`.

Appends: the call is checked on the caller's thread as the local journal
checks it (`checked_body`: nothing the log could not read back; large parts
moved to the object store first), framed on the session's head and
published as ONE atomic batch guarded by the head's stream sequence. A call
holds at most `MAX_BATCH_MSGS` (1,000) events: a larger one is refused whole
with `CallTooLarge`, nothing written (a session of any length is written in
calls). One event loop thread (`LoopThread`) owns the connection; the
calls reach it through one queue (`submit.Submissions`: a wake-up per
burst, not per call); calls of one session are applied in the order they
were made, calls of different sessions are in flight at once.

The head of each session this journal appended to is cached; a stale cache
(another host appended) costs one read of the subject's last message and
the call then fails with `SessionFenced` (a `SeqConflict`) if its expected
seq is stale, exactly as the server's guard would.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

import nats
from nats.aio.client import Client

from cairn.events.body_check import checked_body
from cairn.events.codec import Record, ts_in_range, validate_session_id
from cairn.events.errors import InputError, InvalidEvent
from cairn.events.kinds import KINDS, EventBase, ToolResult, UserMessage, kind_name
from cairn.events.model import BlobPart
from cairn.events.state import SessionState
from cairn.store.blobs import BLOB_CARRIERS, BLOB_THRESHOLD, externalize
from cairn.store.errors import AppendTimeout, BadClock, BlobError, StorageFailed, StoreClosed, read_clock
from cairn.store.index_records import CheckpointRef, SessionSummary
from cairn.store.jetstream import blobs as cluster_blobs
from cairn.store.jetstream.appender import Appender
from cairn.store.jetstream.layout import (
    HEADER_ROOM,
    MAX_BATCH_MSGS,
    SETTLE_DEADLINE_S,
    CallTooLarge,
    Handles,
    Layout,
    ensure_layout,
)
from cairn.store.jetstream.loop import LoopThread
from cairn.store.jetstream.reading import SessionReads
from cairn.store.jetstream.reads import DirectReader
from cairn.store.jetstream.submit import Pending, Submissions
from cairn.store.jetstream.writer import log

T = TypeVar("T")

#: how often the journal pings its server: a frozen (SIGSTOPped) server keeps its TCP link, so only
#: unanswered pings show it is gone (nats-py's default, 120 s, stalled appends for the whole freeze)
PING_INTERVAL_S = 2
#: unanswered pings before the journal drops the server and reconnects to another node
MAX_OUTSTANDING_PINGS = 2
#: how long one connection attempt may take, reconnects included: a frozen server accepts the TCP
#: connection and then says nothing, so a reconnect that picks it waits this long before the next
CONNECT_TIMEOUT_S = 3.0


async def _connection_trouble(error: Exception) -> None:
    """nats-py's report of a connection error: a node went away, the client reconnects to another."""
    log.info("cairn: NATS connection: %s: %s", type(error).__name__, error)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class JetStreamJournal(SessionReads):
    """A cairn store on a NATS JetStream cluster (see the module doc). Thread-safe."""

    def __init__(
        self,
        loop: LoopThread,
        nc: Client,
        handles: Handles,
        layout: Layout,
        *,
        url: str,
        clock_ms: Callable[[], int],
        request_timeout_s: float,
        blob_threshold: int,
    ) -> None:
        self.layout = layout
        self.url = url
        self._loop = loop
        self._nc = nc
        self._handles = handles
        self._clock_ms = clock_ms
        self._request_timeout_s = request_timeout_s
        self._blob_threshold = blob_threshold
        self._closed = False
        reader = DirectReader(nc, layout.stream, timeout_s=request_timeout_s)
        self._submissions = Submissions(loop.loop, self._begin)
        self._appender = Appender(
            nc,
            reader,
            layout,
            handles.pointers,
            request_timeout_s=request_timeout_s,
            max_line=max(1024, nc.max_payload - HEADER_ROOM),
            finished=self._submissions.finished,
        )
        super().__init__(reader, handles.pointers, nc.jetstream(timeout=request_timeout_s), layout)

    @classmethod
    def open(
        cls,
        url: str | Sequence[str],
        *,
        layout: Layout | None = None,
        clock_ms: Callable[[], int] | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        request_timeout_s: float = 12.0,
        blob_threshold: int = BLOB_THRESHOLD,
    ) -> JetStreamJournal:
        """Connect to the cluster at `url` (comma-separated or a list), creating the layout if missing.

        `request_timeout_s` bounds one request; it is above the 5-7 s write
        stall of a stream leader's failure. An append's attempts are shorter
        while it is young (2 s: `writer.attempt_timeout`), so one sent to a
        leader that just died goes again soon after the election; it retries
        (same message ids) until its own `timeout`.
        """
        servers = [u for u in url.split(",") if u] if isinstance(url, str) else list(url)
        chosen = layout if layout is not None else Layout()
        loop = LoopThread(name="cairn-jetstream")
        try:
            nc = loop.call(
                nats.connect(
                    servers=servers,
                    connect_timeout=connect_timeout_s,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.25,
                    allow_reconnect=True,
                    error_cb=_connection_trouble,
                    ping_interval=PING_INTERVAL_S,
                    max_outstanding_pings=MAX_OUTSTANDING_PINGS,
                ),
                connect_timeout_s * 2,
            )
            try:
                handles = loop.call(
                    ensure_layout(nc, chosen, request_timeout_s=request_timeout_s), SETTLE_DEADLINE_S + 5
                )
            except BaseException:
                loop.call(nc.close(), 10.0)
                raise
        except BaseException:
            loop.close()
            raise
        return cls(
            loop,
            nc,
            handles,
            chosen,
            url=",".join(servers),
            clock_ms=clock_ms if clock_ms is not None else _wall_clock_ms,
            request_timeout_s=request_timeout_s,
            blob_threshold=blob_threshold,
        )

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        if self._closed:
            coroutine.close()
            raise StoreClosed("the JetStream journal is closed")
        return self._loop.call(coroutine, timeout_s if timeout_s is not None else self._request_timeout_s * 4)

    # -- appending -----------------------------------------------------------------------

    def append(
        self,
        sid: str,
        events: Sequence[EventBase],
        *,
        expected_seq: int,
        ts_ms: int | None = None,
        timeout: float | None = 30.0,
    ) -> list[Record]:
        """Append `events` to `sid` as one atomic batch (see `JournalBackend.append` and the module doc).

        Raises `SessionFenced`/`SeqConflict` for a stale `expected_seq`,
        `CallTooLarge` over 1,000 events, `InvalidEvent`, `LineTooLarge`,
        `InvalidSessionId`, `InputError` for bad input (nothing written),
        `AppendTimeout` when the outcome is still unknown after `timeout`.
        """
        budget = 30.0 if timeout is None else timeout
        ts = self._admit(sid, events, expected_seq, ts_ms)
        pending = Pending.blocking(sid, self._checked(list(events)), expected_seq, ts, budget)
        self._submissions.submit(pending)
        assert pending.lock is not None
        if not pending.lock.acquire(timeout=budget + self._request_timeout_s + 5.0):
            raise AppendTimeout(f"session {sid}: no acknowledgement within {budget} s")
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def append_async(
        self,
        sid: str,
        events: Sequence[EventBase],
        *,
        expected_seq: int,
        ts_ms: int | None = None,
        timeout: float = 30.0,
    ) -> concurrent.futures.Future[list[Record]]:
        """Queue an append; the future resolves as `append` would return or raise.

        A bad session id, `expected_seq` or `ts_ms`, or an object that is not
        an event, raises here; an event that would not read back equal fails
        the future. Calls of one session are applied in the order made.
        """
        future: concurrent.futures.Future[list[Record]] = concurrent.futures.Future()
        try:
            ts = self._admit(sid, events, expected_seq, ts_ms)
        except BadClock as exc:  # not the call's fault: its outcome, like the local journal's
            future.set_exception(exc)
            return future
        try:
            checked = self._checked(list(events))
        except InputError as exc:
            future.set_exception(exc)
            return future
        self._submissions.submit(Pending(sid, checked, expected_seq, ts, timeout, future=future))
        return future

    def _admit(self, sid: str, events: Sequence[EventBase], expected_seq: int, ts_ms: int | None) -> int:
        """The call's arguments checked (StoreClosed, InvalidSessionId, InputError, InvalidEvent); its ts."""
        if self._closed:
            raise StoreClosed("the JetStream journal is closed")
        validate_session_id(sid)
        if type(expected_seq) is not int or expected_seq < 0:
            raise InputError(f"expected_seq must be an int >= 0, got {expected_seq!r}")
        if ts_ms is not None and (type(ts_ms) is not int or not ts_in_range(ts_ms)):
            raise InputError(f"ts_ms must be None or an int in 0..2**63-1 (unix ms), got {ts_ms!r}")
        if isinstance(events, EventBase | str | bytes) or not isinstance(events, Sequence):
            raise InvalidEvent(f"events must be a sequence of events, got {type(events).__name__}")
        for index, event in enumerate(events):
            if type(event) not in _TAGS:
                raise InvalidEvent(f"event {index} of the call: not an event: {type(event).__name__}")
        return ts_ms if ts_ms is not None else read_clock(self._clock_ms)

    def _checked(self, events: list[EventBase]) -> list[tuple[EventBase, bytes, str]]:
        """Each event as the log reads it back, its body and tag; large parts moved to the object store."""
        if not events:
            raise InputError("an append needs at least one event")
        if len(events) > MAX_BATCH_MSGS:
            raise CallTooLarge(
                f"a call of {len(events)} events: one atomic batch holds at most {MAX_BATCH_MSGS}; "
                "append in calls of at most that many"
            )
        out: list[tuple[EventBase, bytes, str]] = []
        for index, event in enumerate(events):
            try:
                stored, body = checked_body(event)
                if type(stored) in BLOB_CARRIERS and len(body) > self._blob_threshold:
                    moved = externalize(stored, self._put_blob, self._blob_threshold)
                    if moved is not stored:
                        stored, body = checked_body(moved)
                if type(stored) in BLOB_CARRIERS:
                    self._check_blob_parts(stored)
            except InvalidEvent as exc:
                raise InvalidEvent(f"event {index} of the call: {exc}", path=exc.path) from None
            out.append((stored, body, kind_name(stored)))
        return out

    @property
    def fast_appends(self) -> int:
        """Calls acknowledged on the fast path (`appender`), for tests and benches."""
        return self._appender.fast

    async def _begin(self, pending: Pending) -> None:
        await self._appender.begin(pending)

    def _put_blob(self, data: bytes) -> str:
        return self._call(cluster_blobs.put_blob(self._handles.blobs, data), self._request_timeout_s * 6)

    def _check_blob_parts(self, event: EventBase) -> None:
        assert isinstance(event, UserMessage | ToolResult)
        for position, part in enumerate(event.content):
            if type(part) is BlobPart:
                size = self._call(cluster_blobs.blob_size(self._handles.blobs, part.sha256))
                if size != part.size:
                    raise InvalidEvent(
                        f"no {part.size}-byte blob {part.sha256} in the cluster",
                        path=f"$.content[{position}]",
                    )

    # -- blobs, state, closing -------------------------------------------------------------

    def read_blob(self, sha256: str) -> bytes:
        """A blob's bytes, verified against its SHA-256 (`BlobError` if missing or altered)."""
        return self._call(cluster_blobs.get_blob(self._handles.blobs, sha256), self._request_timeout_s * 6)

    def blob_size(self, sha256: str) -> int | None:
        try:
            return self._call(cluster_blobs.blob_size(self._handles.blobs, sha256))
        except BlobError:
            return None

    @property
    def failed(self) -> StorageFailed | None:
        """Always None: the cluster's failures are transient (retried) or typed per call."""
        return None

    def close(self) -> None:
        """Drain the connection and stop its loop. Idempotent.

        Appends acknowledged while the connection drains return as usual; a
        call still queued then fails with `StoreClosed` (nothing written),
        one still in flight with `AppendTimeout` (it may be stored).
        """
        if self._closed:
            return
        self._closed = True
        try:
            try:
                self._loop.call(self._nc.drain(), 30.0)
            except Exception as exc:
                log.warning("cairn: closing the NATS connection: %s", exc)
            self._loop.call(self._cancel(), 10.0)  # calls still in flight: AppendTimeout below
        finally:
            self._loop.close()
            self._submissions.abandon(
                StoreClosed("the JetStream journal is closed"),
                AppendTimeout(
                    "the JetStream journal closed before the append was acknowledged: it may be stored"
                ),
            )

    async def _cancel(self) -> None:
        await self._submissions.cancel()
        await self._appender.cancel()

    def __enter__(self) -> JetStreamJournal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_TAGS = frozenset(KINDS.values())
__all__ = ["CheckpointRef", "JetStreamJournal", "SessionState", "SessionSummary"]
