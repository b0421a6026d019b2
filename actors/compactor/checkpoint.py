"""The checkpoint event of a compaction (K1, K3) and its re-derivation by an auditor.

A `checkpoint-committed` event is self-describing: `source_hash` names the
exact source it replaced (SHA-256 over each source message's canonical JSON,
length-prefixed, hand-off stripped), `raw_summary` is the model's raw reply,
`prompt_version` the ledger contract (the prompt it answered and the host's
rebuild rules), the diagnostics say how it was reached (attempts,
reductions, delays, omitted messages and files, the C10 target), and
`carried` is the derived state replay resumes from.

`rederive_replacement(source, checkpoint)` rebuilds the replacement from the
source and the event alone, with no model: the summary from `raw_summary`
and the records of the source (LLM), the fallback plan at the recorded
target (fallback), counted with the same token counter settings (T1-T3), or
R3's snip-only replacement (the source without the snipped turns, the S1
marker where they were). The restored files are an observation of the disk
at compaction time, so they are taken from the event itself, not re-read.
The records' next actions are settled by the spent rule (`ledger`) unless
the checkpoint's `prompt_version` predates it: a checkpoint re-derives under
the rules it was built with. A `prompt_version` of `cairn-ledger-json-1`
says `raw_summary` is the JSON ledger (`structured`), rendered the same way.
An LLM checkpoint whose diagnostics say `tail_fitted` re-derives its tail as
the fallback plans one (`fallback.fit_tail`) at the recorded target.
K1's limits (1..4,096 messages, 16 MiB, version 1, shapes) are enforced by
the event's own `__post_init__`, on write and on replay alike."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from cairn.actors.compactor.active_task import active_task_message, task_text
from cairn.actors.compactor.errors import AuditMismatch
from cairn.actors.compactor.fallback import fit_tail, plan_fallback
from cairn.actors.compactor.files import ORIGIN as FILES_ORIGIN
from cairn.actors.compactor.ledger import extract_records, record_texts, source_records
from cairn.actors.compactor.prompt import BEFORE_SPENT_RULE, JSON_PROMPT_VERSION
from cairn.actors.compactor.replacement import (
    assemble,
    fallback_summary_message,
    message_ids,
    retained_tail,
    summary_message,
)
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import CheckpointCommitted
from cairn.events.model import Message
from cairn.events.protocol import marker_text
from cairn.events.tool_turns import remove_tool_turns

HANDOFF_ORIGIN = "handoff"
_encoder = msgspec.json.Encoder()


def strip_handoff(messages: Sequence[Message]) -> tuple[Message, ...]:
    """C1 / H6: the compaction source never contains the hand-off."""
    return tuple(m for m in messages if m.meta.origin != HANDOFF_ORIGIN)


def source_hash(source: Sequence[Message]) -> str:
    """SHA-256 over the canonical JSON of the (stripped) source messages."""
    digest = hashlib.sha256()
    for message in source:
        encoded = _encoder.encode(message)
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
    return f"sha256:{digest.hexdigest()}"


def rederive_replacement(
    source: Sequence[Message], checkpoint: CheckpointCommitted, counter: TokenCounter
) -> tuple[Message, ...]:
    """The replacement `checkpoint` must hold for `source`, rebuilt without a model.

    Raises AuditMismatch when `source` is not the source the checkpoint names.
    """
    stripped = strip_handoff(source)
    if source_hash(stripped) != checkpoint.source_hash:
        raise AuditMismatch(
            f"source of {len(stripped)} messages does not hash to the checkpoint's "
            f"{checkpoint.source_hash or '(none)'} (epoch {checkpoint.epoch})"
        )
    if checkpoint.diagnostics.failure_reason == "snip-only":
        return _rederive_snip_only(stripped, checkpoint)
    summary_id, _, task_id = message_ids(checkpoint.epoch)
    spent_rule = checkpoint.prompt_version not in BEFORE_SPENT_RULE
    records = (source_records(stripped) if spent_rule else extract_records(record_texts(stripped))).records
    task = task_text(checkpoint.carried.open_turn)
    task_message = active_task_message(task, task_id)
    if checkpoint.strategy == "llm":
        if checkpoint.raw_summary is None:
            raise AuditMismatch(f"LLM checkpoint of epoch {checkpoint.epoch} has no raw summary")
        files = next((m for m in checkpoint.replacement_messages if m.meta.origin == FILES_ORIGIN), None)
        summary = summary_message(
            checkpoint.raw_summary,
            records,
            summary_id,
            spent_rule=spent_rule,
            structured=checkpoint.prompt_version == JSON_PROMPT_VERSION,
        )
        if checkpoint.diagnostics.tail_fitted:
            return fit_tail(
                stripped, summary, task_message, task, checkpoint.diagnostics.target_tokens, counter
            ).replacement
        return assemble(summary, retained_tail(stripped), files, task_message)
    plan = plan_fallback(
        stripped,
        summary=fallback_summary_message(records, summary_id),
        task_message=task_message,
        task=task,
        target=checkpoint.diagnostics.target_tokens,
        counter=counter,
    )
    return plan.replacement


def _rederive_snip_only(source: tuple[Message, ...], checkpoint: CheckpointCommitted) -> tuple[Message, ...]:
    """R3's snip-only checkpoint: the source without the snipped turns, the marker where they were.

    The marker's own id and seq are labels the session chose; its text must be
    the S1 marker for the number of turns removed.
    """
    snipped = checkpoint.diagnostics.snipped_call_ids
    kept, first = remove_tool_turns(source, snipped)
    if first is None:
        raise AuditMismatch(
            f"snip-only checkpoint of epoch {checkpoint.epoch} removes nothing from its source"
        )
    named = set(snipped)
    turns = sum(
        1
        for m in source
        if m.role == "assistant" and m.tool_calls and all(call.id in named for call in m.tool_calls)
    )
    marker = next(
        (m for m in checkpoint.replacement_messages if m.meta.origin == "snip-marker" and m not in source),
        None,
    )
    if marker is None or marker.content != marker_text(turns):
        raise AuditMismatch(
            f"snip-only checkpoint of epoch {checkpoint.epoch} has no S1 marker for {turns} snipped turns"
        )
    kept.insert(first, marker)
    return tuple(kept)


def verify_checkpoint(
    source: Sequence[Message], checkpoint: CheckpointCommitted, counter: TokenCounter
) -> None:
    """Raise AuditMismatch unless `checkpoint` is exactly what its source and summary give."""
    expected = rederive_replacement(source, checkpoint, counter)
    if expected != checkpoint.replacement_messages:
        first = next(
            (
                i
                for i, (a, b) in enumerate(zip(expected, checkpoint.replacement_messages, strict=False))
                if a != b
            ),
            min(len(expected), len(checkpoint.replacement_messages)),
        )
        raise AuditMismatch(
            f"checkpoint of epoch {checkpoint.epoch} differs from its re-derivation "
            f"at replacement message {first}"
        )
    tokens = counter.messages(expected)
    if tokens != checkpoint.replacement_tokens:
        raise AuditMismatch(
            f"checkpoint of epoch {checkpoint.epoch} says {checkpoint.replacement_tokens} "
            f"replacement tokens, re-derivation counts {tokens}"
        )
