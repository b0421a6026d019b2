"""The host: routing, the client stream, steering, passivation, fork, manual compaction, recovery, close."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cairn import Host, HostConfig
from cairn.actors.compactor.errors import CompactionBlocked
from cairn.actors.compactor.hooks import HookContext, HookVerdict
from cairn.actors.errors import HostBusy, HostClosed, SessionExists, TurnTimeout, UnknownSession
from cairn.actors.provider.base import TextDelta
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.actors.session import turn_loop as session_actor
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import Turn
from cairn.actors.tokens import TokenCounter
from cairn.events.codec import Record
from cairn.events.errors import InputError
from cairn.events.kinds import (
    CheckpointCommitted,
    Handoff,
    SessionStarted,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import TextPart, ToolCall
from tests.actors.helpers import (
    SETTINGS,
    WAIT,
    Agent,
    Clock,
    GatedTools,
    Seed,
    SizedTools,
    kinds,
    open_host,
    reopen_and_compare,
    scripted,
    words,
)


def test_send_starts_a_session_and_streams_its_turn_live(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        turns=[
            Reply(text="looking", tool_calls=(ToolCall("c1", "read", '{"tokens": 3}'),)),
            Reply(text="all good here"),
        ],
        chunk_chars=4,
    )
    host = open_host(tmp_path / "store", provider)
    turn = host.send("s-1", "check it", workspace=tmp_path / "ws" / ".." / "ws")

    readers = [list(turn.events(timeout=WAIT)) for _ in range(2)]  # every reader sees everything
    result = turn.result(WAIT)

    assert result.ok and result.text == "all good here" and result.requests == 2
    assert readers[0] == readers[1]
    kinds_seen = [i.line_kind for i in readers[0] if isinstance(i, Record)]
    assert kinds_seen == [
        "session-started",
        "user-message",
        "turn-started",
        "request",
        "assistant-message",
        "usage",
        "tool-result",
        "request",
        "assistant-message",
        "usage",
        "turn-completed",
    ]
    deltas = "".join(i.text for i in readers[0] if isinstance(i, TextDelta))
    assert deltas == "lookingall good here"
    started = next(i.event for i in readers[0] if isinstance(i, Record) and i.line_kind == "session-started")
    assert isinstance(started, SessionStarted)
    assert started.workspace == str(tmp_path / "ws") and started.context_window == SETTINGS.context_window
    assert started.tool_schemas == SizedTools.schemas
    reopen_and_compare(host, tmp_path / "store", ["s-1"]).close()


def test_messages_a_session_cannot_take_are_rejected(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    new = host.send("s", "hello").result(WAIT)
    assert new.status == "rejected" and new.error_class == "UnknownSession"
    assert host.send("s", "hello", workspace=tmp_path).result(WAIT).ok
    other = host.send("s", "hello", workspace=tmp_path / "elsewhere").result(WAIT)
    assert other.status == "rejected" and other.error_class == "WorkspaceMismatch"
    assert host.send("s", "hello").result(WAIT).ok  # the workspace may be left out later
    with pytest.raises(ValueError):
        host.send("bad id!", "x", workspace=tmp_path)
    host.close()
    with pytest.raises(HostClosed):
        host.send("s", "late")


def test_a_closed_host_says_so_for_every_call_that_reads_the_store(tmp_path: Path) -> None:
    """Not the closed index's own error (`lmdb.Error`), which a host could not tell from a failing disk."""
    host = open_host(tmp_path / "store", scripted())
    assert host.send("s", "hello", workspace=tmp_path).result(WAIT).ok
    host.close()
    calls = {
        "sessions": lambda: list(host.sessions()),
        "transcript": lambda: host.transcript("s"),
        "fork": lambda: host.fork("s", "s2"),
        "compact": lambda: host.compact("s"),
        "interrupted_turns": host.interrupted_turns,
        "state": lambda: host.state("s"),
        "next_request": lambda: host.next_request("s"),
        "send": lambda: host.send("s", "late"),
    }
    for name, call in calls.items():
        with pytest.raises(HostClosed):
            call()
            pytest.fail(f"{name} did not raise")


