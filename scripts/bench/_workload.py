"""The synthetic events the store benches write: user messages, tool calls and tool results in turn."""

from __future__ import annotations

import random

from cairn.events.kinds import AssistantMessage, EventBase, ToolResult, UserMessage
from cairn.events.model import TextPart, ToolCall


def payload(rng: random.Random, low: int, high: int) -> str:
    """Filler text of `low` to `high` characters."""
    size = rng.randint(low, high)
    return ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]


def mixed_event(rng: random.Random, i: int, size_range: tuple[int, int]) -> EventBase:
    """Event `i` of the mix: a user message, an assistant message with a tool call, its result, in turn."""
    text = payload(rng, *size_range)
    return _turn_event(i, text, text[:80])


def _turn_event(i: int, text: str, said: str) -> EventBase:
    """Event `i` of a turn's three: the user's `text`, the assistant saying `said` with a tool call,
    the call's result `text`."""
    if i % 3 == 0:
        return UserMessage(message_id=f"u{i}", content=(TextPart(text),))
    if i % 3 == 1:
        call = ToolCall(id=f"c{i}", name="read", arguments='{"path": "src/app.py"}')
        return AssistantMessage(message_id=f"a{i}", request_id=f"r{i}", text=said, tool_calls=(call,))
    return ToolResult(
        call_id=f"c{i - 1}",
        tool_name="read",
        status="ok",
        effect="read",
        content=(TextPart(text),),
        original_chars=len(text),
    )


#: characters of the filler text per cl100k token (`payload`'s "lorem ipsum ..." is 5.4 a token)
CHARS_PER_TOKEN = 5.4


def sized_event(rng: random.Random, i: int, tokens: int) -> EventBase:
    """Event `i` of the mix (user message, assistant message with a tool call, its result, in turn),
    each carrying about `tokens` tokens of text (+-20 %), for appends of a given event size."""
    chars = round(tokens * CHARS_PER_TOKEN)
    text = payload(rng, chars * 4 // 5, chars * 6 // 5)
    return _turn_event(i, text, text)


def event_text(event: EventBase) -> str:
    """The text an event of the mix carries (what its tokens are counted from)."""
    if isinstance(event, UserMessage | ToolResult):
        return "".join(part.text for part in event.content if isinstance(part, TextPart))
    if isinstance(event, AssistantMessage):
        return event.text or ""
    return ""
