"""The session's state machine (`actors.session.machine`), driven with plain values, move by move,
and L1's order before each request (`before_request`) on sessions built event by event.

No actor, no thread, no log: `step(mode, happened)` is a pure function, so
each test states a mode, an input, and the mode and effects that must come
out. The actor tests (tests/actors) check that the shell carries them out.
"""

from __future__ import annotations

import pytest

from cairn.actors.session.machine import (
    AcceptResult,
    AwaitingCompaction,
    AwaitingProvider,
    AwaitingRetry,
    AwaitingTools,
    CancelAsked,
    CancelTurn,
    CompactionAsked,
    CompactionEnded,
    EndTurn,
    ErrorJudged,
    Happened,
    HostMessage,
    Idle,
    JudgeError,
    Mode,
    NextRequest,
    Preparing,
    ProviderErred,
    Queue,
    RecordError,
    RecordResponse,
    RecordTool,
    RecoverContext,
    Refuse,
    RefuseResult,
    RequestSent,
    ResponseEnded,
    Resume,
    RetryDue,
    RunTool,
    Stopped,
    Streamed,
    Take,
    TakeCompaction,
    TakeItem,
    ToolEnded,
    ToolResolved,
    ToolWaits,
    TurnEnded,
    TurnStarting,
    WaitForResult,
    WaitThenRetry,
    step,
    turn_runs,
)
from cairn.actors.session.preparing import (
    CompactFirst,
    L1Done,
    SendRequest,
    SlimFirst,
    TooManyRequests,
    WriteHandoff,
    before_request,
)
from cairn.actors.session.tracker import occupancy
from cairn.actors.session.verdict import Fail, FailClosed, Recover, RetryAfter
from cairn.actors.session.view import HistoryView
from cairn.events.model import ToolCall
from tests.session.builders import Session, new_view

READ = ToolCall("c1", "read", '{"path": "a.py"}')
GREP = ToolCall("c2", "grep", '{"pattern": "TODO"}')
WAITING: list[Mode] = [
    Preparing(),
    AwaitingProvider(7, "r12"),
    AwaitingTools(7, (READ,), 0),
    AwaitingRetry(7, 375),
    AwaitingCompaction(8, "threshold"),
    AwaitingCompaction(8, "manual"),
]


def run_through(mode: Mode, *inputs: Happened) -> tuple[Mode, list[object]]:
    """Feed `inputs` one after another; the last mode and every effect, in order."""
    effects: list[object] = []
    for happened in inputs:
        mode, more = step(mode, happened)
        effects.extend(more)
    return mode, effects


# --- the host's messages ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["send", "compact"])
def test_an_idle_session_takes_a_host_message_at_once(kind: str) -> None:
    assert step(Idle(), HostMessage(kind)) == (Idle(), (Take(kind),))  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", WAITING, ids=lambda mode: type(mode).__name__)
def test_C11_a_message_that_arrives_during_any_wait_is_kept_for_later(mode: Mode) -> None:
    """C11: a user message sent while a turn runs steers it (recorded before its next request);
    a manual compaction (K4) waits for the turn's end. Neither changes the mode."""
    assert step(mode, HostMessage("send")) == (mode, (Queue("send"),))
    assert step(mode, HostMessage("compact")) == (mode, (Queue("compact"),))


@pytest.mark.parametrize("mode", [m for m in WAITING if turn_runs(m)], ids=lambda mode: type(mode).__name__)
def test_a_message_sent_mid_turn_does_what_its_policy_says(mode: Mode) -> None:
    assert step(mode, HostMessage("send", "steer")) == (mode, (Queue("send"),))
    assert step(mode, HostMessage("send", "queue")) == (mode, (Queue("send"),))  # `_steer` leaves it
    assert step(mode, HostMessage("send", "reject")) == (mode, (Refuse(),))
    # queued first, so the turn's end finds it and starts the next turn with it
    assert step(mode, HostMessage("send", "interrupt")) == (Preparing(), (Queue("send"), CancelTurn()))


@pytest.mark.parametrize("mode", WAITING, ids=lambda mode: type(mode).__name__)
def test_continue_and_dismiss_are_taken_only_when_idle(mode: Mode) -> None:
    for kind in ("continue", "dismiss"):
        assert step(Idle(), HostMessage(kind)) == (Idle(), (Take(kind),))  # type: ignore[arg-type]
        assert step(mode, HostMessage(kind)) == (mode, (Refuse(kind),))  # type: ignore[arg-type]


