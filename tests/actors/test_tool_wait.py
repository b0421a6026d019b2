"""Waiting for tool results is a mode of the session (`machine.AwaitingTools`), not a blocked actor.

While a tool runs, the session actor goes on taking messages: a question
about its state is answered, a user message is kept and recorded before the
request that follows the results (C11), a stop ends the turn at once with
the open call closed. Real hosts, real threads; the tool is held by an
event, never by sleeping.
"""

from __future__ import annotations

from pathlib import Path

from cairn.actors.session.turn import INTERRUPTED_RESULT
from cairn.events.kinds import Request, ToolResult, UserMessage
from cairn.events.model import TextPart
from tests.actors.helpers import WAIT, GatedTools, kinds, open_host, reopen_and_compare, scripted


def test_the_session_answers_while_a_tool_runs(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        turn = host.send("s", "work: tools 1 x 5 #q", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        state = host.state("s")  # an ask to the actor: answered with the tool still held
        assert state.open_turn is not None
        assert kinds(host.journal, "s")[-2:] == ["assistant-message", "usage"]  # the call, no result yet
        tools.release.set()
        assert turn.result(WAIT).ok
    finally:
        tools.release.set()
        host.close()


def test_C11_a_message_sent_while_a_tool_runs_is_in_the_request_after_the_result(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        first = host.send("s", "start: tools 1 x 10 #steer", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        steer = host.send("s", "and mind the tests")
        state = host.state("s")  # the actor took the message before this ask: it is queued
        assert len([m for m in state.context if m.role == "user"]) == 1
        tools.release.set()
        assert first.result(WAIT).ok and steer.result(WAIT) == first.result(WAIT)

        log = list(host.journal.read("s"))
        result = next(r for r in log if isinstance(r.event, ToolResult))
        after = [r for r in log if r.seq > result.seq]
        # the steering message comes right after the result, before the request that carries it
        assert isinstance(after[0].event, UserMessage)
        assert after[0].event.content == (TextPart("and mind the tests"),)
        assert isinstance(after[1].event, Request)
        assert [r.line_kind for r in log].count("request") == 2  # one for the call, one after it
        reopen_and_compare(host, tmp_path / "store", ["s"]).close()
    finally:
        tools.release.set()


def test_a_stop_while_a_tool_runs_ends_the_turn_at_once_and_closes_the_call(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        turn = host.send("s", "work: tools 2 x 5 #c", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        assert host.stop_session("s") is True  # not held by the tool
        result = turn.result(WAIT)
        assert (result.status, result.phase) == ("failed", "interrupted")
        log = list(host.journal.read("s"))
        closed = [r.event for r in log if isinstance(r.event, ToolResult)]
        assert len(closed) == 1 and closed[0].status == "error"
        assert closed[0].content == (TextPart(INTERRUPTED_RESULT),)
        assert log[-1].line_kind == "turn-failed"
        tools.release.set()  # the tool ends late: its result goes nowhere, nothing more is written
        last = log[-1].seq
        assert host.send("s", "carry on").result(WAIT).ok  # rebuilt by replay
        assert all(r.seq <= last or r.line_kind != "tool-result" for r in host.journal.read("s"))
    finally:
        tools.release.set()
        host.close()
