"""The pure decisions of the turn loop (actors/session/turn.py)."""

from __future__ import annotations

import pytest
from msgspec import UNSET

from cairn.actors.provider.actor import ProviderFailed
from cairn.actors.provider.base import UsageReport
from cairn.actors.provider.retry import RetryPolicy
from cairn.actors.session.recovery import reactive_snip
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.tracker import occupancy
from cairn.actors.session.turn import (
    INTERRUPTED_RESULT,
    interrupted_events,
    response_events,
    start_events,
    steering_events,
    tool_result_event,
    unanswered_calls,
    unique_calls,
)
from cairn.actors.session.verdict import (
    Fail,
    FailClosed,
    Recover,
    RetryAfter,
    is_overflow,
    provider_failure,
    provider_verdict,
    reactive_verdict,
)
from cairn.actors.tools import ToolOutcome
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    Carried,
    EventBase,
    ProviderError,
    SessionStarted,
    ToolResult,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, TextPart, ToolCall
from cairn.events.state import SessionState, replay
from tests.session.builders import Session, new_view


def _fold(events: list[EventBase], state: SessionState | None = None) -> SessionState:
    base = state or SessionState(sid="s")
    records = [Record(0, "s", base.last_seq + i + 1, 1, GENESIS, e) for i, e in enumerate(events)]  # type: ignore[arg-type]
    return replay(records, base)


def test_start_events_number_ids_by_the_seq_they_take() -> None:
    events, turn_id = start_events(
        SessionState(sid="s"), ["first", "steer"], settings=SessionSettings(), workspace="/w"
    )
    assert [type(e) for e in events] == [SessionStarted, UserMessage, TurnStarted, UserMessage]
    assert turn_id == "t3" and events[1].message_id == "u2" and events[3].message_id == "u4"  # type: ignore[attr-defined]
    state = _fold(events)
    assert state.open_turn is not None and state.open_turn.task == ("first", "steer")  # C11
    more = steering_events(state, ["again"])
    assert more[0].message_id == "u5"  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        start_events(SessionState(sid="s"), ["x"])


def test_unanswered_calls_and_the_interrupted_end_they_get() -> None:
    calls = (ToolCall("c1", "read"), ToolCall("c2", "read"))
    context = (
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=calls),
        Message(role="tool", content="ok", tool_call_id="c1"),
    )
    assert unanswered_calls(context) == (calls[1],)
    assert unanswered_calls(context[:1]) == ()
    events, _ = start_events(SessionState(sid="s"), ["go"], settings=SessionSettings(), workspace="/w")
    state = _fold(events)
    owed = interrupted_events(state, "process died")
    assert [type(e) for e in owed] == [TurnFailed] and owed[0].phase == "interrupted"  # type: ignore[attr-defined]
    assert interrupted_events(_fold(owed, state), "again") == []


@pytest.mark.parametrize(
    "overflow, delivered, guard, verdict",
    [
        (False, False, False, "fail"),
        (True, True, False, "fail-closed"),
        (True, False, True, "fail-guard"),
        (True, False, False, "recover"),
        (False, True, True, "fail"),
    ],
)
def test_R2_verdict_table(overflow: bool, delivered: bool, guard: bool, verdict: str) -> None:
    state = SessionState(carried=Carried(reactive_since_response=guard))
    assert reactive_verdict(state, overflow=overflow, delivered=delivered) == verdict


def _failure(
    error_class: str = "server",
    *,
    status: int | None = 503,
    retryable: bool = True,
    delivered: bool = False,
    hint_ms: int | None = None,
    message: str = "boom",
) -> ProviderFailed:
    return ProviderFailed(
        job=1,
        error_class=error_class,
        message=message,  # type: ignore[arg-type]
        status_code=status,
        retryable=retryable,
        delivered=delivered,
        retry_after_ms=hint_ms,
    )


POLICY = RetryPolicy()


