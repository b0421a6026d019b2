"""Operations on a session as values, and how a host runs one: a cluster runs them where the session is held.

A front end of the cluster (the HTTP API of `cairn serve --http --nats`)
acts on a session where it is held: on its own host when it holds the
session or can claim it (`ClusterHost.place`), else by asking the holder
over NATS (`ClusterHost.ask`: an `OpRequest` on
`<prefix>.host.<holder>.ops`, one `OpAnswer` back). The holder runs the
operation with its `Host` (`run_op`, on a worker thread) only while it holds
the session; else it answers `taken=False` and the asker places the session
again (it moved, or its lease expired: then the asker claims it).

| op              | runs on the holder                     | value of the answer                  |
|-----------------|----------------------------------------|--------------------------------------|
| `SendOp`        | `Host.send`                            | `Accepted` (with the result: `wait`) |
| `ContinueOp`    | `Host.continue_turn`                   | `Accepted`                           |
| `CancelOp`      | `Turn.cancel` of its running turn      | the cancelled turn's `TurnResult`    |
| `WaitingToolsOp`| `Host.waiting_tools`                   | the calls (`ToolCall`s)              |
| `ResolveToolOp` | `Host.resolve_tool`                    | null                                 |
| `NextRequestOp` | `Host.next_request`                    | `AssembledRequest`                   |
| `CompactOp`     | `Host.compact`                         | `CompactResult`                      |
| `DismissOp`     | `Host.dismiss_interrupted`             | null                                 |
| `StateOp`       | `Host.state`                           | `SessionState`                       |

A refusal travels as the error's class name and message, and is raised
again on the asker as the same cairn error class (`raised`), so a client
gets the same answer from any front end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import msgspec
from msgspec import UNSET

from cairn.actors.errors import NoTurnRunning
from cairn.actors.host import Host
from cairn.actors.session.manual import CompactResult
from cairn.actors.session.request import AssembledRequest
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import Turn, TurnResult
from cairn.actors.tools import ToolOutcome
from cairn.events.errors import CairnError
from cairn.events.kinds import TurnStarted, UserMessage
from cairn.events.model import ImagePart, TextPart, ToolCall
from cairn.events.state import SessionState

#: how long a send waits for its message to be recorded before answering without its seq (the HTTP
#: 202, and a holder's answer to another host)
ACCEPT_WAIT_S = 30.0


class SendOp(msgspec.Struct, frozen=True, kw_only=True, tag="send"):
    content: str | tuple[TextPart | ImagePart, ...]
    workspace: str | None = None
    settings: SessionSettings | None = None
    idempotency_key: str | None = None
    mid_turn: str = "steer"
    #: answer at the turn's end, with its result
    wait: bool = False


class ContinueOp(msgspec.Struct, frozen=True, kw_only=True, tag="continue"):
    turn_id: str
    wait: bool = False


class CancelOp(msgspec.Struct, frozen=True, kw_only=True, tag="cancel"):
    reason: str = ""


class WaitingToolsOp(msgspec.Struct, frozen=True, tag="waiting-tools"):
    pass


class ResolveToolOp(msgspec.Struct, frozen=True, kw_only=True, tag="resolve-tool"):
    call_id: str
    outcome: ToolOutcome


class NextRequestOp(msgspec.Struct, frozen=True, tag="next-request"):
    pass


class CompactOp(msgspec.Struct, frozen=True, tag="compact"):
    pass


class DismissOp(msgspec.Struct, frozen=True, kw_only=True, tag="dismiss"):
    turn_id: str
    reason: str = ""


class StateOp(msgspec.Struct, frozen=True, tag="state"):
    pass


Op = (
    SendOp
    | ContinueOp
    | CancelOp
    | WaitingToolsOp
    | ResolveToolOp
    | NextRequestOp
    | CompactOp
    | DismissOp
    | StateOp
)


class OpRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Run `op` on session `sid` (sent to the host believed to hold it); the answer goes to `reply_to`
    (the request's own reply is an `OpAck` at once)."""

    sid: str
    op: Op
    reply_to: str


class OpAck(msgspec.Struct, frozen=True, kw_only=True):
    """The holder's first reply, at once: `taken` (it runs the op, its `OpAnswer` follows) or not (it
    does not hold the session: place it again)."""

    taken: bool


class OpAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """The holder's answer: `taken` False when it does not hold the session (place it again); else the
    op's `value` (JSON), or the refusal as a cairn error's class name and message."""

    taken: bool
    value: msgspec.Raw = msgspec.Raw(b"null")
    error_class: str = ""
    error: str = ""


class Accepted(msgspec.Struct, frozen=True, kw_only=True):
    """A sent (or continued) message as recorded: its seq and turn (None when not known within the
    wait: queued behind a running turn), and the turn's result when it ended (or was asked for)."""

    message_seq: int | None = None
    turn_id: str | None = None
    result: TurnResult | None = None


