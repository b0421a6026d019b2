"""Stored token counts: the session writes each message's count with its event, replay reads it back.

A session rebuilt by replay must not pay a cold recount of its whole history
(about 100 ms for 200,000 tokens), so every message-carrying event the
session persists records the count (T1) of the message the fold makes of
it, under the name of the counter that counted it (`TokenCounter.scheme`):
`tokens` on user, assistant and tool-result events, `replacement_counts`
on a checkpoint. The field is optional: events written without it (older
logs, other writers) are counted when read, as before.

Trust, on the reading side (`HistoryView`): a stored count stands for a
message only when the reader's counter has the same scheme and the message
is shown to the model as it is (its rendering is the message itself, which
a message holding a blob part never is: the store may move a part to a
blob after the count was taken, and then the count no longer describes
it). Anything else is counted afresh, so the counts a restarted session
uses are those a fresh count gives.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET

from cairn.actors.session.tool_budget import RESULT_LIMIT, content_chars
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    EventBase,
    TokenCount,
    TokenCounts,
    ToolResult,
    UserMessage,
)
from cairn.events.model import BlobPart, Message


def message_of(event: UserMessage | AssistantMessage | ToolResult) -> Message:
    """What the fold makes of a message event, as far as counting goes (no id, no metadata)."""
    if isinstance(event, UserMessage):
        return Message(role="user", content=event.content)
    if isinstance(event, AssistantMessage):
        return Message(
            role="assistant", content=event.text, reasoning=event.reasoning, tool_calls=event.tool_calls
        )
    return Message(role="tool", content=event.content, tool_call_id=event.call_id, name=event.tool_name)


def _worth_storing(message: Message) -> bool:
    """Whether a reader may use the count: not for blob parts, nor for a result X1 always cuts."""
    content = message.content
    if isinstance(content, str):
        return message.role != "tool" or len(content) <= RESULT_LIMIT
    if any(type(part) is BlobPart for part in content):
        return False
    return message.role != "tool" or content_chars(content) <= RESULT_LIMIT


def with_counts(events: Sequence[EventBase], counter: TokenCounter) -> list[EventBase]:
    """`events` with the token count of each message they make recorded, as the session persists them.

    Counts only what a reader can use (see the module doc); an event that
    already holds a count keeps it; a counter without a scheme records none.
    """
    scheme = counter.scheme
    out = list(events)
    if scheme is None:
        return out
    for index, event in enumerate(out):
        if isinstance(event, UserMessage | AssistantMessage | ToolResult):
            if event.tokens is UNSET:
                message = message_of(event)
                if _worth_storing(message):
                    count = TokenCount(counter.fresh(message), scheme)
                    out[index] = msgspec.structs.replace(event, tokens=count)
        elif isinstance(event, CheckpointCommitted) and event.replacement_counts is UNSET:
            counts = tuple(counter.message(message) for message in event.replacement_messages)
            out[index] = msgspec.structs.replace(event, replacement_counts=TokenCounts(counts, scheme))
    return out
