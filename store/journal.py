"""The journal: the one API of the durable event log (DESIGN §2).

Disk contract (under the store root):

- `log/<20-digit first pos>.jsonl` -- the segments (see `store.segments`),
  the only source of truth; one line per event (see `events.codec`).
- `blobs/ab/cdef...` -- large parts, content-addressed (see `store.blobs`).
- `index/` -- the LMDB index, derived and rebuildable (see `store.index`).
- `LOCK` -- held with `flock` by the one process that writes the store.
- `ACKED` -- the acknowledgement mark, rewritten in every group commit;
  `operator.jsonl` and `quarantine/` -- an operator's accepted losses and
  the bytes a repair moved aside (see `store.loss`).

Directories are made 0700 and files 0600 whatever the umask, and nothing
inside the store is opened through a link (see `store.files`).

Write path (group commit): `append` validates the session id and the call,
moves large parts to blobs (fsynced first, once the call's events are
checked as below), and queues the call. One writer thread drains everything
queued, checks each event by encoding it and decoding it back equal
(`events.codec.checked_body`: nothing the log could not read back is
written, and a bad event refuses its whole call), checks each call's
`expected_seq`, assigns pos, seq, ts and the hash chain, writes the batch
with one `os.write` per segment and one `fsync`, rewrites the
acknowledgement mark (no fsync), commits the index in one LMDB transaction,
and only then resolves the callers. A call's events are all written or
none. An I/O error is fatal (fsyncgate): pending and later appends fail
with `StorageFailed` until the store is reopened, and reopening recovers
from the log.

Read path: `read`, `load` and the listings go through the index to the exact
lines; every line read is checked (checksum, envelope, hash chain) and a bad
one raises `CorruptionError` for its session only.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import lmdb
import msgspec

from cairn.events.body_check import checked_body
from cairn.events.codec import (
    GENESIS,
    SCHEMA_VERSION,
    Record,
    chain_digest,
    decode_line,
    decode_run,
    frame_line,
    json_string,
    validate_session_id,
)
from cairn.events.errors import DecodeError, InputError, InvalidEvent
from cairn.events.kinds import TAG_JSON, TAG_OF, EventBase, ToolResult, UserMessage
from cairn.events.model import BlobPart, ImagePart, TextPart
from cairn.events.state import Replayer, SessionState
from cairn.store.blobs import BLOB_CARRIERS, BLOB_THRESHOLD, BlobStore, externalize
from cairn.store.errors import (
    AppendTimeout,
    BlobError,
    CorruptionError,
    IndexUnusable,
    ReadOnlyStore,
    SeqConflict,
    StorageError,
    StorageFailed,
    StoreClosed,
    StoreLocked,
)
from cairn.store.files import DIR_MODE, check_dir, check_file, open_file, private_dir
from cairn.store.index import DEFAULT_MAP_SIZE, Index
from cairn.store.index_builder import IndexBuilder
from cairn.store.index_records import CheckpointRef, IndexMeta, Loc, SessionSummary
from cairn.store.loss import ACK_MARK, OPERATOR_LOG, QUARANTINE, AckMark, AckMarkWriter
from cairn.store.reader import Progress
from cairn.store.recovery import Recovery, open_for_reading, recover
from cairn.store.segments import FsyncFn, SegmentReader, SegmentWriter, segment_name

log = logging.getLogger("cairn.store")

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_READ_PAGE = 256
_MAX_SEQ = (1 << 63) - 1


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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
        self.bodies = bodies  # their JSON once checked (None before: see `Journal._check_call`)
        self.expected = expected
        self.ts = ts
        self.future = future
        self.result: list[Record] = []
        self.error: BaseException | None = None
        self.done = False
        if future is None:
            self.lock: Any = threading.Lock()
            self.lock.acquire()


class Journal:
    """The durable, append-only event log of every session of one store.

    Thread-safety: every public method may be called from any thread. Appends
    are serialized by the single writer thread; reads run on the caller's
    thread with short index transactions and never block appends. Done
    callbacks of `append_async` futures run on the writer thread: they must
    not block on the journal (a synchronous `append` from there is refused).

    Open for writing takes the store's lock file (a second writer gets
    `StoreLocked`), runs recovery (`self.recovery`) and starts the writer.
    It refuses, changing nothing in the log, when acknowledged lines are
    missing and no operator accepted their loss (`AcknowledgedDataMissing`),
    and when `log/` or one of cairn's own entries holds something cairn did
    not make (`UnexpectedEntry`).
    `readonly=True` takes no lock and changes nothing on disk; it reads the
    index as the writer last committed it when that covers the whole log, and
    otherwise (a crash left it behind, no usable index) a private index in a
    temporary directory caught up from the log (`store.recovery.open_for_reading`).
    """

    def __init__(
        self,
        root: Path,
        *,
        index: Index,
        recovery: Recovery,
        readonly: bool,
        segment_bytes: int,
        fsync: FsyncFn,
        clock_ms: Callable[[], int],
        blob_threshold: int,
        lock_fd: int | None,
        private_index: Path | None,
        ack_mark: AckMarkWriter | None = None,
    ) -> None:
        self.root = root
        self.readonly = readonly
        self.recovery = recovery
        self.segment_bytes = segment_bytes
        self._index = index
        self._fsync = fsync
        self._clock_ms = clock_ms
        self._blob_threshold = blob_threshold
        self._lock_fd = lock_fd
        self._private_index = private_index
        self._ack_mark = ack_mark
        self._blobs = BlobStore(root, fsync=fsync)
        self._reader = SegmentReader(root / "log")
        self._queue: collections.deque[_Pending] = collections.deque()
        self._work = threading.Event()
        self._closing = False
        self._closed = False
        self._drained = False
        self._failed: StorageFailed | None = None
        self._close_lock = threading.Lock()
        self._writer_ident = -1
        self._thread: threading.Thread | None = None
        self.batches = 0  # batches written (for benchmarks and tests)
        if not readonly:
            meta = index.meta()
            assert meta is not None
            self._segment = SegmentWriter(
                root / "log",
                recovery.active_segment if recovery.segments else recovery.next_pos,
                fsync=fsync,
            )
            self._next_pos = recovery.next_pos
            self._builder = IndexBuilder(index.summary, meta)
            assert ack_mark is not None, "a writer keeps the acknowledgement mark"
            self._write_mark = ack_mark.write
            self._thread = threading.Thread(target=self._run, name="cairn-journal-writer", daemon=True)
            self._thread.start()

    # -- opening ------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        readonly: bool = False,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        fsync: FsyncFn = os.fsync,
        clock_ms: Callable[[], int] | None = None,
        map_size: int = DEFAULT_MAP_SIZE,
        blob_threshold: int = BLOB_THRESHOLD,
        progress: Progress | None = None,
    ) -> Journal:
        """Open (creating when writable) the store at `root`; see the class doc."""
        path = Path(root)
        if segment_bytes < 1:
            raise InputError(f"segment_bytes must be positive, got {segment_bytes}")
        clock = clock_ms if clock_ms is not None else _wall_clock_ms
        if readonly:
            return cls._open_readonly(path, segment_bytes, fsync, clock, map_size, blob_threshold, progress)
        try:
            _make_store_dirs(path)
        except OSError as exc:
            raise StorageFailed(f"cannot make the store at {path}: {exc}") from exc
        lock_fd = _take_lock(path)
        try:
            index_dir = path / "index"
            rebuilt = ""
            try:
                index = Index(index_dir, map_size=map_size)
            except IndexUnusable as exc:
                rebuilt = str(exc)
                log.warning("cairn: the index of %s is unusable, rebuilding it: %s", path, exc)
                shutil.rmtree(index_dir, ignore_errors=True)
                index = Index(index_dir, map_size=map_size)
            ack_mark: AckMarkWriter | None = None
            try:
                recovery = recover(path, index, fsync=fsync, progress=progress, rebuild=bool(rebuilt))
                if rebuilt:
                    recovery = _with_reason(recovery, rebuilt)
                mark = AckMark(recovery.next_pos, recovery.active_segment, recovery.active_size)
                ack_mark = AckMarkWriter(path, mark, fsync=fsync)
                return cls(
                    path,
                    index=index,
                    recovery=recovery,
                    readonly=False,
                    segment_bytes=segment_bytes,
                    fsync=fsync,
                    clock_ms=clock,
                    blob_threshold=blob_threshold,
                    lock_fd=lock_fd,
                    private_index=None,
                    ack_mark=ack_mark,
                )
            except BaseException:
                if ack_mark is not None:
                    ack_mark.close()
                index.close()
                raise
        except (OSError, lmdb.Error) as exc:  # a full disk reaches us from LMDB as lmdb.DiskError
            os.close(lock_fd)
            raise StorageFailed(f"cannot open the store at {path}: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def _open_readonly(
        cls,
        path: Path,
        segment_bytes: int,
        fsync: FsyncFn,
        clock: Callable[[], int],
        map_size: int,
        blob_threshold: int,
        progress: Progress | None,
    ) -> Journal:
        """Open for reading only: no lock, nothing on disk changed (see `open_for_reading`).

        The store's own index is read as the writer committed it when nothing
        past its recovery point needs indexing (a cheap check, no scan). When
        the log holds lines past it (a crash between the log's fsync and the
        index's commit, or a live writer between the two), the journal reads
        through a private, caught-up copy in a temporary directory, removed by
        `close`; `self.recovery` says what was caught up (`lines_indexed`,
        `scanned_from`, a torn tail left in place, corrupt lines).
        """
        if not check_dir(path / "log"):  # a link in its place: UnexpectedEntry, never read through
            raise StorageError(f"no cairn store at {path} (no log directory)")
        index, recovery, private = open_for_reading(path, map_size=map_size, progress=progress)
        try:
            return cls(
                path,
                index=index,
                recovery=recovery,
                readonly=True,
                segment_bytes=segment_bytes,
                fsync=fsync,
                clock_ms=clock,
                blob_threshold=blob_threshold,
                lock_fd=None,
                private_index=private,
            )
        except BaseException:
            index.close()
            if private is not None:
                shutil.rmtree(private, ignore_errors=True)
            raise

    # -- appending ------------------------------------------------------------------

    def append(
        self,
        sid: str,
        events: Sequence[EventBase],
        *,
        expected_seq: int,
        ts_ms: int | None = None,
        timeout: float | None = 30.0,
    ) -> list[Record]:
        """Append `events` to session `sid` atomically; return them as stored.

        Returns once the lines are fsynced and indexed; the records hold the
        events as a read gives them back (equal to those given). Raises
        `SeqConflict` when `expected_seq` is not the session's last seq,
        `InvalidEvent` (an event that would not read back equal: a field of the
        wrong type, NaN, a lone surrogate, a missing blob; it names the field),
        `LineTooLarge`, `InvalidSessionId` or `InputError` for bad input: the
        whole call is refused and nothing of it written,
        `StorageFailed` after an I/O error, `AppendTimeout` when no answer came
        within `timeout` seconds (the append may still become durable).
        """
        if threading.get_ident() == self._writer_ident:
            raise InputError("append from the journal's writer thread would deadlock; use append_async")
        pending = self._submit(sid, events, expected_seq, ts_ms, None)
        if not pending.lock.acquire(timeout=-1 if timeout is None else timeout):
            raise AppendTimeout(f"session {sid}: no acknowledgement within {timeout} s")
        if pending.error is not None:
            raise pending.error
        return pending.result

    def append_async(
        self,
        sid: str,
        events: Sequence[EventBase],
        *,
        expected_seq: int,
        ts_ms: int | None = None,
    ) -> concurrent.futures.Future[list[Record]]:
        """Queue an append; the future resolves as `append` would return or raise.

        A bad session id, `expected_seq` or `ts_ms`, or an object that is not
        an event, raises here, before anything is queued; an event whose
        fields would not read back equal fails the future with `InvalidEvent`
        (the writer checks it before anything of the call is written), as an
        oversized line fails it with `LineTooLarge`. Calls queued in
        order are applied in order, so a caller may pipeline appends of one
        session with increasing `expected_seq`.
        """
        future: concurrent.futures.Future[list[Record]] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # the writer owns it now: it cannot be cancelled
        self._submit(sid, events, expected_seq, ts_ms, future)
        return future

    def _submit(
        self,
        sid: str,
        events: Sequence[EventBase],
        expected_seq: int,
        ts_ms: int | None,
        future: concurrent.futures.Future[list[Record]] | None,
    ) -> _Pending:
        if self.readonly:
            raise ReadOnlyStore(f"the store at {self.root} is open read-only")
        if self._failed is not None:
            raise _own_copy(self._failed)
        if self._closing:
            raise StoreClosed(f"the journal of {self.root} is closed")
        validate_session_id(sid)
        if type(expected_seq) is not int or expected_seq < 0:
            raise InputError(f"expected_seq must be an int >= 0, got {expected_seq!r}")
        if ts_ms is not None and (type(ts_ms) is not int or not 0 <= ts_ms <= _MAX_SEQ):
            raise InputError(f"ts_ms must be None or an int in 0..2**63-1 (unix ms), got {ts_ms!r}")
        if type(events) is not list and (
            isinstance(events, EventBase | str | bytes) or not isinstance(events, Iterable)
        ):
            raise InvalidEvent(f"events must be a sequence of events, got {type(events).__name__}")
        prepared: list[EventBase] = list(events)
        # None: not checked yet. The writer checks each event (`_check_call`), warm and batched;
        # a call that may hold a part for the blob store is checked here, all of it, before
        # any of its blobs is written.
        bodies: list[bytes | None] = [None] * len(prepared)
        threshold = self._blob_threshold
        blobs = False
        for index, event in enumerate(prepared):
            kind = type(event)
            if kind not in TAG_OF:  # the event classes themselves: a subclass would encode another tag
                raise InvalidEvent(f"event {index} of the call: not an event: {kind.__name__}")
            if kind in BLOB_CARRIERS and not blobs:
                blobs = _may_hold_a_blob_part(event, threshold)
        if blobs:
            for index, event in enumerate(prepared):
                prepared[index], bodies[index] = self._checked_event(index, event)
            for index, body in enumerate(bodies):
                if body is not None and len(body) > threshold:  # only then can a part be over it
                    moved = externalize(prepared[index], self._put_blob, threshold)
                    if moved is not prepared[index]:
                        prepared[index], bodies[index] = checked_body(moved)
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

    def _checked_event(self, index: int, event: EventBase) -> tuple[EventBase, bytes]:
        """`checked_body`, and every blob part it names present; InvalidEvent naming the event's index."""
        try:
            stored, body = checked_body(event)
            if type(stored) in BLOB_CARRIERS:
                self._check_blob_parts(stored)
        except InvalidEvent as exc:
            raise InvalidEvent(f"event {index} of the call: {exc}", path=exc.path) from None
        return stored, body

    def _check_blob_parts(self, event: EventBase) -> None:
        """Refuse a blob part (of a checked event) that names no blob of this store of its size.

        Blob parts are written by `externalize`, or copied by a caller from an
        earlier event: one that names a missing blob would be acknowledged and
        then reported by `verify`. A stat, not a re-hash (blobs are immutable).
        """
        assert isinstance(event, UserMessage | ToolResult)
        for position, part in enumerate(event.content):
            if type(part) is BlobPart:
                try:
                    present = self._blobs.path(part.sha256).stat().st_size == part.size
                except (BlobError, OSError):
                    present = False
                if not present:
                    raise InvalidEvent(
                        f"no {part.size}-byte blob {part.sha256} in the store at {self.root}",
                        path=f"$.content[{position}]",
                    )

    def _check_call(self, pending: _Pending) -> None:
        """Runs on the writer thread: check each event of the call `_submit` left unchecked.

        Raises InvalidEvent for the first bad one (the call is then refused
        whole, nothing of it written). Here rather than on the caller's thread
        because there it would run cold: with hundreds of appending threads,
        each switch evicts the caches, and the same encode and decode cost a
        caller several times what they cost the writer, which runs them back
        to back.
        """
        events, bodies = pending.events, pending.bodies
        check = checked_body
        carriers = BLOB_CARRIERS
        for index, body in enumerate(bodies):
            if body is None:
                try:
                    stored, bodies[index] = check(events[index])
                    if type(stored) in carriers:
                        self._check_blob_parts(stored)
                except InvalidEvent as exc:
                    raise InvalidEvent(f"event {index} of the call: {exc}", path=exc.path) from None
                events[index] = stored

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
        """Runs on the writer thread: frame the checked bodies, write, fsync, index, then resolve.

        This loop runs once per appended event under heavy concurrency, so it
        is written for speed: locals, positional calls, no per-event objects
        beyond the line and the Record.
        """
        failed = self._failed
        if failed is not None:
            for pending in batch:
                _resolve(pending, None, failed)
            return
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
        check = self._check_call
        frame = frame_line
        version = SCHEMA_VERSION

        for pending in batch:
            try:
                check(pending)
            except Exception as exc:  # bad input must never reach `_fail`: it fails its own call only
                if not isinstance(exc, InputError):
                    exc = InvalidEvent(f"an event of the call cannot be checked ({type(exc).__name__})")
                rejected.append((pending, exc))
                continue
            sid = pending.sid
            head = head_of(sid)
            if head.broken_seq:
                rejected.append((pending, self._broken(sid, head.broken_seq)))
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
                add(head, record.seq, record.pos, ts, record.prev, digest, record.line_kind, record.event,
                    seg_first, chunk_size, length)
                last = (seg_first, chunk_size, length)
                chunk_size += length
            chunk_lines += lines
            pos = call_pos
            done.append((pending, records))

        if done:
            try:
                for number, (first_pos, lines_of_chunk) in enumerate(chunks):
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
            except BaseException as exc:
                failure = self._fail(exc, "writing and syncing the log")
                for pending, _ in done:
                    _resolve(pending, None, failure)
                for pending, error in rejected:
                    _resolve(pending, None, error)
                return
            self.batches += 1
        for pending, records in done:
            pending.done = True
            if pending.future is None:
                pending.result = records
                pending.lock.release()
            else:
                pending.future.set_result(records)
        for pending, error in rejected:
            _resolve(pending, None, error)

    def _broken(self, sid: str, seq: int) -> CorruptionError:
        for entry in self._index.corruptions():
            if entry.sid == sid:
                return CorruptionError(
                    f"the session is unreadable from seq {seq}: {entry.reason}",
                    segment=segment_name(entry.segment), offset=entry.offset, sid=sid, seq=entry.seq or seq,
                )
        loc = self._index.location(sid, seq) or self._index.location(sid, seq - 1)
        return CorruptionError(
            f"the session's seq or hash chain breaks at seq {seq}",
            segment=segment_name(loc.segment) if loc else "?", offset=loc.offset if loc else -1,
            sid=sid, seq=seq,
        )

    # -- reading ------------------------------------------------------------------------

    def last_seq(self, sid: str) -> int:
        """The session's highest seq from the index (0 when unknown); no replay."""
        summary = self._index.summary(validate_session_id(sid))
        return summary.last_seq if summary is not None else 0

    def session(self, sid: str) -> SessionSummary | None:
        return self._index.summary(validate_session_id(sid))

    def sessions(self) -> Iterator[SessionSummary]:
        """Every session's summary, in id order."""
        return self._index.summaries()

    def checkpoints(self, sid: str) -> list[CheckpointRef]:
        """The session's `checkpoint-committed` events, by epoch."""
        return self._index.checkpoints(validate_session_id(sid))

    def read(self, sid: str, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Record]:
        """The session's records with from_seq <= seq <= to_seq, in seq order.

        Each line is verified (checksum, envelope, hash chain within the
        range); a bad line, or reading past the point where the session is
        known to be broken, raises `CorruptionError` naming segment, offset
        and session. Other sessions are unaffected.
        """
        validate_session_id(sid)
        last = _MAX_SEQ if to_seq is None else to_seq
        return self._read(sid, max(from_seq, 1), last)

    def _read(self, sid: str, from_seq: int, to_seq: int, *, chain: bool = True) -> Iterator[Record]:
        """Records of one session; `chain=False` skips the hash-chain check.

        Replay (`load`, `replay_full`) skips it: every line's CRC, envelope,
        seq and position are still checked, so a damaged line still fails
        closed, while the chain (tamper evidence, costly SHA-256 per line) is
        `read` and `verify`'s business.
        """
        if from_seq > to_seq:
            return
        summary = self._index.summary(sid)
        if summary is None:
            return
        broken = summary.broken_seq
        to_seq = min(to_seq, summary.last_seq)
        cursor = from_seq
        prev_digest: str | None = None
        while cursor <= to_seq:
            page = self._index.locations(sid, cursor, to_seq, _READ_PAGE)
            lines = self._read_page(page)
            for (seq, loc), raw in zip(page, lines, strict=True):
                if broken and seq >= broken:
                    raise self._broken(sid, broken)
                record, digest = self._read_line(sid, seq, loc, chain, raw)
                if chain and prev_digest is not None and record.prev != prev_digest:
                    raise CorruptionError(
                        "hash chain broken: prev does not name the previous line",
                        segment=segment_name(loc.segment), offset=loc.offset, sid=sid, seq=seq,
                    )
                prev_digest = digest
                cursor = seq + 1
                yield record
            if len(page) < _READ_PAGE:
                break
        if broken and from_seq <= broken <= to_seq and cursor <= broken:
            raise self._broken(sid, broken)

    def _replay_pages(self, sid: str, from_seq: int, to_seq: int = _MAX_SEQ) -> Iterator[list[Record]]:
        """The replay hot path: the session's records in pages, checked like `read` minus the chain.

        Each run of adjacent lines is read with one pread and decoded with one
        `decode_lines` call; every line's frame, CRC, envelope, seq, position
        and session are checked, and any problem raises `CorruptionError`
        naming segment, offset and session (found by re-reading the run line
        by line). The hash chain is `read` and `verify`'s business.
        """
        summary = self._index.summary(sid)
        if summary is None or from_seq > to_seq:
            return
        broken = summary.broken_seq
        to_seq = min(to_seq, summary.last_seq)
        if broken and from_seq >= broken:
            raise self._broken(sid, broken)
        cursor = from_seq
        read = self._reader.read
        raw_locations = self._index.raw_locations
        page_size = _READ_PAGE * 4
        while cursor <= to_seq:
            page = raw_locations(sid, cursor, to_seq, page_size)
            if not page:
                break
            if broken and page[-1][0] >= broken:
                page = [entry for entry in page if entry[0] < broken]
            i, count = 0, len(page)
            while i < count:
                _, segment, offset, _, _ = page[i]
                end, stop = i, offset
                while end < count and page[end][1] == segment and page[end][2] == stop:
                    stop += page[end][3]
                    end += 1
                run = page[i:end]
                yield self._decode_run(sid, run, read, segment, offset, stop)
                cursor = run[-1][0] + 1
                i = end
            if broken and cursor >= broken:
                raise self._broken(sid, broken)
            if count < page_size:
                break
        if broken and from_seq <= broken <= to_seq and cursor <= broken:
            raise self._broken(sid, broken)

    def _decode_run(
        self,
        sid: str,
        run: list[tuple[int, int, int, int, int]],
        read: Callable[[int, int, int], bytes],
        segment: int,
        offset: int,
        stop: int,
    ) -> list[Record]:
        """Decode one run of adjacent lines; on any doubt, check them one by one for the precise error."""
        try:
            blob = read(segment, offset, stop - offset)
        except OSError:
            blob = b""
        if len(blob) == stop - offset:
            try:
                records = decode_run(blob, [entry[3] for entry in run])
            except DecodeError:
                records = []
            if len(records) == len(run):
                for record, (seq, _, _, _, pos) in zip(records, run, strict=True):
                    if record.seq != seq or record.pos != pos or record.sid != sid:
                        break
                else:
                    return records
        # the slow path names the first bad line exactly (and raises for it)
        return [self._read_line(sid, seq, Loc(seg, off, length, pos), False)[0]
                for seq, seg, off, length, pos in run]

    def _read_page(self, page: list[tuple[int, Loc]]) -> list[bytes | None]:
        """The raw lines of a page of locations, one pread per run of adjacent lines.

        A line that cannot be read here comes back as None and is read (and
        its error reported) one by one in `_read_line`.
        """
        lines: list[bytes | None] = []
        i = 0
        while i < len(page):
            first = page[i][1]
            end = i + 1
            stop = first.offset + first.length
            while end < len(page) and page[end][1].segment == first.segment and page[end][1].offset == stop:
                stop += page[end][1].length
                end += 1
            try:
                blob = self._reader.read(first.segment, first.offset, stop - first.offset)
            except OSError:
                blob = b""
            if len(blob) != stop - first.offset:
                lines.extend([None] * (end - i))
            else:
                start = 0
                for _, loc in page[i:end]:
                    lines.append(blob[start : start + loc.length])
                    start += loc.length
            i = end
        return lines

    def _read_line(
        self, sid: str, seq: int, loc: Loc, chain: bool = True, raw: bytes | None = None
    ) -> tuple[Record, str]:
        where = f"{segment_name(loc.segment)}@{loc.offset}"
        try:
            if raw is None:
                raw = self._reader.read(loc.segment, loc.offset, loc.length)
            record = decode_line(raw, where=where)
            digest = chain_digest(raw) if chain else ""
        except (DecodeError, OSError) as exc:
            raise CorruptionError(
                f"unreadable line: {exc}",
                segment=segment_name(loc.segment), offset=loc.offset, sid=sid, seq=seq,
            ) from exc
        if record.sid != sid or record.seq != seq or record.pos != loc.pos:
            raise CorruptionError(
                f"the line holds {record.sid} seq {record.seq} pos {record.pos}, "
                f"the index expects seq {seq} pos {loc.pos}",
                segment=segment_name(loc.segment), offset=loc.offset, sid=sid, seq=seq,
            )
        return record, digest

    def load(self, sid: str) -> SessionState:
        """The session's state, replayed from its latest checkpoint (DESIGN §2.6).

        Reads the latest `session-started` and then every event from the latest
        `checkpoint-committed` on: O(events since the checkpoint). Equal to
        `replay_full`. An unknown session gives an empty state for `sid`; a
        broken one raises `CorruptionError` (fail closed).
        """
        validate_session_id(sid)
        summary = self._index.summary(sid)
        if summary is None:
            return SessionState(sid=sid)
        if summary.broken_seq:
            raise self._broken(sid, summary.broken_seq)
        start = summary.checkpoint_seq
        if start <= 1:
            return self._replay(sid, 1)
        replayer = Replayer()
        if 0 < summary.info_seq < start:
            for page in self._replay_pages(sid, summary.info_seq, summary.info_seq):
                replayer.feed(page)
        return self._replay(sid, start, replayer)

    def replay_full(self, sid: str) -> SessionState:
        """The session's state folded from seq 1 (the reference for `load`)."""
        validate_session_id(sid)
        if self._index.summary(sid) is None:
            return SessionState(sid=sid)
        return self._replay(sid, 1)

    def _replay(self, sid: str, from_seq: int, replayer: Replayer | None = None) -> SessionState:
        replayer = replayer if replayer is not None else Replayer()
        for page in self._replay_pages(sid, from_seq):
            replayer.feed(page)
        return replayer.state()

    def read_blob(self, sha256: str) -> bytes:
        """A blob's bytes, verified against its SHA-256 (`BlobError` if missing or altered)."""
        return self._blobs.get(sha256)

    def index_dump(self) -> list[tuple[str, bytes, bytes]]:
        """Every entry of the index, for equality checks against a rebuild."""
        return self._index.dump()

    @property
    def index(self) -> Index:
        return self._index

    @property
    def failed(self) -> StorageFailed | None:
        """The fatal storage error, once one happened (appends are refused)."""
        return self._failed

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Finish queued appends, stop the writer, release the lock. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closing = True
            self._work.set()
            if self._thread is not None:
                self._thread.join()
            self._drained = True
            closed = StoreClosed(f"the journal of {self.root} is closed")
            while self._queue:
                _resolve(self._queue.popleft(), None, closed)
            self._closed = True
            if not self.readonly:
                self._segment.close()
            if self._ack_mark is not None:
                with contextlib.suppress(OSError):  # the log is the truth: a mark left behind only lags
                    self._ack_mark.close()
            self._reader.close()
            self._index.close()
            if self._private_index is not None:
                shutil.rmtree(self._private_index, ignore_errors=True)
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _may_hold_a_blob_part(event: EventBase, threshold: int) -> bool:
    """Whether `externalize` might move a part of this unchecked event: a cheap superset of its test.

    A part's JSON is at most six bytes a character plus its keys, so a part
    whose strings are short enough cannot be over the threshold. (Exact
    types and no getattr defaults: a missing attribute costs an exception.)
    """
    content = event.content  # type: ignore[attr-defined]  # a blob carrier
    if type(content) is not tuple:  # not checked yet: the writer refuses anything but a tuple
        return False
    for part in content:
        kind = type(part)
        if kind is TextPart:
            values: tuple[object, ...] = (part.text,)
        elif kind is ImagePart:
            values = (part.data, part.url, part.media_type)
        else:
            continue
        chars = sum(len(value) for value in values if type(value) is str)
        if chars * 6 + 64 > threshold:
            return True
    return False


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


def _make_store_dirs(root: Path) -> None:
    """The store root (0700 when cairn makes it; its parents as `mkdir -p` would) and its `log/`.

    Raises `UnexpectedEntry` when one of cairn's own entries is a link or of
    the wrong type, before anything is changed.
    """
    if not root.is_dir():
        root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another opener made it meanwhile
            os.mkdir(root, DIR_MODE)
            os.chmod(root, DIR_MODE)
    for name in ("LOCK", ACK_MARK, OPERATOR_LOG):
        check_file(root / name)
    for name in ("index", "blobs", QUARANTINE):
        check_dir(root / name)
    private_dir(root / "log")


def _take_lock(root: Path) -> int:
    """The exclusive writer lock (flock on `<root>/LOCK`); StoreLocked if held."""
    fd, _ = open_file(root / "LOCK", os.O_RDWR, create=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        finally:
            os.close(fd)
        raise StoreLocked(
            f"the store at {root} is open for writing by another process or journal"
            + (f" (pid {holder})" if holder else "")
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _with_reason(recovery: Recovery, reason: str) -> Recovery:
    return dataclasses.replace(recovery, index_rebuilt=reason)
