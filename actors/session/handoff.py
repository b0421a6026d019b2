"""The hand-off (CONTEXT-RULES H1-H7): when to record it, its strict record, its hidden message.

State machine of one compaction epoch (an epoch starts at every
`checkpoint-committed`; the fold files `handoff` events under the epoch they
name when it is the current one, `SessionState.epoch_handoffs`):

| hand-off events in the epoch       | status       | projected | may write |
|------------------------------------|--------------|-----------|-----------|
| none                               | `none`       | no        | yes (H1)  |
| exactly one, valid (H2)            | `current`    | yes (H4)  | no        |
| one invalid, or more than one      | `suppressed` | no        | no        |

Never pick one of several (H3). A new checkpoint starts the next epoch at `none`.

Record v1 (H1/H2), exactly these fields, in this order when cairn writes it::

    {"version":1,"message_id":"...","observed_tokens":N,"input_budget":N,
     "handoff_threshold":N,"compaction_threshold":N,"created_at":"2026-01-31T12:00:00.000Z"}

Validated when written and again on every read: no other field and no field
twice; version 1; message id 1..128 chars without control characters;
non-negative ints (budget positive); thresholds equal to B3 of the budget;
hand-off threshold <= observed < compaction threshold; created-at a real UTC
date in exactly that millisecond form.

Decisions of H6 (the session actor carries them out): the hand-off event is
hidden (`is_hidden_event`): never sent to the client stream and not copied
into a fork; `strip_handoff` takes it out of compaction input, so it is never
summarised; the event is persisted before the first request that carries the
message (the request is assembled from the state the event was applied to).
H7: a failed write is logged as one line (`handoff_failure_line`), sends no
marker and is not retried in that turn (`decide_handoff(..., write_failed=True)`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import re
import unicodedata
from typing import Literal

import msgspec

from cairn.actors.session.budget import BudgetSnapshot, thresholds
from cairn.events.errors import InputError
from cairn.events.kinds import HANDOFF_VERSION, EventBase, Handoff, OwnerChanged
from cairn.events.model import Message, MessageMeta, TextPart
from cairn.events.state import SessionState

HandoffStatus = Literal["none", "current", "suppressed"]

#: H4: the rendered text never exceeds this many UTF-8 bytes
MAX_TEXT_BYTES = 2_000
MAX_MESSAGE_ID_CHARS = 128

_CREATED_AT_RE = re.compile(
    r"\A([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{3})Z\Z"
)
_EPOCH_START = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class InvalidHandoff(InputError):
    """A hand-off record that breaks H2 (the message says which rule)."""


class HandoffRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The v1 hand-off record (H1). Decoding refuses unknown and missing fields."""

    version: int
    message_id: str
    observed_tokens: int
    input_budget: int
    handoff_threshold: int
    compaction_threshold: int
    created_at: str


_FIELDS = HandoffRecord.__struct_fields__
_record_decoder = msgspec.json.Decoder(HandoffRecord)
_record_encoder = msgspec.json.Encoder()


def format_created_at(now_ms: int) -> str:
    """UTC, millisecond ISO form: `2026-01-31T12:00:00.000Z` (exact integer arithmetic)."""
    moment = _EPOCH_START + _dt.timedelta(milliseconds=now_ms)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}."
        f"{moment.microsecond // 1000:03d}Z"
    )


def _created_at_problem(text: str) -> str | None:
    match = _CREATED_AT_RE.match(text)
    if match is None:
        return "created_at is not of the form YYYY-MM-DDTHH:MM:SS.mmmZ"
    year, month, day, hour, minute, second, _ms = (int(group) for group in match.groups())
    try:
        _dt.datetime(year, month, day, hour, minute, second, tzinfo=_dt.UTC)
    except ValueError:
        return f"created_at {text!r} is not a real date and time"
    return None


