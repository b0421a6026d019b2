"""The deterministic fallback (F1-F5), with property tests of its two guarantees."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.compactor.active_task import active_task_message
from cairn.actors.compactor.fallback import plan_fallback
from cairn.actors.compactor.ledger import ExactRecord
from cairn.actors.compactor.replacement import FALLBACK_NOTICE, fallback_summary_message
from cairn.actors.provider.scripted import http_error
from cairn.events.model import Message, ToolCall
from tests.compactor.builders import COUNTER, Log, coding_session, compactor, request, text


def _plan(source, *, task: str = "", target: int = 5_000, records=()):
    summary = fallback_summary_message(records, "ckpt-1-summary")
    return plan_fallback(
        source,
        summary=summary,
        task_message=active_task_message(task, "ckpt-1-task"),
        task=task,
        target=target,
        counter=COUNTER,
    )


def test_F1_summary_is_the_failure_notice_plus_the_records_ledger() -> None:
    plain = fallback_summary_message((), "s")
    assert text(plain) == FALLBACK_NOTICE and plain.meta.origin == "fallback-summary"
    record = ExactRecord("Exact next action", "run `make check`")
    with_records = text(fallback_summary_message((record,), "s"))
    assert with_records.startswith(FALLBACK_NOTICE)
    assert "## Exact next action\n- run `make check`" in with_records
    assert "## Objective and constraints\n- No evidence observed." in with_records


def test_F1_service_falls_back_with_mandatory_state_when_the_model_fails() -> None:
    service, _ = compactor(http_error(401))
    outcome = service.compact(request(coding_session(12).state()))
    replacement = outcome.replacement
    assert outcome.strategy == "fallback"
    assert replacement[0].meta.origin == "fallback-summary"
    assert replacement[-1].meta.origin == "active-task"
    assert outcome.checkpoint.raw_summary is None


def test_F2_an_active_task_larger_than_the_target_raises_the_target() -> None:
    source = coding_session(6).state().context
    task = "Implement the spec below exactly.\n" + "requirement line\n" * 3000
    plan = _plan(source, task=task, target=500)
    task_tokens = COUNTER.messages(plan.replacement[-1:])
    assert plan.target > 500
    assert plan.target == COUNTER.messages([plan.replacement[0]]) + task_tokens
    assert plan.tokens <= plan.target
    assert plan.kept_messages == 0  # no budget left for the tail


def test_F3_the_last_user_message_equal_to_the_task_is_not_repeated() -> None:
    log = Log()
    log.turn("Rename the module to core.")
    log.say("Renaming now.")
    plan = _plan(log.state().context, task="Rename the module to core.")
    tail = plan.replacement[1:-1]
    assert [m.role for m in tail] == ["assistant"]
    assert "Rename the module to core." in text(plan.replacement[-1])


def test_F4_a_huge_single_message_in_a_6000_window_is_cut_head_and_tail() -> None:
    log = Log(window=6_000)
    log.turn("Summarise the log.")
    log.tool("HEAD-MARK " + "alpha beta gamma delta\n" * 20_000 + " TAIL-MARK", name="bash")
    service, _ = compactor(http_error(503), http_error(503), http_error(503))
    outcome = service.compact(request(log.state()))
    checkpoint = outcome.checkpoint
    assert checkpoint.diagnostics.target_tokens == 3_000
    assert checkpoint.replacement_tokens <= 3_000
    result = next(m for m in outcome.replacement if m.role == "tool")
    body = text(result)
    assert body.startswith("HEAD-MARK") and body.endswith("TAIL-MARK")
    assert "chars cut by compaction" in body and result.meta.truncated
    assert checkpoint.diagnostics.truncated_messages == 1  # the result; the call has no text
    call = outcome.replacement[outcome.replacement.index(result) - 1]
    assert call.tool_calls and call.tool_calls[0].id == result.tool_call_id


def test_F4_orphans_unanswered_calls_and_reasoning_are_dropped() -> None:
    source = (
        Message(role="tool", content="orphan", tool_call_id="gone", id="t0"),
        Message(role="assistant", content="", tool_calls=(ToolCall("c1", "read"),), id="a1"),
        Message(role="user", content="next", id="u1"),
        Message(
            role="assistant",
            content="thinking done",
            reasoning="secret",
            id="a2",
            tool_calls=(ToolCall("c2", "read"), ToolCall("c3", "grep")),
        ),
        Message(role="tool", content="r2", tool_call_id="c2", id="t2"),
    )
    tail = _plan(source).replacement[1:]
    assert [m.id for m in tail] == ["u1", "a2", "t2"]
    assert tail[1].reasoning is None and [c.id for c in tail[1].tool_calls] == ["c2"]


def test_F4_the_walk_stops_at_the_first_unit_that_does_not_fit() -> None:
    source = (
        Message(role="user", content="old small", id="u0"),
        Message(role="user", content="big " * 20_000, id="u1"),
        Message(role="user", content="new small", id="u2"),
    )
    plan = _plan(source, target=1_000)
    ids = [m.id for m in plan.replacement[1:]]
    assert ids == ["u1", "u2"] and plan.truncated_messages == 1


_roles = st.sampled_from(["user", "assistant", "tool", "call"])


@st.composite
def _histories(draw) -> list[Message]:
    messages: list[Message] = []
    for n in range(draw(st.integers(0, 30))):
        kind = draw(_roles)
        size = draw(st.sampled_from([1, 10, 200, 3_000, 30_000]))
        body = draw(st.sampled_from(["word ", "x", "ünï ", "{}\n"])) * size
        if kind == "call":
            ids = [f"c{n}-{k}" for k in range(draw(st.integers(1, 3)))]
            messages.append(
                Message(
                    role="assistant",
                    content=body[:50],
                    tool_calls=tuple(ToolCall(i, "read") for i in ids),
                    id=f"a{n}",
                )
            )
            for i in ids[: draw(st.integers(0, len(ids)))]:
                messages.append(Message(role="tool", content=body, tool_call_id=i, id=f"t{i}"))
        elif kind == "tool":
            messages.append(Message(role="tool", content=body, tool_call_id=f"orphan{n}", id=f"o{n}"))
        else:
            messages.append(Message(role=kind, content=body, id=f"m{n}"))
    return messages


@given(source=_histories(), target=st.integers(0, 12_000), task=st.sampled_from(["", "do it", "t" * 7000]))
def test_F5_property_fallback_never_exceeds_its_target(source, target, task) -> None:
    plan = _plan(source, task=task, target=target)
    assert plan.tokens == COUNTER.messages(plan.replacement) <= plan.target
    assert plan.target >= target


@given(source=_histories(), target=st.integers(0, 12_000))
def test_F4_property_fallback_never_separates_a_call_from_its_result(source, target) -> None:
    tail = _plan(source, target=target).replacement[1:]
    calls = {c.id: i for i, m in enumerate(tail) for c in m.tool_calls}
    answered = {m.tool_call_id for m in tail if m.role == "tool"}
    for i, message in enumerate(tail):
        if message.role == "tool":
            assert message.tool_call_id in calls and calls[message.tool_call_id] < i
    assert set(calls) <= answered  # every kept call has its result
