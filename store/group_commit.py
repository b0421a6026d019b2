"""Group commit: the queue of append calls and the two writer threads that commit them in batches.

The write path of a store opened for writing (`store.journal` is its
facade). `append` checks the call's arguments on the caller's thread (and its
events, when a part may go to the blob store: `store.admission`), then
queues it. Two threads commit the queue, a pipeline of two stages:

- the *preparer* drains everything queued into a batch: it checks each
  call's events (encoded and read back), its `expected_seq` against
  the session's head (`store.index_builder`:
  the writer's cache of each session's running summary), assigns pos, seq,
  ts and the hash chain, frames the lines (`frame_line`: envelope, CRC,
  chain digest) and builds the batch's index entries;
- the *syncer* takes the prepared batch and writes it with one `os.write`
  per segment and one `fsync`, rewrites the acknowledgement mark (`ACKED`,
  no fsync: evidence of what was acknowledged, see `store.loss`), commits
  the index in one LMDB transaction, and only then resolves the callers.

While the syncer is in batch N's fsync, the preparer frames batch N+1 (and
keeps adding to it what arrives until the syncer is free): one batch in
flight, one being prepared. A call's events are all written or none, a call
never straddles two segments, and the bytes on disk are those of framing
the batches one after the other.

An I/O error is fatal (fsyncgate): the one path for it (`_fail`) makes
pending and later appends fail with `StorageFailed` until the store is
reopened -- the batch in flight, the batch being prepared and the queue --
and reopening recovers from the log.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from cairn.events.codec import Record
from cairn.events.errors import InputError
from cairn.events.kinds import EventBase
from cairn.store.ack_mark import AckMarkWriter
from cairn.store.admission import Admission
from cairn.store.batch_framing import frame_calls
from cairn.store.blobs import BlobStore
from cairn.store.commit_calls import (
    Batch,
    Pending,
    RelayEnd,
    acknowledge,
    drain,
    own_copy,
    refuse,
    resolve,
    wake_next,
)
from cairn.store.errors import (
    AppendTimeout,
    BadClock,
    StorageFailed,
    StoreClosed,
    read_clock,
)
from cairn.store.index import Index
from cairn.store.index_builder import IndexBuilder
from cairn.store.index_records import IndexMeta
from cairn.store.recovery import Recovery
from cairn.store.segments import FsyncFn, SegmentWriter

log = logging.getLogger("cairn.store")

#: how long the preparer waits for the relay of a batch it synced to wake every caller (`_sync`)
RELAY_WAIT_S = 0.1


class GroupCommit:
    """The writer of one store: its queue, its two writer threads, the active segment, the index's heads.

    Built by the journal once recovery ran and the acknowledgement mark is
    open, and it starts the threads. Thread-safety: `append` and `submit`
    may be called from any thread (not the writer threads': a synchronous
    `append` there is refused, it would wait on itself); done callbacks of
    their futures run on the syncer thread. `close` is called once, by the
    journal. The preparer owns the heads (`IndexBuilder`) and the planned
    end of the log (`_next_pos`, `_plan_first`, `_plan_size`); the syncer
    owns the segment file, the mark and the index's transactions.
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
        self._queue: collections.deque[Pending] = collections.deque()
        self._work = threading.Event()  # the preparer's: a call was queued, or the syncer is free
        self._ready = threading.Event()  # the syncer's: a batch was handed over, or it should stop
        self._free = threading.Event()  # the preparer's, with a batch prepared: the syncer is free
        self._closing = False
        self._stopping = False
        self._drained = False
        self._failed: StorageFailed | None = None
        self._writer_idents: tuple[int, ...] = ()
        self.batches = 0  # batches written (for benchmarks and tests)
        meta = index.meta()
        assert meta is not None
        self._segment = SegmentWriter(
            root / "log",
            recovery.active_segment if recovery.segments else recovery.next_pos,
            fsync=fsync,
        )
        self._next_pos = recovery.next_pos
        self._plan_first = self._segment.first_pos
        self._plan_size = self._segment.size
        self._builder = IndexBuilder(index.summary, meta)
        self._write_mark = ack_mark.write
        self._open: Batch | None = None  # the batch being prepared (the preparer's)
        self._in_flight: Batch | None = None  # handed to the syncer; None when it is free
        #: a batch with nothing queued behind it is synced by the preparer itself (`_hand_over`);
        #: tests of the overlap turn this off to make every batch go through the syncer thread
        self.sync_inline_when_idle = True
        self._syncer = threading.Thread(target=self._sync_run, name="cairn-journal-syncer", daemon=True)
        self._thread = threading.Thread(target=self._run, name="cairn-journal-writer", daemon=True)
        self._syncer.start()
        self._thread.start()
        self._writer_idents = (self._thread.ident or 0, self._syncer.ident or 0)

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
        if threading.get_ident() in self._writer_idents:
            raise InputError("append from the journal's writer thread would deadlock; use append_async")
        return self.wait(self.submit(sid, events, expected_seq, ts_ms, None), timeout)

    def wait(self, pending: Pending, timeout: float | None) -> list[Record]:
        """Wait for the answer to a call `submit` queued without a future; return its records or raise."""
        if not pending.lock.acquire(timeout=-1 if timeout is None else timeout):
            # no baton will come from us: pass one now if we are in a relay already, else the
            # syncer skips us (it reads `abandoned` after setting `relay`; we, the other way round)
            pending.abandoned = True
            if pending.relay is not None:
                wake_next(pending.relay)
            raise AppendTimeout(f"session {pending.sid}: no acknowledgement within {timeout} s")
        if pending.relay is not None:
            wake_next(pending.relay)  # the baton: wake the next caller of our batch
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
    ) -> Pending:
        """Check, encode and queue a call; the writer resolves `future`, or the call's lock.

        Bad arguments raise here (`Admission.check_args`); a bad event is the
        call's own refusal, queued with it so that it is answered in order,
        as the writer answers a conflict. `Journal.append_async` calls it
        directly with its future (one call less on the append path, which
        the store bench measures).
        """
        if self._failed is not None:
            raise own_copy(self._failed)
        if self._closing:
            raise StoreClosed(f"the journal of {self.root} is closed")
        admission = self._admission
        listed = admission.check_args(sid, events, expected_seq, ts_ms)
        try:
            stored, bodies = admission.admit(listed)
            refused = None
        except InputError as exc:
            stored, bodies, refused = listed, [], exc
        pending = Pending(sid, stored, bodies, expected_seq, ts_ms, future, refused)
        queue = self._queue
        queue.append(pending)
        if not self._work.is_set():
            self._work.set()
        if self._drained:
            # close() may have swept the queue before our item landed in it:
            # take it back ourselves unless someone else resolved it.
            with contextlib.suppress(ValueError):
                queue.remove(pending)
                resolve(pending, None, StoreClosed(f"the journal of {self.root} is closed"))
        return pending

    def _put_blob(self, data: bytes) -> str:
        try:
            return self._blobs.put(data)
        except OSError as exc:
            failure = self._fail(exc, "writing a blob")
            raise failure from exc

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

    # -- the preparer thread -------------------------------------------------------------

    def _run(self) -> None:
        queue = self._queue
        work = self._work
        free = self._free
        try:
            while True:
                if self._open is not None and self._in_flight is None:
                    if queue:  # what queued while the syncer was busy joins the batch: fewer fsyncs
                        self._prepare(drain(queue))
                    if self._open is not None:
                        self._hand_over(inline=self.sync_inline_when_idle and not queue)
                elif queue:
                    self._prepare(drain(queue))
                elif self._open is not None:
                    # prepared while the syncer is busy: wait for it alone, not for each call that
                    # queues meanwhile (those join this batch, in one drain, when the syncer is free)
                    free.clear()
                    if self._in_flight is not None:
                        free.wait()
                else:  # idle: a call, or the syncer done (closing waits for it), wakes it
                    work.clear()
                    if queue:
                        continue
                    if self._closing and self._in_flight is None:
                        break
                    work.wait()
        finally:
            self._stopping = True
            self._ready.set()
            self._syncer.join()

    def _prepare(self, calls: list[Pending]) -> None:
        """Frame `calls` into the open batch (opening one); a failed store refuses them instead."""
        failed = self._failed
        if failed is not None:
            for pending in calls:
                resolve(pending, None, failed)
            return
        batch = self._open
        if batch is None:
            meta = self._builder.meta
            batch = self._open = Batch(
                self._plan_first, self._next_pos, (meta.last_segment, meta.last_offset, meta.last_length)
            )
        try:
            self._frame(calls, batch)
        except BaseException as exc:  # never leave a caller hanging
            failure = self._fail(exc, "framing a batch")
            for pending in calls:
                resolve(pending, None, failure)
            self._open = None
            refuse(batch, failure)

    def _hand_over(self, inline: bool = False) -> None:
        """Give the open batch, with its index entries, to the (free) syncer; a failed store refuses it.

        `inline`: nothing else is queued, so there is nothing to frame while
        this batch syncs; the preparer syncs it itself rather than wake the
        syncer thread for it (a lone session would pay one more thread hand-
        over per call; measured 0.77x of the one-thread writer without this).
        Calls that queue meanwhile wait for the next batch, as they would for
        a busy syncer.
        """
        batch = self._open
        assert batch is not None
        self._open = None
        failed = self._failed
        if failed is not None:  # the batch in flight failed: so does the one prepared behind it
            refuse(batch, failed)
            return
        if batch.done:
            builder = self._builder
            last = batch.last
            builder.meta = IndexMeta(
                segment=self._plan_first,
                offset=self._plan_size,
                next_pos=batch.next_pos,
                last_segment=last[0],
                last_offset=last[1],
                last_length=last[2],
            )
            batch.index = builder.take()
        if inline:
            try:
                self._sync(batch, wait_relay=True)
            except BaseException as exc:  # never leave a caller hanging
                refuse(batch, self._fail(exc, "acknowledging a batch"))
            return
        self._in_flight = batch
        self._ready.set()

    def _frame(self, calls: list[Pending], batch: Batch) -> None:
        """Frame `calls` into `batch` at the planned end of the log (`store.batch_framing`)."""
        clock_error: BadClock | None = None
        try:
            now = read_clock(self._clock_ms)
        except BadClock as exc:  # the calls it would stamp fail; the writer goes on
            now, clock_error = 0, exc
        self._plan_first, self._plan_size = frame_calls(
            calls,
            batch,
            builder=self._builder,
            index=self._index,
            limit=self.segment_bytes,
            plan_size=self._plan_size,
            now=now,
            clock_error=clock_error,
        )
        self._next_pos = batch.next_pos

    # -- the syncer thread ---------------------------------------------------------------

    def _sync_run(self) -> None:
        ready = self._ready
        work = self._work
        while True:
            ready.wait()
            ready.clear()
            batch = self._in_flight
            if batch is None:
                if self._stopping:
                    return
                continue
            try:
                self._sync(batch)
            except BaseException as exc:  # never leave a caller hanging
                refuse(batch, self._fail(exc, "acknowledging a batch"))
            self._in_flight = None
            self._free.set()
            if not work.is_set():
                work.set()

    def _sync(self, batch: Batch, wait_relay: bool = False) -> None:
        """Write, fsync, mark and index a batch, then resolve its callers; a failure fails them all.

        `wait_relay` (the preparer syncing a batch itself): it then waits,
        up to `RELAY_WAIT_S`, until the relay has woken every caller of the
        batch, before it goes back to the queue. Framing the next batch at
        once would hold the GIL the relay needs, one woken caller at a time,
        and the index commit after it hands the GIL to a relay caller at
        every LMDB put (py-lmdb lets it go around each); waiting, the next
        batch takes in the calls those callers make meanwhile, and framing,
        commit and relay each run alone. The store bench measured 25.3k ->
        26.9k events/s at 256 sessions and 17.8k -> 19.8k at 1,024 (medians
        of 8 alternating runs). A relay of one caller is not waited for.
        """
        failed = self._failed
        if failed is not None:
            refuse(batch, failed)
            return
        if batch.done:
            try:
                self._commit(batch)
            except BaseException as exc:
                refuse(batch, self._fail(exc, "writing and syncing the log"))
                return
            self.batches += 1
        end = RelayEnd() if wait_relay else None
        if acknowledge(batch, end) and end is not None:
            end.lock.acquire(timeout=RELAY_WAIT_S)  # a caller stuck in it holds back no more than this

    def _commit(self, batch: Batch) -> None:
        """Write the chunks (rolling segments between them) and fsync, rewrite the mark, commit the index."""
        segment = self._segment
        for number, (first_pos, lines_of_chunk) in enumerate(batch.chunks):
            if number:
                segment.roll(first_pos)
            if lines_of_chunk:
                segment.write(b"".join(lines_of_chunk))
                segment.sync()
        self._write_mark(batch.next_pos, segment.first_pos, segment.size)  # evidence of what is acknowledged
        assert batch.index is not None
        self._index.commit(batch.index)

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Finish the queued appends, stop the writer threads, refuse what came after, close the files."""
        self._closing = True
        self._work.set()
        self._thread.join()
        self._drained = True
        closed = StoreClosed(f"the journal of {self.root} is closed")
        while self._queue:
            resolve(self._queue.popleft(), None, closed)
        self._segment.close()
        with contextlib.suppress(OSError):  # the log is the truth: a mark left behind only lags
            self._ack_mark.close()
