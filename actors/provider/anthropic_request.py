"""Our messages and tool schemas as Anthropic's Messages API wants them, with cache breakpoints (pure).

| our message                   | Messages API                                                        |
|-------------------------------|---------------------------------------------------------------------|
| system, before any other      | a text block of the `system` parameter                              |
| system, later (a snip marker) | a `user` text block (the API has no system turns)                   |
| user                          | `user`: text blocks, `image` blocks (base64 or URL source)          |
| assistant                     | `assistant`: its signed `thinking` / `redacted_thinking` blocks, a  |
|                               | `text` block, then `tool_use` blocks (`input`: the parsed arguments)|
| tool                          | a `tool_result` block (`tool_use_id`, text and images, `is_error`)  |
|                               | in a `user` message                                                 |

Consecutive messages of one role are merged into one message (a run of
tool results and the user text after them becomes one user message, the
results first, as the API requires). A message with nothing to send (empty
text, no calls) is left out: the API refuses empty content. Reasoning
without a signature (`Message.reasoning` from another provider) is never
sent; signed blocks are sent back verbatim, in their order, so that a tool
loop with extended thinking keeps its thinking (the API refuses an assistant
tool-use turn whose thinking was dropped). Images in an assistant message
become the M4 placeholder (the API takes images from the user only); a
`BlobPart` is its preview and a note (`chat_messages.blob_text`). Only
content crosses: `meta`, ids and `name` are never sent.

Tool schemas are read as for chat completions (`{"type": "function",
"function": {...}}` or the bare function `{"name", "description",
"parameters"}`) or in the API's own shape (`input_schema`), and sent as
`{"name", "description", "input_schema"}` (no parameters: an empty object
schema).

Prompt caching (`cache_control: {"type": "ephemeral"}`), at most four
breakpoints, in this order of priority: the last tool, the last block of
the system prompt, then the blocks that end the messages the request lists
in `cache_breakpoints` (indexes into its `messages`), newest first, as many
as are left. A breakpoint never goes on a thinking block (the API refuses
it): it goes on the message's last other block, or on the block before. Two
indexes that land on the same block use one breakpoint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.actors.provider.chat_messages import ToolSchemaError, blob_text, schema_object
from cairn.events.model import IMAGE_PLACEHOLDER, ImagePart, Message, Part, TextPart

Block = dict[str, Any]

#: the most `cache_control` breakpoints one request may carry (the API's limit)
MAX_CACHE_BREAKPOINTS = 4
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

__all__ = [
    "MAX_CACHE_BREAKPOINTS",
    "AnthropicBody",
    "ToolSchemaError",
    "to_anthropic_body",
    "to_anthropic_tools",
]


def image_block(part: ImagePart) -> Block:
    """An `image` block: a URL source for a URL, else base64 data."""
    if part.url:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    return {"type": "image", "source": {"type": "base64", "media_type": part.media_type, "data": part.data}}


def _part_text(part: Part) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        return IMAGE_PLACEHOLDER
    return blob_text(part)


def content_blocks(content: str | tuple[Part, ...], *, images: bool) -> list[Block]:
    """Text and (when `images`) image blocks; adjacent text joined, empty text left out."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[Block] = []
    for part in content:
        if images and isinstance(part, ImagePart):
            blocks.append(image_block(part))
            continue
        text = _part_text(part)
        if not text:
            continue
        if blocks and blocks[-1]["type"] == "text":
            blocks[-1]["text"] += text
        else:
            blocks.append({"type": "text", "text": text})
    return blocks


def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the `input` object; `{}` when they are not a JSON object."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _assistant_blocks(message: Message) -> list[Block]:
    blocks: list[Block] = []
    for reasoning in message.reasoning_blocks:
        if reasoning.redacted:
            blocks.append({"type": "redacted_thinking", "data": reasoning.redacted})
        elif reasoning.signature:
            blocks.append({"type": "thinking", "thinking": reasoning.text, "signature": reasoning.signature})
    blocks.extend(content_blocks(message.content, images=False))
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)}
        for call in message.tool_calls
    )
    return blocks


