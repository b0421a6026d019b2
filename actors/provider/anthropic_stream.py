"""Streamed Messages API events into provider output (pure, no I/O).

`EventAssembler.feed(event)` takes one decoded event (the SDK's model or a
plain dict) and returns the output it completes; `end()` is called when the
stream ends and returns the closing `UsageReport` and `Finished`.

| event                                         | output                                          |
|-----------------------------------------------|-------------------------------------------------|
| `message_start` (`message.usage`)             | the usage kept for `end()`                      |
| `content_block_start` text / thinking         | its initial text, if any (`TextDelta`, `ReasoningDelta`) |
| `content_block_delta` `text_delta`            | `TextDelta`                                     |
| `content_block_delta` `thinking_delta`        | `ReasoningDelta`                                |
| `content_block_delta` `signature_delta`       | kept with its thinking block                    |
| `content_block_delta` `input_json_delta`      | kept until the block stops                      |
| `content_block_stop` of a thinking block      | `ReasoningBlockReady` (text and signature)      |
| `content_block_stop` of a redacted thinking   | `ReasoningBlockReady` (its opaque `data`)       |
| `content_block_stop` of a `tool_use` block    | `ToolCallReady` (id, name, the joined JSON)     |
| `message_delta` (`delta.stop_reason`, `usage`)| the stop reason and usage kept for `end()`      |
| `message_stop`                                | the stream is complete                          |
| `ping`, other blocks and deltas, other events | nothing (the protocol may grow)                 |
| stream end after `message_stop`               | `UsageReport`, `Finished(mapped stop reason)`   |
| stream end without it                         | `TruncatedStream`                               |
| not an object, a delta for no open block, ... | `MalformedChunk`                                |

(An `error` event is raised by the SDK itself; see `anthropic_errors`.)

Stop reasons are mapped to the chat-completions words the rest of cairn
records: `end_turn` and `stop_sequence` to `stop`, `max_tokens` and
`model_context_window_exceeded` to `length`, `tool_use` to `tool_calls`,
`refusal` to `content_filter`; any other (`pause_turn`, ...) passes as is.

Usage: a field of `message_delta`'s usage wins over `message_start`'s (the
API sends running totals). `prompt_tokens` is the whole prompt, as a
chat-completions server counts it: `input_tokens` + `cache_read_input_tokens`
+ `cache_creation_input_tokens` (a cache field absent counts 0);
`cached_prompt_tokens` is the cache read and `cache_write_tokens` the cache
creation; `completion_tokens` is `output_tokens`; `total_tokens` their sum.
Fields are None when not reported, and only non-negative integers count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from cairn.actors.provider.base import (
    Finished,
    ProviderOutput,
    ReasoningBlockReady,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
)
from cairn.actors.provider.chat_stream import MalformedChunk, TruncatedStream, count_of, field_of, is_object
from cairn.events.model import ReasoningBlock, ToolCall

STOP_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

__all__ = ["STOP_REASONS", "EventAssembler", "MalformedChunk", "TruncatedStream", "usage_report"]


def _text(value: object, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedChunk(f"{what} is not a string")
    return value


USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def usage_report(usage: Mapping[str, int]) -> UsageReport:
    """The report of the usage fields seen (see the module doc); every field None when there are none."""
    given = usage.get("input_tokens")
    read = usage.get("cache_read_input_tokens")
    written = usage.get("cache_creation_input_tokens")
    output = usage.get("output_tokens")
    prompt = None if given is None else given + (read or 0) + (written or 0)
    return UsageReport(
        prompt_tokens=prompt,
        completion_tokens=output,
        total_tokens=None if prompt is None or output is None else prompt + output,
        cached_prompt_tokens=read,
        cache_write_tokens=written,
    )


@dataclass
class _Block:
    kind: str
    text: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    data: str = ""
    id: str = ""
    name: str = ""
    initial_input: object = None


class EventAssembler:
    """Turns the events of one streamed message into provider output. One per request."""

    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._stopped = False
        self._events = 0

    @property
    def events(self) -> int:
        """How many events were fed (0: the server sent no event stream)."""
        return self._events

    def feed(self, event: object) -> list[ProviderOutput]:
        if not is_object(event):
            raise MalformedChunk(f"an event is not a JSON object: {type(event).__name__}")
        self._events += 1
        kind = field_of(event, "type")
        if kind == "message_start":
            message = field_of(event, "message")
            if is_object(message):
                self._keep_usage(field_of(message, "usage"))
            return []
        if kind == "content_block_start":
            return self._start(_index(event), field_of(event, "content_block"))
        if kind == "content_block_delta":
            return self._delta(_index(event), field_of(event, "delta"))
        if kind == "content_block_stop":
            return self._stop(_index(event))
        if kind == "message_delta":
            delta = field_of(event, "delta")
            if is_object(delta):
                reason = field_of(delta, "stop_reason")
                if reason is not None:
                    self._stop_reason = _text(reason, "`stop_reason`")
            self._keep_usage(field_of(event, "usage"))
            return []
        if kind == "message_stop":
            self._stopped = True
        return []

    def end(self) -> list[ProviderOutput]:
        """At the end of the stream: the usage and the finish, or `TruncatedStream`."""
        if not self._stopped:
            raise TruncatedStream("the stream ended before `message_stop`")
        reason = self._stop_reason
        return [usage_report(self._usage), Finished(STOP_REASONS.get(reason, reason) if reason else None)]

    def _keep_usage(self, usage: object) -> None:
        if not is_object(usage):
            return
        for name in USAGE_FIELDS:
            value = count_of(field_of(usage, name))
            if value is not None:
                self._usage[name] = value

    def _start(self, index: int, content: object) -> list[ProviderOutput]:
        if not is_object(content):
            raise MalformedChunk("`content_block` is not an object")
        kind = _text(field_of(content, "type"), "a content block's `type`")
        block = _Block(kind)
        self._blocks[index] = block
        if kind == "text":
            text = _text(field_of(content, "text"), "a text block's `text`")
            return [TextDelta(text)] if text else []
        if kind == "thinking":
            text = _text(field_of(content, "thinking"), "a thinking block's `thinking`")
            block.signature.append(_text(field_of(content, "signature"), "a thinking block's `signature`"))
            if text:
                block.text.append(text)
                return [ReasoningDelta(text)]
        elif kind == "redacted_thinking":
            block.data = _text(field_of(content, "data"), "a redacted thinking block's `data`")
        elif kind == "tool_use":
            block.id = _text(field_of(content, "id"), "a tool call's `id`")
            block.name = _text(field_of(content, "name"), "a tool call's `name`")
            block.initial_input = field_of(content, "input")
        return []

    def _delta(self, index: int, delta: object) -> list[ProviderOutput]:
        block = self._blocks.get(index)
        if block is None:
            raise MalformedChunk(f"a delta for content block {index}, which was not started")
        if not is_object(delta):
            raise MalformedChunk("`delta` is not an object")
        kind = field_of(delta, "type")
        if kind == "text_delta":
            text = _text(field_of(delta, "text"), "a text delta")
            return [TextDelta(text)] if text else []
        if kind == "thinking_delta":
            text = _text(field_of(delta, "thinking"), "a thinking delta")
            block.text.append(text)
            return [ReasoningDelta(text)] if text else []
        if kind == "signature_delta":
            block.signature.append(_text(field_of(delta, "signature"), "a signature delta"))
        elif kind == "input_json_delta":
            block.text.append(_text(field_of(delta, "partial_json"), "an input JSON delta"))
        return []

    def _stop(self, index: int) -> list[ProviderOutput]:
        block = self._blocks.pop(index, None)
        if block is None:
            raise MalformedChunk(f"a stop for content block {index}, which was not started")
        if block.kind == "thinking":
            reasoning = ReasoningBlock(text="".join(block.text), signature="".join(block.signature))
            return [ReasoningBlockReady(reasoning)]
        if block.kind == "redacted_thinking":
            return [ReasoningBlockReady(ReasoningBlock(redacted=block.data))]
        if block.kind == "tool_use":
            if not block.name or not block.id:
                raise MalformedChunk(f"tool call {index} has no id or no name")
            return [ToolCallReady(ToolCall(block.id, block.name, _arguments(block)))]
        return []


def _index(event: object) -> int:
    index = field_of(event, "index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise MalformedChunk("a content block event has no integer `index`")
    return index


def _arguments(block: _Block) -> str:
    """The call's arguments: the joined JSON deltas, else the start's `input` when not empty, else {}."""
    joined = "".join(block.text)
    if joined:
        return joined
    initial = block.initial_input
    if isinstance(initial, Mapping) and initial:
        return json.dumps(dict(initial), separators=(",", ":"))
    return "{}"
