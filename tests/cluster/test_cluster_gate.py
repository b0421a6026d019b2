"""`LeasedJournal`: a cluster host's Host writes only the sessions it fenced, while their lease is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.actors.cluster import gate as gate_module
from cairn.actors.cluster.errors import LeaseNotHeld, ReplicaBehind
from cairn.actors.cluster.gate import LeasedJournal
from cairn.events.state import SessionState, user_text_message
from cairn.store import Journal
from cairn.store.backend import JournalBackend
from cairn.store.errors import SeqConflict


def test_appends_pass_only_for_admitted_sessions_with_a_valid_lease_and_a_conflict_shuts_the_session(
    tmp_path: Path,
) -> None:
    valid = {"s": True}
    conflicts: list[str] = []
    with Journal.open(tmp_path) as journal:
        gate = LeasedJournal(journal, lambda sid: valid.get(sid, False), conflicts.append)
        assert isinstance(gate, JournalBackend)
        hello = [user_text_message("u1", "hello")]
        with pytest.raises(LeaseNotHeld):  # not fenced here
            gate.append("s", hello, expected_seq=0)
        gate.admit("s")
        assert [r.seq for r in gate.append("s", hello, expected_seq=0)] == [1]
        assert gate.append_async("s", hello, expected_seq=1).result(10)[0].seq == 2

        valid["s"] = False  # the lease's lost_at passed on this host's clock
        with pytest.raises(LeaseNotHeld):
            gate.append("s", hello, expected_seq=2)
        assert not gate.admits("s")  # and the session stays shut until fenced again

        valid["s"] = True
        gate.admit("s")
        journal.append("s", hello, expected_seq=2)  # another writer
        with pytest.raises(SeqConflict):
            gate.append("s", hello, expected_seq=2)
        assert conflicts == ["s"] and not gate.admits("s")
        with pytest.raises(LeaseNotHeld):
            gate.append_async("s", hello, expected_seq=3)
        assert gate.last_seq("s") == 3 and [r.seq for r in gate.read("s")] == [1, 2, 3]


class Lagging:
    """A journal whose first `stale` loads come from a replica that has not seen the last appends."""

    def __init__(self, inner: Journal, stale: int) -> None:
        self.inner = inner
        self.stale = stale

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def load(self, sid: str) -> SessionState:
        if self.stale > 0:
            self.stale -= 1
            return SessionState(sid=sid)
        return self.inner.load(sid)


def test_a_load_is_read_again_until_it_reaches_what_this_host_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate_module, "FRESH_READ_S", 0.2)
    with Journal.open(tmp_path) as journal:
        lagging = Lagging(journal, stale=3)
        gate = LeasedJournal(lagging, lambda sid: True, lambda sid: None)  # type: ignore[arg-type]
        gate.admit("s", fence_seq=0)
        gate.append("s", [user_text_message("u1", "hello")], expected_seq=0)
        assert gate.load("s").last_seq == 1 and lagging.stale == 0  # three stale answers, then the fresh one
        assert gate.last_seq("s") == 1
        lagging.stale = 10**6  # a replica that never catches up: a typed error after FRESH_READ_S
        with pytest.raises(ReplicaBehind):
            gate.load("s")
