"""Deferred tool results: a call whose executor returns `Deferred` waits for `Host.resolve_tool`.

The turn waits in its tools mode (`machine.AwaitingTools`, deferred) without
blocking the session; the host posts what the model should see (a client ran
the tool, or a person said yes or no: an approval pause). After the timeout
the model gets an error result instead, and a late result is refused. Real
hosts and threads; the timeout's clock is a sleep the test controls.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from cairn import Deferred, InputError, ToolNotWaiting, ToolOutcome
from cairn.actors.provider.scripted import Reply
from cairn.actors.tools import ToolInvocation
from cairn.events.kinds import ToolResult
from cairn.events.model import TextPart, ToolCall, text_of
from tests.actors.helpers import WAIT, kinds, open_host, reopen_and_compare, scripted
from tests.actors.helpers import Clock as MsClock
from tests.actors.test_async_host import open_async


class NeedsApproval:
    """`write` waits for a person's yes or no (Deferred); `read` runs at once."""

    schemas = (
        '{"name":"read","parameters":{"type":"object"}}',
        '{"name":"write","parameters":{"type":"object"}}',
    )
    read_only = ("read",)

    def __init__(self, timeout_s: float | None = None) -> None:
        self.deferred = threading.Event()
        self.timeout_s = timeout_s

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome | Deferred:
        if invocation.name == "write":
            self.deferred.set()
            return Deferred(timeout_s=self.timeout_s)
        return ToolOutcome(content="file contents")


class Clock:
    """The deferred timeout's sleep: it returns when the test says the time is up."""

    def __init__(self) -> None:
        self.up = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.up.wait(WAIT)


WRITE = ToolCall("w-1", "write", '{"path": "notes.md"}')


def waiting(host, sid: str = "s") -> tuple[ToolCall, ...]:  # type: ignore[no-untyped-def]
    """The calls waiting, once the session has taken the executor's `Deferred` (it comes by message
    after the executor returned): asked again until they show, without sleeping."""
    deadline = time.monotonic() + WAIT
    while not (calls := host.waiting_tools(sid)) and time.monotonic() < deadline:
        pass
    return calls  # type: ignore[no-any-return]


def _provider():  # type: ignore[no-untyped-def]
    return scripted(
        Reply(text="Reading first.", tool_calls=(ToolCall("r-1", "read", "{}"), WRITE)),
        Reply(text="Done with the notes."),
    )


def _results(host, sid: str = "s") -> list[ToolResult]:  # type: ignore[no-untyped-def]
    return [r.event for r in host.journal.read(sid) if isinstance(r.event, ToolResult)]


def test_an_approved_call_gets_the_hosts_result_and_the_turn_goes_on(tmp_path: Path) -> None:
    tools, clock = NeedsApproval(), Clock()
    host = open_host(tmp_path / "store", _provider(), tools=tools, sleep=clock.sleep)
    try:
        turn = host.send("s", "write the notes", workspace=tmp_path)
        assert waiting(host) == (WRITE,)
        assert kinds(host.journal, "s")[-2:] == [
            "tool-result",
            "tool-deferred",
        ]  # the read ran; the write waits
        host.resolve_tool("s", "w-1", ToolOutcome(content="approved: wrote 12 chars", effect="write"))
        result = turn.result(WAIT)
        assert result.ok and result.text == "Done with the notes."
        written = _results(host)[-1]
        assert (written.call_id, written.status, written.effect) == ("w-1", "ok", "write")
        assert written.content == (TextPart("approved: wrote 12 chars"),)
        assert host.waiting_tools("s") == ()
        with pytest.raises(ToolNotWaiting):  # answered: a second result changes nothing
            host.resolve_tool("s", "w-1", ToolOutcome(content="again"))
        assert len(_results(host)) == 2
        reopen_and_compare(host, tmp_path / "store", ["s"]).close()
    finally:
        clock.up.set()


def test_a_declined_call_is_an_error_result_the_model_sees(tmp_path: Path) -> None:
    tools, clock = NeedsApproval(), Clock()
    host = open_host(tmp_path / "store", _provider(), tools=tools, sleep=clock.sleep)
    try:
        turn = host.send("s", "write the notes", workspace=tmp_path)
        assert waiting(host) == (WRITE,)
        host.resolve_tool("s", "w-1", ToolOutcome(content="the user declined this write", status="error"))
        assert turn.result(WAIT).ok
        assert _results(host)[-1].status == "error"
    finally:
        clock.up.set()
        host.close()


