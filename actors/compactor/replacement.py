"""The LLM-path replacement (C9) and the two summary messages (C8 ledger, F1 notice).

C9: [summary, the newest 20 % of the source messages (rounded up) minus the
tool results whose call is not among them, recent-file restoration (W),
active-task checkpoint (C11)]. The tail leaves out the file and task
reminders of an earlier checkpoint: the new checkpoint carries fresh ones.
Every piece is a pure function of the source,
the model's raw text, the records, the restored files and the task, so the
same inputs always give the same messages (an auditor re-derives them).
"""

from __future__ import annotations

from collections.abc import Sequence

from cairn.actors.compactor.ledger import ExactRecord, rebuild_ledger, record_lines, summary_body
from cairn.actors.compactor.structured import render_ledger
from cairn.events.model import Message, MessageMeta

TAIL_PERCENT = 20
SUMMARY_ORIGIN = "summary"
#: reminders of an earlier checkpoint that the new one supersedes: never kept in a tail
SUPERSEDED_ORIGINS = frozenset({"active-task", "recent-files"})
FALLBACK_ORIGIN = "fallback-summary"

_SUMMARY_HEAD = (
    "Earlier messages of this session were compacted. The ledger below replaces them; "
    "lines that restate exact continuation records are verbatim and take precedence."
)
FALLBACK_NOTICE = (
    "Automatic compaction of earlier messages failed, so they were removed without a model "
    "summary. The exact continuation records below (if any) and the messages that follow are "
    "authoritative; anything not shown there is no longer in context."
)


def message_ids(epoch: int) -> tuple[str, str, str]:
    """Deterministic ids of the synthesized messages of the checkpoint of `epoch`."""
    return f"ckpt-{epoch}-summary", f"ckpt-{epoch}-files", f"ckpt-{epoch}-task"


def summary_message(
    raw_text: str,
    records: Sequence[ExactRecord],
    message_id: str,
    *,
    spent_rule: bool = True,
    structured: bool = False,
) -> Message:
    """C8: the model's summary, rebuilt by the host around the exact records (`spent_rule`:
    `rebuild_ledger`'s, False only to re-derive a checkpoint built before it; `structured`: the
    reply is the JSON ledger, whose headings the host writes, `structured.render_ledger`)."""
    body = render_ledger(raw_text) if structured else summary_body(raw_text)
    ledger = rebuild_ledger(body, records, spent_rule=spent_rule)
    return Message(
        role="user",
        content=f"{_SUMMARY_HEAD}\n\n{ledger}",
        id=message_id,
        meta=MessageMeta(origin=SUMMARY_ORIGIN, record=record_lines(records)),
    )


def fallback_summary_message(records: Sequence[ExactRecord], message_id: str) -> Message:
    """F1: the fixed notice, plus the ledger rebuilt from the records alone when there are any
    (the service gives them settled by the spent rule, `ledger.source_records`)."""
    text = FALLBACK_NOTICE
    if records:
        text = f"{text}\n\n{rebuild_ledger('', records)}"
    meta = MessageMeta(origin=FALLBACK_ORIGIN, record=record_lines(records))
    return Message(role="user", content=text, id=message_id, meta=meta)


def retained_tail(source: Sequence[Message]) -> tuple[Message, ...]:
    """C9: the newest 20 % (ceil) of the source, without results whose call is not kept."""
    count = -(-len(source) * TAIL_PERCENT // 100)
    tail = source[len(source) - count :] if count else ()
    calls = {call.id for message in tail for call in message.tool_calls}
    return tuple(
        m
        for m in tail
        if (m.role != "tool" or m.tool_call_id in calls) and m.meta.origin not in SUPERSEDED_ORIGINS
    )


def assemble(
    summary: Message,
    tail: Sequence[Message],
    files: Message | None,
    task: Message | None,
) -> tuple[Message, ...]:
    """[summary, tail, files, task], leaving out the pieces that are absent."""
    pieces: list[Message] = [summary, *tail]
    if files is not None:
        pieces.append(files)
    if task is not None:
        pieces.append(task)
    return tuple(pieces)
