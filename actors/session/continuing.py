"""Continuing or dismissing an interrupted turn, pure: the event each records, or why it cannot.

A session's interrupted turn (`interrupted.interrupted_turn`) can be
continued (`Host.continue_turn`): a new turn whose `turn-started` names the
same user message and `continues` the interrupted one. Its context already
holds what that turn recorded: the results of its tools are not run again,
and the calls left open were closed with an error saying their outcome is
unknown (the model decides whether to call again). Or it can be dismissed
(`Host.dismiss_interrupted`): `turn-dismissed`, and it is no longer listed.
"""

from __future__ import annotations

from collections.abc import Iterable

from cairn.actors.session.interrupted import InterruptedTurn, interrupted_turn
from cairn.actors.session.turn import MAX_ERROR_CHARS
from cairn.events.codec import Record
from cairn.events.kinds import TurnDismissed, TurnStarted
from cairn.events.state import SessionState


def _listed(sid: str, records: Iterable[Record], turn_id: str) -> InterruptedTurn | str:
    """`sid`'s interrupted turn when it is `turn_id`, else why not."""
    listed = interrupted_turn(sid, records)
    if listed is not None and listed.turn_id == turn_id and listed.state == "interrupted":
        return listed
    now = f"its interrupted turn is {listed.turn_id}" if listed is not None else "it has none"
    return f"turn {turn_id!r} is not session {sid}'s interrupted turn ({now})"


def continuing(sid: str, state: SessionState, records: Iterable[Record], turn_id: str) -> TurnStarted | str:
    """The `turn-started` that continues `turn_id` (its id from `state`), or why it cannot be."""
    listed = _listed(sid, records, turn_id)
    if isinstance(listed, str):
        return listed
    return TurnStarted(turn_id=f"t{state.last_seq + 1}", message_id=listed.message_id, continues=turn_id)


def dismissal(sid: str, records: Iterable[Record], turn_id: str, reason: str) -> TurnDismissed | str:
    """The `turn-dismissed` of `turn_id`, or why it is not the session's interrupted turn."""
    listed = _listed(sid, records, turn_id)
    if isinstance(listed, str):
        return listed
    return TurnDismissed(turn_id=turn_id, reason=reason[:MAX_ERROR_CHARS])
