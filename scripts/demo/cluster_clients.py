"""The client side of `cairn demo --cluster`: a thread per session sending its turns via `ClusterClient`.

Each session sends turns 1..M of the local demo's scripted tasks
(`Setup.message`) one after the other, waiting at the run's two gates
(before the turn after the host kill, and before the turn after the node
stop) so that the faults land mid-run: after the first gate, one session
of the host about to be killed (the probe) goes first, and the host is
killed once that turn streamed its first record (it is open there); the
others go after the kill, so no message is in flight to the dead host. A turn whose handle ends
interrupted or whose send raises (the killed host's open turn: its client
hears nothing for `silence_s`) is retried once as the same task, and both
attempts are kept. Every record the client is streamed is kept as
`SeenRecord`, and `Watch` notes when records arrive, for the stall
measured after the node stop.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cairn.actors.cluster import ClusterClient
from cairn.demo.clients import TurnOutcome
from cairn.demo.cluster_facts import SeenRecord
from cairn.demo.providers import Setup
from cairn.events.codec import Record


@dataclass(frozen=True)
class Attempt(TurnOutcome):
    """One send of one turn: how it ended for the client (a `TurnOutcome`), and which host served it."""

    host_id: str = ""


@dataclass
class Watch:
    """Shared by the session threads and the run: progress, record arrivals, the gates."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    #: turns completed (or given up) per session
    done: dict[str, int] = field(default_factory=dict)
    #: the host that served each session's latest turn
    served_by: dict[str, str] = field(default_factory=dict)
    last_record_at: float = 0.0
    after_kill: threading.Event = field(default_factory=threading.Event)
    after_stop: threading.Event = field(default_factory=threading.Event)
    #: the one session sent on first after the first gate (one of the victim's), and its go
    probe: str | None = None
    probe_go: threading.Event = field(default_factory=threading.Event)
    #: set when the probe's turn streamed a record from the host about to be killed: a turn open on it
    victim_busy: threading.Event = field(default_factory=threading.Event)
    victim: str | None = None

    def wait_all(self, sids: list[str], turns: int, timeout_s: float) -> bool:
        """Wait until every session finished `turns` turns; False at the deadline."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while not all(self.done.get(sid, 0) >= turns for sid in sids):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.5))
        return True

    def record_after(self, since: float, timeout_s: float) -> float | None:
        """The arrival time of the first record streamed after `since` (monotonic), None at the deadline."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while self.last_record_at <= since:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 0.5))
            return self.last_record_at


@dataclass
class SessionRun:
    """One session's client thread: its attempts and the records it was streamed."""

    sid: str
    workspace: Path
    attempts: list[Attempt] = field(default_factory=list)
    seen: list[SeenRecord] = field(default_factory=list)


def _attempt(
    client: ClusterClient, setup: Setup, run: SessionRun, n: int, watch: Watch, wait_s: float
) -> Attempt:
    try:
        turn = client.send(run.sid, setup.message(run.sid, n, run.workspace), workspace=run.workspace)
        probing = run.sid == watch.probe and watch.probe_go.is_set() and turn.host_id == watch.victim
        for item in turn.events(timeout=wait_s):
            if isinstance(item, Record):
                if probing:
                    watch.victim_busy.set()  # the turn is durable on the victim and still running
                run.seen.append(SeenRecord(item.seq, item.prev, item.event))
                with watch.cond:
                    watch.last_record_at = time.monotonic()
                    watch.cond.notify_all()
        result = turn.result(timeout=wait_s)
    except Exception as error:  # what sending or waiting raised is the attempt's outcome
        return Attempt.of_error(n, error)
    return Attempt.of_result(n, result, host_id=turn.host_id)


def send_session(
    client: ClusterClient,
    setup: Setup,
    run: SessionRun,
    turns: int,
    gates: tuple[int, int],
    watch: Watch,
    wait_s: float,
) -> None:
    """Send the session's turns (see the module doc); one retry of a turn that did not complete."""
    try:
        for n in range(1, turns + 1):
            if n == gates[0] + 1:
                watch.probe_go.wait()  # set once the probe is chosen
                if run.sid != watch.probe:
                    watch.after_kill.wait()
            if n == gates[1] + 1:
                watch.after_stop.wait()
            attempt = _attempt(client, setup, run, n, watch, wait_s)
            run.attempts.append(attempt)
            if not attempt.ok and attempt.status != "rejected":
                attempt = _attempt(client, setup, run, n, watch, wait_s)
                run.attempts.append(attempt)
            with watch.cond:
                watch.done[run.sid] = n
                if attempt.host_id:
                    watch.served_by[run.sid] = attempt.host_id
                watch.cond.notify_all()
    finally:
        with watch.cond:
            watch.done[run.sid] = turns
            watch.cond.notify_all()
