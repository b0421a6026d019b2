"""The incremental history view equals the pure functions it memoizes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.session.tool_budget import render_context
from cairn.actors.session.view import HistoryView
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import AssistantMessage, ContextSlimmed, EventBase, ToolResult, UserMessage
from cairn.events.model import BlobPart, TextPart, ToolCall, tool_turns
from cairn.events.state import SessionState, evolve
from tests.session.builders import counter, new_view, summary_message

_sizes = st.sampled_from([0, 10, 1_000, 60_000, 100_001])


@st.composite
def _events(draw: st.DrawFn) -> list[EventBase]:
    events: list[EventBase] = []
    calls = 0
    for step in draw(
        st.lists(st.sampled_from(["user", "calls", "result", "text", "slim", "blob"]), max_size=40)
    ):
        if step == "user":
            events.append(UserMessage(message_id=f"u{len(events)}", content=(TextPart("do it"),)))
        elif step == "calls":
            count = draw(st.integers(1, 3))
            tool_calls = tuple(ToolCall(f"c{calls + i}", "read") for i in range(count))
            calls += count
            events.append(
                AssistantMessage(message_id=f"a{len(events)}", request_id="r", tool_calls=tool_calls)
            )
        elif step in ("result", "blob") and calls:
            call_id = f"c{draw(st.integers(0, calls - 1))}"
            size = draw(_sizes)
            part = (
                BlobPart("ab" * 32, size, chars=size, preview="p" * min(size, 2_000))
                if step == "blob"
                else TextPart("r" * size)
            )
            events.append(
                ToolResult(call_id=call_id, tool_name="read", status="ok", effect="read", content=(part,))
            )
        elif step == "slim" and calls:
            removed = (f"c{draw(st.integers(0, calls - 1))}",)
            events.append(
                ContextSlimmed(mode="snip", removed_call_ids=removed, tokens_saved=0, marker_text="[s]")
            )
        else:
            events.append(AssistantMessage(message_id=f"a{len(events)}", request_id="r", text="thinking"))
    return events


@given(_events())
def test_view_synced_after_every_event_equals_a_fresh_build(events: list[EventBase]) -> None:
    view = HistoryView(counter())
    state = SessionState()
    for seq, event in enumerate(events, start=1):
        state = evolve(state, Record(seq, "s1", seq, seq, GENESIS, event))  # type: ignore[arg-type]
        view.sync(state)
        rendered = render_context(state.context)
        assert tuple(view.rendered) == rendered
        assert view.total == counter().messages(rendered)
        assert [turn.as_tool_turn() for turn in view.turns] == tool_turns(state.context)


def test_view_rebuilds_after_a_checkpoint_and_for_another_session() -> None:
    view = new_view()
    state = SessionState(sid="a", context=(summary_message("one"),))
    view.sync(state)
    other = SessionState(sid="b", context=(summary_message("two"), summary_message("three")))
    view.sync(other)
    assert view.rendered == list(other.context)
    assert view.total == counter().messages(other.context)
