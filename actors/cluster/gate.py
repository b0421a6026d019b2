"""`LeasedJournal`: the journal a cluster host's `Host` writes through, open only for its fenced sessions.

The `Host` and its session actors run unchanged on it (it is a
`JournalBackend`, reads delegated as they are). An append for a session is
let through only when both hold:

1. the session is OPEN here: this host took its lease and its
   `owner-changed` (the fence) is in the log; `shut(sid)` closes it the
   moment the lease is lost, before the session's actor is stopped;
2. `lease_valid(sid)`: the keeper holds the lease and its `lost_at` has not
   passed on this host's clock (a host that was paused past it wakes up
   refused, before its keeper even ran).

Anything else raises `LeaseNotHeld` before a byte is sent. An append the
cluster refuses with `SeqConflict` (someone else wrote the session) shuts
the session too and reports it (`on_conflict`): the host stops serving it.
The check and the append are not atomic (a host can stall in between); the
fence is what makes that harmless: the new owner's `owner-changed` moved
the expected seq, so the stale append fails the journal's guard.

Reading what this host wrote: the gate remembers the last seq it wrote of
each admitted session (its floor), and a `load` or `replay_full` that comes
back below it is read again (a `CorruptionError` too), for up to
`FRESH_READ_S`; then `ReplicaBehind`. The JetStream journal itself now
reads a session's head from the stream leader and completes short replica
pages (`store.jetstream.reads`), so this check costs one comparison and
only a journal that lags would ever make it read again: it keeps "a host
never serves a session older than its own appends" a property of the gate,
whatever journal it wraps.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from cairn.actors.cluster.errors import LeaseNotHeld, ReplicaBehind
from cairn.events.codec import Record
from cairn.events.kinds import EventBase
from cairn.events.state import SessionState
from cairn.store.backend import JournalBackend
from cairn.store.errors import CorruptionError, SeqConflict, StorageFailed
from cairn.store.index_records import CheckpointRef, SessionSummary

#: how long a read of a session may stay behind this host's own appends to it before it is an error
FRESH_READ_S = 5.0
_REREAD_PAUSE_S = 0.02


class LeasedJournal:
    """A `JournalBackend` over `inner` that writes only the sessions open here (see the module doc)."""

    def __init__(
        self,
        inner: JournalBackend,
        lease_valid: Callable[[str], bool],
        on_conflict: Callable[[str], None],
    ) -> None:
        self.inner = inner
        self._lease_valid = lease_valid
        self._on_conflict = on_conflict
        self._open: set[str] = set()
        self._floors: dict[str, int] = {}
        self._lock = threading.Lock()

    # -- which sessions are open -------------------------------------------------------------

    def admit(self, sid: str, fence_seq: int = 0) -> None:
        """Let appends for `sid` through (its lease is taken and its fence written at `fence_seq`)."""
        with self._lock:
            self._open.add(sid)
            self._floors[sid] = fence_seq

    def shut(self, sid: str) -> bool:
        """Refuse appends for `sid` from now on; whether it was open."""
        with self._lock:
            was = sid in self._open
            self._open.discard(sid)
            self._floors.pop(sid, None)
            return was

    def admits(self, sid: str) -> bool:
        with self._lock:
            return sid in self._open

    def _check(self, sid: str) -> None:
        if not self.admits(sid):
            raise LeaseNotHeld(f"session {sid}: not held by this host (not taken, or its lease was lost)")
        if not self._lease_valid(sid):
            self.shut(sid)
            raise LeaseNotHeld(f"session {sid}: this host's lease ran out before the append")

    # -- writing ----------------------------------------------------------------------------------

    def append(
        self,
        sid: str,
        events: Sequence[EventBase],
        *,
        expected_seq: int,
        ts_ms: int | None = None,
        timeout: float | None = 30.0,
    ) -> list[Record]:
        self._check(sid)
        try:
            records = self.inner.append(sid, events, expected_seq=expected_seq, ts_ms=ts_ms, timeout=timeout)
        except SeqConflict:
            self._conflict(sid)
            raise
        self._wrote(sid, records)
        return records

    def append_async(
        self,
        sid: str,
        events: Sequence[EventBase],
        *,
        expected_seq: int,
        ts_ms: int | None = None,
    ) -> concurrent.futures.Future[list[Record]]:
        self._check(sid)
        future = self.inner.append_async(sid, events, expected_seq=expected_seq, ts_ms=ts_ms)

        def done(result: concurrent.futures.Future[list[Record]]) -> None:
            if result.cancelled():
                return
            error = result.exception()
            if isinstance(error, SeqConflict):
                self._conflict(sid)
            elif error is None:
                self._wrote(sid, result.result())

        future.add_done_callback(done)
        return future

    def _wrote(self, sid: str, records: list[Record]) -> None:
        with self._lock:
            if sid in self._floors and records:
                self._floors[sid] = max(self._floors[sid], records[-1].seq)

    def _floor(self, sid: str) -> int:
        with self._lock:
            return self._floors.get(sid, 0)

    def _fresh(self, sid: str, read: Callable[[str], SessionState]) -> SessionState:
        """`read(sid)` again until it reaches what this host wrote (see the module doc)."""
        floor = self._floor(sid)
        give_up = time.monotonic() + FRESH_READ_S
        while True:
            try:
                state = read(sid)
                if state.last_seq >= floor:
                    return state
                behind: Exception = ReplicaBehind(
                    f"session {sid}: the cluster's reads stay at seq {state.last_seq}, "
                    f"behind seq {floor} this host wrote"
                )
            except CorruptionError as exc:  # a gap between pages from two replicas, or a real one
                behind = exc
            if time.monotonic() >= give_up:
                raise behind
            time.sleep(_REREAD_PAUSE_S)  # polling the cluster's replicas, with a deadline

    def _conflict(self, sid: str) -> None:
        if self.shut(sid):
            self._on_conflict(sid)

    # -- reading: as the inner journal, loads no older than this host's appends --------------------

    def last_seq(self, sid: str) -> int:
        return max(self.inner.last_seq(sid), self._floor(sid))

    def session(self, sid: str) -> SessionSummary | None:
        return self.inner.session(sid)

    def sessions(self) -> Iterator[SessionSummary]:
        return self.inner.sessions()

    def checkpoints(self, sid: str) -> list[CheckpointRef]:
        return self.inner.checkpoints(sid)

    def read(self, sid: str, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Record]:
        return self.inner.read(sid, from_seq, to_seq)

    def load(self, sid: str) -> SessionState:
        return self._fresh(sid, self.inner.load)

    def replay_full(self, sid: str) -> SessionState:
        return self._fresh(sid, self.inner.replay_full)

    def read_blob(self, sha256: str) -> bytes:
        return self.inner.read_blob(sha256)

    @property
    def failed(self) -> StorageFailed | None:
        return self.inner.failed

    def close(self) -> None:
        """Close the inner journal (a `Host` given this journal never does: its cluster host does)."""
        self.inner.close()
