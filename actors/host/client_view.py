"""What a client may see of a session: the one definition, for the live stream and the transcript.

A host streams `Turn.events()` items to its users and pages the log to them
(`Host.transcript`). Both go through here, so there is one answer to "what
may a client see":

- never a hidden event (H6: the hand-off, a cluster's owner change), with or
  without `include_private`: `client_view` gives None for one;
- by default, none of the host's own data: no system prompt, no tool
  schemas, no workspace path (`session-started`, the breaker's key of
  `compaction-failed`), no paths a tool reported touching (`files` of
  `tool-result`), no summary a checkpoint replaced history with, no signed
  reasoning blocks, no idempotency key. What the user or the model wrote is
  shown as it is, paths in it too: it is the conversation;
- images by kind and size (`ShownImage`: media type, decoded bytes), their
  base64 data only when asked for (`images=True`).

The messages, tool results and turn boundaries have typed views (`Shown*`,
frozen msgspec Structs, tagged `kind` with the log's own kind names);
`client_view` turns any stream item (a `Record`, a `TextDelta`, a
`ReasoningDelta`) into a JSON-ready dict: the view of its kind under an
envelope (`kind`, `session`, `seq`, `ts`; deltas have `kind` and `text`
only). `include_private=True` adds the event's other fields as stored, for
an operator's tools; it never shows a hidden event either.

Reasoning: a model's reasoning text is shown (`ShownAssistantMessage.reasoning`),
as the live stream already sends its `ReasoningDelta`s; the signed blocks a
provider wants back (`reasoning_blocks`) are the provider's, not the user's.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cairn.actors.provider.base import ReasoningDelta, TextDelta
from cairn.actors.session.handoff import is_hidden_event
from cairn.events.codec import Record
from cairn.events.errors import InputError
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    EventBase,
    SessionStarted,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import BlobPart, ImagePart, Part, TextPart


class ShownText(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    """A text part, as written."""

    text: str


class ShownImage(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="image"):
    """An image part: its media type and size in bytes; `data` (base64) only when asked for, or its `url`."""

    media_type: str
    size: int
    url: str = ""
    data: str | None = None


class ShownBlob(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="blob"):
    """A part kept in the blob store (a large tool output or image): its kind, size and head."""

    media_type: str
    size: int
    chars: int
    preview: str


ShownPart = ShownText | ShownImage | ShownBlob


class ShownToolCall(msgspec.Struct, frozen=True):
    """A tool call the model made: its id, the tool's name, its arguments (JSON text, as written)."""

    id: str
    name: str
    arguments: str


class ShownUserMessage(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="user-message"):
    """A message the user sent."""

    message_id: str
    parts: tuple[ShownPart, ...]


class ShownAssistantMessage(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="assistant-message"
):
    """A model's answer: its text, its reasoning text (None: none), the tool calls it made."""

    message_id: str
    text: str
    reasoning: str | None
    tool_calls: tuple[ShownToolCall, ...]
    finish_reason: str | None


class ShownToolResult(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="tool-result"):
    """A tool's result as the model saw it: `truncated` when cut, `original_chars` its size before."""

    call_id: str
    tool_name: str
    status: str
    parts: tuple[ShownPart, ...]
    original_chars: int
    truncated: bool


class ShownTurnStarted(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="turn-started"):
    """A turn began, with the user message `message_id`; `continues`: the interrupted turn it
    continues (`Host.continue_turn`), else None."""

    turn_id: str
    message_id: str
    continues: str | None = None


class ShownTurnCompleted(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="turn-completed"):
    """A turn ended: the model stopped calling tools, after `requests` requests."""

    turn_id: str
    requests: int


class ShownTurnFailed(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="turn-failed"):
    """A turn failed in `phase` (provider, compaction, checkpoint, tool, interrupted), with its error."""

    turn_id: str
    phase: str
    error_class: str
    error: str


class ShownTurnCancelled(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="turn-cancelled"):
    """The host cancelled a turn (`Turn.cancel`), with the reason it gave (may be empty)."""

    turn_id: str
    reason: str


#: what the transcript holds: the messages, tool results and turn boundaries
ShownEvent = (
    ShownUserMessage
    | ShownAssistantMessage
    | ShownToolResult
    | ShownTurnStarted
    | ShownTurnCompleted
    | ShownTurnFailed
    | ShownTurnCancelled
)


