"""`Host.interrupted_turns`: the turn each session's log says a crash interrupted (see
`actors.session.interrupted`, the fold over one session, and `InterruptedTurn`)."""

from __future__ import annotations

import logging

from cairn.actors.session.interrupted import InterruptedTurn, interrupted_turn
from cairn.store.backend import JournalBackend
from cairn.store.errors import CorruptionError

__all__ = ["InterruptedTurn", "interrupted_turn", "interrupted_turns"]

log = logging.getLogger("cairn.host")


def interrupted_turns(journal: JournalBackend, live: set[str]) -> list[InterruptedTurn]:
    """`Host.interrupted_turns`: the interrupted turns by session id, less open ones of `live` sessions."""
    found: list[InterruptedTurn] = []
    for summary in journal.sessions():
        try:
            turn = interrupted_turn(summary.sid, journal.read(summary.sid))
        except CorruptionError as exc:  # it cannot be loaded either; the others are still listed
            log.warning("cairn: interrupted turns: session %s skipped: %s", summary.sid, exc)
            continue
        if turn is None or (turn.state == "open" and summary.sid in live):
            continue
        found.append(turn)
    return found