def _tool_result_block(message: Message) -> Block:
    block: Block = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id or "",
        "content": content_blocks(message.content, images=True),
    }
    if message.meta.tool_status == "error":
        block["is_error"] = True
    return block


@dataclass
class AnthropicBody:
    """The `system`, `messages` and `tools` arguments of one request."""

    system: list[Block] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[Block] = field(default_factory=list)
    #: for each of our messages, where its last block went: (`SYSTEM`, block) or (message, block);
    #: None when it sent nothing
    ends: list[tuple[int, int] | None] = field(default_factory=list)


SYSTEM = -1  # the `ends` row of a block of the system parameter


def to_anthropic_tools(schemas: Sequence[str]) -> list[Block]:
    """Tool schemas (canonical JSON strings) as Messages API tools. Raises `ToolSchemaError`."""
    tools: list[Block] = []
    for index, schema in enumerate(schemas):
        value = schema_object(index, schema)
        if isinstance(value.get("input_schema"), dict):
            function, parameters = value, value["input_schema"]
        elif value.get("type") == "function" and isinstance(value.get("function"), dict):
            function = value["function"]
            parameters = function.get("parameters")
        else:
            function, parameters = value, value.get("parameters")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ToolSchemaError(index, "has no function name")
        tool: Block = {"name": function["name"]}
        if isinstance(function.get("description"), str) and function["description"]:
            tool["description"] = function["description"]
        tool["input_schema"] = parameters if isinstance(parameters, dict) else {"type": "object"}
        tools.append(tool)
    return tools


def to_anthropic_body(
    messages: Sequence[Message],
    tools: Sequence[str] = (),
    *,
    cache_breakpoints: Sequence[int] = (),
    caching: bool = True,
) -> AnthropicBody:
    """The request's system prompt, messages and tools (see the module doc). Raises `ToolSchemaError`."""
    body = AnthropicBody(tools=to_anthropic_tools(tools))
    leading = True
    for message in messages:
        if message.role == "system" and leading:
            blocks = content_blocks(message.content, images=False)
            body.system.extend(blocks)
            body.ends.append((SYSTEM, len(body.system) - 1) if blocks else None)
            continue
        leading = False
        if message.role == "assistant":
            role, blocks = "assistant", _assistant_blocks(message)
        elif message.role == "tool":
            role, blocks = "user", [_tool_result_block(message)]
        else:  # user, and a system message after the conversation began
            role, blocks = "user", content_blocks(message.content, images=message.role == "user")
        if not blocks:
            body.ends.append(None)
            continue
        if not body.messages or body.messages[-1]["role"] != role:
            body.messages.append({"role": role, "content": []})
        content: list[Block] = body.messages[-1]["content"]
        content.extend(blocks)
        body.ends.append((len(body.messages) - 1, len(content) - 1))
    if caching:
        _mark_breakpoints(body, cache_breakpoints)
    return body


def _cacheable(body: AnthropicBody, end: tuple[int, int]) -> Block | None:
    """The block a breakpoint at `end` goes on: the last block there that is not thinking."""
    where, index = end
    blocks = body.system if where == SYSTEM else body.messages[where]["content"]
    for position in range(index, -1, -1):
        if blocks[position]["type"] not in ("thinking", "redacted_thinking"):
            return blocks[position]
    return None


def _mark_breakpoints(body: AnthropicBody, indexes: Sequence[int]) -> None:
    marked: list[Block] = []

    def mark(block: Block | None) -> None:
        if block is None or len(marked) >= MAX_CACHE_BREAKPOINTS or any(b is block for b in marked):
            return
        block["cache_control"] = dict(EPHEMERAL)
        marked.append(block)

    if body.tools:
        mark(body.tools[-1])
    if body.system:
        mark(body.system[-1])
    for index in sorted({i for i in indexes if 0 <= i < len(body.ends)}, reverse=True):
        end = next((e for e in reversed(body.ends[: index + 1]) if e is not None), None)
        if end is not None:
            mark(_cacheable(body, end))
