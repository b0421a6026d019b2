"""`Turn.cancel()` and the policy for a message sent mid-turn (`Host.send(..., mid_turn=)`).

A cancelled turn is recorded as `turn-cancelled`, not as a failure and not as
a turn a crash interrupted: its open calls are closed with an error result,
the session goes on without a replay, and `interrupted_turns()` never lists
it. Real hosts, real threads; turns are held by events, never by sleeping.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import InputError
from cairn.actors.provider.base import Finished, ProviderOutput, ProviderRequest, TextDelta, UsageReport
from cairn.actors.session.turn import CANCELLED_RESULT
from cairn.actors.session.turn_loop import INTERRUPTING
from cairn.events.kinds import ToolResult, TurnCancelled, UserMessage
from cairn.events.model import TextPart
from tests.actors.helpers import WAIT, GatedTools, kinds, open_host, reopen_and_compare, scripted
from tests.actors.test_async_host import open_async


def test_cancel_while_a_tool_runs_records_turn_cancelled_and_the_session_goes_on(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        turn = host.send("s", "work: tools 2 x 5 #c", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        turn.cancel("the user pressed stop")
        result = turn.result(WAIT)
        assert (result.status, result.phase, result.error) == ("cancelled", None, "the user pressed stop")
        assert not result.ok
        log = list(host.journal.read("s"))
        assert [r.line_kind for r in log][-2:] == ["tool-result", "turn-cancelled"]
        closed = log[-2].event
        assert isinstance(closed, ToolResult) and closed.status == "error"
        assert closed.content == (TextPart(CANCELLED_RESULT),)
        ended = log[-1].event
        assert isinstance(ended, TurnCancelled) and ended.reason == "the user pressed stop"
        assert host.state("s").open_turn is None
        assert host.interrupted_turns() == []  # ended on purpose: nothing to continue
        tools.release.set()  # the tool ends late: its outcome goes nowhere
        assert host.send("s", "carry on").result(WAIT).ok
        assert host.stats.spawned == 1  # the same actor: no replay
        assert kinds(host.journal, "s").count("tool-result") == 1
        reopen_and_compare(host, tmp_path / "store", ["s"]).close()
    finally:
        tools.release.set()


class HeldProvider:
    """Streams one delta, then waits for `release` before the rest: a request held mid-stream."""

    def __init__(self) -> None:
        self.streaming = threading.Event()
        self.release = threading.Event()

    def stream(self, request: ProviderRequest) -> Iterator[ProviderOutput]:
        if request.purpose == "turn" and not self.streaming.is_set():
            yield TextDelta("Let me think")
            self.streaming.set()
            assert self.release.wait(WAIT)
        yield TextDelta("Done.")
        yield UsageReport(prompt_tokens=100, completion_tokens=5, total_tokens=105)
        yield Finished("stop")


def test_cancel_mid_stream_abandons_the_request_and_records_no_assistant_message(tmp_path: Path) -> None:
    provider = HeldProvider()
    host = open_host(tmp_path / "store", provider)
    try:
        turn = host.send("s", "think hard", workspace=tmp_path)
        assert provider.streaming.wait(WAIT)
        turn.cancel()
        assert turn.result(WAIT).status == "cancelled"
        provider.release.set()  # the rest of the stream reaches nobody
        assert kinds(host.journal, "s")[-2:] == ["request", "turn-cancelled"]
        assert host.send("s", "something easier").result(WAIT).text == "Done."
        assert "assistant-message" in kinds(host.journal, "s")[-4:]
    finally:
        provider.release.set()
        host.close()


def test_cancel_after_the_turn_ended_changes_nothing(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    try:
        turn = host.send("s", "hello", workspace=tmp_path)
        assert turn.result(WAIT).ok
        before = host.journal.last_seq("s")
        turn.cancel()
        assert turn.result(WAIT).ok and host.state("s").last_seq == before
    finally:
        host.close()


def test_a_message_queued_behind_a_turn_is_withdrawn_without_a_trace(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        first = host.send("s", "work: tools 1 x 5 #q", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        later = host.send("s", "then this", mid_turn="queue")
        later.cancel()
        assert later.result(WAIT).status == "cancelled"  # before anything of it was written
        tools.release.set()
        assert first.result(WAIT).ok
        texts = [r.event.content for r in host.journal.read("s") if isinstance(r.event, UserMessage)]
        assert texts == [(TextPart("work: tools 1 x 5 #q"),)]
    finally:
        tools.release.set()
        host.close()


def test_mid_turn_queue_starts_the_next_turn_after_the_running_one(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        first = host.send("s", "work: tools 1 x 5 #q", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        second = host.send("s", "and then this", mid_turn="queue")
        tools.release.set()
        one, two = first.result(WAIT), second.result(WAIT)
        assert one.ok and two.ok and one.turn_id != two.turn_id
        log = kinds(host.journal, "s")
        assert log.count("turn-started") == 2 and log.count("turn-completed") == 2
        # the queued message was recorded after the first turn's end, not steering it
        assert log.index("turn-completed") < len(log) - log[::-1].index("user-message") - 1
    finally:
        tools.release.set()
        host.close()


def test_mid_turn_reject_refuses_the_message_and_records_nothing(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        first = host.send("s", "work: tools 1 x 5 #r", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        refused = host.send("s", "not now", mid_turn="reject").result(WAIT)
        assert (refused.status, refused.error_class) == ("rejected", "TurnRunning")
        tools.release.set()
        assert first.result(WAIT).ok
        assert kinds(host.journal, "s").count("user-message") == 1
    finally:
        tools.release.set()
        host.close()


def test_mid_turn_interrupt_cancels_the_running_turn_and_starts_the_next(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        first = host.send("s", "work: tools 2 x 5 #i", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        second = host.send("s", "stop that, do this instead", mid_turn="interrupt")
        assert second.result(WAIT).ok
        one = first.result(WAIT)
        assert (one.status, one.error) == ("cancelled", INTERRUPTING)
        ended = [r.event for r in host.journal.read("s") if isinstance(r.event, TurnCancelled)]
        assert [e.turn_id for e in ended] == [one.turn_id] and ended[0].reason == INTERRUPTING
        reopen_and_compare(host, tmp_path / "store", ["s"]).close()
    finally:
        tools.release.set()


def test_a_resend_of_a_cancelled_turns_message_is_answered_cancelled_from_the_log(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        turn = host.send("s", "work: tools 1 x 5 #k", workspace=tmp_path, idempotency_key="k-1")
        assert tools.entered.wait(WAIT)
        turn.cancel("changed my mind")
        assert turn.result(WAIT).status == "cancelled"
        again = host.send("s", "work: tools 1 x 5 #k", idempotency_key="k-1").result(WAIT)
        assert (again.status, again.error, again.turn_id) == (
            "cancelled",
            "changed my mind",
            turn.result().turn_id,
        )
    finally:
        tools.release.set()
        host.close()


@pytest.mark.parametrize("policy", ["", "STEER", "later", None, 3])
def test_an_unknown_mid_turn_policy_is_refused_before_anything_is_written(
    tmp_path: Path, policy: object
) -> None:
    host = open_host(tmp_path / "store", scripted())
    try:
        with pytest.raises(InputError, match="mid_turn"):
            host.send("s", "hello", workspace=tmp_path, mid_turn=policy)  # type: ignore[arg-type]
        assert host.journal.last_seq("s") == 0
    finally:
        host.close()


def test_async_turn_cancel(tmp_path: Path) -> None:
    tools = GatedTools()

    async def main() -> None:
        async with open_async(tmp_path / "store", scripted(), tools=tools) as host:
            turn = await host.send("s", "work: tools 1 x 5 #a", workspace=tmp_path)
            assert await asyncio.to_thread(tools.entered.wait, WAIT)
            turn.cancel("from the loop")
            result = await turn.result()
            assert (result.status, result.error) == ("cancelled", "from the loop")

    try:
        asyncio.run(main())
    finally:
        tools.release.set()