def test_a_message_sent_mid_turn_steers_that_turn(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    first = host.send("s", "start: tools 1 x 10 #steer", workspace=tmp_path)
    assert tools.entered.wait(WAIT)
    steer = host.send("s", "and mind the tests")
    tools.release.set()

    one, two = first.result(WAIT), steer.result(WAIT)

    assert one.ok and two == one  # one turn, seen through both handles
    log = list(host.journal.read("s"))
    assert [r.line_kind for r in log].count("turn-started") == 1
    users = [r for r in log if isinstance(r.event, UserMessage)]
    completed = next(r for r in log if r.line_kind == "turn-completed")
    assert len(users) == 2 and users[1].seq < completed.seq
    # the steering message is part of the request that follows it
    last = [r for r in host.journal.read("s") if r.line_kind == "request"][-1]
    assert last.seq > users[1].seq
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_passivation_by_lru_cap_and_replay_on_return(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted(), max_live_sessions=2)
    states = {}
    for sid in ("a", "b", "c"):
        assert host.send(sid, f"hello {sid}: tools 1 x 20 #{sid}", workspace=tmp_path).result(WAIT).ok
        states[sid] = host.state(sid)
        assert len(host.live_sessions) <= 2
    assert host.live_sessions == ["b", "c"] and host.stats.passivated_lru == 1
    assert host.state("a") == states["a"]  # rebuilt by replay, identical
    assert host.live_sessions == ["c", "a"]
    assert host.send("a", "again").result(WAIT).ok
    assert host.stats.peak_live == 2
    reopen_and_compare(host, tmp_path / "store", ["a", "b", "c"]).close()


def test_passivation_of_idle_sessions(tmp_path: Path) -> None:
    clock = Clock()
    host = open_host(tmp_path / "store", scripted(), clock=clock, idle_timeout_s=60)
    for sid in ("a", "b"):
        assert host.send(sid, "hi", workspace=tmp_path).result(WAIT).ok
    before = host.state("a")
    clock.advance(30_000)
    assert host.send("b", "still here").result(WAIT).ok
    clock.advance(31_000)
    assert host.passivate_idle() == 1 and host.live_sessions == ["b"]
    assert host.stats.passivated_idle == 1
    assert host.state("a") == before
    host.close()


def test_a_full_registry_makes_a_new_session_wait_for_a_slot(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools, max_live_sessions=1, slot_timeout_s=0.01)
    busy = host.send("a", "work: tools 1 x 5 #a", workspace=tmp_path)
    assert tools.entered.wait(WAIT)
    with pytest.raises(HostBusy):
        host.send("b", "me too", workspace=tmp_path)
    tools.release.set()
    assert busy.result(WAIT).ok
    assert host.send("b", "me too", workspace=tmp_path).result(WAIT).ok
    assert host.live_sessions == ["b"]
    host.close()


def test_a_waiting_sender_gets_the_slot_when_a_turn_ends(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools, max_live_sessions=1)
    busy = host.send("a", "work: tools 1 x 5 #a", workspace=tmp_path)
    assert tools.entered.wait(WAIT)
    got: list[Turn] = []
    waiter = threading.Thread(target=lambda: got.append(host.send("b", "next", workspace=tmp_path)))
    waiter.start()
    tools.release.set()
    waiter.join(WAIT)
    assert busy.result(WAIT).ok and got and got[0].result(WAIT).ok
    assert host.stats.peak_live == 1
    host.close()


def test_an_unfinished_turn_is_marked_interrupted_when_its_session_loads(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    seed = Seed(host.journal, "s", str(tmp_path))
    seed.turn(tools=[30])
    call = ToolCall("lost-1", "read", '{"tokens": 5}')
    from cairn.events.kinds import AssistantMessage

    host.journal.append(
        "s",
        [
            UserMessage(message_id="ux", content=(TextPart("half done"),)),
            TurnStarted(turn_id="tx", message_id="ux"),
            AssistantMessage(message_id="ax", request_id="rx", tool_calls=(call,)),
        ],
        expected_seq=host.journal.last_seq("s"),
    )

    state = host.state("s")

    assert state.open_turn is None
    tail = list(host.journal.read("s"))[-2:]
    assert tail[0].line_kind == "tool-result" and tail[0].event.call_id == "lost-1"  # type: ignore[union-attr]
    assert tail[0].event.status == "error"  # type: ignore[union-attr]
    failed = tail[1].event
    assert isinstance(failed, TurnFailed) and failed.phase == "interrupted" and failed.turn_id == "tx"
    assert host.send("s", "go on").result(WAIT).ok  # the host may simply send again
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_a_crashed_session_is_rebuilt_by_replay_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a bug on the way to the provider, after the turn's events and its request are on disk
    real = session_actor.inline_image_blobs
    calls = {"n": 0}

    def crash_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("a bug in cairn")
        return real(*args, **kwargs)

    monkeypatch.setattr(session_actor, "inline_image_blobs", crash_once)
    host = open_host(tmp_path / "store", scripted())
    assert host.send("s", "first", workspace=tmp_path).result(WAIT).ok
    durable = list(host.journal.read("s"))

    crashed = host.send("s", "second").result(WAIT)

    assert crashed.status == "failed" and crashed.phase == "interrupted"
    assert crashed.error_class == "RuntimeError"
    after = host.send("s", "third")  # the dead actor is noticed and rebuilt by replay
    assert after.result(WAIT).ok
    assert host.stats.rebuilt_after_crash == 1
    log = list(host.journal.read("s"))
    assert log[: len(durable)] == durable  # nothing acknowledged was lost
    failed = [r.event for r in log if isinstance(r.event, TurnFailed)]
    assert [f.phase for f in failed] == ["interrupted"]  # the crashed turn, marked at the rebuild
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_close_mid_turn_records_it_interrupted_and_resolves_every_handle(tmp_path: Path) -> None:
    tools = GatedTools()
    root = tmp_path / "store"
    host = open_host(root, scripted(), tools=tools)
    turn = host.send("s", "work: tools 2 x 5 #c", workspace=tmp_path)
    assert tools.entered.wait(WAIT)
    closer = threading.Thread(target=host.close)
    closer.start()
    tools.release.set()
    closer.join(WAIT)
    assert not closer.is_alive()

    result = turn.result(WAIT)

    assert result.status == "failed" and result.phase == "interrupted"
    again = open_host(root, scripted())
    assert kinds(again.journal, "s")[-1] == "turn-failed"
    assert again.state("s").open_turn is None
    again.close()


def test_K4_manual_compaction_only_from_half_the_window(tmp_path: Path) -> None:
    blocked = {"on": False}

    def hook(context: HookContext) -> HookVerdict | None:
        assert context.trigger == "manual"
        return HookVerdict(block=True, reason="hold") if blocked["on"] else None

    host = open_host(tmp_path / "store", scripted(), hook=hook)
    small = Seed(host.journal, "small", str(tmp_path))
    small.turn(tools=[100])
    big = Seed(host.journal, "big", str(tmp_path))
    for _ in range(10):
        big.turn(tools=[1_000])  # about 10,500 tokens: over half of the 20,000 window

    declined = host.compact("small")
    assert not declined and declined.compacted is False and declined.record is None
    assert declined.reason == "below-threshold" and declined.threshold == 10_000
    assert declined.context_window == 20_000 and 0 < declined.projection < 10_000
    assert "checkpoint-committed" not in kinds(host.journal, "small")
    blocked["on"] = True
    with pytest.raises(CompactionBlocked):
        host.compact("big")
    blocked["on"] = False
    result = host.compact("big")
    assert result and result.compacted and result.reason == "compacted"
    assert result.projection >= 10_000 and result.threshold == 10_000
    record = result.record
    assert record is not None and isinstance(record.event, CheckpointCommitted)
    assert record.event.trigger == "manual" and record.event.strategy == "llm"
    assert host.state("big").checkpoint_seq == record.seq
    with pytest.raises(UnknownSession):
        host.compact("nobody")
    reopen_and_compare(host, tmp_path / "store", ["small", "big"]).close()


def test_fork_copies_history_without_handoffs_and_renumbers_checkpoints(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(user_tokens=900)
    assert host.send("s", "in the band").result(WAIT).ok  # writes a hand-off
    assert host.compact("s").compacted  # then a checkpoint after it
    parent = list(host.journal.read("s"))
    handoff_seq = next(r.seq for r in parent if isinstance(r.event, Handoff))

    last = host.fork("s", "f")

    child = list(host.journal.read("f"))
    assert last == len(child) == len(parent) - 1
    cp_parent = next(r.event for r in parent if isinstance(r.event, CheckpointCommitted))
    cp_child = next(r.event for r in child if isinstance(r.event, CheckpointCommitted))
    assert cp_parent.through_seq > handoff_seq and cp_child.through_seq == cp_parent.through_seq - 1
    assert host.state("f").context == host.state("s").context  # after the checkpoint: same messages
    with pytest.raises(SessionExists):
        host.fork("s", "f")
    with pytest.raises(UnknownSession):
        host.fork("nobody", "g")
    assert host.send("f", "carry on").result(WAIT).ok
    reopen_and_compare(host, tmp_path / "store", ["s", "f"]).close()


def test_one_adapter_per_session_from_a_factory(tmp_path: Path) -> None:
    made: dict[str, ScriptedProvider] = {}

    def factory(sid: str) -> ScriptedProvider:
        return made.setdefault(sid, ScriptedProvider(turns=[Reply(text=f"I am {sid}")]))

    host = Host.open(tmp_path / "store", provider_factory=factory, config=HostConfig(sweep=False))
    assert host.send("x", "who?", workspace=tmp_path).result(WAIT).text == "I am x"
    assert host.send("y", "who?", workspace=tmp_path).result(WAIT).text == "I am y"
    assert sorted(made) == ["x", "y"] and made["x"].calls == 1
    host.close()


def test_turn_handle_times_out_instead_of_hanging(tmp_path: Path) -> None:
    turn = Turn("s")
    with pytest.raises(TurnTimeout):
        turn.result(timeout=0)
    with pytest.raises(TurnTimeout):
        next(turn.events(timeout=0))


def test_steering_messages_join_the_active_task_a_compaction_keeps(tmp_path: Path) -> None:
    counter = TokenCounter()
    provider = ScriptedProvider(  # counts as cairn does, so its usage agrees with the local estimate
        responder=Agent(), prompt_tokens=lambda request: counter.messages(request.messages)
    )
    tools = GatedTools()
    host = open_host(tmp_path / "store", provider, tools=tools)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(12):
        seed.turn(tools=[950])  # in the hand-off band; the long steering message pushes it over
    first = host.send("s", "start: tools 2 x 100 #task")
    assert tools.entered.wait(WAIT)
    steer = host.send("s", "and keep the public API unchanged. " + words(3_000))
    tools.release.set()
    assert first.result(WAIT).ok and steer.result(WAIT).ok

    log = list(host.journal.read("s"))
    steering = [r for r in log if isinstance(r.event, UserMessage)][-1]
    checkpoint = next(r for r in log if isinstance(r.event, CheckpointCommitted))
    assert steering.seq < checkpoint.seq and isinstance(checkpoint.event, CheckpointCommitted)
    task = next(m for m in checkpoint.event.replacement_messages if m.meta.origin == "active-task")
    text = task.content if isinstance(task.content, str) else ""
    assert "start: tools 2 x 100 #task" in text and "and keep the public API unchanged" in text  # C11
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_a_host_its_embedder_drops_without_closing_does_not_hang_the_interpreter_at_exit(
    tmp_path: Path,
) -> None:
    """A dropped, unclosed host is still closed at exit (its sessions stop), and the interpreter ends."""
    import subprocess
    import sys
    import textwrap

    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = textwrap.dedent(f"""
        import gc
        from cairn import Host, HostConfig
        host = Host.open({str(tmp_path / "store")!r}, config=HostConfig(sweep=False))  # no sweeper holds it
        result = host.send("dropped", "hello", workspace={str(workspace)!r}).result(timeout=60)
        assert result.status == "completed", result
        del host, result
        gc.collect()
        print("leaving")
    """)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "CAIRN_CPU": "off"},
    )
    assert done.returncode == 0, done.stderr
    assert "leaving" in done.stdout
    with Host.open(tmp_path / "store") as host:
        assert host.journal.last_seq("dropped") > 0


class _Hung:
    """A provider whose turns stream one delta, then hang until `release` (at most `WAIT` s)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def stream(self, request: object) -> Iterator[TextDelta]:
        yield TextDelta("thinking ")
        self.entered.release()
        self.release.wait(WAIT)


def test_close_stops_every_session_at_once_so_hung_providers_cost_one_stop_timeout(tmp_path: Path) -> None:
    """Four turns held by a provider that never answers: closing waits the stop timeout (2 s here) for
    all of them together, not once per session (8 s), and every handle ends interrupted."""
    hung = _Hung()
    host = Host.open(tmp_path / "store", provider=hung, config=HostConfig(stop_timeout_s=2.0, sweep=False))
    turns = [host.send(f"s{n}", "hello", workspace=tmp_path) for n in range(4)]
    for _ in turns:
        assert hung.entered.acquire(timeout=WAIT)
    began = time.monotonic()
    host.close()
    took = time.monotonic() - began
    hung.release.set()
    assert took < 6.0, f"closing took {took:.1f} s: the sessions were stopped one after another"
    for turn in turns:
        result = turn.result(WAIT)
        assert result.status == "failed" and result.phase == "interrupted"


def test_a_stop_timeout_that_is_not_a_finite_positive_number_is_refused() -> None:
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(InputError, match="stop_timeout_s"):
            HostConfig(stop_timeout_s=bad)


class LateTools:
    """An executor whose tools appear after the host opened (an MCP server that started late)."""

    def __init__(self) -> None:
        self.schemas: tuple[str, ...] = ()

    def __call__(self, invocation: Any) -> Any:
        from cairn.actors.tools import ToolOutcome

        return ToolOutcome(content="ok")


def test_a_new_session_starts_with_the_tools_the_executor_has_now(tmp_path: Path) -> None:
    """Found from outside: with an MCP server that started after `Host.open`, every new session was
    still offered no tools, the list being taken once at open. A session keeps the schemas it began
    with (the requests' fixed prefix); a new one, with the host's settings or its own without
    schemas, takes the executor's as they are when it starts."""
    tools = LateTools()
    provider = scripted()
    settings = msgspec.structs.replace(SETTINGS, tool_schemas=())
    with open_host(tmp_path / "store", provider, tools=tools, settings=settings) as host:
        assert host.send("early", "hello", workspace=tmp_path).result(WAIT).ok
        assert provider.requests[-1].tools == ()
        tools.schemas = ('{"name":"late","parameters":{"type":"object"}}',)
        assert host.send("later", "hello", workspace=tmp_path).result(WAIT).ok
        assert provider.requests[-1].tools == tools.schemas
        assert host.send("own", "hi", workspace=tmp_path, settings=settings).result(WAIT).ok
        assert provider.requests[-1].tools == tools.schemas
        assert host.send("early", "again").result(WAIT).ok
        assert provider.requests[-1].tools == ()  # the schemas it began with


def test_a_host_given_no_settings_takes_the_providers_configured_model_window_and_cap(tmp_path: Path) -> None:
    """Found from outside: `Host.open(provider=OpenAIProvider.from_env())` recorded `model=scripted`
    and a 128,000-token window for a 2,048-token server; CAIRN_MODEL and CAIRN_CONTEXT_WINDOW never
    reached the log or the budget."""
    from cairn.actors.provider.openai_compat import OpenAIProvider

    environ = {
        "CAIRN_BASE_URL": "http://127.0.0.1:9/v1",
        "CAIRN_MODEL": "smollm2",
        "CAIRN_CONTEXT_WINDOW": "4096",
        "CAIRN_MAX_OUTPUT_TOKENS": "512",
    }
    with OpenAIProvider.from_env(environ) as provider, Host.open(tmp_path / "a", provider=provider) as host:
        assert (host.settings.model, host.settings.context_window, host.settings.max_output_tokens) == (
            "smollm2",
            4096,
            512,
        )
    with Host.open(tmp_path / "b") as host:  # the scripted provider has no configuration: the defaults
        assert host.settings == SessionSettings()
