"""The wire protocol between cluster clients and hosts: msgspec structs, MessagePack on NATS.

A client publishes one `TurnRequest` to the session's subject with its own
inbox as the reply subject; whichever host serves the turn publishes the
turn's frames to that inbox, in order, from one connection (so NATS keeps
their order):

| frame         | when                                          | the client's handle              |
|---------------|-----------------------------------------------|----------------------------------|
| `Accepted`    | first: the host holds the session, sent it    | `send` returns                   |
| `ErrorFrame`  | instead of `Accepted`: refused, no turn began | `send` raises `RequestRefused`   |
| `RecordFrame` | each client-visible record, once durable      | the `Record` of its log line     |
| `DeltaFrame`  | each text or reasoning delta as it streams    | `TextDelta` / `ReasoningDelta`   |
| `ResultFrame` | last: how the turn ended                      | `result()` returns it            |
| `Beat`        | every second while the turn runs (no number)  | proves the host is alive         |

Every frame but `Beat` carries `n` (0 for `Accepted`, then 1, 2, ...): a
client that sees a gap knows a frame was lost. Records travel as their log
line (`events.codec`), so the client decodes the very bytes the log holds.

Between hosts: a host that got a message for a session another host holds
sends that host a `Forwarded` request (the client's inbox inside) and gets
a `ForwardAnswer`: taken (it streams to the client itself) or not (it no
longer holds the session).
"""

from __future__ import annotations

import msgspec

from cairn.actors.provider.base import ReasoningDelta, TextDelta
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import StreamItem, TurnResult
from cairn.events.codec import Record, decode_line, encode_line
from cairn.events.model import ImagePart, TextPart


class TurnRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A user message for `sid`, as `Host.send` takes it."""

    sid: str
    content: str | tuple[TextPart | ImagePart, ...]
    workspace: str | None = None
    settings: SessionSettings | None = None
    #: the client's idempotency key (`Host.send(idempotency_key=...)`): a resend runs nothing twice
    idempotency_key: str | None = None


class Forwarded(msgspec.Struct, frozen=True, kw_only=True):
    """A client's request passed on by host `via` to the session's holder; frames go to `reply_to`."""

    request: TurnRequest
    reply_to: str
    via: str


class ForwardAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """The holder's answer to a `Forwarded`: `taken` (it serves the turn) or not (not its session now)."""

    taken: bool
    host_id: str


class Frame(msgspec.Struct, frozen=True, tag_field="f"):
    """Base of what a host publishes to a client's inbox."""


class Accepted(Frame, frozen=True, tag="accepted"):
    host_id: str
    n: int = 0
    #: the serving host's lease TTL: a host silent for longer has lost the session (0: not said)
    lease_ttl_s: float = 0.0


class ErrorFrame(Frame, frozen=True, tag="error"):
    n: int
    error_class: str
    message: str


class RecordFrame(Frame, frozen=True, tag="record"):
    n: int
    line: bytes


class DeltaFrame(Frame, frozen=True, tag="delta"):
    n: int
    text: str
    reasoning: bool = False


class ResultFrame(Frame, frozen=True, tag="result"):
    n: int
    result: TurnResult


class Beat(Frame, frozen=True, tag="beat"):
    pass


AnyFrame = Accepted | ErrorFrame | RecordFrame | DeltaFrame | ResultFrame | Beat

_encoder = msgspec.msgpack.Encoder()
_frames = msgspec.msgpack.Decoder(AnyFrame)
_requests = msgspec.msgpack.Decoder(TurnRequest)
_forwards = msgspec.msgpack.Decoder(Forwarded)
_answers = msgspec.msgpack.Decoder(ForwardAnswer)


def encode(value: msgspec.Struct) -> bytes:
    return _encoder.encode(value)


def decode_frame(data: bytes) -> AnyFrame:
    """A frame (msgspec's `ValidationError`/`DecodeError` for anything else)."""
    return _frames.decode(data)


def decode_request(data: bytes) -> TurnRequest:
    return _requests.decode(data)


def decode_forwarded(data: bytes) -> Forwarded:
    return _forwards.decode(data)


def decode_answer(data: bytes) -> ForwardAnswer:
    return _answers.decode(data)


def item_frame(n: int, item: StreamItem) -> RecordFrame | DeltaFrame:
    """The frame of one item of a turn's stream."""
    match item:
        case Record():
            line, _ = encode_line(
                pos=item.pos, sid=item.sid, seq=item.seq, ts=item.ts, prev=item.prev, event=item.event
            )
            return RecordFrame(n=n, line=line)
        case TextDelta():
            return DeltaFrame(n=n, text=item.text)
        case ReasoningDelta():
            return DeltaFrame(n=n, text=item.text, reasoning=True)


def frame_item(frame: RecordFrame | DeltaFrame) -> StreamItem:
    """The stream item a frame carries: the record decoded (and checked) from its line, or a delta."""
    match frame:
        case RecordFrame():
            return decode_line(frame.line, where="a turn frame")
        case DeltaFrame(reasoning=True):
            return ReasoningDelta(frame.text)
        case DeltaFrame():
            return TextDelta(frame.text)
