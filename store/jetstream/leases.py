"""Session leases in a JetStream key-value bucket: take, renew, release, look up.

The bucket (disk contract, STYLE 13)
------------------------------------
One KV bucket, `cairn_leases` by default (its stream is `KV_cairn_leases`),
file storage, replicas 3, history 1 (what turns on per-message TTLs, and
keeps one message per key). The key of session `sid` is
`names.session_token(sid)` (reversible; a bad id is refused before
anything is written), its subject `$KV.cairn_leases.<token>`. The value is
a small JSON record `{"holder", "sid", "ttl_s", "at"}` (`at`: the holder's
wall-clock time of the write, for people only). The revision of a lease is
the stream sequence of the message that holds it. Every write is guarded
by `Nats-Expected-Last-Subject-Sequence`, carries a `Nats-Msg-Id` that its
retries reuse (the server's duplicate window makes a retried write land at
most once) and, for takes and renewals, a `Nats-TTL` of the lease TTL:

| operation | message                           | guard (expected last subject seq) |
|-----------|-----------------------------------|-----------------------------------|
| take      | record, `Nats-TTL: <ttl>s`        | 0, or the revision of a marker    |
| renew     | record, `Nats-TTL: <ttl>s`        | the lease's revision              |
| release   | `KV-Operation: DEL`, `Nats-TTL: 60s` | the lease's revision           |

`kv.update` cannot set a TTL (an update without one would make the key
permanent), hence the raw publishes. The server removes a key whose TTL
ran out; on a bucket made with `limit_marker_ttl` it leaves an expiry
marker instead (value empty, `Nats-Marker-Reason`), which `kv.create`
trips over until the marker expires: a take here reads the key first and
expects the marker's revision. Release markers expire after 60 s, so the
bucket does not grow with every session ever seen. Reads go to the
stream leader (not `direct`), so a take is never decided on a stale
follower (the guard would refuse it anyway).

Nothing here is the source of truth for a session's events: the bucket
only says who serves it. See `lease_keeper` for the fencing story.

`AsyncLeaseBucket` is the core (coroutines on the connection's loop).
`lease_bucket.LeaseBucket` is its blocking facade over a `LoopThread`;
both are thread-safe in the sense that every call runs on the one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg, StorageType
from nats.js.kv import KeyValue

from cairn.events.errors import InputError
from cairn.store.errors import StorageError
from cairn.store.jetstream.layout import SETTLE_DEADLINE_S, settled
from cairn.store.jetstream.lease_policy import (
    Held,
    Lease,
    LeaseTiming,
    Observed,
    Reclaim,
    Refuse,
    Take,
    Vacant,
    Vacated,
    may_take,
)
from cairn.store.jetstream.names import session_of_token, session_token

T = TypeVar("T")

DEFAULT_BUCKET = "cairn_leases"
#: how long a release marker stays before the server removes it
RELEASE_MARKER_TTL_S = 60
#: how long one write is retried (same message id) before the call gives up: above the 5-7 s stall
WRITE_DEADLINE_S = 10.0
#: one request's timeout inside that deadline
ATTEMPT_TIMEOUT_S = 2.0
#: pause before retrying an unanswered write
_RETRY_PAUSE_S = 0.05
#: how often a "wrong last sequence" is re-checked against the key before it counts (PITFALLS: 10164)
_FALSE_REJECTION_RETRIES = 3
_WRONG_LAST = (10071, 10164)
_TRANSIENT = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError)
_TRANSIENT_CONN = (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError)


class LeaseHeld(InputError):
    """The session is leased to another host (`holder`), at `revision`: not yours to take."""

    def __init__(self, sid: str, holder: str, revision: int) -> None:
        self.sid = sid
        self.holder = holder
        self.revision = revision
        super().__init__(f"session {sid} is held by host {holder!r} (lease revision {revision})")


class LeaseLost(StorageError):
    """The lease is no longer the caller's: the key moved past its revision (taken, released, expired)."""

    def __init__(self, lease: Lease, actual: int | None) -> None:
        self.lease = lease
        self.actual = actual
        super().__init__(
            f"session {lease.sid}: lease of {lease.holder!r} at revision {lease.revision} is gone"
            f" (the key is at {actual if actual is not None else 'an unknown revision'})"
        )


