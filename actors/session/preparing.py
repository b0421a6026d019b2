"""L1's order before each request, pure: the next thing to do given the stages already done.

The session actor is `Preparing` (`machine`) while it makes a turn's next
request: it asks `before_request`, carries out the answer (persisting its
event, then applying it), and asks again with that stage done, on the state
the answer led to, until the answer is the request itself (or a compaction
to wait for, or the turn's end).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from cairn.actors.session.handoff import InvalidHandoff, decide_handoff
from cairn.actors.session.request import FirstRequest, assemble, request_event, speculative
from cairn.actors.session.slimming import apply_plan, plan_micro, plan_snip
from cairn.actors.session.tracker import Occupancy, occupancy
from cairn.actors.session.view import HistoryView
from cairn.events.kinds import EventBase
from cairn.events.model import Message
from cairn.events.state import SessionState

#: the last stage of L1 carried out before this request ("": none yet; "snip" also after a checkpoint)
L1Done = Literal["", "micro", "snip", "handoff"]


class TooManyRequests(msgspec.Struct, frozen=True):
    """The turn made `requests` requests, its limit, without the model finishing: it fails."""

    requests: int


class SlimFirst(msgspec.Struct, frozen=True):
    """Persist this micro-slim (S4) or snip (S1) event, then go on after `stage` (phase `compaction`)."""

    event: EventBase
    stage: L1Done


class CompactFirst(msgspec.Struct, frozen=True):
    """L1 (4): compaction is due; compact `source` (the context with the planned snip applied)."""

    source: tuple[Message, ...] | None


class WriteHandoff(msgspec.Struct, frozen=True):
    """H1: persist the hand-off before the request that carries it (H6); a failed write is H7's."""

    event: EventBase


class HandoffRefused(msgspec.Struct, frozen=True):
    """H7: the hand-off could not be made; logged once, not tried again this turn, the request goes."""

    error: Exception


class SendRequest(msgspec.Struct, frozen=True):
    """L1 (6): nothing left to do first; assemble the request on this occupancy, persist, send."""

    occ: Occupancy


BeforeRequest = TooManyRequests | SlimFirst | CompactFirst | WriteHandoff | HandoffRefused | SendRequest


def before_request(
    state: SessionState,
    view: HistoryView,
    *,
    now_ms: int,
    done: L1Done,
    requests: int,
    max_requests: int,
    handoff_failed: bool,
) -> BeforeRequest:
    """The next thing to do before the turn's next request, given the stages `done` (L1, H1).

    In order: the request limit; (1) micro-slim (S4); (2) the snip planned
    (S1); (4) compaction when due, of the context with the snip applied;
    (3) else the snip; (5) the hand-off when due (H1; `handoff_failed`: H7,
    not again this turn); (6) the request. The actor carries out one answer
    at a time, persisting its event, and asks again with that stage done,
    on the state it leads to; a checkpoint goes on from (5) (`done="snip"`).
    `view` is the token-count memo of `state`'s messages.
    """
    if done == "" and requests >= max_requests:
        return TooManyRequests(requests)
    occ = occupancy(state, view)
    if done == "":
        micro = plan_micro(state, view, occ, now_ms=now_ms)
        if micro is not None:
            return SlimFirst(micro.event, "micro")
    if done in ("", "micro"):
        snip = plan_snip(state, view, occ)
        if occ.snapshot.phase == "compaction_due":
            return CompactFirst(apply_plan(state, snip, now_ms=now_ms).context if snip is not None else None)
        if snip is not None:
            return SlimFirst(snip.event, "snip")
    if done != "handoff":
        try:
            handoff = decide_handoff(state, occ.snapshot, now_ms=now_ms, write_failed=handoff_failed)
        except InvalidHandoff as exc:
            return HandoffRefused(exc)
        if handoff is not None:
            return WriteHandoff(handoff)
    return SendRequest(occ)


def first_request(
    sid: str,
    state: SessionState,
    view: HistoryView,
    events: Sequence[EventBase],
    *,
    now_ms: int,
    turn_id: str,
    max_requests: int,
) -> FirstRequest | None:
    """The turn's first request, when it can go out in the same append as `events`, which open the
    turn (one fsync before the first token instead of two), else None.

    It can when L1 has nothing to do before it (`before_request` answers
    `SendRequest` at once), judged on the state those events would make
    (`speculative`). The request is then the one the actor would assemble
    after appending them: the same state, the same id. Otherwise the actor
    appends them alone and prepares the request as for any other (and logs
    a refused hand-off, H7). The caller checks that no steering message
    waits (C11: it would go first).
    """
    ahead = speculative(state, sid, events, now_ms)
    move = before_request(
        ahead, view, now_ms=now_ms, done="", requests=0, max_requests=max_requests, handoff_failed=False
    )
    if not isinstance(move, SendRequest):
        return None
    assembled = assemble(ahead, view, occ=move.occ)
    request_id = f"r{ahead.last_seq + 1}"
    event = request_event(assembled, request_id=request_id, turn_id=turn_id, attempt=1)
    return FirstRequest(event, assembled, request_id)