def test_without_a_running_turn_the_policy_does_not_matter() -> None:
    for policy in ("steer", "queue", "reject", "interrupt"):
        assert step(Idle(), HostMessage("send", policy)) == (Idle(), (Take("send"),))  # type: ignore[arg-type]
        manual = AwaitingCompaction(3, "manual")
        assert step(manual, HostMessage("send", policy)) == (manual, (Queue("send"),))  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", [m for m in WAITING if turn_runs(m)], ids=lambda mode: type(mode).__name__)
def test_a_cancel_ends_the_running_turn_in_any_mode(mode: Mode) -> None:
    assert step(mode, CancelAsked()) == (Preparing(), (CancelTurn(),))
    # whatever it waited for is stale afterwards: the turn's end leaves the session idle
    idle, _ = step(Preparing(), TurnEnded())
    assert step(idle, ResponseEnded(7, (), steering_waits=False)) == (idle, ())
    assert step(idle, ToolEnded(7, 0)) == (idle, ())
    assert step(idle, CompactionEnded(8)) == (idle, ())


def test_a_cancel_without_a_running_turn_changes_nothing() -> None:
    for mode in (Idle(), AwaitingCompaction(3, "manual")):
        assert step(mode, CancelAsked()) == (mode, ())


# --- one request and its answer -----------------------------------------------------------------------


def test_a_turn_without_tools_goes_idle_to_request_to_completed() -> None:
    mode, effects = run_through(
        Idle(),
        TurnStarting(),
        RequestSent(1, "r4"),
        Streamed(1),
        Streamed(1),
        ResponseEnded(1, (), steering_waits=False),
    )
    assert mode == Preparing()
    assert effects == [TakeItem(), TakeItem(), RecordResponse(completes=True), EndTurn("completed")]
    assert step(mode, TurnEnded()) == (Idle(), (Resume(),))


def test_C11_a_response_without_tools_while_a_message_waits_leads_to_the_next_request() -> None:
    mode, effects = step(AwaitingProvider(3, "r9"), ResponseEnded(3, (), steering_waits=True))
    assert mode == Preparing()
    assert effects == (RecordResponse(completes=False), NextRequest())


def test_answers_to_an_earlier_request_change_nothing() -> None:
    awaiting = AwaitingProvider(5, "r20")
    for stale in (Streamed(4), ResponseEnded(4, (READ,), steering_waits=False), ProviderErred(4)):
        assert step(awaiting, stale) == (awaiting, ())
    # and once the turn ended, a late answer of its last request neither
    assert step(Idle(), ResponseEnded(5, (), steering_waits=False)) == (Idle(), ())


# --- tools --------------------------------------------------------------------------------------------


def test_tool_calls_run_one_at_a_time_in_their_order_then_the_next_request() -> None:
    calls = (READ, GREP)
    mode, effects = step(AwaitingProvider(2, "r7"), ResponseEnded(2, calls, steering_waits=False))
    assert mode == AwaitingTools(2, calls, 0)
    assert effects == (RecordResponse(completes=False), RunTool(2, 0, READ))

    mode, effects = step(mode, ToolEnded(2, 0))
    assert mode == AwaitingTools(2, calls, 1)
    assert effects == (RecordTool(READ), RunTool(2, 1, GREP))

    mode, effects = step(mode, ToolEnded(2, 1))
    assert mode == Preparing()
    assert effects == (RecordTool(GREP), NextRequest())


def test_a_tool_result_for_another_call_or_another_response_changes_nothing() -> None:
    waiting = AwaitingTools(2, (READ, GREP), 1)
    for stale in (ToolEnded(2, 0), ToolEnded(2, 2), ToolEnded(1, 1)):
        assert step(waiting, stale) == (waiting, ())


def test_waiting_for_tools_is_a_mode_that_ends_like_the_others() -> None:
    """Stopped mid-tools: idle, nothing run or recorded; the log's open call is closed on the next load."""
    assert turn_runs(AwaitingTools(2, (READ,), 0))
    assert step(AwaitingTools(2, (READ,), 0), Stopped()) == (Idle(), ())


