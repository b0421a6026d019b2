"""Slimming (S1-S5): snip and micro compaction planners, and their replay."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.session.slimming import (
    DEFAULT_READ_ONLY_TOOLS,
    apply_plan,
    candidates,
    micro_due,
    plan_micro,
    plan_snip,
    rank_of,
    read_only_tools,
)
from cairn.actors.session.tracker import occupancy
from cairn.events.kinds import ToolResult
from cairn.events.model import Message, TextPart, tool_turns
from cairn.events.protocol import marker_text
from cairn.events.state import SessionState, replay
from tests.session.builders import Session, new_view


def _session(turns: int, *, window: int | None = None, **kwargs: object) -> Session:
    session = Session(window=window, cap=0 if window else None, **kwargs)  # type: ignore[arg-type]
    session.user("clean up the repository")
    for n in range(turns):
        session.tool_turn(output=f"output of call {n}", text=f"step {n}")
    return session


def test_S1_turns_older_than_the_newest_ten_are_snipped_behind_one_marker() -> None:
    session = _session(20)  # 41 messages, no window: phase unknown, every candidate goes
    view = new_view()
    occ = occupancy(session.state, view)
    assert occ.snapshot.phase == "unknown"
    plan = plan_snip(session.state, view, occ)
    assert plan is not None
    assert plan.event.mode == "snip"
    assert plan.event.removed_call_ids == tuple(f"c{n}" for n in range(10))
    assert plan.removed_indexes == tuple(range(1, 21))
    assert plan.event.marker_text == marker_text(10)
    assert "10 earlier tool interactions were snipped" in plan.event.marker_text
    marker = Message(role="system", content=marker_text(10))
    assert plan.event.tokens_saved == view.tokens(1, 21) - view.counter.message(marker)
    session.add(plan.event)
    context = session.state.context
    assert len(context) == 41 - 20 + 1
    assert context[1].role == "system" and context[1].meta.origin == "snip-marker"
    assert context[1].id == plan.event.marker_id
    assert [turn.call_ids for turn in tool_turns(context)] == [(f"c{n}",) for n in range(10, 20)]
    assert "1 earlier tool interaction was snipped" in marker_text(1)


def test_S1_nothing_is_snipped_below_thirty_messages() -> None:
    short = _session(14)  # 29 messages
    view = new_view()
    assert plan_snip(short.state, view, occupancy(short.state, view)) is None
    short.assistant("one more")
    assert len(short.state.context) == 30
    assert plan_snip(short.state, view, occupancy(short.state, view)) is not None


def test_S2_read_only_successes_go_first_then_writes_then_errors_only_as_needed() -> None:
    session = Session(window=None, cap=None)
    session.user("migrate the database")
    kinds = ["error", "write", "read", "write", "read", "error", "read"] + ["read"] * 10
    for n, kind in enumerate(kinds):
        session.tool_turn(
            name="edit" if kind == "write" else "read",
            status="error" if kind == "error" else "ok",
            output=f"output {n} " * 50,
        )
    view = new_view()
    unknown = occupancy(session.state, view)
    everything = plan_snip(session.state, view, unknown)
    assert everything is not None and len(everything.event.removed_call_ids) == 7  # unknown: all
    # a window whose hand-off threshold is about three turns below the projection
    window = (unknown.projection.tokens - 3 * view.tokens(1, 3)) * 10 // 7
    info = session.state.info
    assert info is not None
    state = msgspec.structs.replace(
        session.state, info=msgspec.structs.replace(info, context_window=window, max_output_tokens=0)
    )
    occ = occupancy(state, view)
    threshold = occ.snapshot.handoff_threshold
    assert threshold is not None and occ.snapshot.phase != "below_handoff"
    plan = plan_snip(state, view, occ)
    assert plan is not None
    # read-only successes oldest first, then the writes, then the errors
    priority = ["c2", "c4", "c6", "c1", "c3", "c0", "c5"]
    removed = plan.event.removed_call_ids
    assert len(removed) == 4 and set(removed) == set(priority[:4])
    assert occupancy(apply_plan(state, plan, now_ms=0), new_view()).projection.tokens < threshold
    # and three turns would not have been enough
    three = sum(
        view.message_tokens(turn.call_index) + view.message_tokens(turn.call_index + 1)
        for turn in view.turns
        if turn.call_ids[0] in priority[:3]
    )
    marker = view.counter.message(Message(role="system", content=marker_text(3)))
    assert occ.projection.tokens - three + marker >= threshold


def test_S2_the_host_declares_the_read_only_tools() -> None:
    assert DEFAULT_READ_ONLY_TOOLS == ("read", "grep", "glob", "search", "web-search", "web-fetch", "list")
    session = Session(window=None, cap=None, read_only=("view",))
    session.user("inspect")
    session.tool_turn(name="read")  # not read-only for this host: a write
    session.tool_turn(name="view")
    session.tool_turn(name="view", effect="write")  # the result says it wrote
    for _ in range(14):
        session.tool_turn(name="view")
    view = new_view()
    occ = occupancy(session.state, view)
    plan = plan_snip(session.state, view, occ)
    assert plan is not None
    read_only = read_only_tools(session.state.info)
    ranks = [rank_of(entry, session.state.context, read_only) for entry in view.turns]
    assert ranks[:3] == [1, 0, 1]


def test_S3_unmatched_results_stay_and_assistant_text_goes_with_its_turn() -> None:
    session = _session(12)
    late = ToolResult(call_id="c0", tool_name="read", status="ok", effect="read", content=(TextPart("late"),))
    session.add(late)
    session.add(ToolResult(call_id="ghost", tool_name="read", status="ok", effect="read", content=()))
    for n in range(8):
        session.tool_turn(output=f"more {n}")
    view = new_view()
    plan = plan_snip(session.state, view, occupancy(session.state, view))
    assert plan is not None
    # c0 is named again by a result outside its turn: it cannot be removed by id
    assert "c0" not in plan.event.removed_call_ids
    session.add(plan.event)
    texts = [m.content for m in session.state.context if m.role == "assistant"]
    assert "step 1" not in texts and "step 0" in texts
    assert [m.tool_call_id for m in session.state.context if m.role == "tool"].count("ghost") == 1
    assert any(m.tool_call_id == "c0" for m in session.state.context)


def test_S3_reused_call_ids_are_never_candidates() -> None:
    session = Session(window=None, cap=None)
    session.user("go")
    for _ in range(20):
        session.tool_turn(call_ids=("call_0",))  # a provider that numbers calls per message
    view = new_view()
    assert candidates(session.state, view, keep=10, minimum=30) == []
    assert plan_snip(session.state, view, occupancy(session.state, view)) is None


def test_S4_micro_compaction_after_sixty_idle_seconds_keeps_three() -> None:
    session = _session(8)  # 17 messages: enough for micro (15), not for snip (30)
    view = new_view()
    occ = occupancy(session.state, view)
    last = session.state.carried.last_response_ts
    assert last is not None
    # S4's numbers stated literally: more than 60 s (60,000 ms) idle, keep 3, at least 15 messages
    assert not micro_due(session.state, last + 60_000)
    assert micro_due(session.state, last + 60_001)
    assert plan_micro(session.state, view, occ, now_ms=last + 1_000) is None
    assert plan_micro(session.state, view, occ, now_ms=last + 60_000) is None
    assert plan_snip(session.state, view, occ) is None
    plan = plan_micro(session.state, view, occ, now_ms=last + 60_001)
    assert plan is not None and plan.event.mode == "micro"
    assert plan.event.removed_call_ids == ("c0", "c1", "c2", "c3", "c4")  # 8 turns, the newest 3 kept
    fresh = Session(window=None, cap=None)
    fresh.user("first request of the session")
    assert not micro_due(fresh.state, 10**15)


def test_S4_micro_compaction_needs_fifteen_messages() -> None:
    short = _session(6)
    short.user("one more request")  # 1 + 12 + 1 = 14 messages
    assert len(short.state.context) == 14
    view = new_view()
    last = short.state.carried.last_response_ts
    assert last is not None
    assert plan_micro(short.state, view, occupancy(short.state, view), now_ms=last + 60_001) is None
    enough = _session(7)  # 1 + 14 = 15 messages
    assert len(enough.state.context) == 15
    view = new_view()
    last = enough.state.carried.last_response_ts
    assert last is not None
    plan = plan_micro(enough.state, view, occupancy(enough.state, view), now_ms=last + 60_001)
    assert plan is not None
    assert plan.event.removed_call_ids == ("c0", "c1", "c2", "c3")  # 7 turns, the newest 3 kept


def test_S5_the_recorded_event_rebuilds_the_planned_context_on_replay() -> None:
    session = _session(25)
    view = new_view()
    plan = plan_snip(session.state, view, occupancy(session.state, view))
    assert plan is not None
    planned = plan.apply(session.state.context, session.state.last_seq + 1)
    session.add(plan.event)
    assert session.state.context == planned
    assert replay(session.records).context == planned
    assert apply_plan(replay(session.records[:-1]), plan, now_ms=0).context == planned


# --- properties ---------------------------------------------------------------


@st.composite
def _sessions(draw: st.DrawFn) -> SessionState:
    """A varied session, with a window that puts it in a drawn phase (or none: unknown)."""
    session = Session(window=None, cap=None, tools=())
    session.user("task")
    steps = draw(
        st.lists(
            st.sampled_from(["turn", "turn", "turn", "multi", "orphan", "user", "late", "reuse", "open"]),
            min_size=16,
            max_size=45,
        )
    )
    for step in steps:
        status = draw(st.sampled_from(["ok", "ok", "error"]))
        name = draw(st.sampled_from(["read", "edit", "grep"]))
        output = "x " * draw(st.integers(0, 60))
        if step == "turn":
            session.tool_turn(name=name, status=status, output=output)
        elif step == "multi":
            answered = draw(st.integers(0, 3))
            session.tool_turn(name=name, status=status, output=output, calls=3, answered=answered)
        elif step == "open":
            session.tool_turn(name=name, output=output, answered=0)
        elif step == "orphan":
            session.add(ToolResult(call_id="nobody", tool_name=name, status="ok", effect="read", content=()))
        elif step == "late" and session.calls:
            late = f"c{draw(st.integers(0, session.calls - 1))}"
            session.add(ToolResult(call_id=late, tool_name=name, status="ok", effect="read", content=()))
        elif step == "reuse":
            session.tool_turn(call_ids=("dup",), output=output)
        else:
            session.user("steer " * draw(st.integers(0, 20)))
    state = session.state
    share = draw(st.none() | st.integers(40, 110))  # projection as % of the input budget
    if share is None:
        return state
    tokens = occupancy(state, new_view()).projection.tokens
    info = msgspec.structs.replace(state.info, context_window=tokens * 100 // share, max_output_tokens=0)
    return msgspec.structs.replace(state, info=info)


@given(_sessions())
def test_S3_a_plan_never_separates_a_call_from_its_results_nor_removes_unmatched_ones(
    state: SessionState,
) -> None:
    view = new_view()
    occ = occupancy(state, view)
    for plan in (plan_snip(state, view, occ), plan_snip(state, view, occ, keep=3, minimum=15)):
        if plan is None:
            continue
        context = state.context
        removed = set(plan.removed_indexes)
        matched = {index for turn in tool_turns(context) for index in turn.result_indexes}
        for turn in tool_turns(context):
            indexes = set(turn.indexes)
            assert indexes <= removed or not indexes & removed  # the whole turn or nothing
        for index in removed:
            message = context[index]
            assert message.role in ("assistant", "tool")
            if message.role == "tool":
                assert index in matched  # never an unmatched result
        folded = apply_plan(state, plan, now_ms=0)
        assert folded.context == plan.apply(context, state.last_seq + 1)  # the fold gives the plan


@given(_sessions())
def test_S2_after_slimming_the_projection_is_under_the_threshold_or_no_candidate_is_left(
    state: SessionState,
) -> None:
    view = new_view()
    occ = occupancy(state, view)
    plan = plan_snip(state, view, occ)
    pool = {call_id for entry in candidates(state, view, keep=10, minimum=30) for call_id in entry.call_ids}
    threshold = occ.snapshot.handoff_threshold
    if plan is None:
        assert not pool or (threshold is not None and occ.projection.tokens < threshold)
        return
    after = occupancy(apply_plan(state, plan, now_ms=0), new_view())
    if occ.snapshot.phase == "unknown":
        assert set(plan.event.removed_call_ids) == pool
    else:
        assert threshold is not None
        assert after.projection.tokens < threshold or set(plan.event.removed_call_ids) == pool
        assert after.projection.tokens == occ.projection.local_tokens - plan.event.tokens_saved
