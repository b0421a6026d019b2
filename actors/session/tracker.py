"""Occupancy projection of the next request (CONTEXT-RULES P1, P3-P6) from the session's log.

The baseline is read from the state the log folds to, never kept beside it
(P6): `SessionState.last_request` is the latest `request` event and
`last_usage` its `usage` event when the ids match, so a replayed session has
exactly the baseline the live one had.

Rules:

- P1 floor of a usage: the largest of total and prompt + completion, over the
  fields that are non-negative ints (a missing part of the sum counts 0 when
  the other part is there); no usable field: no usage. The prompt is the
  whole prompt, cache reads and writes included (`Usage.whole_prompt`): a report
  that left them out of `prompt_tokens` gets them added back.
- P3 baseline, after a response with usable usage: {floor, revision, history
  length sent, model, fingerprint, fixed tokens} (all but the floor are
  fields of the `request` event). No usable usage: no baseline.
- P4 projection of the next request:

  | the baseline                                     | tokens                                  |
  |--------------------------------------------------|-----------------------------------------|
  | is missing                                       | local: fixed + history + pending        |
  | has another revision than the state              | local                                   |
  | sent more history than there is now              | local                                   |
  | sent history not followed by the assistant reply | local                                   |
  | otherwise                                        | floor + after reply + pending + fixed+  |

  (fixed+ = max(0, fixed now - fixed then)); source `local_estimate` for
  the local rows.
  The provider counted its own reply, so only messages after it are added.
  Source `provider_plus_estimate` when anything was added or the model or
  fingerprint changed, else `provider`. *Pending* is what the request sends
  beyond history that the last request did not: the hand-off message, unless
  the last request carried it already (then the floor has counted it).
- P5 the revision is `SessionState.revision`: slimming and checkpoints raise
  it in the fold, appends never do.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from cairn.actors.session.budget import BudgetSnapshot, budget_for, snapshot
from cairn.actors.session.handoff import EpochHandoff, epoch_handoff, handoff_message
from cairn.actors.session.profile import RequestProfile, profile_of
from cairn.actors.session.view import HistoryView
from cairn.events.kinds import Usage
from cairn.events.model import Message
from cairn.events.state import SessionState

Source = Literal["provider", "provider_plus_estimate", "local_estimate"]


def _usable(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def provider_floor(usage: Usage | None) -> int | None:
    """P1: the provider-reported lower bound of what the last request and its reply occupy.

    The prompt part is `Usage.whole_prompt`: cache reads and writes are prompt tokens.
    """
    if usage is None:
        return None
    total = _usable(usage.total_tokens)
    prompt = usage.whole_prompt()
    completion = _usable(usage.completion_tokens)
    if prompt is None and completion is None:
        return total
    summed = (prompt or 0) + (completion or 0)
    return summed if total is None else max(total, summed)


class Baseline(msgspec.Struct, frozen=True, kw_only=True):
    """P3: what the last provider response tells about the next request."""

    floor: int
    revision: int
    history_length: int
    model: str
    fingerprint: str
    fixed_tokens: int
    handoff_included: bool
    request_seq: int


def baseline_of(state: SessionState) -> Baseline | None:
    """P3/P6: the baseline the log gives, or None when there is no usable usage."""
    request = state.last_request
    if request is None:
        return None
    floor = provider_floor(state.last_usage)
    if floor is None:
        return None
    return Baseline(
        floor=floor,
        revision=request.history_revision,
        history_length=request.history_length,
        model=request.model,
        fingerprint=request.fingerprint,
        fixed_tokens=request.fixed_tokens,
        handoff_included=request.handoff_included,
        request_seq=state.last_request_seq,
    )


class Projection(msgspec.Struct, frozen=True, kw_only=True):
    """P4: the projected tokens of the next request and where the number comes from.

    `local_tokens` is the full local estimate (fixed + history + hand-off),
    which is also what the projection becomes after any destructive rewrite.
    """

    tokens: int
    source: Source
    floor: int | None
    local_tokens: int


def project(
    state: SessionState,
    view: HistoryView,
    profile: RequestProfile,
    handoff: Message | None = None,
) -> Projection:
    """P4: the projection of a request of `profile` + history + `handoff` (if any)."""
    view.sync(state)
    counter = view.counter
    handoff_tokens = counter.message(handoff) if handoff is not None else 0
    local = profile.fixed_tokens + view.total + handoff_tokens
    base = baseline_of(state)
    context = state.context
    if (
        base is None
        or base.revision != state.revision
        or len(context) <= base.history_length
        or context[base.history_length].role != "assistant"
        or context[base.history_length].meta.seq <= base.request_seq
    ):
        return Projection(tokens=local, source="local_estimate", floor=None, local_tokens=local)
    after_reply = view.tokens(base.history_length + 1)
    pending = handoff_tokens if handoff is not None and not base.handoff_included else 0
    tokens = base.floor + after_reply + pending + max(0, profile.fixed_tokens - base.fixed_tokens)
    changed = (
        len(context) > base.history_length + 1
        or pending > 0
        or profile.model != base.model
        or profile.fingerprint != base.fingerprint
    )
    source: Source = "provider_plus_estimate" if changed else "provider"
    return Projection(tokens=tokens, source=source, floor=base.floor, local_tokens=local)


class Occupancy(msgspec.Struct, frozen=True, kw_only=True):
    """Where a session stands before a request: everything slimming, hand-off and assembly read."""

    profile: RequestProfile
    epoch_handoff: EpochHandoff
    #: the hidden hand-off message the request carries (H3/H4), or None
    handoff: Message | None
    projection: Projection
    snapshot: BudgetSnapshot


def prepare(state: SessionState, view: HistoryView) -> None:
    """Bring a session's view and counter up to `state` when it is loaded, so its first request is warm.

    The view walks the context once (renderings, stored counts, tool turns
    and their S2 classes) and the counter counts the request's fixed parts
    (system prompt, tool schemas) of the session's model. Called by the
    session actor's load, so a respawn pays this once, at the load, and the
    first request after it pays what any request pays; both are measured
    apart by `cairn bench --only respawn`.
    """
    view.sync(state)
    profile_of(state.info, view.counter)


def occupancy(state: SessionState, view: HistoryView, *, model: str | None = None) -> Occupancy:
    """Profile, current hand-off, projection and budget snapshot of the next request."""
    profile = profile_of(state.info, view.counter, model=model)
    current = epoch_handoff(state)
    handoff = handoff_message(current.record, state.epoch) if current.record is not None else None
    projection = project(state, view, profile, handoff)
    info = state.info
    budget = budget_for(
        info.context_window if info is not None else None,
        info.max_output_tokens if info is not None else None,
    )
    return Occupancy(
        profile=profile,
        epoch_handoff=current,
        handoff=handoff,
        projection=projection,
        snapshot=snapshot(budget, projection.tokens, projection.source),
    )
