"""`deferred.deferred_wait`: the open turn a restart resumes, read from the log (pure), and its move."""

from __future__ import annotations

from cairn.actors.session import machine
from cairn.actors.session.deferred import DeferredWait, deferred_wait
from cairn.events.kinds import (
    AssistantMessage,
    Request,
    ToolDeferred,
    ToolResult,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import TextPart, ToolCall
from tests.compactor.builders import Log

READ, WRITE = ToolCall("r-1", "read", "{}"), ToolCall("w-1", "write", "{}")


def _waiting_log() -> Log:
    """A turn whose answer called read then write; the read has its result, the write was deferred."""
    log = Log()
    log.add(UserMessage(message_id="u1", content=(TextPart("write the notes"),)))
    log.add(TurnStarted(turn_id="t1", message_id="u1"))
    log.add(Request(request_id="q1", turn_id="t1", attempt=1, fingerprint="f", history_revision=0,
                    projected_tokens=10, phase="normal", message_count=2))  # fmt: skip
    log.add(AssistantMessage(message_id="a1", request_id="q1", tool_calls=(READ, WRITE)))
    log.add(ToolResult(call_id="r-1", tool_name="read", status="ok", effect="read", content=(TextPart("x"),)))
    log.add(ToolDeferred(call_id="w-1", tool_name="write", timeout_ms=60_000), ts=50_000)
    return log


def test_an_open_turn_at_a_deferred_call_is_a_wait_with_its_time_left() -> None:
    wait = deferred_wait(_waiting_log().records)
    assert wait == DeferredWait(
        turn_id="t1", calls=(READ, WRITE), answered=1, deferred_ms=50_000, timeout_ms=60_000, requests=1
    )
    assert wait.left_ms(50_000) == 60_000 and wait.left_ms(80_000) == 30_000 and wait.left_ms(200_000) == 0


def test_a_turn_that_ended_or_whose_call_was_answered_is_no_wait() -> None:
    answered = _waiting_log()
    answered.add(ToolResult(call_id="w-1", tool_name="write", status="ok", effect="write", content=()))
    assert deferred_wait(answered.records) is None  # the result came: the turn is at its next request
    for end in (TurnCompleted(turn_id="t1"), TurnFailed(turn_id="t1", phase="interrupted", error="x")):
        ended = _waiting_log()
        ended.add(end)
        assert deferred_wait(ended.records) is None
    running = _waiting_log()
    running.records.pop()  # the write was running on the server when the log ended: interrupted
    assert deferred_wait(running.records) is None


def test_a_deferral_of_another_call_than_the_one_the_turn_is_at_is_no_wait() -> None:
    log = _waiting_log()
    log.records.pop()
    log.add(ToolDeferred(call_id="r-1", tool_name="read", timeout_ms=1))  # answered already
    assert deferred_wait(log.records) is None


def test_a_resumed_wait_is_awaiting_tools_deferred_with_its_timer() -> None:
    mode, effects = machine.step(machine.Idle(), machine.WaitResumed(7, (READ, WRITE), 1))
    assert mode == machine.AwaitingTools(7, (READ, WRITE), 1, deferred=True)
    assert effects == (machine.ResumeWait(7, 1),)
    following, after = machine.step(mode, machine.ToolResolved("w-1"))
    assert following == machine.Preparing()
    assert isinstance(after[0], machine.AcceptResult) and after[1] == machine.RecordTool(WRITE)
