"""Message units (M2), tool turns (M3) and compaction text (M4) as the session's policies use them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.session.view import HistoryView
from cairn.events.model import (
    IMAGE_PLACEHOLDER,
    BlobPart,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolTurn,
    text_of,
    tool_turns,
    units,
)
from cairn.events.state import SessionState
from tests.session.builders import counter


def _call(*ids: str) -> Message:
    return Message(role="assistant", content="", tool_calls=tuple(ToolCall(i, "read") for i in ids))


def _result(call_id: str) -> Message:
    return Message(role="tool", content="out", tool_call_id=call_id)


def test_M2_a_unit_is_a_call_with_its_contiguous_results() -> None:
    messages = [
        Message(role="user", content="go"),
        _call("a", "b"),
        _result("a"),
        _result("b"),
        _result("zz"),  # an orphan result is a unit of one
        Message(role="assistant", content="done"),
    ]
    assert units(messages) == [(0, 1), (1, 4), (4, 5), (5, 6)]


def test_M3_a_tool_turn_scans_forward_until_the_next_user_or_assistant() -> None:
    messages = [
        _call("a", "b"),
        _result("a"),
        Message(role="system", content="[marker]"),
        _result("b"),  # still the same turn: a system message does not end the scan
        Message(role="user", content="steer"),
        _result("a"),  # after a user message: unmatched
    ]
    assert tool_turns(messages) == [ToolTurn(0, (1, 3), ("a", "b"))]


def test_M4_compaction_text_uses_the_placeholder_and_never_reasoning() -> None:
    message = Message(
        role="assistant",
        content=(TextPart("see "), ImagePart(data="AAAA"), BlobPart("ab" * 32, 10, "image/png")),
        reasoning="secret chain of thought",
    )
    assert text_of(message) == f"see {IMAGE_PLACEHOLDER}{IMAGE_PLACEHOLDER}"
    assert "secret" not in text_of(message)


_roles = st.sampled_from(["user", "assistant", "assistant+calls", "tool", "system"])


@st.composite
def _contexts(draw: st.DrawFn) -> tuple[Message, ...]:
    ids = ["c1", "c2", "c3", "c4"]
    out: list[Message] = []
    for role in draw(st.lists(_roles, max_size=25)):
        if role == "assistant+calls":
            chosen = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=2, unique=True))
            out.append(_call(*chosen))
        elif role == "tool":
            out.append(_result(draw(st.sampled_from(ids))))
        else:
            out.append(Message(role=role, content="text"))
    return tuple(out)


@given(_contexts())
def test_M3_the_view_finds_the_same_tool_turns(context: tuple[Message, ...]) -> None:
    view = HistoryView(counter())
    view.sync(SessionState(context=context))
    assert [entry.as_tool_turn() for entry in view.turns] == tool_turns(context)