def test_a_deferred_call_waits_for_the_hosts_result_and_refuses_any_other() -> None:
    running = AwaitingTools(2, (READ, GREP), 0)
    waiting, effects = step(running, ToolWaits(2, 0))
    assert (waiting, effects) == (AwaitingTools(2, (READ, GREP), 0, True), (WaitForResult(2, 0),))
    assert step(waiting, ToolResolved("c2")) == (waiting, (RefuseResult(),))  # not the one waiting
    assert step(running, ToolResolved("c1")) == (running, (RefuseResult(),))  # not deferred: it runs
    assert step(Idle(), ToolResolved("c1")) == (Idle(), (RefuseResult(),))
    following, effects = step(waiting, ToolResolved("c1"))
    assert following == AwaitingTools(2, (READ, GREP), 1)
    assert effects == (AcceptResult(), RecordTool(READ), RunTool(2, 1, GREP))
    # the timeout's error came first: recorded like any outcome, and a late result is refused
    timed_out, effects = step(waiting, ToolEnded(2, 0))
    assert effects == (RecordTool(READ), RunTool(2, 1, GREP))
    assert step(timed_out, ToolResolved("c1")) == (timed_out, (RefuseResult(),))


# --- a provider error: C5, R3, fail -------------------------------------------------------------------


def test_a_provider_error_is_judged_before_anything_else() -> None:
    assert step(AwaitingProvider(6, "r30"), ProviderErred(6)) == (Preparing(), (JudgeError(),))


def test_C5_a_transient_error_waits_then_sends_the_request_again() -> None:
    mode, effects = step(Preparing(), ErrorJudged(6, RetryAfter(750)))
    assert mode == AwaitingRetry(6, 750)
    assert effects == (RecordError(), WaitThenRetry(6, 750))
    assert step(mode, RetryDue(5)) == (mode, ())  # a timer of an earlier wait
    assert step(mode, RetryDue(6)) == (Preparing(), (NextRequest(),))


def test_R3_a_context_limit_error_asks_for_a_reactive_compaction_then_the_request_again() -> None:
    mode, effects = step(Preparing(), ErrorJudged(6, Recover()))
    assert (mode, effects) == (Preparing(), (RecordError(), RecoverContext()))
    mode, effects = step(mode, CompactionAsked(9, "reactive"))
    assert mode == AwaitingCompaction(9, "reactive")
    assert step(mode, CompactionEnded(9)) == (Preparing(), (TakeCompaction("reactive"),))


@pytest.mark.parametrize("verdict", [Fail(), FailClosed()], ids=["fail", "R2-fail-closed"])
def test_R2_an_error_not_retried_nor_recovered_ends_the_turn_failed(verdict: Fail | FailClosed) -> None:
    assert step(Preparing(), ErrorJudged(6, verdict)) == (Preparing(), (RecordError(), EndTurn("failed")))


# --- compaction ---------------------------------------------------------------------------------------


def test_L1_a_threshold_compaction_is_awaited_within_the_turn() -> None:
    mode, _ = step(Preparing(), CompactionAsked(4, "threshold"))
    assert mode == AwaitingCompaction(4, "threshold") and turn_runs(mode)
    assert step(mode, CompactionEnded(3)) == (mode, ())  # an answer to an abandoned job
    assert step(mode, CompactionEnded(4)) == (Preparing(), (TakeCompaction("threshold"),))


def test_K4_a_manual_compaction_runs_outside_any_turn_and_resumes_what_waited() -> None:
    mode, _ = step(Idle(), CompactionAsked(4, "manual"))
    assert mode == AwaitingCompaction(4, "manual") and not turn_runs(mode)
    assert step(mode, CompactionEnded(4)) == (Idle(), (TakeCompaction("manual"), Resume()))


# --- moves the actor never makes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "happened"),
    [
        (Idle(), RequestSent(1, "r1")),  # a request outside a turn
        (AwaitingProvider(1, "r1"), RequestSent(2, "r2")),  # two requests at once
        (AwaitingProvider(1, "r1"), TurnStarting()),  # a turn inside a turn
        (Idle(), CompactionAsked(1, "threshold")),  # a turn's compaction outside a turn
        (Preparing(), CompactionAsked(1, "manual")),  # a manual one inside a turn (K4 waits)
        (Idle(), ErrorJudged(1, Fail())),
    ],
)
def test_a_move_the_actor_never_makes_is_refused_as_a_bug(mode: Mode, happened: Happened) -> None:
    with pytest.raises(AssertionError, match="cannot happen while"):
        step(mode, happened)


def test_every_mode_ends_idle_when_the_turn_ends_or_the_actor_stops() -> None:
    for mode in [Idle(), *WAITING]:
        assert step(mode, TurnEnded()) == (Idle(), (Resume(),))
        assert step(mode, Stopped()) == (Idle(), ())


