"""`cairn interrupted`: the turns a crash (or a stop) interrupted, to continue or dismiss, with their message.

Read-only, like the other listings: the same fold as `Host.interrupted_turns`
(`cairn.actors.session.interrupted`), over every session of the store: a host
continues one with `Host.continue_turn` or dismisses it with
`Host.dismiss_interrupted` (this command only reads). A turn
whose log still ends inside it is shown as `open`: interrupted by a crash,
or still running in a host that writes the store now. A session that cannot be
read (a corrupt line) is skipped with a warning, the others listed, exit 1.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import msgspec

from cairn._cli_base import EXIT_OK, EXIT_PROBLEMS, open_store
from cairn._cli_output import clip, iso, print_json, print_table, warn
from cairn.store.errors import CorruptionError

if TYPE_CHECKING:
    from cairn.actors.host.interrupted import InterruptedTurn


def cmd_interrupted(args: argparse.Namespace) -> int:
    """Every session whose last turn never finished: the turn, when, and its user message."""
    from cairn.actors.host.interrupted import interrupted_turn  # the runtime, only when asked for

    found: list[InterruptedTurn] = []
    unreadable = 0
    with open_store(args) as journal:
        for summary in journal.sessions():
            try:
                turn = interrupted_turn(summary.sid, journal.read(summary.sid))
            except CorruptionError as exc:  # the others are still listed; the exit status says so
                warn(f"session {summary.sid} skipped: {exc}")
                unreadable += 1
                continue
            if turn is not None:
                found.append(turn)
    status = EXIT_PROBLEMS if unreadable else EXIT_OK
    if args.json:
        print_json([msgspec.to_builtins(turn) for turn in found])
        return status
    rows = [
        [
            turn.session,
            turn.turn_id,
            turn.state,
            iso(turn.started_ms),
            iso(turn.interrupted_ms) if turn.interrupted_ms is not None else "",
            clip(turn.text) + (f" [+{turn.images} image(s)]" if turn.images else ""),
        ]
        for turn in found
    ]
    print_table("interrupted turns", ["session", "turn", "state", "started", "interrupted", "message"], rows)
    if not found:
        print("no interrupted turns in the other sessions" if unreadable else "no interrupted turns")
    return status
