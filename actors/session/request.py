"""Request assembly: from the session's state to the exact messages a provider receives.

One function serves the live turn loop and `cairn context`, so what an
auditor is shown is what the model was sent:

    messages = system messages (P2) + history rendered by the tool-result
               budget (X1-X3) + the current hand-off (H3/H4), last

with the projection of that request (P4), its budget snapshot (B4), the
local token counts of each part and where a provider with prompt caching
may put its breakpoints (`cache_breakpoints`). `request_event` turns it into the `request`
event that must be persisted before the request is sent; that event is the
baseline the next projection starts from (P3, P6).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from cairn.actors.session.budget import BudgetSnapshot
from cairn.actors.session.cache_breakpoints import cache_breakpoints
from cairn.actors.session.tracker import Occupancy, Projection, occupancy
from cairn.actors.session.view import HistoryView
from cairn.events.codec import Record
from cairn.events.kinds import EventBase, Request
from cairn.events.model import Message
from cairn.events.state import SessionState, replay


class PartTokens(msgspec.Struct, frozen=True, kw_only=True):
    """Local token counts of each part of a request (T1)."""

    system: int
    tools: int
    history: int
    handoff: int

    @property
    def total(self) -> int:
        return self.system + self.tools + self.history + self.handoff


class AssembledRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What the provider receives for one request, and what cairn knows about it."""

    model: str
    messages: tuple[Message, ...]
    #: tool schemas as canonical JSON strings, in the order sent
    tools: tuple[str, ...]
    #: history messages sent (the index the reply will take in the context)
    history_length: int
    history_revision: int
    handoff_included: bool
    fingerprint: str
    fixed_tokens: int
    projection: Projection
    snapshot: BudgetSnapshot
    parts: PartTokens
    #: indexes into `messages` where a provider with prompt caching may put a breakpoint
    cache_breakpoints: tuple[int, ...] = ()


def assemble(
    state: SessionState,
    view: HistoryView,
    *,
    occ: Occupancy | None = None,
    model: str | None = None,
) -> AssembledRequest:
    """The next request of `state` (pass `occ` when it was just computed for this state)."""
    if occ is None:
        occ = occupancy(state, view, model=model)
    view.sync(state)
    profile = occ.profile
    handoff = occ.handoff
    tail = (handoff,) if handoff is not None else ()
    messages = (*profile.system, *view.rendered, *tail)
    return AssembledRequest(
        model=profile.model,
        messages=messages,
        tools=profile.tools,
        history_length=len(state.context),
        history_revision=state.revision,
        handoff_included=handoff is not None,
        fingerprint=profile.fingerprint,
        fixed_tokens=profile.fixed_tokens,
        projection=occ.projection,
        snapshot=occ.snapshot,
        parts=PartTokens(
            system=profile.system_tokens,
            tools=profile.tools_tokens,
            history=view.total,
            handoff=view.counter.message(handoff) if handoff is not None else 0,
        ),
        cache_breakpoints=cache_breakpoints(messages, history_start=len(profile.system)),
    )


def budget_figures(assembled: AssembledRequest) -> dict[str, Any]:
    """The request's projection and the budget it is judged against, as JSON-ready figures (what
    `cairn context` and the HTTP API's next-request view both show)."""
    snap = assembled.snapshot
    return {
        "projected_tokens": assembled.projection.tokens,
        "projection_source": assembled.projection.source,
        "input_budget": snap.input_budget,
        "handoff_threshold": snap.handoff_threshold,
        "compaction_threshold": snap.compaction_threshold,
        "phase": snap.phase,
    }


def request_event(assembled: AssembledRequest, *, request_id: str, turn_id: str, attempt: int = 1) -> Request:
    """The `request` event of an assembled request (persist it before sending, P6)."""
    return Request(
        request_id=request_id,
        turn_id=turn_id,
        attempt=attempt,
        fingerprint=assembled.fingerprint,
        history_revision=assembled.history_revision,
        projected_tokens=assembled.projection.tokens,
        phase=assembled.snapshot.phase,
        message_count=len(assembled.messages),
        history_length=assembled.history_length,
        model=assembled.model,
        fixed_tokens=assembled.fixed_tokens,
        projection_source=assembled.projection.source,
        handoff_included=assembled.handoff_included,
        counted_tokens=assembled.projection.local_tokens,
    )


class FirstRequest(msgspec.Struct, frozen=True):
    """A turn's first request, assembled on the state its start events would make: its event goes
    into the same append as theirs (`speculative`)."""

    event: Request
    assembled: AssembledRequest
    request_id: str


def speculative(state: SessionState, sid: str, events: Sequence[EventBase], ts_ms: int) -> SessionState:
    """The state `events` would make once appended to session `sid` after `state`, stamped
    `ts_ms` (pure).

    The same fold replay uses (`evolve`), on records numbered as the journal will number them;
    their log position and hash chain are not known yet, and no rule reads them. The actor
    never keeps this state: it assembles a request from it, and takes the log's own records
    once the append is acknowledged (persist, then apply)."""
    records = [
        Record(-1, sid, state.last_seq + n, ts_ms, "", event)  # type: ignore[arg-type]
        for n, event in enumerate(events, start=1)
    ]
    return replay(records, state)
