"""Our messages and tool schemas as the chat-completions protocol wants them (pure).

| our message                 | chat-completions message                                         |
|-----------------------------|------------------------------------------------------------------|
| system                      | `system`, text only                                              |
| user                        | `user`: a string, or text + `image_url` parts when it has images |
| assistant                   | `assistant`: text (null with calls), `tool_calls` as functions   |
| tool                        | `tool` with `tool_call_id`, text only                            |

Parts: a `TextPart` is its text; an `ImagePart` is an `image_url` part with
its URL or a `data:` URL of its base64 data (in a user message; elsewhere the
protocol takes text only, so it becomes the M4 placeholder); a `BlobPart`
(text kept in the blob store) is its preview plus a note saying how much was
not sent. Only content crosses: `meta` (hidden flags, origins, seqs), message
ids and reasoning are never sent. `name` is sent on system, user and
assistant messages, where the protocol has it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from cairn.events.errors import InputError
from cairn.events.model import IMAGE_PLACEHOLDER, BlobPart, ImagePart, Message, Part, TextPart

ChatMessage = dict[str, Any]


def schema_object(index: int, schema: str) -> dict[str, Any]:
    """Tool schema number `index` (canonical JSON) decoded; `ToolSchemaError` unless a JSON object."""
    try:
        value = json.loads(schema)
    except ValueError:
        raise ToolSchemaError(index, "not valid JSON") from None
    if not isinstance(value, dict):
        raise ToolSchemaError(index, "not a JSON object")
    return value


class ToolSchemaError(InputError):
    """A tool schema that is not a JSON object naming a function; `index` is its position in the request.

    The caller is at fault; the adapter reports it as a `bad-request` failure.
    """

    def __init__(self, index: int, message: str) -> None:
        self.index = index
        super().__init__(f"tool schema {index}: {message}")


def blob_text(part: BlobPart) -> str:
    """A blob's preview and a note on what stayed in the blob store."""
    if part.media_type.startswith("image/"):
        return f"[image {part.media_type} of {part.size} bytes kept in the blob store, not sent]"
    if not part.preview:
        return f"[{part.media_type} content of {part.size} bytes kept in the blob store, not sent]"
    left = max(0, part.chars - len(part.preview))
    if left == 0:
        return part.preview
    return f"{part.preview}\n[{left} more characters kept in the blob store, not sent]"


def image_url(part: ImagePart) -> str:
    return part.url or f"data:{part.media_type};base64,{part.data}"


def _part_text(part: Part) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        return IMAGE_PLACEHOLDER
    return blob_text(part)


def flat_text(content: str | tuple[Part, ...]) -> str:
    """The content as text only: images become the M4 placeholder, blobs their preview and note."""
    if isinstance(content, str):
        return content
    return "".join(_part_text(part) for part in content)


def _user_content(content: str | tuple[Part, ...]) -> str | list[dict[str, Any]]:
    if isinstance(content, str) or not any(isinstance(p, ImagePart) for p in content):
        return flat_text(content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, ImagePart):
            parts.append({"type": "image_url", "image_url": {"url": image_url(part)}})
            continue
        text = _part_text(part)
        if parts and parts[-1]["type"] == "text":
            parts[-1]["text"] += text
        elif text:
            parts.append({"type": "text", "text": text})
    return parts


def to_chat_message(message: Message) -> ChatMessage:
    """One message in the protocol's shape; see the module table."""
    out: ChatMessage
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": flat_text(message.content),
        }
    if message.role == "user":
        out = {"role": "user", "content": _user_content(message.content)}
    elif message.role == "assistant":
        text = flat_text(message.content)
        out = {"role": "assistant", "content": text if text or not message.tool_calls else None}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments or "{}"},
                }
                for call in message.tool_calls
            ]
    else:
        out = {"role": "system", "content": flat_text(message.content)}
    if message.name:
        out["name"] = message.name
    return out


def to_chat_messages(messages: Iterable[Message]) -> list[ChatMessage]:
    return [to_chat_message(m) for m in messages]


def to_chat_tools(schemas: Iterable[str]) -> list[dict[str, Any]]:
    """Tool schemas (canonical JSON strings) as chat-completions tools.

    A schema is either already `{"type": "function", "function": {...}}` or the
    bare function `{"name": ..., "description": ..., "parameters": ...}`,
    which is wrapped. Raises `ToolSchemaError` for anything else.
    """
    tools: list[dict[str, Any]] = []
    for index, schema in enumerate(schemas):
        value = schema_object(index, schema)
        if value.get("type") == "function" and isinstance(value.get("function"), dict):
            function = value["function"]
        else:
            function = value
            value = {"type": "function", "function": function}
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ToolSchemaError(index, "has no function name")
        tools.append(value)
    return tools