def _message_id_problem(message_id: str) -> str | None:
    if not 1 <= len(message_id) <= MAX_MESSAGE_ID_CHARS:
        return f"message_id must be 1..{MAX_MESSAGE_ID_CHARS} chars, got {len(message_id)}"
    if any(unicodedata.category(char) == "Cc" for char in message_id):
        return "message_id contains a control character"
    return None


def record_problem(record: HandoffRecord) -> str | None:
    """H2 on a decoded record: why it is invalid, or None."""
    if record.version != HANDOFF_VERSION:
        return f"unsupported hand-off version {record.version}"
    problem = _message_id_problem(record.message_id)
    if problem is not None:
        return problem
    for name in ("observed_tokens", "handoff_threshold", "compaction_threshold"):
        if getattr(record, name) < 0:
            return f"{name} is negative"
    if record.input_budget <= 0:
        return "input_budget must be positive"
    if (record.handoff_threshold, record.compaction_threshold) != thresholds(record.input_budget):
        return "thresholds are not 7/10 and 8/10 of the input budget (B3)"
    if not record.handoff_threshold <= record.observed_tokens < record.compaction_threshold:
        return "observed_tokens is outside the hand-off band"
    return _created_at_problem(record.created_at)


def _refuse_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise InvalidHandoff("a field appears more than once")
    return dict(pairs)


@functools.lru_cache(maxsize=256)
def _checked(raw: bytes) -> HandoffRecord | str:
    try:
        record = _record_decoder.decode(raw)
    except msgspec.ValidationError as exc:
        return f"record does not match v1: {exc}"
    except msgspec.DecodeError as exc:
        return f"record is not JSON: {exc}"
    try:
        json.loads(raw, object_pairs_hook=_refuse_duplicates)
    except InvalidHandoff as exc:
        return str(exc)
    problem = record_problem(record)
    return record if problem is None else problem


def validate_record(raw: bytes | msgspec.Raw) -> HandoffRecord:
    """H2: decode and check a stored record strictly; raise InvalidHandoff when it breaks a rule."""
    result = _checked(bytes(raw))
    if isinstance(result, str):
        raise InvalidHandoff(result)
    return result


def encode_record(record: HandoffRecord) -> bytes:
    """The record as cairn writes it: its fields in declaration order, compact JSON."""
    return _record_encoder.encode(record)


# --- per-epoch state (H3) ---------------------------------------------------


class EpochHandoff(msgspec.Struct, frozen=True, kw_only=True):
    """H3: the hand-off status of the current epoch; `record` only when `current`."""

    status: HandoffStatus
    record: HandoffRecord | None = None
    reason: str = ""


_NONE = EpochHandoff(status="none")


def epoch_handoff(state: SessionState) -> EpochHandoff:
    """H3 from the hand-off events of the current epoch."""
    events = state.epoch_handoffs
    if not events:
        return _NONE
    if len(events) > 1:
        return EpochHandoff(status="suppressed", reason=f"{len(events)} hand-off records in one epoch")
    result = _checked(bytes(events[0].record))
    if isinstance(result, str):
        return EpochHandoff(status="suppressed", reason=result)
    return EpochHandoff(status="current", record=result)


# --- when to record (H1, H7) ------------------------------------------------


def default_message_id(state: SessionState) -> str:
    """A deterministic id for the hand-off message: its epoch and the seq its event will take."""
    return f"handoff-e{state.epoch}-s{state.last_seq + 1}"


def new_record(message_id: str, snap: BudgetSnapshot, now_ms: int) -> HandoffRecord:
    """A v1 record of the snapshot (its phase must be `handoff_band`)."""
    if snap.input_budget is None or snap.projected_tokens is None:
        raise InvalidHandoff("a hand-off needs a known budget and projection")
    handoff, compaction = thresholds(snap.input_budget)
    return HandoffRecord(
        version=HANDOFF_VERSION,
        message_id=message_id,
        observed_tokens=snap.projected_tokens,
        input_budget=snap.input_budget,
        handoff_threshold=handoff,
        compaction_threshold=compaction,
        created_at=format_created_at(now_ms),
    )


