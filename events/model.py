"""The message model (CONTEXT-RULES M1-M4): messages, parts, tool calls, units.

Everything here is a frozen msgspec Struct with tuple fields, so messages can
cross actor boundaries without copies (PITFALLS 20) and sit inside events.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec

Role = Literal["system", "user", "assistant", "tool"]
ToolStatus = Literal["ok", "error"]
ToolEffect = Literal["read", "write"]

#: M4: what an image becomes in compaction text.
IMAGE_PLACEHOLDER = "[image omitted from compaction]"

#: a message or tool call id: 1..128 characters, none of them a control character (used with fullmatch:
#: `$` would let a final newline through)
_ID_RE = re.compile(r"[^\x00-\x1f\x7f]{1,128}")

#: Every int of the log is a signed 64-bit integer: what JSON readers, the LMDB index (msgpack,
#: big-endian u64 keys) and SQL exports can hold. msgspec checks the bound on decode, so the
#: journal's round trip refuses a larger int before it is written.
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class TextPart(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="text"):
    text: str


class ImagePart(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="image"):
    """An inline image: base64 `data` of `media_type`, or a `url`."""

    media_type: str = "image/png"
    data: str = ""
    url: str = ""


class BlobPart(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="blob"):
    """A payload kept in the content-addressed blob store instead of the line.

    `preview` is the head of the text (empty for binary media); `chars` is the
    full text length in Python characters (0 for binary media).
    """

    sha256: str
    size: Int64
    media_type: str = "text/plain"
    chars: Int64 = 0
    preview: str = ""


Part = TextPart | ImagePart | BlobPart


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    id: str
    name: str
    arguments: str = "{}"


class ReasoningBlock(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One block of a model's reasoning as its provider wants it sent back (Anthropic's extended thinking).

    `text` is the reasoning as streamed and `signature` the provider's proof
    that it is unchanged; a redacted block has no text, only the provider's
    opaque `redacted` data. Both are sent back verbatim on later requests.
    """

    text: str = ""
    signature: str = ""
    redacted: str = ""


class MessageMeta(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """What cairn knows about a message beyond what a provider is sent.

    `origin` names synthesized messages: `handoff`, `summary`, `active-task`,
    `recent-files`, `snip-marker`, `fallback-summary`. `seq` is the log seq of
    the event the message came from (0 when synthesized). `record` is data a
    synthesized message carries for cairn, never for the model: the hand-off
    message names its record there (H4), and a checkpoint's summary keeps the
    exact continuation records it was built with (C8), one canonical line
    each, so that the next compaction still reads them. The `tool_*` fields,
    `original_chars` and `truncated` describe a tool result (S2, X1).
    """

    seq: Int64 = 0
    hidden: bool = False
    origin: str = ""
    record: str = ""
    tool_status: ToolStatus | None = None
    tool_effect: ToolEffect | None = None
    original_chars: Int64 | None = None
    truncated: bool = False


class Message(msgspec.Struct, frozen=True, gc=False, kw_only=True, omit_defaults=True):
    role: Role
    content: str | tuple[Part, ...] = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    id: str = ""
    meta: MessageMeta = MessageMeta()
    #: the reasoning as signed blocks, for a provider that wants them back (omitted when empty)
    reasoning_blocks: tuple[ReasoningBlock, ...] = ()


def parts_of(content: str | Sequence[Part]) -> tuple[Part, ...]:
    """Content as parts: a str is one text part; a tuple of parts is itself."""
    return (TextPart(content),) if isinstance(content, str) else tuple(content)


def text_of(content: str | Sequence[Part] | Message) -> str:
    """M4: the compaction text of a message's content (images as the placeholder, no reasoning).

    `content` is what a `Message` or an event holds (a str, or parts); given a
    message, its content is used.
    """
    if isinstance(content, Message):
        content = content.content
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ImagePart) or part.media_type.startswith("image/"):
            pieces.append(IMAGE_PLACEHOLDER)
        else:
            pieces.append(part.preview)
    return "".join(pieces)


def shape_problem(message: Message) -> str | None:
    """Why a message is not of valid shape (K1), or None when it is."""
    if message.role not in ("system", "user", "assistant", "tool"):
        return f"unknown role {message.role!r}"
    if message.role == "tool" and not message.tool_call_id:
        return "a tool message needs tool_call_id"
    if message.role != "tool" and message.tool_call_id is not None:
        return f"a {message.role} message cannot have tool_call_id"
    if message.tool_calls and message.role != "assistant":
        return "only an assistant message can carry tool calls"
    if (message.reasoning is not None or message.reasoning_blocks) and message.role != "assistant":
        return "only an assistant message can carry reasoning"
    seen: set[str] = set()
    for call in message.tool_calls:
        if not _ID_RE.fullmatch(call.id) or not call.name:
            return "a tool call needs an id (1..128 chars) and a name"
        if call.id in seen:
            return f"duplicate tool call id {call.id!r}"
        seen.add(call.id)
    if message.id and not _ID_RE.fullmatch(message.id):
        return "message id must be 1..128 chars without control characters"
    return None


# --- units (M2) and tool turns (M3) ---------------------------------------


def units(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """M2: split into message units, as half-open index ranges [start, end).

    An assistant message with tool calls takes the contiguous tool results
    that answer its calls; every other message is a unit of one.
    """
    result: list[tuple[int, int]] = []
    i = 0
    n = len(messages)
    while i < n:
        msg = messages[i]
        end = i + 1
        if msg.role == "assistant" and msg.tool_calls:
            ids = {call.id for call in msg.tool_calls}
            while end < n and messages[end].role == "tool" and messages[end].tool_call_id in ids:
                end += 1
        result.append((i, end))
        i = end
    return result


class ToolTurn(msgspec.Struct, frozen=True, gc=False):
    """M3: an assistant message with tool calls and every later result answering it."""

    call_index: int
    result_indexes: tuple[int, ...]
    call_ids: tuple[str, ...]

    @property
    def indexes(self) -> tuple[int, ...]:
        return (self.call_index, *self.result_indexes)


def tool_turns(messages: Sequence[Message]) -> list[ToolTurn]:
    """M3: every tool turn, oldest first.

    The scan for results runs forward from the call until the next user or
    assistant message.
    """
    turns: list[ToolTurn] = []
    for i, msg in enumerate(messages):
        if msg.role != "assistant" or not msg.tool_calls:
            continue
        ids = tuple(call.id for call in msg.tool_calls)
        wanted = set(ids)
        found: list[int] = []
        for j in range(i + 1, len(messages)):
            later = messages[j]
            if later.role in ("user", "assistant"):
                break
            if later.role == "tool" and later.tool_call_id in wanted:
                found.append(j)
        turns.append(ToolTurn(i, tuple(found), ids))
    return turns
