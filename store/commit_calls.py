"""An append call queued for the group commit, the batch it is framed into, and how its caller is answered.

Thread-safety: a `Pending` is made on its caller's thread, framed and
resolved by the writer threads (`store.group_commit`), resolved once; its
caller only reads it after being woken (its lock, or its future).
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from typing import Any

from cairn.events.codec import Record
from cairn.events.errors import InputError
from cairn.events.kinds import EventBase
from cairn.store.errors import StorageFailed
from cairn.store.index_builder import IndexBatch


class Pending:
    """One queued append call; resolved by a writer thread exactly once."""

    __slots__ = (
        "abandoned",
        "bodies",
        "done",
        "error",
        "events",
        "expected",
        "future",
        "lock",
        "relay",
        "result",
        "sid",
        "ts",
    )

    def __init__(
        self,
        sid: str,
        events: list[EventBase],
        bodies: list[bytes] | None,
        expected: int,
        ts: int | None,
        future: concurrent.futures.Future[list[Record]] | None,
        error: InputError | None,
    ) -> None:
        self.sid = sid
        self.events = events
        #: each one's body, when the caller's thread checked the events (they are then as a read gives
        #: them back, `checked_body`); None: the writer checks them before it frames them (`store.admission`)
        self.bodies = bodies
        self.expected = expected
        self.ts = ts
        self.future = future
        self.result: list[Record] = []
        self.error: BaseException | None = error  # set here: the call was refused on the caller's thread
        self.done = False
        #: the waiters of its batch still to wake, when it was acknowledged in a relay (`acknowledge`)
        self.relay: collections.deque[Pending | RelayEnd] | None = None
        self.abandoned = False  # its caller stopped waiting (AppendTimeout)
        if future is None:
            self.lock: Any = threading.Lock()
            self.lock.acquire()


class Batch:
    """A batch the preparer frames (and may extend while the syncer is busy), then the syncer commits."""

    __slots__ = ("chunks", "done", "index", "last", "next_pos", "rejected")

    def __init__(self, first_pos: int, next_pos: int, last: tuple[int, int, int]) -> None:
        #: the lines, per segment: (the segment's first pos, its lines); the first is the active segment
        self.chunks: list[tuple[int, list[bytes]]] = [(first_pos, [])]
        self.done: list[tuple[Pending, list[Record]]] = []
        self.rejected: list[tuple[Pending, BaseException]] = []
        #: the position after the batch's last line, and that line's place (segment, offset, length)
        self.next_pos = next_pos
        self.last = last
        #: the index entries of `done`, taken when the batch is handed to the syncer
        self.index: IndexBatch | None = None


def drain(queue: collections.deque[Pending]) -> list[Pending]:
    """Everything queued, in order (`popleft` is atomic: a call queued meanwhile is taken or left whole)."""
    calls: list[Pending] = []
    take = queue.popleft
    while queue:
        calls.append(take())
    return calls


class RelayEnd:
    """The last waiter of a relay: the writer, until every caller of its batch was woken (`acknowledge`)."""

    __slots__ = ("abandoned", "lock")

    def __init__(self) -> None:
        self.abandoned = False
        self.lock = threading.Lock()
        self.lock.acquire()


def acknowledge(batch: Batch, end: RelayEnd | None = None) -> bool:
    """Resolve a batch's calls: those written with their records, those refused with their errors.

    Callers waiting in `append` are woken in a relay: every answer is stored
    first, then the syncer wakes the first caller, and each caller, once
    awake, wakes the next (`wake_next`). Waking them all at once would put
    every one of them on the GIL at the same moment (each lock release
    wakes a thread that then sleeps again on the GIL, and preempts this one
    to do so); one at a time, each finds it free, or soon. A caller that
    stopped waiting (`AppendTimeout`) passes its turn on instead (see
    `GroupCommit.append`), so the relay always reaches the last caller.

    With `end`, the writer joins a relay of two callers or more as its last
    waiter, and the return says so: it then waits for its lock, see
    `GroupCommit._sync`.
    """
    locked: list[Pending] = []
    for pending, records in batch.done:
        pending.done = True
        pending.result = records
        future = pending.future
        if future is None:
            locked.append(pending)
        else:
            future.set_result(records)
    for pending, error in batch.rejected:
        resolve(pending, None, error)
    if not locked:
        return False
    waiters: collections.deque[Pending | RelayEnd] = collections.deque(locked)
    for pending in locked:
        pending.relay = waiters
    joined = False
    if end is not None and len(locked) > 1:
        waiters.append(end)
        joined = True
    for pending in locked:
        if pending.abandoned:  # its caller will pass nothing on: wake one more for it
            wake_next(waiters)
    wake_next(waiters)
    return joined


def wake_next(relay: collections.deque[Pending | RelayEnd]) -> None:
    """Wake the next caller of a relay (none when it is done); `popleft` gives each one once."""
    try:
        pending = relay.popleft()
    except IndexError:
        return
    pending.lock.release()


def refuse(batch: Batch, failure: StorageFailed) -> None:
    """Fail a batch that will not be written: its framed calls with the store's failure, the refused
    ones with their own errors."""
    for pending, _ in batch.done:
        resolve(pending, None, failure)
    for pending, error in batch.rejected:
        resolve(pending, None, error)


def resolve(pending: Pending, records: list[Record] | None, error: BaseException | None) -> None:
    if pending.done:
        return
    pending.done = True
    if isinstance(error, StorageFailed):
        error = own_copy(error)
    if pending.future is None:
        pending.result = records or []
        pending.error = error
        pending.lock.release()
    elif error is not None:
        pending.future.set_exception(error)
    else:
        pending.future.set_result(records or [])


def own_copy(failure: StorageFailed) -> StorageFailed:
    """A caller's own instance of the store's one failure, with the same message and cause.

    The same exception object raised in many threads (or from many futures)
    collects every raise's frames in its traceback, which then grows without
    bound and interleaves unrelated callers.
    """
    copy = StorageFailed(*failure.args)
    copy.__cause__ = failure.__cause__
    return copy
