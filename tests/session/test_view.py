"""The incremental history view equals the pure functions it memoizes."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.session.slimming import rank_of
from cairn.actors.session.tool_budget import render_context
from cairn.actors.session.view import HistoryView, TurnEntry, read_only_tools
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import AssistantMessage, ContextSlimmed, EventBase, ToolResult, UserMessage
from cairn.events.model import BlobPart, TextPart, ToolCall, text_of, tool_turns
from cairn.events.state import SessionInfo, SessionState, evolve
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
            names = draw(st.lists(st.sampled_from(["read", "edit"]), min_size=count, max_size=count))
            tool_calls = tuple(ToolCall(f"c{calls + i}", name) for i, name in enumerate(names))
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
            status = draw(st.sampled_from(["ok", "ok", "error"]))
            effect = draw(st.sampled_from(["read", "read", "write"]))
            events.append(
                ToolResult(call_id=call_id, tool_name="read", status=status, effect=effect, content=(part,))
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
        assert [turn.rank for turn in view.turns] == _fresh_ranks(state)


def _fresh_ranks(state: SessionState) -> list[int]:
    """S2 class of every tool turn, computed from scratch (no memo) for the session's read-only tools."""
    read_only = read_only_tools(state.info)
    ranks = []
    for turn in tool_turns(state.context):
        entry = TurnEntry(turn.call_index, turn.call_ids)
        entry.result_indexes = list(turn.result_indexes)
        ranks.append(rank_of(entry, state.context, read_only))
    return ranks


def test_S2_the_view_ranks_each_turn_as_its_results_come_in_for_the_sessions_read_only_tools() -> None:
    view = HistoryView(counter())
    state = SessionState()
    events: list[EventBase] = [
        AssistantMessage(message_id="a1", request_id="r", tool_calls=(ToolCall("c1", "read"),)),
        ToolResult(call_id="c1", tool_name="read", status="ok", effect="read", content=(TextPart("x"),)),
        AssistantMessage(
            message_id="a2", request_id="r", tool_calls=(ToolCall("c2", "read"), ToolCall("c3", "read"))
        ),
        ToolResult(call_id="c2", tool_name="read", status="ok", effect="write", content=(TextPart("x"),)),
        ToolResult(call_id="c3", tool_name="read", status="error", effect="read", content=(TextPart("x"),)),
        AssistantMessage(message_id="a3", request_id="r", tool_calls=(ToolCall("c4", "edit"),)),
    ]
    ranks = []
    for seq, event in enumerate(events, start=1):
        state = evolve(state, Record(seq, "s1", seq, seq, GENESIS, event))  # type: ignore[arg-type]
        view.sync(state)
        ranks.append([turn.rank for turn in view.turns])
    assert ranks == [[0], [0], [0, 0], [0, 1], [0, 2], [0, 2, 1]]
    # the host declares "edit" read-only: the view ranks again for those names
    info = SessionInfo(workspace="/w", model="m", read_only_tools=("read", "edit"))
    view.sync(msgspec.structs.replace(state, info=info))
    assert view.read_only == frozenset({"read", "edit"})
    assert [turn.rank for turn in view.turns] == [0, 2, 0]


def test_view_rebuilds_after_a_checkpoint_and_for_another_session() -> None:
    view = new_view()
    state = SessionState(sid="a", context=(summary_message("one"),))
    view.sync(state)
    other = SessionState(sid="b", context=(summary_message("two"), summary_message("three")))
    view.sync(other)
    assert view.rendered == list(other.context)
    assert view.total == counter().messages(other.context)


def test_S2_a_turn_ranked_for_other_names_is_still_right_for_them_as_its_results_come_in() -> None:
    view = HistoryView(counter())
    state = SessionState()
    call = AssistantMessage(message_id="a1", request_id="r", tool_calls=(ToolCall("c1", "read"),))
    state = evolve(state, Record(1, "s1", 1, 1, GENESIS, call))
    view.sync(state)
    nothing_read_only: frozenset[str] = frozenset()
    assert rank_of(view.turns[0], state.context, nothing_read_only) == 1  # "read" is a write for them
    error = ToolResult(
        call_id="c1", tool_name="read", status="error", effect="read", content=(TextPart("x"),)
    )
    state = evolve(state, Record(2, "s1", 2, 2, GENESIS, error))
    view.sync(state)
    assert rank_of(view.turns[0], state.context, nothing_read_only) == 2 == _fresh_ranks(state)[0]


def test_X2_results_of_one_turn_share_its_budget_in_the_view_as_in_render_context() -> None:
    calls = tuple(ToolCall(f"c{n}", "read") for n in range(3))
    events: list[EventBase] = [
        AssistantMessage(message_id="a1", request_id="r", tool_calls=calls),
        *(
            ToolResult(
                call_id=f"c{n}",
                tool_name="read",
                status="ok",
                effect="read",
                content=(TextPart("r" * 90_000),),
            )
            for n in range(3)
        ),
        UserMessage(message_id="u1", content=(TextPart("next"),)),
        AssistantMessage(message_id="a2", request_id="r", tool_calls=(ToolCall("c3", "read"),)),
        ToolResult(
            call_id="c3", tool_name="read", status="ok", effect="read", content=(TextPart("r" * 90_000),)
        ),
    ]
    view = HistoryView(counter())
    state = SessionState()
    for seq, event in enumerate(events, start=1):
        state = evolve(state, Record(seq, "s1", seq, seq, GENESIS, event))  # type: ignore[arg-type]
        view.sync(state)  # one message at a time, as a live session
    shown = [len(text_of(message.content)) for message in view.rendered]
    # the third result gets what is left of the turn's 200,000 chars (20,000) and a note; a new turn, all
    assert shown[1:3] == [90_000, 90_000] and 20_000 < shown[3] < 20_300 and shown[6] == 90_000
    assert tuple(view.rendered) == render_context(state.context)
    rebuilt = HistoryView(counter())
    rebuilt.sync(state)  # all at once, as after a respawn
    assert rebuilt.rendered == view.rendered and rebuilt.total == view.total
