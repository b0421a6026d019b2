"""Slimming without a model (CONTEXT-RULES S1-S5): snip and micro compaction as planners.

A planner decides, the log remembers: it returns a `SlimPlan` whose
`context-slimmed` event names the removed tool calls, and the fold applies
that event (remove those tool turns, put the marker where the first removed
message was, revision + 1), so replay rebuilds the same context without
deciding again (S5).

Rules:

- S1 snip: with at least 30 messages in history, every tool turn (M3) older
  than the newest 10 tool turns is a candidate. The removed turns are replaced
  by one system marker saying how many earlier tool interactions were snipped.
- S2 candidates go in priority order, oldest first within a class:

  | class | turn                                                    |
  |-------|---------------------------------------------------------|
  | 0     | read-only success: every call read-only, no error, no write effect |
  | 1     | write: a call not read-only, or a result with effect `write`       |
  | 2     | error: a result with status `error`                                 |

  and only as many as needed to bring the projection under the hand-off
  threshold (all of them when the phase is `unknown`; none below the
  threshold). After a slimming the revision changes, so the next projection is
  the local estimate (P4); the plan removes turns until both the current
  projection and that local estimate, less what is removed, plus the marker,
  are under the threshold.
- S3 an unmatched tool result is never removed; a removed turn takes its
  assistant text with it. A turn whose call ids also occur outside it (a
  provider reusing ids) cannot be named unambiguously by call id, so it is
  never a candidate.
- S4 micro: more than 60 s after the last provider response (never before the
  first one), snip with keep 3 and a minimum of 15 messages.
- S5 the plan is recorded as `context-slimmed` before it takes effect.
"""

from __future__ import annotations

import msgspec

from cairn.actors.session.tracker import Occupancy
from cairn.actors.session.view import (
    DEFAULT_READ_ONLY_TOOLS,
    RANK_ERROR,
    RANK_READ_ONLY,
    RANK_WRITE,
    HistoryView,
    TurnEntry,
    read_only_tools,
)
from cairn.events.codec import Record
from cairn.events.kinds import ContextSlimmed, SlimMode
from cairn.events.model import Message, MessageMeta
from cairn.events.protocol import marker_text
from cairn.events.state import SessionState, evolve

__all__ = [
    "DEFAULT_READ_ONLY_TOOLS",
    "RANK_ERROR",
    "RANK_READ_ONLY",
    "RANK_WRITE",
    "SlimPlan",
    "apply_plan",
    "candidates",
    "micro_due",
    "plan_micro",
    "plan_snip",
    "rank_of",
    "read_only_tools",
]

SNIP_KEEP = 10
SNIP_MINIMUM = 30
MICRO_KEEP = 3
MICRO_MINIMUM = 15
#: S4: the provider's prompt cache is taken as expired after this long
MICRO_IDLE_MS = 60_000


class SlimPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A decided slimming: the event to record and the context positions it removes."""

    event: ContextSlimmed
    #: indexes into the context it was planned on, ascending
    removed_indexes: tuple[int, ...]

    def apply(self, context: tuple[Message, ...], seq: int) -> tuple[Message, ...]:
        """The planned context once the event is recorded at `seq` (what the fold must give)."""
        removed = set(self.removed_indexes)
        kept = [message for index, message in enumerate(context) if index not in removed]
        if self.removed_indexes and self.event.marker_text:
            first = self.removed_indexes[0]
            marker = Message(
                role="system",
                content=self.event.marker_text,
                id=self.event.marker_id,
                meta=MessageMeta(seq=seq, origin="snip-marker"),
            )
            kept.insert(first, marker)
        return tuple(kept)


def rank_of(entry: TurnEntry, context: tuple[Message, ...], read_only: frozenset[str]) -> int:
    """S2: 0 read-only success, 1 write, 2 error (the view's rank when it is for these names)."""
    if entry.rank is not None and (entry.rank_for is read_only or entry.rank_for == read_only):
        return entry.rank
    rank = RANK_READ_ONLY
    for index in entry.result_indexes:
        meta = context[index].meta
        if meta.tool_status == "error":
            rank = RANK_ERROR
            break
        if meta.tool_effect == "write":
            rank = RANK_WRITE
    if rank == RANK_READ_ONLY and any(
        call.name not in read_only for call in context[entry.call_index].tool_calls
    ):
        rank = RANK_WRITE
    entry.rank, entry.rank_for = rank, read_only
    return rank


def _nameable(entry: TurnEntry, view: HistoryView) -> bool:
    """True when the turn's call ids occur nowhere else, so the fold removes exactly this turn."""
    if len(entry.id_set) != len(entry.call_ids):
        return False
    own = len(entry.call_ids) + len(entry.result_indexes)
    return sum(view.references(call_id) for call_id in entry.call_ids) == own


def candidates(state: SessionState, view: HistoryView, *, keep: int, minimum: int) -> list[TurnEntry]:
    """S1/S3: the tool turns a snip may remove, oldest first."""
    view.sync(state)
    if len(state.context) < minimum:
        return []
    turns = view.turns
    older = turns[: max(0, len(turns) - keep)]
    return [entry for entry in older if _nameable(entry, view)]


def plan_snip(
    state: SessionState,
    view: HistoryView,
    occ: Occupancy,
    *,
    keep: int = SNIP_KEEP,
    minimum: int = SNIP_MINIMUM,
    mode: SlimMode = "snip",
    marker_id: str | None = None,
) -> SlimPlan | None:
    """S1-S3: what to snip before this request, or None when nothing should go.

    `occ` must be the occupancy of `state` (tracker.occupancy).
    """
    snap = occ.snapshot
    # None: the phase is unknown, every candidate goes (S2)
    limit = snap.handoff_threshold if snap.phase != "unknown" else None
    if limit is not None and snap.projected_tokens is not None and snap.projected_tokens < limit:
        return None
    pool = candidates(state, view, keep=keep, minimum=minimum)
    if not pool:
        return None
    context = state.context
    read_only = view.read_only  # synced to state by candidates(): the names the turns are ranked for
    ordered = sorted(pool, key=lambda entry: (rank_of(entry, context, read_only), entry.call_index))
    counter = view.counter
    top = max(occ.projection.tokens, occ.projection.local_tokens)
    chosen: list[TurnEntry] = []
    removed_tokens = 0
    for entry in ordered:
        chosen.append(entry)
        removed_tokens += sum(view.message_tokens(index) for index in entry.indexes)
        # a marker counts at least 0: while the rest alone is at or over the limit, it is not counted
        # (each new count of a marker is an encode, which a counter new after a respawn would pay)
        if (
            limit is not None
            and top - removed_tokens < limit
            and top - removed_tokens + counter.message(_marker(len(chosen))) < limit
        ):
            break
    marker_tokens = counter.message(_marker(len(chosen)))
    chosen.sort(key=lambda entry: entry.call_index)
    indexes = tuple(sorted(index for entry in chosen for index in entry.indexes))
    event = ContextSlimmed(
        mode=mode,
        removed_call_ids=tuple(call_id for entry in chosen for call_id in entry.call_ids),
        tokens_saved=removed_tokens - marker_tokens,
        marker_id=marker_id or f"snip-{state.last_seq + 1}",
        marker_text=marker_text(len(chosen)),
    )
    return SlimPlan(event=event, removed_indexes=indexes)


def _marker(count: int) -> Message:
    """The marker as counted (T1 does not count message ids, so one count serves every id)."""
    return Message(role="system", content=marker_text(count))


def micro_due(state: SessionState, now_ms: int) -> bool:
    """S4: the prompt cache has expired since the last provider response (never before the first)."""
    last = state.carried.last_response_ts
    return last is not None and now_ms - last > MICRO_IDLE_MS


def plan_micro(
    state: SessionState,
    view: HistoryView,
    occ: Occupancy,
    *,
    now_ms: int,
    marker_id: str | None = None,
) -> SlimPlan | None:
    """S4: micro compaction before this request, when due; applied at once by the caller (L1)."""
    if not micro_due(state, now_ms):
        return None
    return plan_snip(
        state, view, occ, keep=MICRO_KEEP, minimum=MICRO_MINIMUM, mode="micro", marker_id=marker_id
    )


def apply_plan(state: SessionState, plan: SlimPlan, *, now_ms: int) -> SessionState:
    """The state once the plan's event is recorded next (the same fold as the log's).

    For L1 step 4: the compactor's input is the snip result, which is not
    persisted unless compaction commits.
    """
    record = Record(0, state.sid, state.last_seq + 1, now_ms, "", plan.event)
    return evolve(state, record)