def decide_handoff(
    state: SessionState,
    snap: BudgetSnapshot,
    *,
    now_ms: int,
    message_id: str | None = None,
    write_failed: bool = False,
) -> Handoff | None:
    """H1: the `handoff` event to persist before this request, or None.

    One per epoch, only in `handoff_band`, only while the epoch's status is
    `none`, and not again in a turn whose earlier write failed (H7). Raises
    InvalidHandoff when the record would break H2 (refuse in decide).
    """
    if write_failed or snap.phase != "handoff_band" or epoch_handoff(state).status != "none":
        return None
    record = new_record(message_id or default_message_id(state), snap, now_ms)
    problem = record_problem(record)
    if problem is not None:
        raise InvalidHandoff(problem)
    return Handoff(epoch=state.epoch, record=msgspec.Raw(encode_record(record)))


# --- the hidden message (H4, H5) --------------------------------------------


@functools.lru_cache(maxsize=64)
def render_text(record: HandoffRecord) -> str:
    """H4: the reminder the model reads, from the record alone (at most 2,000 UTF-8 bytes)."""
    headroom = max(0, record.compaction_threshold - record.observed_tokens)
    text = (
        "<context-handoff>\n"
        "Context rollover is near: this conversation uses about "
        f"{record.observed_tokens:,} of {record.input_budget:,} input tokens, and older context "
        f"will be compacted at {record.compaction_threshold:,}. Headroom before compaction: "
        f"{headroom:,} tokens.\n"
        "Continue the task from its current state; do not start over. In your next reply, make "
        "the state explicit so that it survives compaction:\n"
        "- the objective and its constraints;\n"
        "- decisions taken and why;\n"
        "- changes made to files and the workspace;\n"
        "- verification run and what it showed;\n"
        "- background work still running;\n"
        "- blockers and open risks;\n"
        "- the exact next action.\n"
        "For pending work, keep the exact commands and their arguments. Claim nothing you have "
        "not proven. Do not create notes or other bookkeeping files for this.\n"
        "</context-handoff>"
    )
    assert len(text.encode()) <= MAX_TEXT_BYTES, "hand-off text over 2,000 bytes"
    return text


@functools.lru_cache(maxsize=64)
def handoff_message(record: HandoffRecord, epoch: int) -> Message:
    """H4: the hidden user message a current record projects to."""
    return Message(
        role="user",
        content=render_text(record),
        id=record.message_id,
        meta=MessageMeta(hidden=True, origin="handoff", record=f"handoff:{epoch}:{record.message_id}"),
    )


def is_handoff(message: Message, record: HandoffRecord | None) -> bool:
    """H5: a message is the hand-off only if it is the current record's rendering, byte for byte.

    Role, id and text must all match; anything else (a copy typed by a user,
    a rendering of another record) is ordinary text.
    """
    if record is None or message.role != "user" or message.id != record.message_id:
        return False
    content = message.content
    if isinstance(content, str):
        text = content
    elif len(content) == 1 and isinstance(content[0], TextPart):
        text = content[0].text
    else:
        return False
    return text == render_text(record)


def strip_handoff(messages: tuple[Message, ...], record: HandoffRecord | None) -> tuple[Message, ...]:
    """H6/C1: the messages without the hand-off (compaction input never contains it)."""
    if record is None:
        return messages
    return tuple(message for message in messages if not is_handoff(message, record))


def is_hidden_event(event: EventBase) -> bool:
    """H6: events kept from the client stream and from forks (the hand-off, a cluster's owner change)."""
    return isinstance(event, Handoff | OwnerChanged)


def handoff_failure_line(sid: str, error: BaseException) -> str:
    """H7: the one log line for a failed hand-off write: session hashed, error class only."""
    digest = hashlib.sha256(sid.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9_.]", "?", type(error).__name__)
    return f"cairn: hand-off not recorded (session sha256:{digest}, error {name}); the turn goes on"
