"""What a host tells a running turn from outside: cancel it, or post a deferred call's result.

`Host.send` gives each `Turn` a `canceller`, which tells the session
(`CancelRequest`); `Host.resolve_tool` checks a posted result here
(`resolution`) before anything is sent, then `tell_and_wait` hands it to the
session and waits for its answer (taken, or `ToolNotWaiting`), as for
`Host.dismiss_interrupted`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import typing
from collections.abc import Callable

import pykka

from cairn.actors.errors import HostTimeout, NotInterrupted, ToolNotWaiting
from cairn.actors.host.registry import Entry
from cairn.actors.session.machine import MidTurn
from cairn.actors.session.messages import CancelRequest, DismissTurn, ResolveTool
from cairn.actors.session.stream import Turn
from cairn.actors.tools import check_outcome
from cairn.events.errors import InputError

#: the longest call id `resolve_tool` takes (a provider's ids are far shorter)
MAX_CALL_ID_CHARS = 256

#: the values of `Host.send`'s `mid_turn`
MID_TURN: tuple[MidTurn, ...] = typing.get_args(MidTurn)


def check_mid_turn(mid_turn: object) -> None:
    """`InputError` unless `mid_turn` is one of `MID_TURN`."""
    if mid_turn not in MID_TURN:
        raise InputError(f"mid_turn must be one of {', '.join(MID_TURN)}, got {mid_turn!r}")


def canceller(entry: Entry) -> Callable[[Turn, str], None]:
    """What `Turn.cancel` does: tell the session (a session stopped meanwhile has ended the turn)."""

    def cancel(turn: Turn, reason: str) -> None:
        ref = entry.ref
        if ref is not None:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(CancelRequest(turn, reason))

    return cancel


def resolution(session: str, call_id: object, outcome: object) -> ResolveTool:
    """The message that posts `outcome` for call `call_id`; `InputError` for a bad id or outcome."""
    if not isinstance(call_id, str) or not call_id or len(call_id) > MAX_CALL_ID_CHARS:
        raise InputError(f"a call id is a non-empty string of at most {MAX_CALL_ID_CHARS} chars")
    checked = check_outcome(outcome)
    if isinstance(checked, str):
        raise InputError(f"the outcome for call {call_id!r} of session {session} {checked}")
    return ResolveTool(call_id, checked, concurrent.futures.Future())


def check_turn_id(turn_id: object) -> None:
    """`InputError` unless `turn_id` looks like a turn id (non-empty text, at most 256 chars)."""
    if not isinstance(turn_id, str) or not turn_id or len(turn_id) > MAX_CALL_ID_CHARS:
        raise InputError(f"a turn id is a non-empty string of at most {MAX_CALL_ID_CHARS} chars")


def tell_and_wait(
    entry: Entry, session: str, message: ResolveTool | DismissTurn, timeout: float | None
) -> None:
    """Tell the session `message` and wait for its answer (its `reply`): done, or the error."""
    try:
        assert entry.ref is not None
        entry.ref.tell(message)
        message.reply.result(timeout=timeout)
    except pykka.ActorDeadError:
        gone = ToolNotWaiting if isinstance(message, ResolveTool) else NotInterrupted
        raise gone(f"session {session} stopped before it answered; nothing changed") from None
    except concurrent.futures.TimeoutError:
        raise HostTimeout(f"session {session} did not answer within {timeout} s") from None
