"""Our messages and tool schemas in the chat-completions shape (M1, M4)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.provider.chat_messages import (
    ToolSchemaError,
    to_chat_message,
    to_chat_messages,
    to_chat_tools,
)
from cairn.events.model import (
    IMAGE_PLACEHOLDER,
    BlobPart,
    ImagePart,
    Message,
    MessageMeta,
    Role,
    TextPart,
    ToolCall,
)
from tests import strategies

SHA = "ab" * 32


def test_M1_each_role_takes_its_protocol_shape() -> None:
    sent = to_chat_messages(
        (
            Message(role="system", content="rules", name="boot"),
            Message(role="user", content="hi", name="ana"),
            Message(role="assistant", content="ok", tool_calls=(ToolCall("c1", "ls", ""),)),
            Message(role="tool", content="a.py", tool_call_id="c1", name="ls"),
        )
    )
    assert sent == [
        {"role": "system", "content": "rules", "name": "boot"},
        {"role": "user", "content": "hi", "name": "ana"},
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]


def test_images_are_image_url_parts_in_user_messages_and_placeholders_elsewhere() -> None:
    parts = (TextPart("see "), TextPart("this"), ImagePart(url="https://img.example/a.png"), TextPart("!"))
    user = to_chat_message(Message(role="user", content=parts))
    assert user["content"] == [
        {"type": "text", "text": "see this"},
        {"type": "image_url", "image_url": {"url": "https://img.example/a.png"}},
        {"type": "text", "text": "!"},
    ]
    tool = to_chat_message(
        Message(role="tool", tool_call_id="c1", content=(TextPart("shot: "), ImagePart(data="QUJD")))
    )
    assert tool["content"] == f"shot: {IMAGE_PLACEHOLDER}"


def test_a_blob_is_its_preview_and_a_note_and_a_user_message_without_images_is_a_string() -> None:
    blob = BlobPart(sha256=SHA, size=50_000, chars=50_000, preview="head of the log")
    sent = to_chat_message(Message(role="user", content=(TextPart("output:\n"), blob)))
    assert sent["content"] == (
        "output:\nhead of the log\n[49985 more characters kept in the blob store, not sent]"
    )
    whole = BlobPart(sha256=SHA, size=4, chars=4, preview="tiny")
    assert to_chat_message(Message(role="user", content=(whole,)))["content"] == "tiny"
    picture = BlobPart(sha256=SHA, size=9000, media_type="image/jpeg")
    assert "image/jpeg of 9000 bytes" in to_chat_message(Message(role="user", content=(picture,)))["content"]


_ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")
_ALLOWED_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id"}


@st.composite
def _marked(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(_ROLES))
    return Message(
        role=role,
        content=draw(st.one_of(strategies.text, strategies.content)),
        tool_calls=draw(strategies.tool_calls) if role == "assistant" else (),
        tool_call_id=draw(strategies.ids) if role == "tool" else None,
        reasoning="REASONING-XYZ" if role == "assistant" else None,
        id="ID-XYZ",
        meta=MessageMeta(seq=99, hidden=True, origin="ORIGIN-XYZ", record="RECORD-XYZ"),
    )


@given(st.lists(_marked(), max_size=5))
def test_M1_meta_ids_and_reasoning_are_never_sent(history: list[Message]) -> None:
    sent = to_chat_messages(history)
    assert len(sent) == len(history)
    for message in sent:
        assert set(message) <= _ALLOWED_KEYS
    text = json.dumps(sent)
    for marker in ("REASONING-XYZ", "ID-XYZ", "ORIGIN-XYZ", "RECORD-XYZ"):
        assert marker not in text


def test_tool_schemas_are_wrapped_as_functions_unless_they_already_are() -> None:
    bare = '{"name":"read","parameters":{"type":"object"}}'
    wrapped = '{"type":"function","function":{"name":"grep"}}'
    assert to_chat_tools((bare, wrapped)) == [
        {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "grep"}},
    ]


@pytest.mark.parametrize("schema", ["not json", "[1]", '{"description": "no name"}'])
def test_a_bad_tool_schema_names_its_position(schema: str) -> None:
    with pytest.raises(ToolSchemaError) as caught:
        to_chat_tools(('{"name":"ok"}', schema))
    assert caught.value.index == 1