# --- before each request: L1's order (machine.before_request) ------------------------------------

MAX = 64


def _tool_session(turns: int, *, observed: int | None = None) -> tuple[Session, HistoryView]:
    """A task then `turns` tool turns; with `observed`, the provider's usage for a request after them
    (window 110,000, cap 10,000: budget 100,000, hand-off at 70,000, compaction at 80,000)."""
    session = Session(window=110_000 if observed else None, cap=10_000 if observed else None)
    session.user("clean up the repository")
    for n in range(turns):
        session.tool_turn(output=f"output of call {n}", text=f"step {n}")
    view = new_view()
    if observed is not None:
        session.request(view, "r1")
        session.assistant("Going on.", request_id="r1")
        session.usage("r1", observed - 100, 100, None)
    return session, view


def _next(session: Session, view: HistoryView, now_ms: int, done: L1Done = "", **kwargs: object) -> object:
    options: dict[str, object] = {"requests": 1, "max_requests": MAX, "handoff_failed": False, **kwargs}
    return before_request(session.state, view, now_ms=now_ms, done=done, **options)  # type: ignore[arg-type]


def _soon(session: Session) -> int:
    """A moment 1 s after the last response: S4's 60 s have not passed."""
    return (session.state.carried.last_response_ts or session.ts) + 1_000


def test_L1_with_nothing_to_do_the_request_goes() -> None:
    session, view = _tool_session(3)
    move = _next(session, view, _soon(session))
    assert isinstance(move, SendRequest) and move.occ == occupancy(session.state, view)


def test_L1_the_turns_request_limit_is_checked_first() -> None:
    session, view = _tool_session(3)
    assert _next(session, view, _soon(session), requests=MAX) == TooManyRequests(MAX)
    assert isinstance(_next(session, view, _soon(session), requests=MAX - 1), SendRequest)


def test_L1_micro_compaction_comes_first_and_the_rest_is_judged_on_its_result() -> None:
    """(1) S4 after more than 60 s idle, applied at once; then (2)-(3) on what it left."""
    session, view = _tool_session(20)  # 41 messages, phase unknown: snip would take every candidate
    idle = (session.state.carried.last_response_ts or 0) + 60_001
    move = _next(session, view, idle)
    assert isinstance(move, SlimFirst) and move.stage == "micro"
    session.add(move.event)
    assert len(session.state.context) < 30  # S1 needs 30: nothing more to snip
    assert isinstance(_next(session, view, idle, done="micro"), SendRequest)


def test_L1_below_compaction_the_snip_is_applied_and_nothing_compacts() -> None:
    session, view = _tool_session(20)
    move = _next(session, view, _soon(session))
    assert isinstance(move, SlimFirst) and move.stage == "snip"
    assert move.event.mode == "snip"  # type: ignore[attr-defined]
    session.add(move.event)
    assert isinstance(_next(session, view, _soon(session), done="snip"), SendRequest)


def test_L1_at_compaction_due_the_unapplied_snip_result_is_compacted() -> None:
    session, view = _tool_session(20, observed=85_000)
    assert occupancy(session.state, view).snapshot.phase == "compaction_due"
    before = session.state
    move = _next(session, view, _soon(session))
    assert isinstance(move, CompactFirst) and move.source is not None
    assert len(move.source) < len(session.state.context)  # the snip result ...
    assert session.state is before  # ... planned, not recorded (L2: nothing applied yet)


def test_L1_after_a_checkpoint_only_the_handoff_and_the_request_remain() -> None:
    session, view = _tool_session(20, observed=85_000)
    assert isinstance(_next(session, view, _soon(session), done="snip"), SendRequest)


def test_H1_in_the_band_the_handoff_is_written_before_the_request_and_only_once() -> None:
    session, view = _tool_session(2, observed=75_000)
    assert occupancy(session.state, view).snapshot.phase == "handoff_band"
    move = _next(session, view, _soon(session))
    assert isinstance(move, WriteHandoff)
    session.add(move.event)
    assert isinstance(_next(session, view, _soon(session), done="handoff"), SendRequest)
    assert isinstance(_next(session, view, _soon(session)), SendRequest)  # one per epoch


def test_H7_after_a_failed_handoff_the_request_goes_without_one() -> None:
    session, view = _tool_session(2, observed=75_000)
    assert isinstance(_next(session, view, _soon(session), handoff_failed=True), SendRequest)
