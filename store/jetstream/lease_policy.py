"""Session leases as pure decisions: who may take a session, when to renew, when a lease is lost.

Sans-I/O (STYLE 11): values in, values out, every time passed in. The
times of a `Lease` are the HOLDER's monotonic clock, and each is the moment
the holder SENT the write that the cluster then confirmed (not the moment
the confirmation arrived). The server starts a key's TTL when it stores the
write, which is after it was sent, so `renewed_at + ttl_s` is a lower bound
of the moment the server lets the key expire: a holder that stops at
`lost_at` (that bound minus a safety margin) has stopped before any other
host can take the session. The margin covers the clock skew between NATS
servers (the expiry is judged on the stored message's timestamp by whichever
server leads the bucket then) and the time a host needs to stop appending.

Rule 1 -- taking a session (`may_take`), on what the bucket holds for its key:

| the key holds                                  | decision                         |
|------------------------------------------------|----------------------------------|
| nothing (never taken, or its TTL removed it)   | `Take(expected_revision=0)`      |
| a delete/purge/expiry marker at revision r     | `Take(expected_revision=r)`      |
| a lease of THIS host at revision r             | `Reclaim(revision=r)` (renew it) |
| a lease of another host at revision r          | `Refuse(holder, r)`              |

"Expired" is the server's word, never a host's: a lease record that is still
in the bucket is held, whatever its holder's clock said, because the hosts'
clocks are not the servers'. The take itself is a write guarded by the
expected revision, so two hosts that both saw the key free cannot both win.

Rule 2 -- keeping a lease (`next_step`), with `due = renewed_at + renew_after_s`
and `lost = renewed_at + lost_after_s` (see `LeaseTiming`):

| now                 | decision                  |
|---------------------|---------------------------|
| now < due           | `Wait(until=due)`         |
| due <= now < lost   | `Renew(deadline=lost)`    |
| lost <= now         | `Lose("unconfirmed")`     |

Rule 3 -- after one renewal attempt (`after_renewal`), `sent_at` being when
the FIRST attempt of this renewal was sent (retries reuse its message id, so
the server stores it at most once and no earlier than that):

| outcome                                   | now         | decision                               |
|-------------------------------------------|-------------|----------------------------------------|
| `Confirmed(revision)`                     | any         | `Kept(lease at revision, sent_at)`     |
| `Refused` (the key moved on: taken,       | any         | `Lose("refused")`                      |
|  released or expired on the server)       |             |                                        |
| `Unanswered` (timeout, no leader, no link)| now < lost  | `Retry(at=min(now + backoff, lost))`   |
| `Unanswered`                              | lost <= now | `Lose("unconfirmed")`                  |

A lease whose renewal lands after the holder declared it lost stays on the
server until its TTL runs out; the holder has already stopped, so that costs
availability (one TTL), never safety.

`LeaseTiming.for_ttl(15)` is the default: renew every 5 s, lost at 13 s, so
a renewal survives a write stall of up to 8 s (the stall measured when a
stream leader dies is 5-7 s, PITFALLS "NATS JetStream").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from cairn.events.errors import InputError

#: the default lease TTL in seconds: above the 5-7 s write stall of a dead stream leader
DEFAULT_TTL_S = 15
#: the largest safety margin `for_ttl` picks (shorter TTLs get a fifth of the TTL)
MAX_SAFETY_MARGIN_S = 2.0
#: pause between two attempts of one renewal that got no answer
RETRY_BACKOFF_S = 0.25

LossReason = Literal["refused", "unconfirmed", "released"]


class InvalidLeaseTiming(InputError):
    """A TTL that is not a whole number of seconds >= 1, or renew/lost times out of order."""


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """When a lease of `ttl_s` seconds is renewed and when its holder must consider it lost.

    Invariant: 0 < renew_after_s < lost_after_s <= ttl_s, ttl_s a whole number >= 1.
    """

    ttl_s: int
    renew_after_s: float
    lost_after_s: float

    def __post_init__(self) -> None:
        if isinstance(self.ttl_s, bool) or not isinstance(self.ttl_s, int) or self.ttl_s < 1:
            raise InvalidLeaseTiming(f"a lease TTL is a whole number of seconds >= 1, not {self.ttl_s!r}")
        if not 0 < self.renew_after_s < self.lost_after_s <= self.ttl_s:
            raise InvalidLeaseTiming(
                f"need 0 < renew_after_s ({self.renew_after_s}) < lost_after_s ({self.lost_after_s})"
                f" <= ttl_s ({self.ttl_s})"
            )

    @classmethod
    def for_ttl(cls, ttl_s: int = DEFAULT_TTL_S) -> LeaseTiming:
        """Renew at a third of the TTL; lost at the TTL minus min(2 s, TTL / 5)."""
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1:
            raise InvalidLeaseTiming(f"a lease TTL is a whole number of seconds >= 1, not {ttl_s!r}")
        margin = min(MAX_SAFETY_MARGIN_S, ttl_s / 5)
        return cls(ttl_s=ttl_s, renew_after_s=ttl_s / 3, lost_after_s=ttl_s - margin)

    @property
    def survivable_stall_s(self) -> float:
        """The longest write stall that starts after a renewal is due and still ends before `lost`."""
        return self.lost_after_s - self.renew_after_s


@dataclass(frozen=True, slots=True)
class Lease:
    """One host's lease on one session, as its holder knows it.

    `revision` is the key's revision in the bucket (the KV stream's sequence
    of the write that created or last renewed it): the next renewal or the
    release must find exactly this revision there. `acquired_at` and
    `renewed_at` are the holder's monotonic times of sending the confirmed
    take and the latest confirmed renewal (equal right after the take).
    """

    sid: str
    holder: str
    revision: int
    ttl_s: int
    acquired_at: float
    renewed_at: float

    def renewed(self, revision: int, sent_at: float) -> Lease:
        return replace(self, revision=revision, renewed_at=sent_at)


# --- what the bucket holds for a key ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Vacant:
    """No message under the key: never taken, or the server removed it at its TTL."""


@dataclass(frozen=True, slots=True)
class Vacated:
    """A delete, purge or expiry marker at `revision`: the key is free, a take must expect `revision`."""

    revision: int


@dataclass(frozen=True, slots=True)
class Held:
    """A lease record of `holder` at `revision`."""

    holder: str
    revision: int


Observed = Vacant | Vacated | Held


@dataclass(frozen=True, slots=True)
class Take:
    expected_revision: int


@dataclass(frozen=True, slots=True)
class Reclaim:
    revision: int


@dataclass(frozen=True, slots=True)
class Refuse:
    holder: str
    revision: int


TakeDecision = Take | Reclaim | Refuse


def may_take(observed: Observed, host_id: str) -> TakeDecision:
    """Rule 1: may `host_id` take the session whose key holds `observed`?"""
    match observed:
        case Vacant():
            return Take(expected_revision=0)
        case Vacated(revision):
            return Take(expected_revision=revision)
        case Held(holder, revision) if holder == host_id:
            return Reclaim(revision=revision)
        case Held(holder, revision):
            return Refuse(holder=holder, revision=revision)


# --- keeping a lease ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wait:
    until: float


@dataclass(frozen=True, slots=True)
class Renew:
    deadline: float


@dataclass(frozen=True, slots=True)
class Lose:
    reason: LossReason


@dataclass(frozen=True, slots=True)
class Kept:
    lease: Lease


@dataclass(frozen=True, slots=True)
class Retry:
    at: float


KeepStep = Wait | Renew | Lose
RenewalDecision = Kept | Retry | Lose


@dataclass(frozen=True, slots=True)
class Confirmed:
    revision: int


@dataclass(frozen=True, slots=True)
class Refused:
    actual_revision: int | None = None


@dataclass(frozen=True, slots=True)
class Unanswered:
    why: str = ""


RenewalOutcome = Confirmed | Refused | Unanswered


def renew_due(lease: Lease, timing: LeaseTiming) -> float:
    return lease.renewed_at + timing.renew_after_s


def lost_at(lease: Lease, timing: LeaseTiming) -> float:
    """The holder's monotonic time from which it must act as if the lease were gone."""
    return lease.renewed_at + timing.lost_after_s


def next_step(lease: Lease, timing: LeaseTiming, now: float) -> KeepStep:
    """Rule 2: what the keeper of `lease` does at `now`."""
    lost = lost_at(lease, timing)
    if now >= lost:
        return Lose("unconfirmed")
    due = renew_due(lease, timing)
    if now < due:
        return Wait(until=due)
    return Renew(deadline=lost)


def after_renewal(
    lease: Lease, outcome: RenewalOutcome, timing: LeaseTiming, sent_at: float, now: float
) -> RenewalDecision:
    """Rule 3: the lease after one attempt of the renewal first sent at `sent_at`."""
    match outcome:
        case Confirmed(revision):
            return Kept(lease.renewed(revision, sent_at))
        case Refused():
            return Lose("refused")
        case Unanswered():
            lost = lost_at(lease, timing)
            if now >= lost:
                return Lose("unconfirmed")
            return Retry(at=min(now + RETRY_BACKOFF_S, lost))