def test_without_a_result_in_time_the_model_gets_a_timeout_and_a_late_one_is_refused(tmp_path: Path) -> None:
    tools, clock = NeedsApproval(timeout_s=90), Clock()
    host = open_host(tmp_path / "store", _provider(), tools=tools, sleep=clock.sleep)
    try:
        turn = host.send("s", "write the notes", workspace=tmp_path)
        assert tools.deferred.wait(WAIT)
        clock.up.set()  # 90 s pass
        assert turn.result(WAIT).ok
        late = _results(host)[-1]
        assert late.status == "error" and "within 90 s" in late.content[0].text  # type: ignore[union-attr]
        with pytest.raises(ToolNotWaiting):
            host.resolve_tool("s", "w-1", ToolOutcome(content="too late"))
        assert len(_results(host)) == 2
    finally:
        clock.up.set()
        host.close()


@pytest.mark.parametrize(
    ("call_id", "outcome", "error"),
    [
        ("nope", ToolOutcome(content="x"), ToolNotWaiting),  # no such call
        ("r-1", ToolOutcome(content="x"), ToolNotWaiting),  # answered already (it ran at once)
        ("", ToolOutcome(content="x"), InputError),
        ("w-1", ToolOutcome(content=12345), InputError),  # type: ignore[arg-type]
        ("w-1", "just text", InputError),
    ],
)
def test_a_bad_result_is_refused_and_changes_nothing(
    tmp_path: Path, call_id: str, outcome: object, error: type[Exception]
) -> None:
    tools, clock = NeedsApproval(), Clock()
    host = open_host(tmp_path / "store", _provider(), tools=tools, sleep=clock.sleep)
    try:
        turn = host.send("s", "write the notes", workspace=tmp_path)
        assert waiting(host) == (WRITE,)
        before = host.journal.last_seq("s")
        with pytest.raises(error):
            host.resolve_tool("s", call_id, outcome)  # type: ignore[arg-type]
        assert host.journal.last_seq("s") == before and host.waiting_tools("s") == (WRITE,)
        host.resolve_tool("s", "w-1", ToolOutcome(content="ok"))  # the call still waits for its result
        assert turn.result(WAIT).ok
    finally:
        clock.up.set()
        host.close()


def test_a_turn_waiting_for_a_result_can_be_cancelled_and_stopped(tmp_path: Path) -> None:
    tools, clock = NeedsApproval(), Clock()
    host = open_host(tmp_path / "store", _provider(), tools=tools, sleep=clock.sleep)
    try:
        turn = host.send("s", "write the notes", workspace=tmp_path)
        assert waiting(host) == (WRITE,)
        turn.cancel("never mind")
        assert turn.result(WAIT).status == "cancelled"
        assert _results(host)[-1].call_id == "w-1" and _results(host)[-1].status == "error"
        with pytest.raises(ToolNotWaiting):
            host.resolve_tool("s", "w-1", ToolOutcome(content="late"))
    finally:
        clock.up.set()
        host.close()


def test_a_bad_deferred_timeout_is_an_error_result(tmp_path: Path) -> None:
    tools, clock = NeedsApproval(timeout_s=-1), Clock()
    host = open_host(tmp_path / "store", _provider(), tools=tools, sleep=clock.sleep)
    try:
        assert host.send("s", "write the notes", workspace=tmp_path).result(WAIT).ok
        assert "bad timeout" in _results(host)[-1].content[0].text  # type: ignore[union-attr]
    finally:
        clock.up.set()
        host.close()


def test_async_host_waiting_tools_and_resolve_tool(tmp_path: Path) -> None:
    tools, clock = NeedsApproval(), Clock()

    async def main() -> None:
        async with open_async(tmp_path / "store", _provider(), tools=tools, sleep=clock.sleep) as host:
            turn = await host.send("s", "write the notes", workspace=tmp_path)
            assert await asyncio.to_thread(waiting, host.host) == (WRITE,)
            assert await host.waiting_tools("s") == (WRITE,)
            await host.resolve_tool("s", "w-1", ToolOutcome(content="approved"))
            assert (await turn.result()).ok

    try:
        asyncio.run(main())
    finally:
        clock.up.set()


class AsyncTools:
    """An `async def` executor: `read` awaits the loop; `hang` never finishes."""

    schemas = ('{"name":"read","parameters":{"type":"object"}}',)
    read_only = ("read",)

    def __init__(self) -> None:
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        self.loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return ToolOutcome(content=f"read on the loop: {invocation.call.id}")


def test_an_async_executor_runs_its_calls_on_the_hosts_loop(tmp_path: Path) -> None:
    tools = AsyncTools()
    provider = scripted(
        Reply(text="Reading.", tool_calls=(ToolCall("a-1", "read", "{}"),)), Reply(text="Read.")
    )

    async def main() -> None:
        async with open_async(tmp_path / "store", provider, tools=tools) as host:
            turn = await host.send("s", "read it", workspace=tmp_path)
            assert (await turn.result()).ok
            assert tools.loops == [asyncio.get_running_loop()]
            results = [r.event for r in host.host.journal.read("s") if isinstance(r.event, ToolResult)]
            assert results[0].content == (TextPart("read on the loop: a-1"),)

    asyncio.run(main())


