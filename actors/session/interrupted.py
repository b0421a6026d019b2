"""The turns a crash (or a stop) interrupted, with the user message to send again: derived from the log.

A session's last turn is *interrupted* when it ended `turn-failed` with
phase `interrupted` (the host marks it so when it stopped the session
mid-turn, or when it next loads a session whose log ends inside a turn), or
when the log still ends inside it (`open`: the process died and the session
was not loaded since). It stays listed until it is continued
(`Host.continue_turn`: a turn that `continues` it), dismissed
(`Host.dismiss_interrupted`: `turn-dismissed`), or followed by another
turn (the user has moved on). A turn the log leaves waiting for a deferred
tool result is not interrupted: loading its session resumes the wait
(`deferred`). `interrupted_turn` is a pure fold over one session's
records; `Host.interrupted_turns` and `cairn interrupted` run it per session
(`actors.host.interrupted`), and the session actor before it continues or
dismisses one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from cairn.actors.session.deferred import WaitFold
from cairn.events.codec import Record
from cairn.events.kinds import (
    TurnCancelled,
    TurnCompleted,
    TurnDismissed,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import ImagePart, Part, TextPart


class InterruptedTurn(msgspec.Struct, frozen=True, kw_only=True):
    """A session's last turn, which never finished: what to send again, and when it happened.

    `text` is the text of the user message that started the turn (its text
    parts joined; `images` counts its image parts), `steering` the text of
    the messages sent while it ran. `state` is `interrupted` (recorded, at
    `interrupted_ms`, with `reason`) or `open` (the log ends inside the turn:
    its session was not loaded since the crash; loading it records the
    interruption). `started_ms` is when the turn began.
    """

    session: str
    turn_id: str
    message_id: str
    text: str
    images: int
    steering: tuple[str, ...]
    state: Literal["interrupted", "open"]
    started_ms: int
    interrupted_ms: int | None
    reason: str


def _text(parts: tuple[Part, ...]) -> str:
    return "".join(part.text for part in parts if isinstance(part, TextPart))


def _images(parts: tuple[Part, ...]) -> int:
    return sum(1 for part in parts if isinstance(part, ImagePart))


def interrupted_turn(session: str, records: Iterable[Record]) -> InterruptedTurn | None:
    """The session's last turn if it was interrupted or is still open in `records`, else None."""
    waiting: dict[str, UserMessage] = {}  # user messages since the last turn began, by id
    current: InterruptedTurn | None = None
    steering: list[str] = []
    deferred = WaitFold()
    for record in records:
        deferred.take(record)
        event = record.event
        match event:
            case UserMessage():
                if current is not None and current.state == "open":
                    steering.append(_text(event.content))
                else:
                    waiting[event.message_id] = event
            case TurnStarted():
                first = waiting.get(event.message_id)
                content = first.content if first is not None else ()
                continued = current if current is not None and current.turn_id == event.continues else None
                current = InterruptedTurn(
                    session=session,
                    turn_id=event.turn_id,
                    message_id=event.message_id,
                    # a continued turn asks what the one it continues asked
                    text=continued.text if continued is not None else _text(content),
                    images=continued.images if continued is not None else _images(content),
                    steering=(),
                    state="open",
                    started_ms=record.ts,
                    interrupted_ms=None,
                    reason="",
                )
                waiting.clear()
                steering = []
            case TurnCompleted() | TurnCancelled() if (
                current is not None and event.turn_id == current.turn_id
            ):
                current = None
            case TurnDismissed() if current is not None and event.turn_id == current.turn_id:
                current = None  # the host said it will not be continued
            case TurnFailed() if current is not None and event.turn_id == current.turn_id:
                if event.phase != "interrupted":
                    current = None
                    continue
                current = msgspec.structs.replace(
                    current,
                    steering=tuple(steering),
                    state="interrupted",
                    interrupted_ms=record.ts,
                    reason=event.error,
                )
    if current is not None and current.state == "open":
        if deferred.wait() is not None:
            return None  # it waits for a deferred tool result: its session resumes it (`deferred`)
        current = msgspec.structs.replace(current, steering=tuple(steering))
    return current
