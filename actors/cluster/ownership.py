"""Which sessions one cluster host owns: take a lease, fence the log, keep it, drop it when lost.

Taking a session (`claim`), in this order, under a per-session lock:

1. take its lease in the bucket (`LeaseKeeper.acquire`: guarded, renewed
   from then on; `LeaseHeld` when another host holds it);
2. stop this host's own actor of the session if one is still live (from an
   earlier tenure: its state is stale);
3. append `owner-changed` (this host, the lease revision, the previous
   holder when known) with the expected seq read just before: THE FENCE.
   Any append of a previous owner after it fails the journal's
   expected-seq guard. A conflict here means a previous owner slipped one
   in: read the seq again and retry;
4. admit the session in the `LeasedJournal` gate: the `Host` may now write it.

The next message's `Host.send` then loads the session by replay (from its
latest checkpoint) and records the turn that was open as interrupted (the
session actor's load does that, as after a local crash).

Losing it (`LeaseKeeper`'s `on_lost`, on the loop thread, or a
`SeqConflict` on an append): shut the gate at once (no further append),
then stop the session's actor on the janitor thread (the turn it ran ends
interrupted; its own record of that is refused, and the next owner writes
it). Releasing everything (`close`) frees every lease for the other hosts.

Thread-safety: every method may be called from any thread; `_lost` runs on
the lease loop and only shuts the gate and queues work.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable

from cairn.actors.cluster.gate import LeasedJournal
from cairn.events.kinds import OwnerChanged
from cairn.store.backend import JournalBackend
from cairn.store.errors import SeqConflict
from cairn.store.jetstream.lease_bucket import LeaseBucket
from cairn.store.jetstream.lease_keeper import LeaseKeeper, LeaseLostNotice
from cairn.store.jetstream.lease_policy import LeaseTiming, lost_at

log = logging.getLogger("cairn.cluster")

#: how often the fence is tried when a previous owner keeps appending between our read and our write
FENCE_TRIES = 8
_FENCE_PAUSE_S = 0.05
#: locks shared by hash among sessions (claims of two sessions rarely wait for each other)
_LOCK_STRIPES = 256


class Ownership:
    """The sessions one host holds (see the module doc)."""

    def __init__(
        self,
        host_id: str,
        ttl_s: int,
        journal: JournalBackend,
        bucket: LeaseBucket,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        LeaseTiming.for_ttl(ttl_s)  # refuses a bad TTL here
        self.host_id = host_id
        self.ttl_s = ttl_s
        self._journal = journal
        self._clock = clock
        self.keeper = LeaseKeeper(bucket, on_lost=self._lost, clock=clock)
        self.gate = LeasedJournal(journal, self.lease_valid, self._conflict)
        self._stop_session: Callable[[str], object] = lambda sid: None
        self._janitor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cairn-cluster-janitor")
        self._locks = tuple(threading.Lock() for _ in range(_LOCK_STRIPES))
        #: the latest losses, newest last (for tests and operators)
        self.lost: collections.deque[LeaseLostNotice] = collections.deque(maxlen=256)

    def bind(self, stop_session: Callable[[str], object]) -> None:
        """How a lost session's actor is stopped (`Host.stop_session`, once the host is open)."""
        self._stop_session = stop_session

    # -- what this host holds ---------------------------------------------------------------------

    def lease_valid(self, sid: str) -> bool:
        """The keeper holds `sid`'s lease and its `lost_at` has not passed on this host's clock."""
        lease = self.keeper.held().get(sid)
        if lease is None:
            return False
        return self._clock() < lost_at(lease, LeaseTiming.for_ttl(lease.ttl_s))

    def holds(self, sid: str) -> bool:
        """This host may serve `sid` now: fenced here and its lease still valid."""
        return self.gate.admits(sid) and self.lease_valid(sid)

    # -- taking ----------------------------------------------------------------------------------------

    def claim(self, sid: str, previous: str | None) -> OwnerChanged | None:
        """Take `sid` (steps 1-4 of the module doc); its `owner-changed`, None when already held here.

        Raises `LeaseHeld` when another host holds it, `LeaseUnavailable`
        when the bucket does not answer, a journal error when the fence
        cannot be written (the lease is released again then).
        """
        with self._lock_of(sid):
            if self.holds(sid):
                return None
            self.gate.shut(sid)
            lease = self.keeper.acquire(sid, self.host_id, self.ttl_s)
            try:
                self._stop_session(sid)
                event = OwnerChanged(
                    host_id=self.host_id, lease_revision=lease.revision, previous_host=previous
                )
                fence_seq = self._fence(sid, event)
            except BaseException:
                self.keeper.release(sid)
                raise
            self.gate.admit(sid, fence_seq)
            return event

    def _fence(self, sid: str, event: OwnerChanged) -> int:
        """Append `event` right after the session's last event (step 3); its seq.

        A conflict means the seq read was stale: a previous owner appended
        meanwhile, or a replica behind the leader answered the read (the
        cluster's reads go to any replica). Read again, after a pause.
        """
        for attempt in range(FENCE_TRIES):
            last = self._journal.last_seq(sid)
            try:
                return self._journal.append(sid, [event], expected_seq=last)[0].seq
            except SeqConflict:
                if attempt == FENCE_TRIES - 1:
                    raise
                log.info("cairn: host %s fencing session %r: seq %d was stale", self.host_id, sid, last)
                time.sleep(_FENCE_PAUSE_S * (attempt + 1))  # a replica catching up: a bounded pause
        raise AssertionError("unreachable")

    def _lock_of(self, sid: str) -> threading.Lock:
        """The lock of `sid`'s claims and releases: one of a fixed set, so memory stays bounded."""
        return self._locks[hash(sid) % _LOCK_STRIPES]

    # -- losing and releasing ---------------------------------------------------------------------------

    def _lost(self, notice: LeaseLostNotice) -> None:
        """The keeper's report (on the loop thread): shut the gate now, stop the actor on the janitor."""
        sid = notice.lease.sid
        self.gate.shut(sid)
        self.lost.append(notice)
        log.warning("cairn: host %s lost the lease of session %r (%s)", self.host_id, sid, notice.reason)
        self._janitor.submit(self._stop_quietly, sid)

    def _conflict(self, sid: str) -> None:
        """Someone else appended to `sid` (the gate saw a `SeqConflict`): stop serving it, free the lease."""
        log.warning(
            "cairn: session %r was written by another host; host %s stops serving it", sid, self.host_id
        )
        self._janitor.submit(self._stop_and_release, sid)

    def _stop_quietly(self, sid: str) -> None:
        try:
            self._stop_session(sid)
        except Exception as exc:
            log.warning("cairn: stopping session %r: %s: %s", sid, type(exc).__name__, exc)

    def _stop_and_release(self, sid: str) -> None:
        self._stop_quietly(sid)
        with self._lock_of(sid):
            if self.gate.admits(sid):
                return  # claimed again meanwhile: fenced anew, ours
            try:
                self.keeper.release(sid)
            except Exception as exc:
                log.warning("cairn: releasing session %r: %s: %s", sid, type(exc).__name__, exc)

    def release(self, sid: str) -> bool:
        """Stop serving `sid` and free its lease at once (True when it was held)."""
        with self._lock_of(sid):
            self.gate.shut(sid)
            return self.keeper.release(sid)

    def close(self, release: bool = True) -> None:
        """Shut every session's gate and release (or, `release=False`, abandon) every lease."""
        for sid in self.keeper.held():
            self.gate.shut(sid)
        self.keeper.close(release=release)
        self._janitor.shutdown(wait=True)
