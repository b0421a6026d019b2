"""The message model (M1): roles, parts, tool calls, metadata, and valid shapes."""

from __future__ import annotations

import msgspec

from cairn.events.model import ImagePart, Message, MessageMeta, TextPart, ToolCall, shape_problem


def test_M1_a_message_carries_every_field_and_round_trips():
    message = Message(
        role="assistant",
        content=(TextPart("looking"), ImagePart(media_type="image/png", data="aGk=")),
        reasoning="think first",
        tool_calls=(ToolCall(id="c1", name="read", arguments='{"path": "a.py"}'),),
        id="a1",
        meta=MessageMeta(seq=4, hidden=False, origin=""),
    )
    data = msgspec.json.encode(message)
    assert msgspec.json.decode(data, type=Message) == message
    assert shape_problem(message) is None


def test_M1_tool_results_need_a_call_id_and_only_assistants_call_tools():
    assert shape_problem(Message(role="tool", content="x", tool_call_id="c1")) is None
    assert "tool_call_id" in (shape_problem(Message(role="tool", content="x")) or "")
    assert "tool calls" in (
        shape_problem(Message(role="user", content="x", tool_calls=(ToolCall(id="c", name="n"),))) or ""
    )
    assert "reasoning" in (shape_problem(Message(role="user", content="x", reasoning="r")) or "")
    duplicate = (ToolCall(id="c", name="n"), ToolCall(id="c", name="n"))
    assert "duplicate" in (shape_problem(Message(role="assistant", tool_calls=duplicate)) or "")


def test_M1_an_unknown_role_is_refused_on_decode():
    try:
        msgspec.json.decode(b'{"role": "robot", "content": "x"}', type=Message)
    except msgspec.ValidationError as exc:
        assert "role" in str(exc)
    else:
        raise AssertionError("an unknown role must not decode")
