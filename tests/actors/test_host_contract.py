"""The host contract: no budget is refused, compact() says why, interrupted turns are listed."""

from __future__ import annotations

import inspect
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cairn import AsyncHost, AsyncTurn, Host, HostConfig, SessionSettings, TextDelta, Turn, TurnResult
from cairn.actors.errors import NoInputBudget, TurnTimeout
from cairn.actors.host.inputs import budget_problem
from cairn.actors.host.interrupted import interrupted_turn
from cairn.actors.session.manual import manual_threshold
from cairn.events.codec import Record
from cairn.events.errors import InputError
from cairn.events.kinds import CheckpointCommitted, TurnFailed, TurnStarted, UserMessage
from cairn.events.model import ImagePart, TextPart
from tests.actors.helpers import WAIT, GatedTools, Seed, kinds, open_host, scripted

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "You are a test agent."  # as the system message: 11 tokens (T1, P2)


# --- settings that leave the budget unknown are refused at Host.open ---------------------------


def test_B2_open_refuses_a_window_not_larger_than_the_reserve(tmp_path: Path) -> None:
    root = tmp_path / "store"
    small = SessionSettings(context_window=8_000)  # reserve 8,192 (B1's floor) fills it
    with pytest.raises(NoInputBudget) as caught:
        Host.open(root, settings=small)
    assert "context_window=8,000" in str(caught.value) and "8,192" in str(caught.value)
    assert isinstance(caught.value, InputError)
    assert not root.exists()  # refused before the store was created


def test_B2_open_refuses_a_window_the_system_prompt_fills(tmp_path: Path) -> None:
    # window 1,011 - cap 1,000 leaves 11 tokens: exactly the system message's 11, so nothing for history
    tight = SessionSettings(context_window=1_011, max_output_tokens=1_000, system_prompt=PROMPT)
    assert budget_problem(tight, 11) is not None
    with pytest.raises(NoInputBudget):
        Host.open(tmp_path / "a", settings=tight)
    roomy = SessionSettings(context_window=1_012, max_output_tokens=1_000, system_prompt=PROMPT)
    assert budget_problem(roomy, 11) is None
    with Host.open(tmp_path / "b", settings=roomy) as host:
        assert list(host.sessions()) == []


def test_B2_an_unknown_window_on_purpose_is_accepted(tmp_path: Path) -> None:
    with Host.open(tmp_path / "store", settings=SessionSettings(context_window=None)) as host:
        assert host.send("s", "hello", workspace=str(tmp_path)).result(WAIT).ok


