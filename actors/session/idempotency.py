"""Idempotent sends: which turn took a message's key, and that turn's outcome, read from the log.

A host may send a message with an idempotency key (`Host.send(...,
idempotency_key=...)`), recorded on its `user-message`. A later send with
the same key to the same session records nothing and runs nothing: it joins
the turn when that turn is still running, else it is answered from the log
(`turn_outcome`: the turn's records and the result the first send got, but
`provider_seconds`, which the log does not hold, 0). The same key with other
content is refused (`IdempotencyKeyReused`): it names another message.

Pure functions over records; the session actor reads the log and applies them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec

from cairn.actors.session.handoff import is_hidden_event
from cairn.actors.session.stream import TurnResult
from cairn.events.codec import Record
from cairn.events.kinds import (
    AssistantMessage,
    Request,
    SessionStarted,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import Part, TextPart, parts_of

#: the longest key a host may give
MAX_KEY_CHARS = 256


@dataclass(frozen=True)
class KeyedMessage:
    """The message a key was recorded with: its turn and its content (to tell a resend from a reuse)."""

    turn_id: str
    content: tuple[Part, ...]


def same_message(first: str | Sequence[Part], second: str | Sequence[Part]) -> bool:
    """Whether two sends carry the same message: the same texts, and an image wherever the other
    has one (a large image is stored as a blob, so images are not compared byte for byte)."""

    def shape(content: str | Sequence[Part]) -> list[str | None]:
        return [part.text if isinstance(part, TextPart) else None for part in parts_of(content)]

    return shape(first) == shape(second)


def key_index(records: Iterable[Record]) -> dict[str, KeyedMessage]:
    """Every key in a session's records, with the turn its message started or steered.

    A message that starts a turn comes before the `turn-started` naming it;
    one that steers comes while its turn is open. A key whose message never
    got a turn (the log ends before its `turn-started`) is left out.
    """
    found: dict[str, KeyedMessage] = {}
    starting: dict[str, tuple[str, tuple[Part, ...]]] = {}  # message id -> (key, content)
    open_turn = ""
    for record in records:
        event = record.event
        if isinstance(event, UserMessage):
            key = event.idempotency_key
            if isinstance(key, str) and key not in found:
                if open_turn:
                    found[key] = KeyedMessage(open_turn, event.content)
                else:
                    starting[event.message_id] = (key, event.content)
        elif isinstance(event, TurnStarted):
            open_turn = event.turn_id
            started = starting.pop(event.message_id, None)
            if started is not None and started[0] not in found:
                found[started[0]] = KeyedMessage(event.turn_id, started[1])
        elif isinstance(event, TurnCompleted | TurnFailed):
            open_turn = ""
    return found


def turn_outcome(records: Sequence[Record], session: str, turn_id: str) -> tuple[list[Record], TurnResult]:
    """The records a client saw of turn `turn_id` (hidden ones left out) and the result it ended with.

    A turn without a recorded end (a crash ended it and the log was not
    marked yet) is `failed`, phase `interrupted`.
    """
    shown: list[Record] = []
    #: what came just before: the message a turn-started names, and the session's start before it
    #: when the same send began the session (as the first send's handle saw them)
    before: list[Record] = []
    inside = False
    requests = 0
    text = ""
    last_seq = 0
    end: TurnCompleted | TurnFailed | TurnCancelled | None = None
    for record in records:
        event = record.event
        if not inside:
            if isinstance(event, TurnStarted) and event.turn_id == turn_id:
                inside = True
                shown = before
            elif isinstance(event, UserMessage):
                started = before and isinstance(before[-1].event, SessionStarted)
                before = [*before, record] if started else [record]
                continue
            else:
                before = [record] if isinstance(event, SessionStarted) else []
                continue
        if not is_hidden_event(event):
            shown.append(record)
        last_seq = record.seq
        if isinstance(event, Request) and event.turn_id == turn_id:
            requests += 1
        elif isinstance(event, AssistantMessage) and event.text:
            text = event.text
        elif isinstance(event, TurnCompleted | TurnFailed | TurnCancelled) and event.turn_id == turn_id:
            end = event
            break
    ran = TurnResult(
        session=session, status="failed", turn_id=turn_id, requests=requests, text=text, last_seq=last_seq
    )
    if isinstance(end, TurnCompleted):
        result = msgspec.structs.replace(ran, status="completed", requests=end.requests or requests)
    elif isinstance(end, TurnCancelled):
        result = msgspec.structs.replace(ran, status="cancelled", error=end.reason)
    elif isinstance(end, TurnFailed):
        result = msgspec.structs.replace(ran, phase=end.phase, error_class=end.error_class, error=end.error)
    else:
        no_end = "the turn has no recorded end"
        result = msgspec.structs.replace(ran, phase="interrupted", error_class="interrupted", error=no_end)
    return [r for r in shown if r.seq <= last_seq], result