def _verdict(
    failure: ProviderFailed,
    *,
    guard: bool = False,
    delivered: bool = False,
    done: int = 0,
    allowed: int = 2,
    draw: float = 0.5,
    policy: RetryPolicy = POLICY,
):  # type: ignore[no-untyped-def]
    state = SessionState(carried=Carried(reactive_since_response=guard))
    return provider_verdict(
        state,
        failure,
        delivered=delivered,
        retries_done=done,
        retries_allowed=allowed,
        draw=draw,
        policy=policy,
    )


def test_C5_a_transient_error_before_any_output_is_retried_after_375_then_750_ms() -> None:
    assert _verdict(_failure()) == RetryAfter(375)
    assert _verdict(_failure(), done=1) == RetryAfter(750)
    assert _verdict(_failure(status=None)) == RetryAfter(375)


def test_C5_a_servers_hint_is_waited_with_jitter_and_one_over_the_cap_fails_at_once() -> None:
    assert _verdict(_failure("rate-limit", status=429, hint_ms=5_000), draw=0.5) == RetryAfter(5_500)
    over = _verdict(
        _failure("rate-limit", status=429, hint_ms=120_000), policy=RetryPolicy(max_wait_ms=60_000)
    )
    assert isinstance(over, Fail) and "120 s" in over.note and "60 s" in over.note


def test_C5_retries_used_up_or_an_error_that_is_not_transient_fail_the_turn() -> None:
    assert _verdict(_failure(), done=2, allowed=2) == Fail()
    assert _verdict(_failure(), allowed=0) == Fail()
    assert _verdict(_failure("auth", status=401, retryable=False)) == Fail()


def test_R2_a_transient_error_after_output_is_not_retried() -> None:
    assert _verdict(_failure(delivered=True)) == Fail()  # the provider saw output go out
    assert _verdict(_failure(), delivered=True) == Fail()  # the session did


def test_R1_a_context_limit_error_is_never_retried_but_recovered() -> None:
    overflow = _failure("context-limit", status=400, retryable=True)
    assert _verdict(overflow) == Recover()
    assert _verdict(_failure("bad-request", status=413, retryable=False)) == Recover()


def test_R2_a_context_limit_error_after_output_fails_closed_and_the_guard_fails_a_second_one() -> None:
    overflow = _failure("context-limit", status=400, retryable=False)
    closed = _verdict(overflow, delivered=True)
    assert isinstance(closed, FailClosed) and "fails closed (R2)" in closed.note
    guarded = _verdict(overflow, guard=True)
    assert isinstance(guarded, Fail) and "second context-limit error" in guarded.note


def test_the_draw_is_taken_for_every_verdict_but_only_a_hinted_wait_uses_it() -> None:
    assert _verdict(_failure(), draw=0.99) == _verdict(_failure(), draw=0.0) == RetryAfter(375)


def test_every_verdict_records_the_provider_error_first_and_a_failure_closes_the_turn() -> None:
    state = SessionState(sid="s")
    common = {
        "turn_id": "t2",
        "request_id": "r3",
        "delivered": False,
        "retries_done": 0,
        "draw": 0.0,
        "policy": RetryPolicy(),
    }
    retried = provider_failure(state, _failure(hint_ms=9), retries_allowed=2, **common)  # type: ignore[arg-type]
    error = retried.events[0]
    assert retried.verdict == RetryAfter(375) and len(retried.events) == 1
    assert isinstance(error, ProviderError) and error.retry_wait_ms == 375 and error.request_id == "r3"
    assert error.retry_after_ms == 9  # recorded as sent, though only 429 and 503 honour it
    failed = provider_failure(state, _failure(message="x" * 3_000), retries_allowed=0, **common)  # type: ignore[arg-type]
    error, closing = failed.events
    assert isinstance(error, ProviderError) and error.retry_wait_ms is None and len(error.message) == 2_000
    assert isinstance(closing, TurnFailed) and closing.phase == "provider" and closing.turn_id == "t2"
    assert failed.detail == "x" * 3_000
    over = provider_failure(
        state, _failure("rate-limit", status=429, hint_ms=90_000), retries_allowed=2, **common
    )  # type: ignore[arg-type]
    assert over.detail.startswith("boom (the server asked to wait 90 s")


