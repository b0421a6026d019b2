"""Stored token counts: the session writes each message's count with its event, replay reads it back.

A session rebuilt by replay must not pay a cold recount of its whole history
(about 100 ms for 200,000 tokens), so every message-carrying event the
session persists records the count (T1) of the message the fold makes of
it, under the name of the counter that counted it (`TokenCounter.scheme`):
`tokens` on user, assistant and tool-result events, `replacement_counts`
on a checkpoint. A tool result too large to show whole (X1) records instead
the count of its preview and note, `shown_tokens`, with the digest of that
rendering. The fields are optional: events written without them (older
logs, other writers) are counted when read, as before.

Trust, on the reading side (`HistoryView`): a stored count stands for a
message only when the reader's counter has the same scheme and the message
is shown to the model as it is (its rendering is the message itself, which
a message holding a blob part never is: the store may move a part to a
blob after the count was taken, and then the count no longer describes
it); a `shown_tokens` count stands only for a rendering with its digest
(the counter's own cache key, so a result shown otherwise, say renumbered
by a fork, is counted again). Anything else is counted afresh, so the
counts a restarted session uses are those a fresh count gives.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET

from cairn.actors.session.tool_budget import RESULT_LIMIT, content_chars, render_result
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    EventBase,
    ShownCount,
    TokenCount,
    TokenCounts,
    ToolResult,
    UserMessage,
)
from cairn.events.model import BlobPart, Message, MessageMeta


def message_of(event: UserMessage | AssistantMessage | ToolResult) -> Message:
    """What the fold makes of a message event, as far as counting goes (no id, no metadata)."""
    if isinstance(event, UserMessage):
        return Message(role="user", content=event.content)
    if isinstance(event, AssistantMessage):
        return Message(
            role="assistant", content=event.text, reasoning=event.reasoning, tool_calls=event.tool_calls
        )
    return Message(role="tool", content=event.content, tool_call_id=event.call_id, name=event.tool_name)


def _shown_whole(message: Message) -> bool | None:
    """True when the model may see the message as it is; False for a result X1 always cuts; None for blobs."""
    content = message.content
    if isinstance(content, str):
        return message.role != "tool" or len(content) <= RESULT_LIMIT
    if any(type(part) is BlobPart for part in content):
        return None
    return message.role != "tool" or content_chars(content) <= RESULT_LIMIT


def _shown_count(event: ToolResult, seq: int, counter: TokenCounter, scheme: str) -> ShownCount:
    """Count and digest of what X1 shows of a result the fold makes at `seq` (wherever it stands)."""
    message = Message(
        role="tool",
        content=event.content,
        tool_call_id=event.call_id,
        name=event.tool_name,
        meta=MessageMeta(
            seq=seq,
            tool_status=event.status,
            tool_effect=event.effect,
            original_chars=event.original_chars,
            truncated=event.truncated,
        ),
    )
    shown = render_result(message)[0]
    return ShownCount(counter.fresh(shown), scheme, counter.digest(shown).hex())


def with_counts(
    events: Sequence[EventBase], counter: TokenCounter, first_seq: int | None = None
) -> list[EventBase]:
    """`events` with the token count of each message they make recorded, as the session persists them.

    Counts only what a reader can use (see the module doc); an event that
    already holds a count keeps it; a counter without a scheme records none.
    `first_seq`, the seq the first event will take, lets a result too large
    to show whole record the count of what is shown (its note names the seq).
    """
    scheme = counter.scheme
    out = list(events)
    if scheme is None:
        return out
    for index, event in enumerate(out):
        if isinstance(event, UserMessage | AssistantMessage | ToolResult):
            if event.tokens is UNSET:
                message = message_of(event)
                whole = _shown_whole(message)
                if whole:
                    count = TokenCount(counter.fresh(message), scheme)
                    out[index] = msgspec.structs.replace(event, tokens=count)
                elif (
                    whole is False
                    and isinstance(event, ToolResult)
                    and event.shown_tokens is UNSET
                    and first_seq is not None
                ):
                    shown = _shown_count(event, first_seq + index, counter, scheme)
                    out[index] = msgspec.structs.replace(event, shown_tokens=shown)
        elif isinstance(event, CheckpointCommitted) and event.replacement_counts is UNSET:
            counts = tuple(counter.message(message) for message in event.replacement_messages)
            out[index] = msgspec.structs.replace(event, replacement_counts=TokenCounts(counts, scheme))
    return out
