"""The turn loop end to end on the scripted provider: L1-L4, H6-H7 and K2, each with replay equivalence.

Each scenario seeds a session's history in a real journal (as a past run
would have left it), sends one message through a real host, checks what the
log and the provider saw, then reopens the store: a fresh host must rebuild
the same state and the same next request.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest

from cairn.actors.compactor.checkpoint import source_hash, strip_handoff
from cairn.actors.compactor.hooks import HookContext, HookVerdict
from cairn.actors.session import preparing as session_preparing
from cairn.actors.session.handoff import handoff_failure_line
from cairn.actors.session.slimming import apply_plan, plan_snip
from cairn.actors.session.tracker import occupancy
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.events.errors import LineTooLarge
from cairn.events.kinds import CheckpointCommitted, ContextSlimmed, Handoff, Request
from cairn.events.state import SessionState, replay
from cairn.store import Journal
from tests.actors.helpers import (
    WAIT,
    Clock,
    Disk,
    Seed,
    kinds,
    open_host,
    reopen_and_compare,
    scripted,
)


def _measure(state: SessionState) -> tuple[HistoryView, object]:
    view = HistoryView(TokenCounter())
    return view, occupancy(state, view)


def _turn_requests(provider) -> list:  # type: ignore[no-untyped-def]
    return [r for r in provider.requests if r.purpose == "turn"]


def _unnumbered(messages: tuple) -> list:  # type: ignore[type-arg]
    return [msgspec.structs.replace(m, meta=msgspec.structs.replace(m.meta, seq=0)) for m in messages]


def _state_before(journal: Journal, sid: str, seq: int) -> SessionState:
    return replay(journal.read(sid, 1, seq - 1))


def test_L1_micro_is_applied_first_and_compaction_takes_its_result(tmp_path: Path) -> None:
    clock = Clock()
    provider = scripted()
    host = open_host(tmp_path / "store", provider, clock=clock)
    seed = Seed(host.journal, "s", str(tmp_path))
    for n in range(13):
        seed.turn(user_tokens=900, tools=[60] if n < 10 else [1_000])
    clock.advance(61_000)  # the prompt cache expired (S4)

    result = host.send("s", "go on").result(WAIT)

    assert result.ok and result.requests == 1
    log = list(host.journal.read("s", seed.journal.last_seq("s") - 8))
    new = [r.line_kind for r in log][-8:]
    assert new == [
        "user-message",
        "turn-started",
        "context-slimmed",
        "checkpoint-committed",
        "request",
        "assistant-message",
        "usage",
        "turn-completed",
    ]
    slimmed = next(r for r in log if isinstance(r.event, ContextSlimmed))
    checkpoint = next(r for r in log if isinstance(r.event, CheckpointCommitted))
    assert isinstance(slimmed.event, ContextSlimmed) and slimmed.event.mode == "micro"
    assert isinstance(checkpoint.event, CheckpointCommitted) and checkpoint.event.trigger == "threshold"
    # (4) compacts exactly the result of (1): the state the micro event left
    after_micro = _state_before(host.journal, "s", checkpoint.seq)
    assert checkpoint.event.source_hash == source_hash(strip_handoff(after_micro.context))
    reopen_and_compare(host, tmp_path / "store", ["s"], clock=clock).close()


def test_L1_compaction_takes_the_unapplied_snip_result(tmp_path: Path) -> None:
    provider = scripted()
    host = open_host(tmp_path / "store", provider)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(tools=[1_000])

    assert host.send("s", "go on").result(WAIT).ok

    log = list(host.journal.read("s"))
    assert not any(isinstance(r.event, ContextSlimmed) for r in log)  # the snip plan was never applied
    checkpoint = next(r for r in log if isinstance(r.event, CheckpointCommitted))
    assert isinstance(checkpoint.event, CheckpointCommitted)
    before = _state_before(host.journal, "s", checkpoint.seq)
    view, occ = _measure(before)
    assert occ.snapshot.phase == "compaction_due"  # type: ignore[attr-defined]
    snip = plan_snip(before, view, occ)  # type: ignore[arg-type]
    assert snip is not None
    snipped = apply_plan(before, snip, now_ms=0).context
    assert checkpoint.event.source_hash == source_hash(snipped) != source_hash(before.context)
    assert checkpoint.event.strategy == "llm"
    # the request went out after the swap, on the replacement
    request = next(r for r in log if isinstance(r.event, Request) and r.seq > checkpoint.seq)
    assert isinstance(request.event, Request) and request.event.history_revision == before.revision + 1
    assert _turn_requests(provider)[0].messages[1].meta.origin == "summary"
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_L1_below_compaction_the_snip_is_applied_and_no_model_compacts(tmp_path: Path) -> None:
    provider = scripted()
    host = open_host(tmp_path / "store", provider)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(12):
        seed.turn(tools=[950])
    start = host.journal.last_seq("s") + 1

    assert host.send("s", "go on").result(WAIT).ok

    assert kinds(host.journal, "s", start) == [
        "user-message",
        "turn-started",
        "context-slimmed",
        "request",
        "assistant-message",
        "usage",
        "turn-completed",
    ]
    assert all(r.purpose == "turn" for r in provider.requests)  # no summary call
    slimmed = [r.event for r in host.journal.read("s", start) if isinstance(r.event, ContextSlimmed)]
    # only as many as needed to get under the hand-off threshold (S2)
    assert slimmed[0].mode == "snip" and slimmed[0].removed_call_ids == ("seed-1",)
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


@pytest.mark.parametrize("hook_kind", ["raises", "blocks"])
def test_L2_failed_compaction_leaves_the_snip_unapplied_and_memory_unchanged(
    tmp_path: Path, hook_kind: str
) -> None:
    def hook(context: HookContext) -> HookVerdict | None:
        if hook_kind == "raises":
            raise RuntimeError("the host's hook broke")
        return HookVerdict(block=True, reason="not now")

    provider = scripted()
    host = open_host(tmp_path / "store", provider, hook=hook)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(tools=[1_000])
    loaded = host.journal.load("s")

    result = host.send("s", "go on").result(WAIT)

    assert result.status == "failed" and result.phase == "compaction"
    assert result.error_class == ("RuntimeError" if hook_kind == "raises" else "blocked")
    assert _turn_requests(provider) == []  # no request was sent
    state = host.state("s")
    assert state.context[: len(loaded.context)] == loaded.context  # nothing snipped, nothing swapped
    assert len(state.context) == len(loaded.context) + 1  # only the new user message
    assert state.revision == loaded.revision and state.epoch == loaded.epoch
    new = kinds(host.journal, "s", loaded.last_seq + 1)
    assert "context-slimmed" not in new and "checkpoint-committed" not in new
    assert new[-1] == "turn-failed"
    if hook_kind == "blocks":  # C3: recorded for audit, not a failure for the breaker
        assert "compaction-failed" in new and state.carried.compaction_failures == 0
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_L3_unknown_phase_still_snips(tmp_path: Path) -> None:
    provider = scripted()
    host = open_host(tmp_path / "store", provider)
    seed = Seed(host.journal, "s", str(tmp_path), window=None)
    for _ in range(12):
        seed.turn(tools=[200])

    assert host.send("s", "go on").result(WAIT).ok

    log = list(host.journal.read("s"))
    slimmed = [r.event for r in log if isinstance(r.event, ContextSlimmed)]
    assert len(slimmed) == 1 and slimmed[0].mode == "snip"
    assert len(slimmed[0].removed_call_ids) == 2  # every candidate: 12 tool turns, keep 10
    assert not any(isinstance(r.event, CheckpointCommitted) for r in log)  # never LLM compaction
    request = next(r.event for r in reversed(log) if isinstance(r.event, Request))
    assert request.phase == "unknown"
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_L3_unknown_phase_still_micro_compacts(tmp_path: Path) -> None:
    clock = Clock()
    host = open_host(tmp_path / "store", scripted(), clock=clock)
    seed = Seed(host.journal, "s", str(tmp_path), window=None)
    for _ in range(12):
        seed.turn(tools=[200])
    clock.advance(61_000)

    assert host.send("s", "go on").result(WAIT).ok

    slimmed = [r.event for r in host.journal.read("s") if isinstance(r.event, ContextSlimmed)]
    assert [s.mode for s in slimmed] == ["micro"] and len(slimmed[0].removed_call_ids) == 9  # keep 3
    reopen_and_compare(host, tmp_path / "store", ["s"], clock=clock).close()


def test_L4_every_crossing_compacts_again(tmp_path: Path) -> None:
    provider = scripted()
    host = open_host(tmp_path / "store", provider)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(tools=[1_000])

    result = host.send("s", "go on: tools 8 x 1500 #l4").result(WAIT)

    assert result.ok
    checkpoints = [r.event for r in host.journal.read("s") if isinstance(r.event, CheckpointCommitted)]
    assert len(checkpoints) >= 2 and all(c.trigger == "threshold" for c in checkpoints)
    assert [c.epoch for c in checkpoints] == list(range(1, len(checkpoints) + 1))
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_K2_checkpoint_write_failure_ends_the_turn_in_phase_checkpoint(tmp_path: Path) -> None:
    disk = Disk()

    def hook(context: HookContext) -> None:
        disk.armed = True  # the disk dies while the checkpoint is on its way
        return None

    provider = scripted()
    root = tmp_path / "store"
    host = open_host(root, provider, disk=disk, hook=hook)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(tools=[1_000])
    loaded = host.journal.load("s")

    result = host.send("s", "go on").result(WAIT)

    assert result.status == "failed" and result.phase == "checkpoint"
    assert disk.failures >= 1
    assert _turn_requests(provider) == []  # no request after a checkpoint that did not commit
    live = host.state("s")
    assert live.context[: len(loaded.context)] == loaded.context and live.epoch == loaded.epoch
    assert live.revision == loaded.revision
    host.close()
    disk.armed = False
    with Journal.open(root, readonly=True) as journal:  # what the disk kept is what memory holds
        assert journal.load("s") == live
        assert "checkpoint-committed" not in kinds(journal, "s")
    again = open_host(root, scripted())
    assert again.state("s").open_turn is None  # the unfinished turn was marked on load
    assert kinds(again.journal, "s")[-1] == "turn-failed"
    assert again.send("s", "try again").result(WAIT).ok  # the session goes on
    again.close()


def test_H6_handoff_committed_before_the_request_that_carries_it(tmp_path: Path) -> None:
    provider = scripted()
    root = tmp_path / "store"
    host = open_host(root, provider)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(user_tokens=900)

    turn = host.send("s", "go on")
    seen = list(turn.events(timeout=WAIT))
    assert turn.result(WAIT).ok

    log = list(host.journal.read("s"))
    handoff = next(r for r in log if isinstance(r.event, Handoff))
    request = next(r for r in log if isinstance(r.event, Request))
    assert handoff.seq < request.seq and isinstance(request.event, Request)
    assert request.event.handoff_included and request.event.phase == "handoff_band"
    sent = _turn_requests(provider)[0].messages
    assert sent[-1].meta.origin == "handoff" and sent[-1].meta.hidden
    # never in the client stream
    assert not any(getattr(item, "line_kind", "") == "handoff" for item in seen)
    assert any(getattr(item, "line_kind", "") == "request" for item in seen)
    # never in a fork, whose next request carries no hand-off
    host.fork("s", "f")
    assert "handoff" not in kinds(host.journal, "f")
    forked = host.state("f")
    parent = host.state("s")
    # the same conversation; only the seqs after the dropped hand-off moved up by one
    assert _unnumbered(forked.context) == _unnumbered(parent.context) and forked.epoch_handoffs == ()
    assert parent.epoch_handoffs != ()
    assert forked.info is not None and forked.info.parent_session == "s"
    assert all(m.meta.origin != "handoff" for m in host.next_request("f").messages)
    assert host.next_request("s").messages[-1].meta.origin == "handoff"
    reopen_and_compare(host, root, ["s", "f"]).close()


def test_H7_failed_handoff_write_is_logged_once_and_the_turn_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = session_preparing.decide_handoff

    def oversized(*args, **kwargs):  # type: ignore[no-untyped-def]
        event = real(*args, **kwargs)
        if event is None:
            return None
        # the journal refuses a line over its size limit: a write that fails, nothing written
        return msgspec.structs.replace(event, record=msgspec.Raw(b'{"pad":"' + b"x" * (21 << 20) + b'"}'))

    monkeypatch.setattr(session_preparing, "decide_handoff", oversized)
    provider = scripted()
    host = open_host(tmp_path / "store", provider)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(user_tokens=900)

    with caplog.at_level(logging.WARNING, logger="cairn.session"):
        result = host.send("s", "go on: tools 2 x 20 #h7").result(WAIT)

    assert result.ok and result.requests == 3
    lines = [r.getMessage() for r in caplog.records if "hand-off not recorded" in r.getMessage()]
    # one line, the session as a hash and the error's class only; no retry in the same turn
    assert lines == [handoff_failure_line("s", LineTooLarge("never shown"))]
    assert "never shown" not in lines[0] and str(tmp_path) not in lines[0]
    assert "handoff" not in kinds(host.journal, "s")
    assert all(m.meta.origin != "handoff" for r in _turn_requests(provider) for m in r.messages)
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()
