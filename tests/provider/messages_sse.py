"""The Messages API's streaming protocol for the loopback server (`chat_server.ChatServer`).

The server's transport is the chat server's (real HTTP/1.1 on 127.0.0.1, one
chunk per event, drops and stalls); what it sends is built here, event by
event, as Anthropic's API sends it: `event: <type>` and `data: <json>` lines
and a blank line, from `message_start` to `message_stop`, with `ping`s, and
no `[DONE]` line. Errors are JSON bodies `{"type": "error", "error":
{"type", "message"}}`, with `request-id` and any extra headers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.provider.chat_server import ChatServer, Error, Reply, Sse

Usage = dict[str, int]


def event(kind: str, data: dict[str, Any]) -> str:
    """One server-sent event, as the API writes it."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def message_start(usage: Usage | None = None, *, model: str = "claude-test") -> str:
    return event(
        "message_start",
        {
            "message": {
                "id": "msg_test",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage if usage is not None else {"input_tokens": 10, "output_tokens": 1},
            }
        },
    )


def ping() -> str:
    return event("ping", {})


def block_start(index: int, block: dict[str, Any]) -> str:
    return event("content_block_start", {"index": index, "content_block": block})


def text_start(index: int) -> str:
    return block_start(index, {"type": "text", "text": ""})


def thinking_start(index: int) -> str:
    return block_start(index, {"type": "thinking", "thinking": "", "signature": ""})


def redacted_thinking(index: int, data: str) -> str:
    return block_start(index, {"type": "redacted_thinking", "data": data})


def tool_start(index: int, call_id: str, name: str) -> str:
    return block_start(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}})


def delta(index: int, body: dict[str, Any]) -> str:
    return event("content_block_delta", {"index": index, "delta": body})


def text_delta(index: int, text: str) -> str:
    return delta(index, {"type": "text_delta", "text": text})


def thinking_delta(index: int, text: str) -> str:
    return delta(index, {"type": "thinking_delta", "thinking": text})


def signature_delta(index: int, signature: str) -> str:
    return delta(index, {"type": "signature_delta", "signature": signature})


def json_delta(index: int, partial: str) -> str:
    return delta(index, {"type": "input_json_delta", "partial_json": partial})


def block_stop(index: int) -> str:
    return event("content_block_stop", {"index": index})


def message_delta(stop_reason: str | None, usage: Usage | None = None) -> str:
    return event(
        "message_delta",
        {
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": usage if usage is not None else {"output_tokens": 5},
        },
    )


def message_stop() -> str:
    return event("message_stop", {})


def error_event(kind: str, message: str) -> str:
    return event("error", {"error": {"type": kind, "message": message}})


def stream(*events: str, drop_after: int | None = None, stall_after: int | None = None) -> Sse:
    """A streamed reply of these events (no `[DONE]`: the Messages API sends none)."""
    return Sse(tuple(events), done=False, drop_after=drop_after, stall_after=stall_after)


def text_events(text: str, index: int = 0) -> Iterator[str]:
    """A text block saying `text` in two deltas."""
    half = len(text) // 2
    yield text_start(index)
    yield text_delta(index, text[:half])
    yield text_delta(index, text[half:])
    yield block_stop(index)


def thinking_events(text: str, signature: str, index: int = 0) -> Iterator[str]:
    """A thinking block: its text in two deltas, then its signature."""
    half = len(text) // 2
    yield thinking_start(index)
    yield thinking_delta(index, text[:half])
    yield thinking_delta(index, text[half:])
    yield signature_delta(index, signature)
    yield block_stop(index)


def tool_events(index: int, call_id: str, name: str, arguments: dict[str, Any]) -> Iterator[str]:
    """A tool_use block, its input JSON in three pieces."""
    raw = json.dumps(arguments)
    cuts = (len(raw) // 3, 2 * len(raw) // 3)
    yield tool_start(index, call_id, name)
    yield json_delta(index, "")  # the API's first input delta is often empty
    for piece in (raw[: cuts[0]], raw[cuts[0] : cuts[1]], raw[cuts[1] :]):
        yield json_delta(index, piece)
    yield block_stop(index)


def text_message(
    text: str,
    *,
    usage: Usage | None = None,
    output_tokens: int = 5,
    stop_reason: str = "end_turn",
) -> Sse:
    """A whole streamed answer: start, a ping, one text block, the stop reason and the end."""
    return stream(
        message_start(usage),
        ping(),
        *text_events(text),
        message_delta(stop_reason, {"output_tokens": output_tokens}),
        message_stop(),
    )


def api_error(status: int, kind: str, message: str, *, headers: tuple[tuple[str, str], ...] = ()) -> Error:
    """An error in the API's shape, with its request id."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Error(status, body, (("request-id", "req_test_1"), *headers))


def messages_server(*replies: Reply, **kwargs: Any) -> ChatServer:
    """A loopback server whose default answer is a Messages stream saying `Done.`."""
    kwargs.setdefault("default", text_message("Done."))
    return ChatServer(*replies, **kwargs)


def base_url(server: ChatServer) -> str:
    """The server's base URL for the SDK, which adds `/v1/messages` itself."""
    return server.url.removesuffix("/v1")