class LeaseUnavailable(StorageError):
    """The lease bucket did not answer in time (no leader, no connection); the outcome is unknown."""


class _LeaseRecord(msgspec.Struct, frozen=True):
    holder: str
    sid: str
    ttl_s: int
    at: float


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a session now, as the bucket says."""

    sid: str
    holder: str
    revision: int
    ttl_s: int


def _checked_host_id(host_id: str) -> str:
    if not isinstance(host_id, str) or not host_id or len(host_id) > 256 or not host_id.isprintable():
        raise InputError(f"a host id is 1-256 printable characters, not {host_id!r}")
    return host_id


def _wrong_last_actual(error: nats.js.errors.APIError) -> int | None:
    """The key's actual revision from "wrong last sequence: N", when the server said it."""
    tail = (error.description or "").rsplit(":", 1)[-1].strip()
    return int(tail) if tail.isdigit() else None


class _WrongLast(Exception):
    def __init__(self, actual: int | None) -> None:
        self.actual = actual


class AsyncLeaseBucket:
    """Leases over one KV bucket; every method is a coroutine for the connection's loop."""

    def __init__(self, js: JetStreamContext, kv: KeyValue, bucket: str, clock: Callable[[], float]) -> None:
        self._js = js
        self._kv = kv
        self.bucket = bucket
        self.stream = f"KV_{bucket}"
        self._clock = clock

    @classmethod
    async def open(
        cls,
        nc: Client,
        bucket: str = DEFAULT_BUCKET,
        replicas: int = 3,
        clock: Callable[[], float] = time.monotonic,
        marker_ttl_s: int | None = None,
    ) -> AsyncLeaseBucket:
        """Create the bucket if it is missing (same config: a no-op) and bind to it.

        `marker_ttl_s` makes the server leave an expiry marker for that long
        when a lease's TTL runs out (watchers then see the expiry); takes
        work over such markers too.
        """
        # creating an R3 stream can take seconds on a loaded machine, and a bucket another host
        # created a moment ago has no leader yet: both calls are repeated while unanswered (`settled`)
        until = time.monotonic() + SETTLE_DEADLINE_S

        async def create(js: JetStreamContext) -> KeyValue:
            return await js.create_key_value(
                bucket=bucket,
                history=1,
                replicas=replicas,
                storage=StorageType.FILE,
                limit_marker_ttl=marker_ttl_s,
            )

        await settled(nc, create, what=f"lease bucket {bucket}", until=until)
        # bound on a context with the short attempt timeout its own reads and writes retry within;
        # by creating again (same config: a no-op), since a server that has not yet applied the
        # creation answers a plain lookup with "not found" (seen when hosts start together)
        kv = await settled(
            nc, create, what=f"lease bucket {bucket}", until=until, attempt_s=ATTEMPT_TIMEOUT_S
        )
        js = nc.jetstream(timeout=ATTEMPT_TIMEOUT_S)
        return cls(js, kv, bucket, clock)

    def _subject(self, sid: str) -> str:
        return f"$KV.{self.bucket}.{session_token(sid)}"

    async def _write(self, subject: str, payload: bytes, headers: dict[str, str], deadline_s: float) -> int:
        """Publish once (retrying unanswered attempts with the same message id); the stored revision."""
        headers = {**headers, "Nats-Msg-Id": uuid.uuid4().hex}
        give_up = time.monotonic() + deadline_s
        while True:
            left = give_up - time.monotonic()
            if left <= 0:
                raise LeaseUnavailable(
                    f"no answer from the lease bucket {self.bucket} for {subject} in {deadline_s} s"
                )
            try:
                ack = await self._js.publish(
                    subject, payload, timeout=min(ATTEMPT_TIMEOUT_S, left), headers=headers
                )
                return int(ack.seq)
            except nats.js.errors.APIError as error:
                if error.err_code in _WRONG_LAST:
                    raise _WrongLast(_wrong_last_actual(error)) from None
                if error.code != 503:  # 503: JetStream not ready (no leader yet): try again
                    raise
            except (*_TRANSIENT, *_TRANSIENT_CONN):
                pass
            await asyncio.sleep(min(_RETRY_PAUSE_S, max(0.0, give_up - time.monotonic())))

    async def _last(self, subject: str, deadline_s: float = WRITE_DEADLINE_S) -> RawStreamMsg | None:
        """The key's last message from the bucket's leader (None: no message), retried while unanswered."""
        give_up = time.monotonic() + deadline_s
        while True:
            left = give_up - time.monotonic()
            if left <= 0:
                raise LeaseUnavailable(
                    f"no answer from the lease bucket {self.bucket} for {subject} in {deadline_s} s"
                )
            try:
                return await self._js.get_msg(self.stream, subject=subject, direct=False)
            except nats.js.errors.NotFoundError:
                return None
            except nats.js.errors.APIError as error:
                if error.code != 503:
                    raise
            except (*_TRANSIENT, *_TRANSIENT_CONN):
                pass
            await asyncio.sleep(min(_RETRY_PAUSE_S, max(0.0, give_up - time.monotonic())))

    async def observe(self, sid: str) -> Observed:
        """What the bucket holds for `sid`'s key now (read from the bucket's leader)."""
        msg = await self._last(self._subject(sid))
        if msg is None:
            return Vacant()
        headers = msg.headers or {}
        if "KV-Operation" in headers or "Nats-Marker-Reason" in headers or not msg.data:
            return Vacated(revision=int(msg.seq or 0))
        try:
            record = msgspec.json.decode(msg.data, type=_LeaseRecord)
        except msgspec.DecodeError:
            return Held(holder="(not a cairn lease record)", revision=int(msg.seq or 0))
        return Held(holder=record.holder, revision=int(msg.seq or 0))

    def _record(self, sid: str, host_id: str, ttl_s: int) -> bytes:
        return msgspec.json.encode(_LeaseRecord(holder=host_id, sid=sid, ttl_s=ttl_s, at=time.time()))

    async def acquire(
        self, sid: str, host_id: str, ttl_s: int, deadline_s: float = WRITE_DEADLINE_S
    ) -> Lease:
        """Take `sid` for `host_id` for `ttl_s` s: unowned, released or expired, or already this host's.

        `host_id` must be unique per host PROCESS (e.g. name-pid-random): a
        take by the id that holds the lease renews it (a restarted host with
        a reused id would share the old one's lease). Raises `LeaseHeld`
        (naming the holder) when another host holds it,
        `InvalidSessionId` for a bad id, `InvalidLeaseTiming` for a bad TTL,
        `LeaseUnavailable` when the bucket does not answer in time.
        """
        subject = self._subject(sid)  # refuses a bad id before anything else
        LeaseTiming.for_ttl(ttl_s)
        _checked_host_id(host_id)
        last: Observed = Vacant()
        for _ in range(3):
            last = await self.observe(sid)
            match may_take(last, host_id):
                case Refuse(holder, revision):
                    raise LeaseHeld(sid, holder, revision)
                case Reclaim(revision):
                    now = self._clock()
                    mine = Lease(sid, host_id, revision, ttl_s, acquired_at=now, renewed_at=now)
                    return await self.renew(mine, deadline_s)
                case Take(expected):
                    sent_at = self._clock()
                    headers = {"Nats-Expected-Last-Subject-Sequence": str(expected), "Nats-TTL": f"{ttl_s}s"}
                    try:
                        revision = await self._write(
                            subject, self._record(sid, host_id, ttl_s), headers, deadline_s
                        )
                    except _WrongLast:
                        continue  # someone wrote between our read and our take: look again
                    return Lease(sid, host_id, revision, ttl_s, acquired_at=sent_at, renewed_at=sent_at)
        holder, revision = (last.holder, last.revision) if isinstance(last, Held) else ("(racing host)", 0)
        raise LeaseHeld(sid, holder, revision)

    async def renew(self, lease: Lease, deadline_s: float = WRITE_DEADLINE_S) -> Lease:
        """Extend `lease` by its TTL from now, if the key is still at its revision; else `LeaseLost`."""
        sent_at = self._clock()
        headers = {"Nats-Expected-Last-Subject-Sequence": str(lease.revision), "Nats-TTL": f"{lease.ttl_s}s"}
        subject = self._subject(lease.sid)
        record = self._record(lease.sid, lease.holder, lease.ttl_s)
        for _ in range(_FALSE_REJECTION_RETRIES):
            try:
                revision = await self._write(subject, record, headers, deadline_s)
            except _WrongLast as wrong:
                actual = wrong.actual
                if await self._still_at(lease):
                    continue  # err 10164 while a follower rejoins: a false rejection (PITFALLS)
                raise LeaseLost(lease, actual) from None
            return lease.renewed(revision, sent_at)
        raise LeaseUnavailable(f"session {lease.sid}: renewal refused while the key is still at its revision")

    async def _still_at(self, lease: Lease) -> bool:
        observed = await self.observe(lease.sid)
        return isinstance(observed, Held) and observed.revision == lease.revision

    async def release(self, lease: Lease, deadline_s: float = WRITE_DEADLINE_S) -> bool:
        """Free the session at once if the key is still at `lease`'s revision; else False (not ours)."""
        headers = {
            "KV-Operation": "DEL",
            "Nats-Expected-Last-Subject-Sequence": str(lease.revision),
            "Nats-TTL": f"{RELEASE_MARKER_TTL_S}s",
        }
        for _ in range(_FALSE_REJECTION_RETRIES):
            try:
                await self._write(self._subject(lease.sid), b"", headers, deadline_s)
            except _WrongLast:
                if await self._still_at(lease):
                    continue  # a false rejection (PITFALLS: 10164)
                return False
            return True
        raise LeaseUnavailable(f"session {lease.sid}: release refused while the key is still at its revision")

    async def owner(self, sid: str) -> Owner | None:
        """The current holder of `sid`, or None when it is free."""
        msg = await self._last(self._subject(sid))
        if msg is None:
            return None
        return self._owner_of(sid, msg.headers or {}, msg.data or b"", int(msg.seq or 0))

    @staticmethod
    def _owner_of(sid: str, headers: dict[str, str], data: bytes, revision: int) -> Owner | None:
        if "KV-Operation" in headers or "Nats-Marker-Reason" in headers or not data:
            return None
        try:
            record = msgspec.json.decode(data, type=_LeaseRecord)
        except msgspec.DecodeError:
            return Owner(sid, "(not a cairn lease record)", revision, 0)
        return Owner(sid, record.holder, revision, record.ttl_s)

    async def owners(self) -> list[Owner]:
        """Every held lease in the bucket (one pass over the last message of each key).

        The pass ends with the snapshot's last entry (its `delta`, the
        messages still pending behind it, is 0), not at nats-py's end marker
        (`None`): the watcher puts that marker first when the server has
        already pushed every message by the time it asks for the consumer's
        pending count, and stopping there read an empty bucket while it held
        a lease (seen under load). `LeaseUnavailable` when the pass does not
        end within `WRITE_DEADLINE_S`.
        """
        info = await self._js.stream_info(self.stream)
        if not info.state.messages:
            return []
        watcher = await self._kv.watchall()
        found: list[Owner] = []
        try:
            async with asyncio.timeout(WRITE_DEADLINE_S):
                async for entry in watcher:
                    if entry is None:
                        continue  # the end marker: it may come before the entries (see above)
                    if entry.operation is None and entry.value:
                        with contextlib.suppress(InputError):  # a key some other writer put here
                            sid = session_of_token(entry.key)
                            owner = self._owner_of(sid, {}, entry.value, int(entry.revision or 0))
                            if owner is not None:
                                found.append(owner)
                    if not entry.delta:
                        break
        except TimeoutError:
            raise LeaseUnavailable(
                f"reading every lease of {self.stream} did not end within {WRITE_DEADLINE_S:g} s"
            ) from None
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        return found

    async def leader(self) -> str | None:
        """The name of the server that leads the bucket's stream now (None while it has none)."""
        info = await self._js.stream_info(self.stream)
        return info.cluster.leader if info.cluster else None

    async def held_by(self, host_id: str) -> list[Owner]:
        """The leases the bucket says `host_id` holds (e.g. for a host restarting under the same id)."""
        return [owner for owner in await self.owners() if owner.holder == host_id]
