"""The demo's client threads: each sends its session's turns one after the other and keeps how each ended."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from cairn import Host, _console
from cairn.actors.provider.base import TextDelta
from cairn.actors.session.stream import TurnResult
from cairn.demo.providers import Setup
from cairn.events.codec import Record
from cairn.events.kinds import CheckpointCommitted


@dataclass(frozen=True)
class TurnOutcome:
    """How one turn of this run ended for its client: the turn's result, or what `send` raised.

    `status` is the result's (`completed`, `failed` in `phase`, `rejected`),
    or `error` when sending or waiting raised (`error_class` says what).
    """

    turn: int
    status: str
    phase: str | None = None
    error_class: str = ""
    error: str = ""
    requests: int = 0

    @classmethod
    def of_result(cls, turn: int, result: TurnResult, **more: Any) -> Self:
        """The outcome a turn's result gives (`more`: a subclass's own fields)."""
        return cls(
            turn=turn,
            status=result.status,
            phase=result.phase,
            error_class=result.error_class,
            error=result.error,
            requests=result.requests,
            **more,
        )

    @classmethod
    def of_error(cls, turn: int, error: Exception) -> Self:
        """The outcome of a turn whose sending or waiting raised `error`."""
        return cls(turn=turn, status="error", error_class=type(error).__name__, error=str(error))

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    @property
    def reason(self) -> str:
        """`rejected: WorkspaceMismatch: session ... works in ...`, `failed in provider: ...`."""
        what = f"{self.status} in {self.phase}" if self.phase else self.status
        detail = ": ".join(part for part in (self.error_class, self.error) if part)
        return f"{what}: {detail}" if detail else what


@dataclass
class Live:
    """What each session is doing, for the progress view (written by the client threads)."""

    turn: int = 0
    of: int = 0
    doing: str = "waiting"
    requests: int = 0
    handoffs: int = 0
    checkpoints: int = 0
    chars: int = 0
    done: bool = False
    outcomes: list[TurnOutcome] = field(default_factory=list)

    @property
    def failed(self) -> int:
        """The turns of this run that did not complete so far."""
        return sum(not outcome.ok for outcome in self.outcomes)


def _describe(record: Record) -> str:
    """What a record of the turn says the session is doing now, for the live view."""
    event = record.event
    kind = record.line_kind
    if kind == "tool-result":
        return f"tool {getattr(event, 'tool_name', '')}"
    if kind == "checkpoint-committed" and isinstance(event, CheckpointCommitted):
        return f"checkpoint ({event.trigger}/{event.strategy})"
    return kind


def _one_turn(
    host: Host, setup: Setup, sid: str, workspace: Path, n: int, live: Live, lock: threading.Lock
) -> TurnOutcome:
    """Send turn `n` and follow it to its end; what sending or waiting raised is its outcome."""
    try:
        turn = host.send(sid, setup.message(sid, n, workspace), workspace=workspace)
        for item in turn.events(timeout=setup.wait_s):
            with lock:
                if isinstance(item, TextDelta):
                    live.chars += len(item.text)
                    live.doing = "streaming"
                    continue
                if not isinstance(item, Record):
                    continue
                live.doing = _describe(item)
                if item.line_kind == "request":
                    live.requests += 1
                elif item.line_kind == "checkpoint-committed":
                    live.checkpoints += 1
        result = turn.result(timeout=setup.wait_s)
    except Exception as error:  # a client thread reports, never dies with a traceback
        return TurnOutcome.of_error(n, error)
    return TurnOutcome.of_result(n, result)


def send_turns(
    host: Host,
    setup: Setup,
    sid: str,
    workspace: Path,
    first: int,
    turns: int,
    live: Live,
    lock: threading.Lock,
    plain: bool,
) -> None:
    """Send the session's turns one after the other, keeping how each ended in `live.outcomes`.

    Once the store has failed, the session sends nothing more: every send
    would fail the same way.
    """
    try:
        for n in range(first, first + turns):
            with lock:
                live.turn, live.doing = n - first + 1, "sending"
            outcome = _one_turn(host, setup, sid, workspace, n, live, lock)
            with lock:
                live.outcomes.append(outcome)
                live.doing = "completed" if outcome.ok else outcome.status
            if plain:
                said = f"completed ({outcome.requests} requests)" if outcome.ok else outcome.reason
                print(
                    _console.printable(f"  {sid} turn {n} ({n - first + 1}/{turns} of this run): {said}"),
                    flush=True,
                )
            if host.journal.failed is not None:
                break
    finally:
        with lock:
            live.done = True
            live.doing = "done" if not live.failed else f"done, {live.failed} not completed"
