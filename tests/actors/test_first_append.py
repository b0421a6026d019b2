"""A turn's first request goes into the same append as the events that open the turn (issue 33 point 4).

One fsync before the first token instead of two, where L1 has nothing to do first; where it
has (a hand-off due, a compaction due), the turn starts as before: its events, then L1's, then
the request, each appended in that order. The log reads the same either way, and replay
rebuilds the live state exactly. The journal is the real one; a spy records each append's kinds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.events.codec import TAG_OF
from cairn.events.kinds import Request
from tests.actors.helpers import WAIT, Seed, open_host, reopen_and_compare, scripted


def _spy_appends(host, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """The kinds of each `journal.append` call the host makes from now on, in order."""
    calls: list[list[str]] = []
    real = host.journal.append

    def append(sid, events, **kwargs):  # type: ignore[no-untyped-def]
        calls.append([TAG_OF[type(event)] for event in events])
        return real(sid, events, **kwargs)

    monkeypatch.setattr(host.journal, "append", append)
    return calls


def test_L1_a_turns_first_request_is_appended_with_the_events_that_open_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    host = open_host(root, scripted())
    appends = _spy_appends(host, monkeypatch)

    assert host.send("s", "hello", workspace=tmp_path).result(WAIT).ok
    assert host.send("s", "and again").result(WAIT).ok

    assert appends[0] == ["session-started", "user-message", "turn-started", "request"]
    second = appends.index(["user-message", "turn-started", "request"])
    assert second > 0 and all("request" not in kinds for kinds in appends[1:second])
    log = list(host.journal.read("s"))
    requests = [r for r in log if isinstance(r.event, Request)]
    # the request is numbered as if appended after them: r<its own seq>, the turn's id
    assert [r.event.request_id for r in requests] == [f"r{r.seq}" for r in requests]
    assert [r.event.turn_id for r in requests] == ["t3", f"t{requests[1].seq - 1}"]
    reopen_and_compare(host, root, ["s"]).close()


def test_H6_with_a_handoff_due_the_turn_starts_as_before_and_the_handoff_precedes_its_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    host = open_host(root, scripted())
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(user_tokens=900)
    appends = _spy_appends(host, monkeypatch)

    assert host.send("s", "go on").result(WAIT).ok

    assert appends[:3] == [["user-message", "turn-started"], ["handoff"], ["request"]]
    reopen_and_compare(host, root, ["s"]).close()


def test_L1_the_speculative_state_is_the_state_the_append_makes(tmp_path: Path) -> None:
    """`request.speculative` folds the events on records numbered as the journal numbers them,
    without their log position or hash chain: the state is the one the real append gives, so the
    request assembled on it is the one assembled after the append."""
    from cairn.actors.session.request import speculative
    from cairn.events.state import replay
    from cairn.store import Journal
    from tests.store.helpers import msg, started

    journal = Journal.open(tmp_path / "store")
    try:
        before_records = journal.append("s", [started(), msg(1)], expected_seq=0, ts_ms=1_000)
        before = replay(before_records)
        events = [msg(3), msg(4)]
        guessed = speculative(before, "s", events, 2_000)
        stored = journal.append("s", events, expected_seq=2, ts_ms=2_000)
        assert [r.pos for r in stored] != [-1, -1] and stored[0].prev != ""
        assert guessed == replay(stored, before) == journal.load("s")
    finally:
        journal.close()
