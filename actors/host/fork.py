"""Forking a session: its history copied into a new session, without the hidden events (H6)."""

from __future__ import annotations

import bisect

import msgspec

from cairn.actors.errors import SessionExists, UnknownSession
from cairn.actors.session.handoff import is_hidden_event
from cairn.events.kinds import CheckpointCommitted, EventBase, SessionStarted
from cairn.store.backend import JournalBackend
from cairn.store.errors import SeqConflict

#: events per append when a fork copies a history: at most one JetStream atomic batch (1,000 messages)
FORK_BATCH = 1_000


def source_to_fork(journal: JournalBackend, source: str, target: str) -> int:
    """`source`'s last seq, when it exists (else `UnknownSession`) and `target` does not (`SessionExists`)."""
    last = journal.last_seq(source)
    if last == 0:
        raise UnknownSession(f"no session {source} in the store")
    if journal.last_seq(target) != 0:
        raise SessionExists(f"session {target} already exists")
    return last


def copy_history(journal: JournalBackend, source: str, target: str, last: int) -> int:
    """Append `source`'s events 1..`last` to the empty session `target`; returns `target`'s last seq.

    Hidden events (the hand-off) are left out; `session-started` names its
    parent, and each checkpoint's `through_seq` is renumbered past the
    events left out, so it keeps pointing at the same event. Written in
    batches of `FORK_BATCH`, each expecting the seq the last one left:
    `SessionExists` when someone else writes `target` meanwhile.
    """
    dropped: list[int] = []
    batch: list[EventBase] = []
    written = 0

    def flush() -> None:
        nonlocal written
        try:
            records = journal.append(target, batch, expected_seq=written)
        except SeqConflict:
            raise SessionExists(f"session {target} was written while it was being forked") from None
        written = records[-1].seq
        batch.clear()

    for record in journal.read(source, 1, last):
        event = record.event
        if is_hidden_event(event):
            dropped.append(record.seq)
            continue
        match event:
            case SessionStarted():
                event = msgspec.structs.replace(event, parent_session=source, parent_seq=last)
            case CheckpointCommitted(through_seq=through):
                gone = bisect.bisect_right(dropped, through)
                event = msgspec.structs.replace(event, through_seq=through - gone)
        batch.append(event)
        if len(batch) >= FORK_BATCH:
            flush()
    if batch:
        flush()
    return written