def test_an_async_executor_that_hangs_is_cancelled_after_tool_timeout_s(tmp_path: Path) -> None:
    cancelled = threading.Event()

    async def hang(invocation: ToolInvocation) -> ToolOutcome:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        raise AssertionError("never")

    provider = scripted(
        Reply(text="Trying.", tool_calls=(ToolCall("h-1", "read", "{}"),)), Reply(text="Gave up.")
    )

    async def main() -> None:
        async with open_async(tmp_path / "store", provider, tools=hang, tool_timeout_s=0.2) as host:
            turn = await host.send("s", "try it", workspace=tmp_path)
            assert (await turn.result()).ok
            assert await asyncio.to_thread(cancelled.wait, WAIT)
            results = [r.event for r in host.host.journal.read("s") if isinstance(r.event, ToolResult)]
            assert results[0].status == "error"
            # what the model reads says what happened: cancelled, not "may still be running" (the
            # executor's own wait or the tool runner's, whichever timer fires first, says so)
            said = text_of(results[0].content)
            assert said.endswith("(the host's tool_timeout_s); it was cancelled"), said
            assert "may still be running" not in said

    asyncio.run(main())


def test_an_async_executors_own_timeout_reads_as_the_tool_runners() -> None:
    """The executor's own wait ending first (the race the test above leaves to chance) gives the same
    words: it answers as the tool runner does, and the session words it once."""
    from cairn.actors.host.async_host import LoopTools
    from cairn.actors.session.tool_calls import run_tool

    async def hang(invocation: ToolInvocation) -> ToolOutcome:
        await asyncio.Event().wait()
        raise AssertionError("never")

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        tools = LoopTools(hang, loop, 0.05)
        outcome = run_tool(tools, ToolCall("h-1", "read", "{}"), session="s", workspace="/w", turn_id="t")
        assert isinstance(outcome, ToolOutcome) and outcome.status == "error"
        assert text_of(outcome.content) == (
            "the tool 'read' did not finish within 0.05 s (the host's tool_timeout_s); it was cancelled"
        )
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


def test_a_wait_for_a_deferred_result_survives_a_restart_and_the_result_completes_the_turn(
    tmp_path: Path,
) -> None:
    """Issue 25 point 2. The host closes while the write waits: the log keeps the turn open (a
    `tool-deferred` last, no `turn-failed`), the handle ends `TurnSuspended`, and the turn is not
    listed as interrupted. A new host loads the session, the call waits again, and the posted
    result completes the turn: the read is not run again."""
    store, tools = tmp_path / "store", NeedsApproval(timeout_s=600)
    host = open_host(store, _provider(), tools=tools, sleep=Clock().sleep)
    try:
        turn = host.send("s", "write the notes", workspace=tmp_path)
        assert waiting(host) == (WRITE,)
    finally:
        host.close()
    suspended = turn.result(WAIT)
    assert (suspended.phase, suspended.error_class) == ("interrupted", "TurnSuspended")
    provider = scripted(Reply(text="Done with the notes."))
    again = open_host(store, provider, tools=NeedsApproval(), sleep=Clock().sleep)
    try:
        assert kinds(again.journal, "s")[-1] == "tool-deferred"
        assert again.interrupted_turns() == []
        assert again.waiting_tools("s") == (WRITE,)  # loading resumed the wait
        again.resolve_tool("s", "w-1", ToolOutcome(content="approved", effect="write"))
        after = again.send("s", "and then?", workspace=tmp_path, mid_turn="queue")  # starts once it ends
        assert after.result(WAIT).ok
        done = kinds(again.journal, "s")
        resumed = done[done.index("tool-deferred") + 1 :]
        assert resumed[:4] == ["tool-result", "request", "assistant-message", "usage"]
        assert resumed[4] == "turn-completed"
        assert [r.call_id for r in _results(again)] == ["r-1", "w-1"]  # the read ran once
    finally:
        again.close()


def test_a_deferred_wait_whose_time_ran_out_while_down_times_out_when_loaded(tmp_path: Path) -> None:
    """The host was down past the call's timeout (60 s): loading the session resumes the wait with no
    time left, so the model gets the timeout's error result at once and the turn goes on."""
    store, clock = tmp_path / "store", MsClock()
    host = open_host(store, _provider(), tools=NeedsApproval(timeout_s=60), clock=clock, sleep=Clock().sleep)
    try:
        host.send("s", "write the notes", workspace=tmp_path)
        assert waiting(host) == (WRITE,)
    finally:
        host.close()
    clock.advance(61_000)
    again = open_host(store, scripted(Reply(text="It timed out.")), tools=NeedsApproval(), clock=clock)
    try:
        after = again.send("s", "so?", workspace=tmp_path, mid_turn="queue")
        assert after.result(WAIT).ok
        result = _results(again)[-1]
        assert result.call_id == "w-1" and result.status == "error"
        assert "no result came for this tool call within 60 s" in str(result.content)
    finally:
        again.close()