@pytest.mark.parametrize(
    "error_class, status, message, expected",
    [
        ("context-limit", None, "", True),
        ("bad-request", 413, "too big", True),
        ("bad-request", 400, "This model's MAXIMUM CONTEXT LENGTH is 8k", True),
        ("server", 500, "prompt_too_long", True),
        ("rate-limit", 429, "slow down", False),
    ],
)
def test_R1_overflow_by_class_status_or_message(
    error_class: str, status: int | None, message: str, expected: bool
) -> None:
    assert is_overflow(error_class, status, message) is expected


def test_tool_results_are_recorded_whole_and_flagged_when_the_model_sees_less() -> None:
    read_only = frozenset({"read"})
    small, used = tool_result_event(
        ToolCall("c1", "read"), ToolOutcome(content="abc"), read_only=read_only, used=0
    )
    assert isinstance(small, ToolResult) and not small.truncated and used == 3 and small.effect == "read"
    huge_text = "x" * (100_000 + 1)
    huge, used = tool_result_event(
        ToolCall("c2", "edit"), ToolOutcome(content=huge_text), read_only=read_only, used=used
    )
    assert huge.truncated and huge.original_chars == 100_000 + 1 and huge.effect == "write"  # X1
    assert huge.content == (TextPart(huge_text),)  # recorded whole (X3)
    assert used == 3 + 2_000
    late, _ = tool_result_event(
        ToolCall("c3", "read"), ToolOutcome(content="y" * 5_000), read_only=read_only, used=200_000
    )
    assert late.truncated  # X2: the turn's budget is spent, only the preview is shown


def test_repeated_call_ids_keep_the_first() -> None:
    a, b = ToolCall("c1", "read", "{}"), ToolCall("c1", "write", "{}")
    assert unique_calls([a, b, ToolCall("c2", "read")]) == (a, ToolCall("c2", "read"))


def test_interrupted_result_text_is_what_the_model_reads() -> None:
    assert "interrupted" in INTERRUPTED_RESULT and "unknown" in INTERRUPTED_RESULT


def test_R3_the_reactive_snip_keeps_three_tool_turns_from_ten_messages() -> None:
    def session(turns: int, *, extra_user: bool) -> Session:
        built = Session(window=None, cap=None)
        built.user("make the build pass")
        for n in range(turns):
            built.tool_turn(output=f"output {n}")
        if extra_user:
            built.user("and hurry")
        return built

    # R3's numbers stated literally: keep 3 tool turns, only from 10 messages up
    nine = session(4, extra_user=False)  # 1 + 8 = 9 messages
    assert len(nine.state.context) == 9
    view = new_view()
    assert reactive_snip(nine.state, view, occupancy(nine.state, view)) is None
    ten = session(4, extra_user=True)  # 1 + 8 + 1 = 10 messages
    assert len(ten.state.context) == 10
    view = new_view()
    plan = reactive_snip(ten.state, view, occupancy(ten.state, view))
    assert plan is not None and plan.event.removed_call_ids == ("c0",)
    many = session(9, extra_user=False)
    view = new_view()
    plan = reactive_snip(many.state, view, occupancy(many.state, view))
    assert plan is not None and plan.event.removed_call_ids == ("c0", "c1", "c2", "c3", "c4", "c5")


def test_the_usage_of_a_response_records_the_cache_reads_and_writes_the_provider_reported() -> None:
    def usage_of(report: UsageReport) -> Usage:
        events = response_events(
            SessionState(sid="s"),
            request_id="r1",
            text="ok",
            reasoning="",
            calls=(),
            usage=report,
            finish_reason=None,
        )
        assert isinstance(events[1], Usage)
        return events[1]

    cached = usage_of(UsageReport(7_100, 50, 7_150, cached_prompt_tokens=5_000, cache_write_tokens=2_000))
    assert (cached.prompt_tokens, cached.cached_prompt_tokens, cached.cache_write_tokens) == (
        7_100,
        5_000,
        2_000,
    )
    plain = usage_of(UsageReport(7_100, 50, 7_150))
    assert plain.cached_prompt_tokens is None and plain.cache_write_tokens is UNSET  # omitted from the line