#: the type of each op's value, to decode an answer's
VALUE_TYPES: dict[type[Any], Any] = {
    SendOp: Accepted,
    ContinueOp: Accepted,
    CancelOp: TurnResult,
    WaitingToolsOp: tuple[ToolCall, ...],
    ResolveToolOp: None,
    NextRequestOp: AssembledRequest,
    CompactOp: CompactResult,
    DismissOp: None,
    StateOp: SessionState,
}

_request_decoder = msgspec.json.Decoder(OpRequest)
_answer_decoder = msgspec.json.Decoder(OpAnswer)
_ack_decoder = msgspec.json.Decoder(OpAck)


def encode(frame: OpRequest | OpAck | OpAnswer) -> bytes:
    return msgspec.json.encode(frame)


def decode_request(data: bytes) -> OpRequest:
    return _request_decoder.decode(data)


def decode_answer(data: bytes) -> OpAnswer:
    return _answer_decoder.decode(data)


def decode_ack(data: bytes) -> OpAck:
    return _ack_decoder.decode(data)


def value_of(op: Op, answer: OpAnswer) -> Any:
    """The answer's value as the op's type (`raised` for a refusal)."""
    if answer.error_class:
        raise raised(answer.error_class, answer.error)
    kind = VALUE_TYPES[type(op)]
    return None if kind is None else msgspec.json.decode(answer.value, type=kind)


def _error_classes() -> Iterator[type[CairnError]]:
    todo: list[type[CairnError]] = [CairnError]
    while todo:
        cls = todo.pop()
        yield cls
        todo.extend(cls.__subclasses__())


class RemoteFailure(CairnError):
    """The holder of a session failed an operation with an error that is not one of cairn's."""


def raised(error_class: str, message: str) -> CairnError:
    """The cairn error named `error_class` with `message` (a `RemoteFailure` naming it when cairn has
    no error of that name, or none that takes a message alone)."""
    for cls in _error_classes():
        if cls.__name__ == error_class:
            try:
                return cls(message)
            except TypeError:
                break
    return RemoteFailure(f"{error_class}: {message}")


def run_op(
    host: Host, sid: str, op: Op, running: Callable[[str], Turn | None], track: Callable[[Turn], None]
) -> Any:
    """Run `op` on `sid` with `host` (on a worker thread of the holder); its value, or a cairn error.

    `running(sid)` is the session's turn running on this host (for `CancelOp`); `track(turn)` is
    told of each turn an op starts."""
    match op:
        case SendOp():
            turn = host.send(
                sid,
                op.content,
                workspace=op.workspace,
                settings=op.settings,
                idempotency_key=op.idempotency_key,
                mid_turn=op.mid_turn,  # type: ignore[arg-type]  # checked by the host (InputError)
            )
            track(turn)
            return accepted(turn, wait=op.wait, queued=op.mid_turn == "queue")
        case ContinueOp():
            turn = host.continue_turn(sid, op.turn_id)
            track(turn)
            return accepted(turn, wait=op.wait, queued=False)
        case CancelOp():
            found = running(sid)
            if found is None:
                raise NoTurnRunning(f"session {sid} runs no turn")
            found.cancel(op.reason)
            return found.result(None)
        case WaitingToolsOp():
            return host.waiting_tools(sid)
        case ResolveToolOp():
            host.resolve_tool(sid, op.call_id, op.outcome)
            return None
        case NextRequestOp():
            return host.next_request(sid)
        case CompactOp():
            return host.compact(sid)
        case DismissOp():
            host.dismiss_interrupted(sid, op.turn_id, op.reason)
            return None
        case StateOp():
            return host.state(sid)


class Opening:
    """A turn's opening as its stream shows it: the seq of the message that started it and the turn's
    id. `take` each item in order; it says True once both are known (the item after the message)."""

    def __init__(self) -> None:
        self.message_seq: int | None = None
        self.turn_id: str | None = None

    def take(self, item: object) -> bool:
        event = getattr(item, "event", None)
        if isinstance(event, UserMessage):
            if self.message_seq is None:
                self.message_seq = item.seq  # type: ignore[attr-defined]
            return False
        if isinstance(event, TurnStarted) and self.turn_id is None:
            self.turn_id = event.turn_id
            if event.continues is not UNSET and self.message_seq is None:
                self.message_seq = item.seq  # type: ignore[attr-defined]  # a continued turn: no new message
                return True
        return self.message_seq is not None


def accepted(turn: Turn, *, wait: bool, queued: bool) -> Accepted:
    """What the asker answers its client: the message's seq and turn id once recorded (not waited for
    when queued behind a running turn), and the result when the turn ended or `wait`."""
    opening = Opening()
    if not queued and not wait:
        try:
            for item in turn.events(ACCEPT_WAIT_S):
                if opening.take(item):
                    break
        except CairnError:  # TurnTimeout: answered without them
            pass
    result = turn.result(None) if wait else (turn.result(0) if turn.done() else None)
    if wait:
        for item in turn.events(0):
            opening.take(item)
    return Accepted(message_seq=opening.message_seq, turn_id=opening.turn_id, result=result)
