"""Many sessions through one host: 1,000 sessions, a live-actor cap of 64, passivation by replay."""

from __future__ import annotations

import collections
from pathlib import Path

from cairn.actors.session.stream import Turn
from cairn.events.state import SessionState
from tests.actors.helpers import WAIT, open_host, scripted

SESSIONS = 1_000
CAP = 64
IN_FLIGHT = 32


def test_thousand_sessions_through_a_capped_host_come_back_identical(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted(), max_live_sessions=CAP)
    workspace = tmp_path / "ws"
    states: dict[str, SessionState] = {}
    flying: collections.deque[Turn] = collections.deque()
    peak_seen = 0

    def settle(turn: Turn) -> None:
        result = turn.result(WAIT)
        assert result.ok, result
        states[turn.session] = host.state(turn.session)

    for n in range(SESSIONS):
        sid = f"user-{n:04d}"
        plan = f"hello: tools 1 x 20 #{sid}" if n % 3 == 0 else "hello"
        flying.append(host.send(sid, plan, workspace=workspace))
        peak_seen = max(peak_seen, len(host.live_sessions))
        if len(flying) >= IN_FLIGHT:
            settle(flying.popleft())
    while flying:
        settle(flying.popleft())

    assert peak_seen <= CAP and host.stats.peak_live <= CAP
    assert host.stats.spawned >= SESSIONS and host.stats.passivated_lru >= SESSIONS - CAP
    # every passivated session comes back by replay with the state it had when it was live
    for sid, state in states.items():
        assert host.state(sid) == state, sid
        assert len(host.live_sessions) <= CAP
    assert sum(1 for _ in host.sessions()) == SESSIONS
    for sid in list(states)[:: SESSIONS // 20]:
        assert host.journal.replay_full(sid) == states[sid]
    host.close()
