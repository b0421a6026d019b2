"""Group commit: the queue of append calls and the one writer thread that commits them in batches.

The write path of a store opened for writing (`store.journal` is its
facade). `append` checks the call on the caller's thread and queues it
(`store.admission`: arguments, events, large parts moved to blobs). The
writer thread drains everything queued as one batch: it checks each call's
events (each must read back equal, `events.body_check.checked_body`; a bad
event refuses its whole call), its `expected_seq` against the session's
head (`store.index_builder`: the writer's cache of each session's running
summary), assigns pos, seq, ts and the hash chain, and frames the lines.
Then it writes them with one `os.write` per segment and one `fsync`,
rewrites the acknowledgement mark (`ACKED`, no fsync: evidence of what was
acknowledged, see `store.loss`), commits the index in one LMDB transaction,
and only then resolves the callers. A call's events are all written or
none, and a call never straddles two segments.

An I/O error is fatal (fsyncgate): the one path for it (`_fail`) makes
pending and later appends fail with `StorageFailed` until the store is
reopened, and reopening recovers from the log.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from cairn.events.codec import GENESIS, SCHEMA_VERSION, Record, frame_line, json_string
from cairn.events.errors import InputError, InvalidEvent
from cairn.events.kinds import TAG_JSON, TAG_OF, EventBase
from cairn.store.admission import Admission
from cairn.store.blobs import BlobStore
from cairn.store.errors import AppendTimeout, SeqConflict, StorageFailed, StoreClosed
from cairn.store.index import Index
from cairn.store.index_builder import IndexBuilder
from cairn.store.index_records import IndexMeta
from cairn.store.loss import AckMarkWriter
from cairn.store.recovery import Recovery
from cairn.store.segments import FsyncFn, SegmentWriter
from cairn.store.session_reader import broken_session

log = logging.getLogger("cairn.store")


class _Pending:
    """One queued append call; resolved by the writer thread exactly once."""

    __slots__ = ("bodies", "done", "error", "events", "expected", "future", "lock", "result", "sid", "ts")

    def __init__(
        self,
        sid: str,
        events: list[EventBase],
        bodies: list[bytes | None],
        expected: int,
        ts: int | None,
        future: concurrent.futures.Future[list[Record]] | None,
    ) -> None:
        self.sid = sid
        self.events = events  # once checked, as `checked_body` decoded them: what a read gives back
        self.bodies = bodies  # their JSON once checked (None before: see `Admission.check_call`)
        self.expected = expected
        self.ts = ts
        self.future = future
        self.result: list[Record] = []
        self.error: BaseException | None = None
        self.done = False
        if future is None:
            self.lock: Any = threading.Lock()
            self.lock.acquire()


class _Framed(NamedTuple):
    """A batch framed and indexed, not yet written: what `_commit` writes and `_acknowledge` resolves."""

    #: the lines, per segment: (the segment's first pos, its lines); the first is the active segment
    chunks: list[tuple[int, list[bytes]]]
    done: list[tuple[_Pending, list[Record]]]
    rejected: list[tuple[_Pending, BaseException]]
    #: the position after the batch's last line, and that line's place (segment, offset, length)
    next_pos: int
    last: tuple[int, int, int]


class GroupCommit:
    """The writer of one store: its queue, its writer thread, the active segment, the index's heads.

    Built by the journal once recovery ran and the acknowledgement mark is
    open, and it starts the writer thread. Thread-safety: `append` and
    `submit` may be called from any thread (not the writer's own: a
    synchronous `append` there is refused, it would wait on itself); done
    callbacks of their futures run on the writer thread. `close` is called
    once, by the journal.
    """

    def __init__(
        self,
        root: Path,
        *,
        index: Index,
        recovery: Recovery,
        blobs: BlobStore,
        segment_bytes: int,
        fsync: FsyncFn,
        clock_ms: Callable[[], int],
        blob_threshold: int,
        ack_mark: AckMarkWriter,
    ) -> None:
        self.root = root
        self.segment_bytes = segment_bytes
        self._index = index
        self._clock_ms = clock_ms
        self._blobs = blobs
        self._ack_mark = ack_mark
        self._admission = Admission(root, blobs, blob_threshold, self._put_blob)
        self._queue: collections.deque[_Pending] = collections.deque()
        self._work = threading.Event()
        self._closing = False
        self._drained = False
        self._failed: StorageFailed | None = None
        self._writer_ident = -1
        self.batches = 0  # batches written (for benchmarks and tests)
        meta = index.meta()
        assert meta is not None
        self._segment = SegmentWriter(
            root / "log",
            recovery.active_segment if recovery.segments else recovery.next_pos,
            fsync=fsync,
        )
        self._next_pos = recovery.next_pos
        self._builder = IndexBuilder(index.summary, meta)
        self._write_mark = ack_mark.write
        self._thread = threading.Thread(target=self._run, name="cairn-journal-writer", daemon=True)
        self._thread.start()

    @property
    def failed(self) -> StorageFailed | None:
        """The fatal storage error, once one happened (appends are refused)."""
        return self._failed

    # -- appending (any thread) -----------------------------------------------------------

    def append(
        self,
        sid: str,
        events: Sequence[EventBase],
        expected_seq: int,
        ts_ms: int | None,
        timeout: float | None,
    ) -> list[Record]:
        """`Journal.append`: queue the call and wait for the writer's answer."""
        if threading.get_ident() == self._writer_ident:
            raise InputError("append from the journal's writer thread would deadlock; use append_async")
        pending = self.submit(sid, events, expected_seq, ts_ms, None)
        if not pending.lock.acquire(timeout=-1 if timeout is None else timeout):
            raise AppendTimeout(f"session {sid}: no acknowledgement within {timeout} s")
        if pending.error is not None:
            raise pending.error
        return pending.result

    def submit(
        self,
        sid: str,
        events: Sequence[EventBase],
        expected_seq: int,
        ts_ms: int | None,
        future: concurrent.futures.Future[list[Record]] | None,
    ) -> _Pending:
        """Check and queue a call (`Admission.prepare`); the writer resolves `future`, or the call's lock.

        `Journal.append_async` calls it directly with its future (one call
        less on the append path, which the store bench measures).
        """
        if self._failed is not None:
            raise _own_copy(self._failed)
        if self._closing:
            raise StoreClosed(f"the journal of {self.root} is closed")
        prepared, bodies = self._admission.prepare(sid, events, expected_seq, ts_ms)
        pending = _Pending(sid, prepared, bodies, expected_seq, ts_ms, future)
        queue = self._queue
        queue.append(pending)
        if not self._work.is_set():
            self._work.set()
        if self._drained:
            # close() may have swept the queue before our item landed in it:
            # take it back ourselves unless someone else resolved it.
            with contextlib.suppress(ValueError):
                queue.remove(pending)
                _resolve(pending, None, StoreClosed(f"the journal of {self.root} is closed"))
        return pending

    def _put_blob(self, data: bytes) -> str:
        try:
            return self._blobs.put(data)
        except OSError as exc:
            failure = self._fail(exc, "writing a blob")
            raise failure from exc

    # -- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        self._writer_ident = threading.get_ident()
        queue = self._queue
        work = self._work
        while True:
            if not queue:
                work.clear()
                if not queue:
                    if self._closing:
                        break
                    work.wait()
                    continue
            batch: list[_Pending] = []
            take = queue.popleft
            while queue:
                batch.append(take())
            try:
                self._write_batch(batch)
            except BaseException as exc:  # never leave a caller hanging
                failure = self._fail(exc, "writing a batch")
                for pending in batch:
                    _resolve(pending, None, failure)

    def _fail(self, exc: BaseException, doing: str) -> StorageFailed:
        """The one path for I/O errors: the store refuses appends from now on."""
        if self._failed is None:
            self._failed = StorageFailed(
                f"the store at {self.root} failed while {doing} ({type(exc).__name__}: {exc}); "
                "the outcome of pending appends is unknown: reopen the store to recover"
            )
            self._failed.__cause__ = exc
            log.error("cairn: %s", self._failed)
        return self._failed

    def _write_batch(self, batch: list[_Pending]) -> None:
        """Runs on the writer thread: frame the calls, write, fsync, index, then resolve them."""
        failed = self._failed
        if failed is not None:
            for pending in batch:
                _resolve(pending, None, failed)
            return
        framed = self._frame(batch)
        if framed.done:
            try:
                self._commit(framed)
            except BaseException as exc:
                failure = self._fail(exc, "writing and syncing the log")
                for pending, _ in framed.done:
                    _resolve(pending, None, failure)
                for pending, error in framed.rejected:
                    _resolve(pending, None, error)
                return
            self.batches += 1
        _acknowledge(framed)

    def _frame(self, batch: list[_Pending]) -> _Framed:
        """Check each call, assign its pos, seq, ts and chain, frame its lines and index them (uncommitted).

        One loop, long on purpose: it runs once per appended event under heavy
        concurrency (the store bench measures it), so it keeps everything in
        locals, calls positionally and makes no per-event objects beyond the
        line and the Record; a function per call would cost a call per append.
        A call that fails its checks (a bad event, `expected_seq`, a broken
        session, a line too large) is rejected alone, nothing of it framed.
        Lines go in chunks, one per segment: a call that would take the
        segment past `segment_bytes` starts the next one.
        """
        builder = self._builder
        head_of = builder.head
        add = builder.add
        segment = self._segment
        limit = self.segment_bytes
        now = self._clock_ms()
        pos = self._next_pos
        seg_first = segment.first_pos
        chunks: list[tuple[int, list[bytes]]] = [(seg_first, [])]
        chunk_lines = chunks[0][1]
        chunk_size = segment.size
        done: list[tuple[_Pending, list[Record]]] = []
        rejected: list[tuple[_Pending, BaseException]] = []
        meta = builder.meta
        last = (meta.last_segment, meta.last_offset, meta.last_length)
        tag_of = TAG_OF
        tag_json = TAG_JSON
        check = self._admission.check_call
        frame = frame_line
        version = SCHEMA_VERSION

        for pending in batch:
            try:
                check(pending.events, pending.bodies)
            except Exception as exc:  # bad input must never reach `_fail`: it fails its own call only
                if not isinstance(exc, InputError):
                    exc = InvalidEvent(f"an event of the call cannot be checked ({type(exc).__name__})")
                rejected.append((pending, exc))
                continue
            sid = pending.sid
            head = head_of(sid)
            if head.broken_seq:
                rejected.append((pending, broken_session(self._index, sid, head.broken_seq)))
                continue
            if pending.expected != head.last_seq:
                rejected.append((pending, SeqConflict(sid, pending.expected, head.last_seq)))
                continue
            ts = pending.ts if pending.ts is not None else now
            seq = head.last_seq
            prev = head.head or GENESIS
            sid_json = json_string(sid)
            lines: list[bytes] = []
            digests: list[str] = []
            records: list[Record] = []
            call_pos = pos
            size = 0
            try:
                for event, body in zip(pending.events, pending.bodies, strict=True):
                    seq += 1
                    kind = type(event)
                    tag = tag_of[kind]
                    line, digest = frame(call_pos, sid_json, seq, ts, prev, tag_json[kind], body)  # type: ignore[arg-type]
                    lines.append(line)
                    digests.append(digest)
                    records.append(Record(call_pos, sid, seq, ts, prev, event, version, tag))  # type: ignore[arg-type]
                    size += len(line)
                    prev = digest
                    call_pos += 1
            except (InputError, msgspec.EncodeError, TypeError, ValueError, OverflowError, KeyError) as exc:
                rejected.append((pending, exc))
                continue
            if chunk_size and chunk_size + size > limit:
                seg_first = pos  # roll before this call: calls never straddle segments
                chunks.append((seg_first, []))
                chunk_lines = chunks[-1][1]
                chunk_size = 0
            for line, digest, record in zip(lines, digests, records, strict=True):
                length = len(line)
                add(
                    head,
                    record.seq,
                    record.pos,
                    ts,
                    record.prev,
                    digest,
                    record.line_kind,
                    record.event,
                    seg_first,
                    chunk_size,
                    length,
                )
                last = (seg_first, chunk_size, length)
                chunk_size += length
            chunk_lines += lines
            pos = call_pos
            done.append((pending, records))
        return _Framed(chunks, done, rejected, pos, last)

    def _commit(self, framed: _Framed) -> None:
        """Write the chunks (rolling segments between them) and fsync, rewrite the mark, commit the index."""
        segment = self._segment
        builder = self._builder
        pos, last = framed.next_pos, framed.last
        for number, (first_pos, lines_of_chunk) in enumerate(framed.chunks):
            if number:
                segment.roll(first_pos)
            if lines_of_chunk:
                segment.write(b"".join(lines_of_chunk))
                segment.sync()
        self._next_pos = pos
        self._write_mark(pos, segment.first_pos, segment.size)  # evidence of what is acknowledged
        builder.meta = IndexMeta(
            segment=segment.first_pos,
            offset=segment.size,
            next_pos=pos,
            last_segment=last[0],
            last_offset=last[1],
            last_length=last[2],
        )
        self._index.commit(builder.take())

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Finish the queued appends, stop the writer thread, refuse what came after, close the files."""
        self._closing = True
        self._work.set()
        self._thread.join()
        self._drained = True
        closed = StoreClosed(f"the journal of {self.root} is closed")
        while self._queue:
            _resolve(self._queue.popleft(), None, closed)
        self._segment.close()
        with contextlib.suppress(OSError):  # the log is the truth: a mark left behind only lags
            self._ack_mark.close()


def _acknowledge(framed: _Framed) -> None:
    """Resolve a batch's calls: those written with their records, those refused with their errors."""
    for pending, records in framed.done:
        pending.done = True
        if pending.future is None:
            pending.result = records
            pending.lock.release()
        else:
            pending.future.set_result(records)
    for pending, error in framed.rejected:
        _resolve(pending, None, error)


def _resolve(pending: _Pending, records: list[Record] | None, error: BaseException | None) -> None:
    if pending.done:
        return
    pending.done = True
    if isinstance(error, StorageFailed):
        error = _own_copy(error)
    if pending.future is None:
        pending.result = records or []
        pending.error = error
        pending.lock.release()
    elif error is not None:
        pending.future.set_exception(error)
    else:
        pending.future.set_result(records or [])


def _own_copy(failure: StorageFailed) -> StorageFailed:
    """A caller's own instance of the store's one failure, with the same message and cause.

    The same exception object raised in many threads (or from many futures)
    collects every raise's frames in its traceback, which then grows without
    bound and interleaves unrelated callers.
    """
    copy = StorageFailed(*failure.args)
    copy.__cause__ = failure.__cause__
    return copy
