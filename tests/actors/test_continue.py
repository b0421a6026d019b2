"""Continuing or dismissing an interrupted turn (`Host.continue_turn`, `Host.dismiss_interrupted`).

An interrupted turn stays in `interrupted_turns()` until it is continued (a
new turn on the same message, whose `turn-started` names the turn it
`continues`; what the interrupted one recorded stays, nothing is run again)
or dismissed (`turn-dismissed`). Real hosts and threads, turns held by events.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cairn import InputError, NotInterrupted, TurnRunning
from cairn.actors.host.client_view import ShownTurnStarted
from cairn.events.kinds import ToolResult, TurnDismissed, TurnStarted
from tests.actors.helpers import WAIT, GatedTools, kinds, open_host, reopen_and_compare, scripted
from tests.actors.test_async_host import open_async


def _interrupt(host, tools: GatedTools, root: Path, sid: str = "s") -> str:  # type: ignore[no-untyped-def]
    """Start a turn that calls two tools, stop the session during the first: the turn's id."""
    turn = host.send(sid, "work: tools 2 x 5 #c", workspace=root)
    assert tools.entered.wait(WAIT)
    assert host.stop_session(sid)
    result = turn.result(WAIT)
    assert (result.status, result.phase) == ("failed", "interrupted")
    tools.release.set()
    return str(result.turn_id)


def test_a_continued_turn_starts_on_the_same_message_and_runs_nothing_twice(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        interrupted = _interrupt(host, tools, tmp_path)
        (listed,) = host.interrupted_turns()
        assert (listed.turn_id, listed.state) == (interrupted, "interrupted")
        before = [r.event for r in host.journal.read("s") if isinstance(r.event, ToolResult)]
        turn = host.continue_turn("s", interrupted)
        result = turn.result(WAIT)
        assert result.ok and result.turn_id != interrupted
        started = [r.event for r in host.journal.read("s") if isinstance(r.event, TurnStarted)]
        assert started[-1].continues == interrupted
        assert started[-1].message_id == started[0].message_id  # the same user message
        assert host.interrupted_turns() == []
        shown = [e.item for e in host.transcript("s", limit=1000).entries]
        assert [item.continues for item in shown if isinstance(item, ShownTurnStarted)] == [
            None,
            interrupted,
        ]
        results = [r.event for r in host.journal.read("s") if isinstance(r.event, ToolResult)]
        assert results[: len(before)] == before  # what it recorded stays, in place
        ids = [invocation.call.id for invocation in tools.calls]
        assert len(ids) == len(set(ids))  # no call was run again
        reopen_and_compare(host, tmp_path / "store", ["s"]).close()
    finally:
        tools.release.set()


def test_a_dismissed_turn_is_no_longer_listed_and_nothing_else_changes(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        interrupted = _interrupt(host, tools, tmp_path)
        state = host.state("s")
        host.dismiss_interrupted("s", interrupted, "the user started over")
        assert host.interrupted_turns() == []
        last = list(host.journal.read("s"))[-1].event
        assert isinstance(last, TurnDismissed) and (last.turn_id, last.reason) == (
            interrupted,
            "the user started over",
        )
        after = host.state("s")
        assert (after.context, after.open_turn) == (state.context, state.open_turn)
        with pytest.raises(NotInterrupted):  # dismissed already
            host.dismiss_interrupted("s", interrupted)
        rejected = host.continue_turn("s", interrupted).result(WAIT)
        assert (rejected.status, rejected.error_class) == ("rejected", "NotInterrupted")
        reopen_and_compare(host, tmp_path / "store", ["s"]).close()
    finally:
        tools.release.set()


def test_after_a_restart_the_interrupted_turn_is_continued(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    interrupted = _interrupt(host, tools, tmp_path)
    host.close()
    released = GatedTools()
    released.release.set()
    host = open_host(tmp_path / "store", scripted(), tools=released)
    try:
        assert [t.turn_id for t in host.interrupted_turns()] == [interrupted]
        assert host.continue_turn("s", interrupted).result(WAIT).ok
        assert host.interrupted_turns() == []
    finally:
        host.close()


def test_a_turn_that_is_not_the_interrupted_one_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        interrupted = _interrupt(host, tools, tmp_path)
        before = host.journal.last_seq("s")
        for wrong in ("t1", "nope", interrupted + "x"):
            refused = host.continue_turn("s", wrong).result(WAIT)
            assert (refused.status, refused.error_class) == ("rejected", "NotInterrupted")
            with pytest.raises(NotInterrupted):
                host.dismiss_interrupted("s", wrong)
        for bad in ("", None, 7, "x" * 300):
            with pytest.raises(InputError):
                host.continue_turn("s", bad)  # type: ignore[arg-type]
            with pytest.raises(InputError):
                host.dismiss_interrupted("s", bad)  # type: ignore[arg-type]
        assert host.journal.last_seq("s") == before
    finally:
        tools.release.set()
        host.close()


def test_while_a_turn_runs_continue_and_dismiss_are_refused(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        interrupted = _interrupt(host, tools, tmp_path)
        running_tools = GatedTools()
        host.close()
        host = open_host(tmp_path / "store", scripted(), tools=running_tools)
        running = host.send("s", "meanwhile: tools 1 x 5 #m")
        assert running_tools.entered.wait(WAIT)
        refused = host.continue_turn("s", interrupted).result(WAIT)
        assert (refused.status, refused.error_class) == ("rejected", "TurnRunning")
        with pytest.raises(TurnRunning):
            host.dismiss_interrupted("s", interrupted)
        running_tools.release.set()
        assert running.result(WAIT).ok
        assert "turn-dismissed" not in kinds(host.journal, "s")
    finally:
        tools.release.set()
        host.close()


def test_async_host_continue_and_dismiss(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    interrupted = _interrupt(host, tools, tmp_path)
    host.close()

    async def main() -> None:
        async with open_async(tmp_path / "store", scripted()) as ahost:
            turn = await ahost.continue_turn("s", interrupted)
            assert (await turn.result()).ok
            assert await ahost.interrupted_turns() == []
            with pytest.raises(NotInterrupted):
                await ahost.dismiss_interrupted("s", interrupted)

    asyncio.run(main())
