"""Reactive recovery (CONTEXT-RULES R3): what the context shrinks to after a context-limit error.

`turn.provider_verdict` decides *whether* to recover (R1-R2); this module
says *how*, without I/O: strip the hand-off, snip with keep 3 and minimum 10
over every candidate, and compact the result (trigger `reactive`). When the
compaction gives nothing, the snip result itself becomes the reactive
checkpoint (`snip_checkpoint`), provided it is smaller; else the provider's
error stands and the turn fails.
"""

from __future__ import annotations

import msgspec

from cairn.actors.compactor.checkpoint import source_hash
from cairn.actors.compactor.gates import shrink_gate
from cairn.actors.session.slimming import MICRO_KEEP, SlimPlan, apply_plan, plan_snip
from cairn.actors.session.tracker import Occupancy, occupancy
from cairn.actors.session.turn import MAX_ERROR_CHARS
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import CHECKPOINT_VERSION, CheckpointCommitted, CheckpointDiagnostics
from cairn.events.model import Message
from cairn.events.state import SessionState, carried_for_checkpoint

#: R3: the snip before a reactive compaction keeps 3 tool turns from 10 messages up
REACTIVE_KEEP = MICRO_KEEP
REACTIVE_MINIMUM = 10


def reactive_snip(state: SessionState, view: HistoryView, occ: Occupancy) -> SlimPlan | None:
    """R3: snip with keep 3 and minimum 10, every candidate (the provider said it does not fit)."""
    everything = msgspec.structs.replace(occ, snapshot=msgspec.structs.replace(occ.snapshot, phase="unknown"))
    return plan_snip(state, view, everything, keep=REACTIVE_KEEP, minimum=REACTIVE_MINIMUM)


def recovery_source(
    state: SessionState, view: HistoryView, counter: TokenCounter, *, now_ms: int
) -> tuple[Message, ...] | None:
    """R3: the snipped context to compact, or None to compact the context as it is.

    None too when the snip does not shrink the context (its marker can
    outweigh the tiny tool turns it removes): then there is no snip at all.
    """
    snip = reactive_snip(state, view, occupancy(state, view))
    if snip is None:
        return None
    snipped = apply_plan(state, snip, now_ms=now_ms).context
    if not shrink_gate(counter.messages(state.context), counter.messages(snipped)).passed:
        return None
    return snipped


def snip_checkpoint(
    state: SessionState, snipped: tuple[Message, ...], counter: TokenCounter, *, detail: str
) -> CheckpointCommitted | None:
    """R3's last resort: compaction gave nothing but the snip removed something.

    The snip result becomes the replacement, committed as a reactive
    checkpoint (strategy `fallback`, diagnostics say `snip-only`), so the
    retried request is smaller and the R2 guard is set like any reactive
    checkpoint's. None when the snip result is not smaller than the context
    (its marker can outweigh tiny tool turns): like every replacement, it
    must shrink (`gates.shrink_gate`), or recovery fails.
    """
    source = state.context
    tokens = counter.messages(snipped)
    source_tokens = counter.messages(source)
    if not shrink_gate(source_tokens, tokens).passed:
        return None
    carried = carried_for_checkpoint(state, reset_breaker=False)
    carried = msgspec.structs.replace(carried, reactive_since_response=True)
    still_there = {call.id for message in snipped for call in message.tool_calls}
    snipped_ids = tuple(
        call.id for message in source for call in message.tool_calls if call.id not in still_there
    )
    return CheckpointCommitted(
        version=CHECKPOINT_VERSION,
        epoch=state.epoch + 1,
        through_seq=state.last_seq,
        trigger="reactive",
        strategy="fallback",
        source_tokens=source_tokens,
        replacement_tokens=tokens,
        replacement_messages=snipped,
        source_hash=source_hash(source),
        diagnostics=CheckpointDiagnostics(
            failure_reason="snip-only",
            failure_detail=detail[:MAX_ERROR_CHARS],
            target_tokens=tokens,
            snipped_call_ids=snipped_ids,
        ),
        carried=carried,
    )
