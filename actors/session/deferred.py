"""A turn that waits for a deferred tool result, read from the log: what a restart resumes.

A tool's executor may defer a call's result (`tools.Deferred`: a client-side
tool, an approval); the session records `tool-deferred` before it waits. If
the process stops or dies then, the log ends inside the turn with that call
unanswered. That turn is not interrupted: nothing was lost, the result is
still to come from outside. `deferred_wait` finds it (a pure fold over the
turn's records); the session actor resumes the wait when it loads
(`machine.WaitResumed`), with the time left of the call's timeout, and
`interrupted_turn` does not list it.

A wait is resumable when the turn is still open and the call the turn was
at (the first call of the last answer without a result; calls run in order)
has a `tool-deferred` record. Anything else open (a request, a server-side
tool that was running) is an interrupted turn, as before.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from cairn.events.codec import Record
from cairn.events.kinds import (
    AssistantMessage,
    Request,
    ToolDeferred,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
)
from cairn.events.model import ToolCall


class DeferredWait(msgspec.Struct, frozen=True, kw_only=True):
    """An open turn waiting for the result of `calls[answered]`, deferred at `deferred_ms` (unix ms)
    for at most `timeout_ms`; `requests`: the turn's requests so far."""

    turn_id: str
    calls: tuple[ToolCall, ...]
    answered: int
    deferred_ms: int
    timeout_ms: int
    requests: int

    def left_ms(self, now_ms: int) -> int:
        """The time left of the wait at `now_ms` (0 once it ran out)."""
        return max(0, self.deferred_ms + self.timeout_ms - now_ms)


class _Turn:
    """The fold's view of the open turn."""

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.calls: tuple[ToolCall, ...] = ()
        self.answered = 0
        self.deferred: Record | None = None
        self.requests = 0


class WaitFold:
    """`deferred_wait` a record at a time (`take`), for folds that read the log once for more."""

    def __init__(self) -> None:
        self._turn: _Turn | None = None

    def take(self, record: Record) -> None:
        turn, event = self._turn, record.event
        match event:
            case TurnStarted():
                self._turn = _Turn(event.turn_id)
            case TurnCompleted() | TurnFailed() | TurnCancelled() if turn is not None:
                if event.turn_id == turn.turn_id:
                    self._turn = None
            case Request() if turn is not None:
                turn.requests += 1
            case AssistantMessage() if turn is not None:
                turn.calls, turn.answered, turn.deferred = event.tool_calls, 0, None
            case ToolResult() if turn is not None and _at(turn, event.call_id):
                turn.answered += 1
                turn.deferred = None
            case ToolDeferred() if turn is not None and _at(turn, event.call_id):
                turn.deferred = record

    def wait(self) -> DeferredWait | None:
        """The wait the records so far end in, or None."""
        turn = self._turn
        if turn is None or turn.deferred is None:
            return None
        deferred = turn.deferred.event
        assert isinstance(deferred, ToolDeferred)
        return DeferredWait(
            turn_id=turn.turn_id,
            calls=turn.calls,
            answered=turn.answered,
            deferred_ms=turn.deferred.ts,
            timeout_ms=deferred.timeout_ms,
            requests=turn.requests,
        )


def deferred_wait(records: Iterable[Record]) -> DeferredWait | None:
    """The open turn of `records` if it waits for a deferred result (see the module doc), else None."""
    fold = WaitFold()
    for record in records:
        fold.take(record)
    return fold.wait()


def _at(turn: _Turn, call_id: str) -> bool:
    """Whether `call_id` is the call the turn is at (the first without a result)."""
    return turn.answered < len(turn.calls) and turn.calls[turn.answered].id == call_id
