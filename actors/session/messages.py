"""The session actor's messages: frozen structs, one union, dispatched with `match` in `on_receive`.

Two are asks (`Load`, `Query`): their answer, or their error, goes back to
the caller and never stops the actor. The others are tells: from the host
(`Send`, `ManualCompact`), from a retry timer (`RetryRequest`), from the
thread that ran a tool call (`ToolDone`), and the
answers of the session's own provider and compactor actors (`ProviderItem`,
`ProviderDone`, `ProviderFailed`, `CompactionDone`, defined beside those
actors). A tell answers through what it carries (a `Turn` handle, a future),
never by return value, so nobody blocks on a session that may call back
(PITFALLS 18).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import typing
from collections.abc import Callable
from typing import Any, Literal

import msgspec
import pykka

from cairn.actors.compactor.actor import CompactionDone
from cairn.actors.provider.actor import ProviderDone, ProviderFailed, ProviderItem
from cairn.actors.session.machine import MidTurn
from cairn.actors.session.manual import CompactResult
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import Turn
from cairn.actors.session.turn import UserContent
from cairn.actors.tools import Deferred, ToolOutcome


class Load(msgspec.Struct, frozen=True):
    """Ask: replay the session from the log (marking an interrupted turn); answers its last seq."""


class Query(msgspec.Struct, frozen=True):
    """Ask: `state` (the SessionState) or `next-request` (the AssembledRequest it would send now)."""

    what: Literal["state", "next-request", "waiting-tools"]


class Send(msgspec.Struct, frozen=True):
    """Tell: a user message for the session; its handle reports the turn it starts or steers."""

    #: a string, or the parts of a message with images
    text: UserContent
    handle: Turn
    workspace: str | None
    settings: SessionSettings
    #: the host's idempotency key for this message (`actors.session.idempotency`), if any
    key: str | None = None
    #: what it does when it arrives while a turn runs (`machine.MidTurn`)
    mid_turn: MidTurn = "steer"


class CancelRequest(msgspec.Struct, frozen=True):
    """Tell (from `Turn.cancel`): cancel the turn of `handle`, or withdraw its message if still queued."""

    handle: Turn
    reason: str = ""


class ManualCompact(msgspec.Struct, frozen=True):
    """Tell: K4 compaction; `reply` gets a `CompactResult` (the checkpoint, or why none), or the error."""

    reply: concurrent.futures.Future[CompactResult]


class RetryRequest(msgspec.Struct, frozen=True):
    """Tell (from a timer thread): the wait after a transient provider error is over."""

    turn_id: str
    #: the job number the turn waits for: a stale timer (the turn moved on) is ignored
    token: int


class ToolDone(msgspec.Struct, frozen=True):
    """Tell (from the thread that ran it): the outcome of the call at `index` of job `job`'s calls,
    or `Deferred`: its result will be posted (`ResolveTool`)."""

    job: int
    index: int
    outcome: ToolOutcome | Deferred


class ContinueTurn(msgspec.Struct, frozen=True):
    """Tell (from `Host.continue_turn`): continue the interrupted turn `turn_id`; `handle` reports it."""

    turn_id: str
    handle: Turn


class DismissTurn(msgspec.Struct, frozen=True):
    """Tell (from `Host.dismiss_interrupted`): record that `turn_id` will not be continued; `reply`
    gets None, or the error."""

    turn_id: str
    reason: str
    reply: concurrent.futures.Future[None]


class ResolveTool(msgspec.Struct, frozen=True):
    """Tell (from `Host.resolve_tool`): the result of a deferred call; `reply` gets None once the
    session took it, or `ToolNotWaiting`."""

    call_id: str
    outcome: ToolOutcome
    reply: concurrent.futures.Future[None]


SessionMessage = (
    Load
    | Query
    | Send
    | CancelRequest
    | ManualCompact
    | RetryRequest
    | ToolDone
    | ResolveTool
    | ContinueTurn
    | DismissTurn
    | ProviderItem
    | ProviderDone
    | ProviderFailed
    | CompactionDone
)
"""Every message a session actor handles."""

#: the classes of `SessionMessage`, for a check at the actor's door
SESSION_MESSAGES: tuple[type, ...] = typing.get_args(SessionMessage)


def tell_from_thread(ref: pykka.ActorRef[Any], produce: Callable[[], SessionMessage], *, name: str) -> None:
    """Run `produce` on a daemon thread of its own and tell the message it makes to `ref`.

    For work a session must not wait for (a tool call, a retry's wait): the
    actor goes on taking messages. The message names the job it answers, so
    one that comes after the session moved on is ignored (`machine.step`);
    one for a session that stopped meanwhile is dropped.
    """

    def work() -> None:
        message = produce()
        with contextlib.suppress(pykka.ActorDeadError):
            ref.tell(message)

    threading.Thread(target=work, name=name, daemon=True).start()


def tell_after(
    ref: pykka.ActorRef[Any],
    sleep: Callable[[float], None],
    delay_s: float,
    message: SessionMessage,
    *,
    name: str,
) -> None:
    """Tell `message` to `ref` after `delay_s` (`sleep`, the runtime's), from a thread of its own:
    a retry's wait, a deferred call's timeout."""

    def after_the_wait() -> SessionMessage:
        sleep(delay_s)
        return message

    tell_from_thread(ref, after_the_wait, name=name)
