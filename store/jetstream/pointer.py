"""The checkpoint pointer: where a session's latest checkpoint is in the stream (derived, rebuildable).

A key-value entry per session (key: the session token) holding the session
seq and stream sequence of its latest `checkpoint-committed` and of its
latest `session-started` before it: what `load` needs to start from the
checkpoint without reading the session from its start (O(tail), as the
local journal does with its index). The log is the truth: the pointer is
written after the events it names are acknowledged, may lag (a host died
in between: it names an older checkpoint, and load just reads more) or be
missing (load replays from seq 1 and writes it), and is checked against the
line it names before it is used (`names_checkpoint`), so a wrong one only
costs a full replay, never a wrong state.
"""

from __future__ import annotations

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from cairn.events.codec import Record
from cairn.events.kinds import CheckpointCommitted, SessionStarted


class Pointer(msgspec.Struct, frozen=True, kw_only=True):
    """Session seq and stream sequence of the latest checkpoint and `session-started` (0: none)."""

    checkpoint_seq: int = 0
    checkpoint_stream: int = 0
    epoch: int = 0
    info_seq: int = 0
    info_stream: int = 0


_decoder = msgspec.json.Decoder(Pointer)


def advanced(pointer: Pointer, records: list[Record], stream_seqs: list[int]) -> Pointer:
    """The pointer after `records` (stored at `stream_seqs`), in seq order: pure."""
    for record, stream_seq in zip(records, stream_seqs, strict=True):
        event = record.event
        if isinstance(event, CheckpointCommitted):
            pointer = msgspec.structs.replace(
                pointer, checkpoint_seq=record.seq, checkpoint_stream=stream_seq, epoch=event.epoch
            )
        elif isinstance(event, SessionStarted):
            pointer = msgspec.structs.replace(pointer, info_seq=record.seq, info_stream=stream_seq)
    return pointer


def matters(records: list[Record]) -> bool:
    """Whether these records move a pointer (a checkpoint or a `session-started` among them)."""
    for record in records:  # noqa: SIM110 - a loop, not any(<genexpr>): asked on every append
        if isinstance(record.event, CheckpointCommitted | SessionStarted):
            return True
    return False


async def get_pointer(kv: KeyValue, token: str) -> Pointer | None:
    """The stored pointer of a session token, or None (missing or unreadable: rebuilt by load)."""
    try:
        entry = await kv.get(token)
    except KeyNotFoundError:
        return None
    if entry.value is None:
        return None
    try:
        return _decoder.decode(entry.value)
    except msgspec.DecodeError:
        return None


async def put_pointer(kv: KeyValue, token: str, pointer: Pointer) -> None:
    await kv.put(token, msgspec.json.encode(pointer))