def image_size(data: str) -> int:
    """The bytes base64 `data` decodes to (arithmetic on its length: nothing is decoded)."""
    data = data.strip()
    return max(0, len(data) * 3 // 4 - (len(data) - len(data.rstrip("="))))


def shown_part(part: Part, *, images: bool = False) -> ShownPart:
    """A part as a client sees it (`images`: with an inline image's base64 data)."""
    match part:
        case TextPart():
            return ShownText(part.text)
        case ImagePart():
            data = part.data if images and part.data else None
            return ShownImage(media_type=part.media_type, size=image_size(part.data), url=part.url, data=data)
        case BlobPart():
            return ShownBlob(
                media_type=part.media_type, size=part.size, chars=part.chars, preview=part.preview
            )


def shown_event(event: EventBase, *, images: bool = False) -> ShownEvent | None:
    """The transcript's view of `event`; None for a kind the transcript does not hold."""
    match event:
        case UserMessage():
            parts = tuple(shown_part(p, images=images) for p in event.content)
            return ShownUserMessage(message_id=event.message_id, parts=parts)
        case AssistantMessage():
            return ShownAssistantMessage(
                message_id=event.message_id,
                text=event.text,
                reasoning=event.reasoning,
                tool_calls=tuple(ShownToolCall(c.id, c.name, c.arguments) for c in event.tool_calls),
                finish_reason=event.finish_reason,
            )
        case ToolResult():
            return ShownToolResult(
                call_id=event.call_id,
                tool_name=event.tool_name,
                status=event.status,
                parts=tuple(shown_part(p, images=images) for p in event.content),
                original_chars=event.original_chars,
                truncated=event.truncated,
            )
        case TurnStarted():
            continues = event.continues if isinstance(event.continues, str) else None
            return ShownTurnStarted(turn_id=event.turn_id, message_id=event.message_id, continues=continues)
        case TurnCompleted():
            return ShownTurnCompleted(turn_id=event.turn_id, requests=event.requests)
        case TurnFailed():
            return ShownTurnFailed(
                turn_id=event.turn_id, phase=event.phase, error_class=event.error_class, error=event.error
            )
        case TurnCancelled():
            return ShownTurnCancelled(turn_id=event.turn_id, reason=event.reason)
    return None


#: fields of the other client-visible kinds that only `include_private` shows (by kind)
PRIVATE_FIELDS: dict[type[EventBase], frozenset[str]] = {
    SessionStarted: frozenset({"workspace", "system_prompt", "tool_schemas", "read_only_tools"}),
    CompactionFailed: frozenset({"workspace"}),
    CheckpointCommitted: frozenset(
        {
            "replacement_messages",
            "replacement_counts",
            "raw_summary",
            "files_restored",
            "diagnostics",
            "carried",
            "source_hash",
            "prompt_version",
        }
    ),
}


def _body(event: EventBase, *, include_private: bool, images: bool) -> dict[str, Any]:
    """The view of `event`'s body (its `kind` included)."""
    shown = shown_event(event, images=images)
    stored: dict[str, Any] = msgspec.to_builtins(event)
    if shown is not None:
        body: dict[str, Any] = msgspec.to_builtins(shown)
    else:
        hidden = PRIVATE_FIELDS.get(type(event), frozenset())
        body = {name: value for name, value in stored.items() if name not in hidden}
        if isinstance(event, CheckpointCommitted):
            body["replacement_message_count"] = len(event.replacement_messages)
    if include_private:
        body.update({name: value for name, value in stored.items() if name not in body})
    return body


def client_view(
    item: Record | TextDelta | ReasoningDelta, *, include_private: bool = False, images: bool = False
) -> dict[str, Any] | None:
    """`item` (a `Turn.events()` item, or a record read from the log) as a JSON-ready dict for a client.

    A record gives `{"kind", "session", "seq", "ts", ...}`: the envelope and
    the view of its kind (see the module doc); a delta gives
    `{"kind": "text-delta" | "reasoning-delta", "text"}`. A hidden event
    (hand-off, owner change) gives None, always. `include_private=True`
    adds every other field of the event as stored (system prompt, tool
    schemas, workspace, raw content with image data ...), for an operator;
    `images=True` keeps inline images' base64 data in the view. Anything
    else raises `InputError`.
    """
    match item:
        case TextDelta():
            return {"kind": "text-delta", "text": item.text}
        case ReasoningDelta():
            return {"kind": "reasoning-delta", "text": item.text}
        case Record():
            if is_hidden_event(item.event):
                return None
            body = _body(item.event, include_private=include_private, images=images)
            return {"kind": item.kind, "session": item.sid, "seq": item.seq, "ts": item.ts, **body}
    raise InputError(f"client_view takes a Record, TextDelta or ReasoningDelta, not {type(item).__name__}")
