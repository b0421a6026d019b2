"""`Host.stop_session` (what a cluster host does when a lease is lost); owner-changed stays hidden."""

from __future__ import annotations

import threading
from pathlib import Path

from cairn.events.kinds import OwnerChanged
from cairn.store import Journal
from tests.actors.helpers import WAIT, GatedTools, kinds, open_host, scripted


def test_stopping_a_session_mid_turn_ends_the_turn_interrupted_and_the_next_message_replays_it(
    tmp_path: Path,
) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        turn = host.send("s", "work: tools 2 x 5 #c", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        stopped: list[bool] = []
        stopper = threading.Thread(target=lambda: stopped.append(host.stop_session("s")))
        stopper.start()  # the tool is still running: the stop waits for the actor's current message
        tools.release.set()
        stopper.join(WAIT)
        assert stopped == [True]
        result = turn.result(WAIT)
        assert (result.status, result.phase) == ("failed", "interrupted")
        assert kinds(host.journal, "s")[-1] == "turn-failed"
        assert host.live_sessions == []
        assert host.stop_session("s") is False  # nothing live to stop
        assert host.send("s", "carry on").result(WAIT).ok  # rebuilt by replay
        assert host.stats.spawned == 2
    finally:
        tools.release.set()
        host.close()


def test_owner_changed_is_kept_from_forks_and_from_the_model_context(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        journal.append("s", [OwnerChanged(host_id="host-a", lease_revision=3)], expected_seq=0)
    host = open_host(root, scripted())
    try:
        assert host.send("s", "hello", workspace=tmp_path).result(WAIT).ok
        host.stop_session("s")  # as a cluster host does before it writes the fence
        taken = OwnerChanged(host_id="host-b", lease_revision=9, previous_host="host-a")
        host.journal.append("s", [taken], expected_seq=host.journal.last_seq("s"))
        assert host.send("s", "again").result(WAIT).ok
        assert kinds(host.journal, "s").count("owner-changed") == 2
        host.fork("s", "f")
        assert "owner-changed" not in kinds(host.journal, "f")
        assert [m.role for m in host.state("s").context] == [m.role for m in host.state("f").context]
        assert all(m.role in ("user", "assistant") for m in host.state("s").context)
    finally:
        host.close()
