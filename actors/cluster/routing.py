"""Where a message for a session goes: pure decisions of a cluster host (sans-I/O, STYLE 11).

Rule 1 -- a message for session s reaches host h (`route`):

| h holds s's lease (before its `lost_at`) | the lease bucket holds for s | decision              |
|------------------------------------------|------------------------------|-----------------------|
| yes                                      | -                            | `Serve`               |
| no                                       | nothing, or a marker         | `Claim`               |
| no                                       | a lease of h itself          | `Claim` (fence again) |
| no                                       | a lease of another host o    | `Forward(o)`          |

Rule 2 -- after a forward to o (`after_forward`):

| o answered                                 | decision                                       |
|--------------------------------------------|------------------------------------------------|
| taken                                      | `Done` (o streams the turn to the client)      |
| not taken (o's lease is ending: lost, or o is closing and releases it) | `AwaitRelease(o, revision)` |
| nothing (no responder, no answer in time: o died, or is paused) | `AwaitRelease(o, revision)` |

`AwaitRelease`: poll the bucket until the key is no longer at that revision
(released, expired after its TTL, taken by another host, or renewed: then
o lives and is asked again), then route again from what it holds.

A `Claim` is: take the lease (guarded; another host may win: route again),
append `owner-changed` with the expected seq read just before (the fence),
then serve. A message is routed at most `MAX_ROUTES` times before the
client gets an error frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cairn.store.jetstream.lease_policy import Held, Observed, Vacant, Vacated

#: how often one message is routed (claimed, forwarded, looked up) before it is refused
MAX_ROUTES = 5


@dataclass(frozen=True, slots=True)
class Serve:
    """This host holds the session: serve the turn."""


@dataclass(frozen=True, slots=True)
class Claim:
    """Nobody holds the session: take it, fence it, serve it."""


@dataclass(frozen=True, slots=True)
class Forward:
    """`holder` holds the session at lease `revision`: pass the message on."""

    holder: str
    revision: int


RouteDecision = Serve | Claim | Forward


def route(holds: bool, observed: Observed, host_id: str) -> RouteDecision:
    """Rule 1 (see the module doc)."""
    if holds:
        return Serve()
    match observed:
        case Vacant() | Vacated():
            return Claim()
        case Held(holder, _) if holder == host_id:
            return Claim()
        case Held(holder, revision):
            return Forward(holder, revision)


@dataclass(frozen=True, slots=True)
class Done:
    """The holder took the message."""


@dataclass(frozen=True, slots=True)
class AwaitRelease:
    """The holder did not answer: wait until `holder`'s lease at `revision` is gone, then look again."""

    holder: str
    revision: int


ForwardOutcome = Literal["taken", "not-taken", "unanswered"]
AfterForward = Done | AwaitRelease


def after_forward(outcome: ForwardOutcome, forward: Forward) -> AfterForward:
    """Rule 2 (see the module doc)."""
    match outcome:
        case "taken":
            return Done()
        case "not-taken" | "unanswered":
            return AwaitRelease(forward.holder, forward.revision)


def released(observed: Observed, awaited: AwaitRelease) -> bool:
    """Whether the awaited lease is gone: the key is free, or at another revision (renewed, taken)."""
    match observed:
        case Vacant() | Vacated():
            return True
        case Held(holder, revision):
            return holder != awaited.holder or revision != awaited.revision