def test_B2_send_refuses_new_session_settings_without_budget(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    with pytest.raises(NoInputBudget):
        host.send("s", "hi", workspace=str(tmp_path), settings=SessionSettings(context_window=1_000))
    assert list(host.sessions()) == []  # nothing written
    host.close()


def test_budget_problem_names_bad_numbers() -> None:
    assert "positive" in (budget_problem(SessionSettings(context_window=0), 0) or "")
    assert "non-negative" in (budget_problem(SessionSettings(max_output_tokens=-1), 0) or "")
    assert budget_problem(SessionSettings(context_window=100_000), 0) is None  # reserve 10,000


# --- compact() says why it did nothing -------------------------------------------------------


def test_K4_threshold_is_half_the_window_rounded_up() -> None:
    assert manual_threshold(20_000) == 10_000
    assert manual_threshold(20_001) == 10_001
    assert manual_threshold(None) is None and manual_threshold(0) is None


def test_K4_compact_below_half_the_window_says_so(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    Seed(host.journal, "s", str(tmp_path)).turn(tools=[100])
    result = host.compact("s")
    assert not result and result.compacted is False and result.record is None
    assert result.reason == "below-threshold"
    assert result.threshold == 10_000 and result.context_window == 20_000
    assert 100 < result.projection < 10_000 and result.projection_source == "local_estimate"
    assert "checkpoint-committed" not in kinds(host.journal, "s")
    host.close()


def test_K4_compact_without_a_window_says_the_window_is_unknown(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    seed = Seed(host.journal, "s", str(tmp_path), window=None, cap=None)
    for _ in range(10):
        seed.turn(tools=[1_000])
    result = host.compact("s")
    assert not result and result.reason == "window-unknown"
    assert result.threshold is None and result.context_window is None
    assert result.projection > 10_000
    host.close()


def test_K4_compact_that_compacts_carries_its_checkpoint(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(10):
        seed.turn(tools=[1_000])
    result = host.compact("s")
    assert result and result.reason == "compacted" and result.threshold == 10_000
    assert result.record is not None and isinstance(result.record.event, CheckpointCommitted)
    assert result.record.seq == host.journal.last_seq("s")
    host.close()


# --- interrupted turns, with the message to send again ---------------------------------------


def _record(seq: int, event: object, ts: int = 0) -> Record:
    return Record(pos=seq - 1, sid="s", seq=seq, ts=ts or 1_000 * seq, prev="", event=event)  # type: ignore[arg-type]


def test_interrupted_turn_fold_keeps_only_the_last_unfinished_turn() -> None:
    ask = UserMessage(
        message_id="u1", content=(TextPart("fix "), TextPart("it"), ImagePart("image/png", "aA=="))
    )
    records = [
        _record(1, ask),
        _record(2, TurnStarted(turn_id="t1", message_id="u1")),
        _record(3, UserMessage(message_id="u2", content=(TextPart("and the docs"),))),
    ]
    open_turn = interrupted_turn("s", records)
    assert open_turn is not None and open_turn.state == "open" and open_turn.interrupted_ms is None
    assert (open_turn.text, open_turn.images, open_turn.steering) == ("fix it", 1, ("and the docs",))
    assert open_turn.started_ms == 2_000
    failed = TurnFailed(turn_id="t1", phase="interrupted", error_class="interrupted", error="crash")
    marked = interrupted_turn("s", [*records, _record(4, failed)])
    assert marked is not None and marked.state == "interrupted"
    assert (marked.interrupted_ms, marked.reason, marked.turn_id) == (4_000, "crash", "t1")
    other = TurnFailed(turn_id="t1", phase="provider", error_class="server", error="500")
    assert interrupted_turn("s", [*records, _record(4, other)]) is None  # failed, not interrupted
    again = [
        _record(5, UserMessage(message_id="u5", content=(TextPart("fix it"),))),
        _record(6, TurnStarted(turn_id="t6", message_id="u5")),
    ]
    resent = interrupted_turn("s", [*records, _record(4, failed), *again])
    assert resent is not None and resent.turn_id == "t6" and resent.state == "open"  # the new one runs


def test_interrupted_turns_after_a_stop_and_a_resend(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    host.send("done", "hello", workspace=str(tmp_path)).result(WAIT)
    turn = host.send("held", "tools 1 x 10 #held", workspace=str(tmp_path))
    assert tools.entered.wait(WAIT)
    assert host.interrupted_turns() == []  # running here: not interrupted
    host.stop_session("held")
    tools.release.set()
    assert turn.result(WAIT).phase == "interrupted"
    [found] = host.interrupted_turns()
    assert (found.session, found.state, found.text) == ("held", "interrupted", "tools 1 x 10 #held")
    assert found.turn_id == turn.result().turn_id
    assert host.send("held", found.text).result(WAIT).ok
    assert host.interrupted_turns() == []
    host.close()


_CHILD = """
import sys, threading
from pathlib import Path
from cairn.actors.tools import ToolOutcome
from tests.actors.helpers import open_host, scripted

def blocking(invocation):
    print("in-tool", flush=True)
    threading.Event().wait()
    return ToolOutcome(content="never")

host = open_host(Path(sys.argv[1]), scripted(), tools=blocking)
host.send("crashed", "tools 1 x 10 #crash", workspace=sys.argv[2])
threading.Event().wait()
"""


def test_interrupted_turns_after_a_sigkill(tmp_path: Path) -> None:
    root = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root), str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"in-tool\n"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(WAIT)
    host = open_host(root, scripted())
    [found] = host.interrupted_turns()
    assert (found.session, found.state, found.text) == ("crashed", "open", "tools 1 x 10 #crash")
    host.state("crashed")  # loading it records the interruption
    [marked] = host.interrupted_turns()
    assert marked.state == "interrupted" and marked.turn_id == found.turn_id
    assert marked.interrupted_ms is not None and marked.interrupted_ms >= marked.started_ms
    host.close()


# --- every timeout is finite by default -------------------------------------------------------


def test_every_wait_a_host_is_offered_is_finite_by_default() -> None:
    assert inspect.signature(Turn.result).parameters["timeout"].default == 3_600.0
    assert inspect.signature(Turn.events).parameters["timeout"].default == 3_600.0
    assert inspect.signature(AsyncTurn.result).parameters["timeout"].default == 3_600.0
    assert inspect.signature(AsyncTurn.events).parameters["timeout"].default == 3_600.0
    assert inspect.signature(Host.compact).parameters["timeout"].default == 600.0
    assert inspect.signature(AsyncHost.compact).parameters["timeout"].default == 600.0
    config = HostConfig()
    assert (config.ask_timeout_s, config.slot_timeout_s) == (30.0, 60.0)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(InputError):
            HostConfig(request_timeout_s=bad)
    assert HostConfig(request_timeout_s=5.0).request_timeout_s == 5.0


def test_a_turn_wait_that_times_out_leaves_the_turn_to_finish(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    turn = host.send("s", "tools 1 x 10 #held", workspace=str(tmp_path))
    assert tools.entered.wait(WAIT)
    with pytest.raises(TurnTimeout):
        turn.result(timeout=0.01)
    tools.release.set()
    assert turn.result(WAIT).ok
    host.close()


# --- Turn.watch: what AsyncHost bridges to a loop ---------------------------------------------


def test_watch_gives_the_backlog_then_each_new_item_once_and_drops_a_failing_watcher() -> None:
    turn = Turn("s")
    turn._publish(TextDelta("a"))
    seen: list[object] = []
    backlog, ended = turn.watch(seen.append)
    assert backlog == [TextDelta("a")] and ended is None

    def broken(news: object) -> None:
        raise RuntimeError("the loop is closed")

    turn.watch(broken)
    turn._publish(TextDelta("b"))  # the broken watcher is dropped, the turn goes on
    late: list[object] = []
    turn.watch(late.append)
    turn.unwatch(late.append)
    turn.unwatch(late.append)  # a no-op the second time
    result = TurnResult(session="s", status="completed")
    turn._finish(result)
    assert seen == [TextDelta("b"), result] and late == []
    assert turn.watch(seen.append) == ([TextDelta("a"), TextDelta("b")], result)
    assert len(seen) == 2  # an ended turn is not watched
