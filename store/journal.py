"""The journal: the one API of the durable event log (DESIGN §2), a facade over its parts.

Disk contract (under the store root):

- `log/<20-digit first pos>.jsonl` -- the segments (see `store.segments`),
  the only source of truth; one line per event (see `events.codec`).
- `blobs/ab/cdef...` -- large parts, content-addressed (see `store.blobs`).
- `index/` -- the LMDB index, derived and rebuildable (see `store.index`).
- `LOCK` -- held with `flock` by the one process that writes the store
  (see `store.lock`).
- `ACKED` -- the acknowledgement mark, rewritten in every group commit;
  `operator.jsonl` and `quarantine/` -- an operator's accepted losses and
  the bytes a repair moved aside (see `store.loss`).

Directories are made 0700 and files 0600 whatever the umask, and nothing
inside the store is opened through a link (see `store.files`).

Write path: `store.group_commit` -- the calls checked and encoded on the
callers' threads (`store.admission`), queued, and committed in batches by
two writer threads, a pipeline: one frames a batch (pos, seq, ts, chain)
while the other writes the batch before it, with one `os.write` per segment
and one `fsync` a batch, the index committed after, the callers resolved
last. A call's events are all written or none; an I/O error is fatal until
the store is reopened, and reopening recovers from the log
(`store.recovery`).

Read path: `store.session_reader` -- `read`, `load` and the listings go
through the index to the exact lines; every line read is checked (checksum,
envelope, hash chain) and a bad one raises `CorruptionError` for its
session only.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

import lmdb

from cairn.events.codec import Record, validate_session_id
from cairn.events.errors import InputError
from cairn.events.kinds import EventBase
from cairn.events.state import SessionState
from cairn.store.ack_mark import ACK_MARK, AckMark, AckMarkWriter
from cairn.store.blobs import BLOB_THRESHOLD, BlobStore
from cairn.store.errors import IndexUnusable, ReadOnlyStore, StorageError, StorageFailed
from cairn.store.files import DIR_MODE, check_dir, check_file, private_dir
from cairn.store.group_commit import GroupCommit
from cairn.store.index import DEFAULT_MAP_SIZE, Index
from cairn.store.index_records import CheckpointRef, SessionSummary
from cairn.store.lock import take_lock
from cairn.store.loss import OPERATOR_LOG, QUARANTINE
from cairn.store.reader import Progress
from cairn.store.readonly import open_for_reading
from cairn.store.recovery import Recovery, recover
from cairn.store.segments import FsyncFn, SegmentReader
from cairn.store.session_reader import MAX_SEQ, SessionReader

log = logging.getLogger("cairn.store")

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Journal:
    """The durable, append-only event log of every session of one store.

    Thread-safety: every public method may be called from any thread. Appends
    are serialized by the writer (a framing thread, then a syncing one);
    reads run on the caller's thread with short index transactions and never
    block appends. Done callbacks of `append_async` futures run on the
    syncing thread: they must not block on the journal (a synchronous
    `append` from either writer thread is refused).

    Open for writing takes the store's lock file (a second writer gets
    `StoreLocked`), runs recovery (`self.recovery`) and starts the writer.
    It refuses, changing nothing in the log, when acknowledged lines are
    missing and no operator accepted their loss (`AcknowledgedDataMissing`),
    and when `log/` or one of cairn's own entries holds something cairn did
    not make (`UnexpectedEntry`).
    `readonly=True` takes no lock and changes nothing on disk; it reads the
    index as the writer last committed it when that covers the whole log, and
    otherwise (a crash left it behind, no usable index) a private index in a
    temporary directory caught up from the log (`store.readonly.open_for_reading`).
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
        self._lock_fd = lock_fd
        self._private_index = private_index
        self._blobs = BlobStore(root, fsync=fsync)
        self._segments = SegmentReader(root / "log")
        self._reader = SessionReader(index, self._segments)
        self._closed = False
        self._close_lock = threading.Lock()
        self._writer: GroupCommit | None = None
        if not readonly:
            assert ack_mark is not None, "a writer keeps the acknowledgement mark"
            self._writer = GroupCommit(
                root,
                index=index,
                recovery=recovery,
                blobs=self._blobs,
                segment_bytes=segment_bytes,
                fsync=fsync,
                clock_ms=clock_ms,
                blob_threshold=blob_threshold,
                ack_mark=ack_mark,
            )

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
        lock_fd = take_lock(path)
        try:
            return cls._open_locked(
                path, lock_fd, segment_bytes, fsync, clock, map_size, blob_threshold, progress
            )
        except (OSError, lmdb.Error) as exc:  # a full disk reaches us from LMDB as lmdb.DiskError
            os.close(lock_fd)
            raise StorageFailed(f"cannot open the store at {path}: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def _open_locked(
        cls,
        path: Path,
        lock_fd: int,
        segment_bytes: int,
        fsync: FsyncFn,
        clock: Callable[[], int],
        map_size: int,
        blob_threshold: int,
        progress: Progress | None,
    ) -> Journal:
        """A writer's open, under the lock: the index (rebuilt if unusable), recovery, mark, writer."""
        index, rebuilt = _open_index(path, map_size)
        ack_mark: AckMarkWriter | None = None
        try:
            recovery = recover(path, index, fsync=fsync, progress=progress, rebuild=bool(rebuilt))
            if rebuilt:
                recovery = dataclasses.replace(recovery, index_rebuilt=rebuilt)
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
        return self._writing().append(sid, events, expected_seq, ts_ms, timeout)

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
        writer = self._writer  # not `_writing()`: the append path saves every call it can
        if writer is None:
            raise ReadOnlyStore(f"the store at {self.root} is open read-only")
        future: concurrent.futures.Future[list[Record]] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # the writer owns it now: it cannot be cancelled
        writer.submit(sid, events, expected_seq, ts_ms, future)
        return future

    def _writing(self) -> GroupCommit:
        """The writer; `ReadOnlyStore` for a journal opened read-only."""
        if self._writer is None:
            raise ReadOnlyStore(f"the store at {self.root} is open read-only")
        return self._writer

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
        last = MAX_SEQ if to_seq is None else to_seq
        return self._reader.read(sid, max(from_seq, 1), last)

    def load(self, sid: str) -> SessionState:
        """The session's state, replayed from its latest checkpoint (DESIGN §2.6).

        Reads the latest `session-started` and then every event from the latest
        `checkpoint-committed` on: O(events since the checkpoint). Equal to
        `replay_full`. An unknown session gives an empty state for `sid`; a
        broken one raises `CorruptionError` (fail closed).
        """
        return self._reader.load(validate_session_id(sid))

    def replay_full(self, sid: str) -> SessionState:
        """The session's state folded from seq 1 (the reference for `load`)."""
        return self._reader.replay_full(validate_session_id(sid))

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
        return self._writer.failed if self._writer is not None else None

    @property
    def batches(self) -> int:
        """Batches the writer wrote (for benchmarks and tests; 0 when read-only)."""
        return self._writer.batches if self._writer is not None else 0

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Finish queued appends, stop the writer, release the lock. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            if self._writer is not None:
                self._writer.close()
            self._closed = True
            self._segments.close()
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


def _open_index(root: Path, map_size: int) -> tuple[Index, str]:
    """A writer's index, and why it was rebuilt from nothing ("" when it was usable)."""
    index_dir = root / "index"
    try:
        return Index(index_dir, map_size=map_size), ""
    except IndexUnusable as exc:
        log.warning("cairn: the index of %s is unusable, rebuilding it: %s", root, exc)
        shutil.rmtree(index_dir, ignore_errors=True)
        return Index(index_dir, map_size=map_size), str(exc)


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
