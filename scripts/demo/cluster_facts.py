"""What a `cairn demo --cluster` run shows, decided from the cluster's log and the client's view: pure.

`session_facts` reads one session's records (as a fresh `JetStreamJournal`
returns them) against the SIGKILL's wall-clock time and the killed host:
who owned it before and after, when a new owner took it from the killed
host (the failover: the SIGKILL to that owner's first event, its
`owner-changed`, acknowledged before it serves), which turns ended how, and
which were left open. `client_agrees` compares what the client was streamed
with the log. `health` lists what did not hold; the run is ok when none did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cairn.events.codec import Record
from cairn.events.kinds import OwnerChanged, TurnCompleted, TurnFailed, TurnStarted


@dataclass(frozen=True)
class SeenRecord:
    """A record as the client was streamed it: enough to find it in the log (seq, chain hash, event)."""

    seq: int
    prev: str
    event: object


@dataclass
class SessionFacts:
    """One session after the run (see the module doc)."""

    sid: str
    owner_before: str | None = None
    owner_after: str | None = None
    #: the host that took it over after the killed one owned it (whether it knew the killed one or found
    #: its lease expired), and the seconds from the SIGKILL to that owner's first event
    new_owner: str | None = None
    failover_s: float | None = None
    owners: list[str] = field(default_factory=list)
    turns_started: int = 0
    turns_completed: int = 0
    #: turns recorded interrupted (by the next owner after a crash, or by a host stopping)
    turns_interrupted: int = 0
    turns_failed_other: int = 0
    turns_open: int = 0
    last_seq: int = 0
    #: the checkpoint load equals a full replay; the client's records equal the log's
    replayed: bool = False
    client_agrees: bool = False


def session_facts(
    sid: str, records: Sequence[Record], *, killed_ms: int | None, victim: str | None
) -> SessionFacts:
    """Ownership, failover and turn facts of one session from its log (see the module doc)."""
    facts = SessionFacts(sid)
    started: dict[str, int] = {}
    ended: set[str] = set()
    for record in records:
        event = record.event
        facts.last_seq = record.seq
        if isinstance(event, OwnerChanged):
            facts.owners.append(event.host_id)
            if killed_ms is None or record.ts < killed_ms:
                facts.owner_before = event.host_id
            elif facts.new_owner is None and facts.owner_before == victim and event.host_id != victim:
                facts.new_owner = event.host_id
                facts.failover_s = (record.ts - killed_ms) / 1000
            facts.owner_after = event.host_id
        elif isinstance(event, TurnStarted):
            started[event.turn_id] = record.seq
        elif isinstance(event, TurnCompleted):
            ended.add(event.turn_id)
            facts.turns_completed += 1
        elif isinstance(event, TurnFailed):
            ended.add(event.turn_id)
            if event.phase == "interrupted":
                facts.turns_interrupted += 1
            else:
                facts.turns_failed_other += 1
    facts.turns_started = len(started)
    facts.turns_open = len(set(started) - ended)
    return facts


def client_agrees(records: Sequence[Record], seen: Sequence[SeenRecord]) -> bool:
    """Every record the client was streamed is in the log as it was streamed, and nothing but hidden
    bookkeeping (`owner-changed`) follows the last one it saw."""
    by_seq = {record.seq: record for record in records}
    for item in seen:
        record = by_seq.get(item.seq)
        if record is None or record.prev != item.prev or record.event != item.event:
            return False
    last = max((item.seq for item in seen), default=0)
    return all(isinstance(record.event, OwnerChanged) for record in records if record.seq > last)


@dataclass(frozen=True)
class Checks:
    """The facts `health` judges, gathered by the run."""

    sessions: list[SessionFacts]
    victim: str | None
    node_stopped: bool
    client_unfinished: list[str]
    verify_exit: int | None
    export_exit: int | None
    export_verify_exit: int | None
    hosts_stopped_cleanly: bool


def health(checks: Checks) -> list[str]:
    """What did not hold, one line each (the run is ok when this is empty)."""
    problems: list[str] = []
    if checks.victim is None:
        problems.append("no host was killed")
    moved = [s for s in checks.sessions if s.owner_before == checks.victim and checks.victim is not None]
    if checks.victim is not None and not moved:
        problems.append(f"host {checks.victim} owned no session when it was killed")
    for facts in moved:
        if facts.new_owner is None:
            problems.append(f"{facts.sid} was never taken over from {checks.victim}")
    if not checks.node_stopped:
        problems.append("no NATS node was stopped")
    for facts in checks.sessions:
        if facts.turns_open:
            problems.append(
                f"{facts.sid}: {facts.turns_open} turn(s) neither completed nor marked interrupted"
            )
        if facts.turns_failed_other:
            problems.append(f"{facts.sid}: {facts.turns_failed_other} turn(s) failed")
        if not facts.replayed:
            problems.append(f"{facts.sid}: the checkpoint load differs from a full replay")
        if not facts.client_agrees:
            problems.append(f"{facts.sid}: the client's records differ from the log")
    problems += checks.client_unfinished
    if checks.verify_exit != 0:
        problems.append(f"cairn verify --nats exited {checks.verify_exit}")
    if checks.export_exit != 0:
        problems.append(f"cairn export exited {checks.export_exit}")
    if checks.export_verify_exit != 0:
        problems.append(f"cairn verify of the export exited {checks.export_verify_exit}")
    if not checks.hosts_stopped_cleanly:
        problems.append("a surviving host did not stop cleanly on SIGTERM (exit status not 0)")
    return problems
