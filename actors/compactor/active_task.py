"""The active-task checkpoint (C11): the current turn's request, kept verbatim across compaction.

The task is the user request that opened the turn plus any steering message
sent during it (`SessionState.carried.open_turn.task`), joined by blank
lines. Up to 6,000 chars it is kept whole; longer, its head 4,500 chars, a
marker and its tail 1,500 chars. It travels in a hidden reminder that says it
is the request (not its status), to resume only the pending exact next
action, and to follow any exact final-response protocol to the letter.
"""

from __future__ import annotations

from cairn.events.kinds import OpenTurn
from cairn.events.model import Message, MessageMeta

TASK_VERBATIM_CHARS = 6000
TASK_HEAD_CHARS = 4500
TASK_TAIL_CHARS = 1500
ORIGIN = "active-task"


def task_text(turn: OpenTurn | None) -> str:
    """The task of the turn in progress ('' when there is none)."""
    if turn is None:
        return ""
    return "\n\n".join(text for text in turn.task if text)


def clip_task(text: str) -> str:
    """C11: verbatim up to 6,000 chars, else head 4,500 + marker + tail 1,500."""
    if len(text) <= TASK_VERBATIM_CHARS:
        return text
    omitted = len(text) - TASK_HEAD_CHARS - TASK_TAIL_CHARS
    return (
        f"{text[:TASK_HEAD_CHARS]}\n[... {omitted} chars of the request omitted ...]\n"
        f"{text[-TASK_TAIL_CHARS:]}"
    )


def active_task_message(task: str, message_id: str) -> Message | None:
    """The hidden reminder that carries the task, or None without a task."""
    if not task:
        return None
    body = (
        "<system-reminder>\n"
        "Earlier context was compacted while this request was in progress. The text below is "
        "the user's request as they wrote it, not a report of how far it got: check the "
        "summary above for what is already done. Resume only the pending exact next action; "
        "do not redo finished steps. If the request prescribes an exact form for the final "
        "response, follow it literally.\n\n"
        "<user-request>\n"
        f"{clip_task(task)}\n"
        "</user-request>\n"
        "</system-reminder>"
    )
    return Message(role="user", content=body, id=message_id, meta=MessageMeta(hidden=True, origin=ORIGIN))
