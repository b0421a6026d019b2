"""Keeping a host's leases: renew each on the policy's schedule, report a lost one at once.

A `LeaseKeeper` runs one task per held lease on the bucket's event loop
(`LoopThread`). Each task follows `lease_policy` Rule 2 and Rule 3: it
sleeps until the renewal is due, renews (one message id for all attempts
of one renewal, retried until the lease's `lost_at`), and when the renewal
is refused (the key moved on: another host took it, or the server expired
it) or not confirmed before `lost_at`, it drops the lease and calls
`on_lost(LeaseLostNotice)` -- at the latest at `lost_at`, which is before
the server can expire the key, so before any other host can take it.

Thread-safety: the public methods may be called from any thread except the
loop's own; `on_lost` and `on_renewed` run ON THE LOOP THREAD and must not
block (put the notice on a queue, or call the session's actor with `tell`).
`close()` (host shutdown, SIGTERM) stops every task and releases every
lease still held, so the sessions are takeable at once.

Fencing (for the host that wires this in): a lease does not fence by
itself. A host that lost its lease (or is paused, or partitioned) may still
try to append until it hears `on_lost`, and the server may expire its lease
a safety margin after the host stopped -- but a host paused for longer
(GC, SIGSTOP, swap) wakes up believing nothing. So a host that TAKES a
session must, before serving it, append a takeover event to the session's
subject with the expected last sequence it read; every append of the old
owner after that fails its expected-sequence guard (the journal's fence).
The keeper makes the overlap short and the notice timely; the takeover
event makes it harmless.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from cairn.store.jetstream.lease_bucket import LeaseBucket
from cairn.store.jetstream.lease_policy import (
    Confirmed,
    Kept,
    Lease,
    LeaseTiming,
    Lose,
    LossReason,
    Refused,
    RenewalOutcome,
    Retry,
    Unanswered,
    Wait,
    after_renewal,
    lost_at,
    next_step,
)
from cairn.store.jetstream.leases import AsyncLeaseBucket, LeaseLost, LeaseUnavailable


@dataclass(frozen=True, slots=True)
class LeaseLostNotice:
    """`lease` stopped being ours at `at` (the keeper's clock) for `reason`; stop serving `lease.sid`."""

    lease: Lease
    reason: LossReason
    at: float


def _ignore_renewed(lease: Lease) -> None:
    return None


class LeaseKeeper:
    """Renews the leases of one host (`bucket.core` on `bucket.loop`) until lost, released or closed."""

    def __init__(
        self,
        bucket: LeaseBucket,
        on_lost: Callable[[LeaseLostNotice], None],
        on_renewed: Callable[[Lease], None] = _ignore_renewed,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bucket = bucket
        self._core: AsyncLeaseBucket = bucket.core
        self._on_lost = on_lost
        self._on_renewed = on_renewed
        self._clock = clock
        self._leases: dict[str, Lease] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._lock = threading.Lock()  # guards `_leases` for readers on other threads
        self._closed = False

    # --- the blocking surface -------------------------------------------------------------

    def acquire(self, sid: str, host_id: str, ttl_s: int) -> Lease:
        """Take `sid` (see `AsyncLeaseBucket.acquire`, `LeaseHeld` if another host holds it) and keep it."""
        return self._bucket.loop.call(self._acquire(sid, host_id, ttl_s), timeout_s=30)

    def keep(self, lease: Lease) -> None:
        """Renew `lease` from now on (a lease taken elsewhere, e.g. by `LeaseBucket.acquire`)."""
        self._bucket.loop.call(self._keep(lease), timeout_s=5)

    def release(self, sid: str) -> bool:
        """Stop renewing `sid` and free it at once; False when it was not held (or no longer ours)."""
        return self._bucket.loop.call(self._release(sid), timeout_s=30)

    def abandon(self, sid: str) -> Lease | None:
        """Stop renewing `sid` WITHOUT releasing it (it expires after its TTL), as a crashed host would."""
        return self._bucket.loop.call(self._forget(sid), timeout_s=5)

    def held(self) -> dict[str, Lease]:
        """A snapshot of the leases this keeper holds now, by session."""
        with self._lock:
            return dict(self._leases)

    def close(self, release: bool = True) -> None:
        """Stop every renewal; release every lease still held unless `release` is False. Idempotent."""
        self._bucket.loop.call(self._close(release), timeout_s=30)

    # --- on the loop ----------------------------------------------------------------------

    async def _acquire(self, sid: str, host_id: str, ttl_s: int) -> Lease:
        lease = await self._core.acquire(sid, host_id, ttl_s)
        await self._keep(lease)
        return lease

    async def _keep(self, lease: Lease) -> None:
        if self._closed:
            raise RuntimeError("the lease keeper is closed")
        await self._forget(lease.sid)
        with self._lock:
            self._leases[lease.sid] = lease
        self._tasks[lease.sid] = asyncio.get_running_loop().create_task(
            self._renew_forever(lease), name=f"lease {lease.sid}"
        )

    async def _forget(self, sid: str) -> Lease | None:
        task = self._tasks.pop(sid, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        with self._lock:
            return self._leases.pop(sid, None)

    async def _release(self, sid: str) -> bool:
        lease = await self._forget(sid)
        if lease is None:
            return False
        try:
            if await self._core.release(lease):
                return True
            # `_forget` may have cancelled a renewal after the server applied it: the key then
            # holds our own newer revision, which no one else writes while our name is on it.
            # Free that one too, or the session stays held until its TTL runs out.
            owner = await self._core.owner(sid)
            if owner is None or owner.holder != lease.holder or owner.revision <= lease.revision:
                return False
            return await self._core.release(replace(lease, revision=owner.revision))
        except LeaseUnavailable:
            return False  # it expires after its TTL

    async def _close(self, release: bool) -> None:
        self._closed = True
        sids = list(self._tasks)
        if release:
            await asyncio.gather(*(self._release(sid) for sid in sids), return_exceptions=True)
        else:
            await asyncio.gather(*(self._forget(sid) for sid in sids), return_exceptions=True)

    async def _renew_forever(self, lease: Lease) -> None:
        """Rule 2 and 3 of `lease_policy` for one lease, until it is lost (or the task is cancelled)."""
        timing = LeaseTiming.for_ttl(lease.ttl_s)
        while True:
            step = next_step(lease, timing, self._clock())
            if isinstance(step, Wait):
                await asyncio.sleep(max(0.0, step.until - self._clock()))
                continue
            if isinstance(step, Lose):
                self._lost(lease, step.reason)
                return
            sent_at, outcome = await self._attempt(lease, timing)
            decision = after_renewal(lease, outcome, timing, sent_at, self._clock())
            match decision:
                case Kept(renewed):
                    lease = renewed
                    with self._lock:
                        self._leases[lease.sid] = lease
                    self._on_renewed(lease)
                case Retry(at):
                    await asyncio.sleep(max(0.0, at - self._clock()))
                case Lose(reason):
                    self._lost(lease, reason)
                    return

    async def _attempt(self, lease: Lease, timing: LeaseTiming) -> tuple[float, RenewalOutcome]:
        """One renewal, retried (same message id) until the lease's `lost_at` at the latest."""
        sent_at = self._clock()
        left = lost_at(lease, timing) - sent_at
        if left <= 0:
            return sent_at, Unanswered("past lost_at")
        try:
            async with asyncio.timeout(left):
                renewed = await self._core.renew(lease, deadline_s=left)
        except LeaseLost as lost:
            return sent_at, Refused(lost.actual)
        except (LeaseUnavailable, TimeoutError) as error:
            return sent_at, Unanswered(str(error))
        except Exception as error:  # a broken connection, a server error: retry until lost_at
            return sent_at, Unanswered(f"{type(error).__name__}: {error}")
        # `renew` measured its own send time; it is no earlier than ours, so ours is the safe bound
        return sent_at, Confirmed(renewed.revision)

    def _lost(self, lease: Lease, reason: LossReason) -> None:
        with self._lock:
            if self._leases.get(lease.sid) is not None and self._leases[lease.sid].revision == lease.revision:
                del self._leases[lease.sid]
        self._tasks.pop(lease.sid, None)
        self._on_lost(LeaseLostNotice(lease, reason, self._clock()))
