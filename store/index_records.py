"""What the LMDB index stores: its keys, its values and their encodings (DESIGN §2.4).

Keys are binary and order-preserving (UTF-8 session id, a NUL, then a
big-endian integer), so a session's events and checkpoints are contiguous
and sorted by seq / epoch; values are fixed binary records or msgpack:

| db            | key                          | value                                         |
|---------------|------------------------------|-----------------------------------------------|
| `events`      | sid NUL seq (>Q)             | segment first pos, offset, length, pos (>QQIQ) |
| `sessions`    | sid                          | `SessionSummary` (msgpack)                    |
| `checkpoints` | sid NUL epoch (>Q)           | seq, pos (>QQ)                                 |
| `corrupt`     | segment (>Q), offset (>Q)    | `CorruptEntry` (msgpack)                      |
| `meta`        | b"format", b"through"        | format version; `IndexMeta` (msgpack)         |

`store.index_builder` writes these entries, `store.index` keeps them in
LMDB and reads them back. Pure values and codecs: no I/O.
"""

from __future__ import annotations

import struct

import msgspec

from cairn.store.segments import segment_name

#: the index's format; an index of another format is rebuilt from the log when opened (a
#: read-only open reads through a private rebuilt copy). 2: cumulative usage in the summaries;
#: 3: the prompt-cache account in the summaries.
FORMAT = b"cairn-index-3"
#: the named databases
DBS = (b"events", b"sessions", b"checkpoints", b"corrupt", b"meta")

#: an `events` value: segment first pos, byte offset, length, pos
LOC = struct.Struct(">QQIQ")
#: the seq or epoch that ends an `events` or `checkpoints` key
U64 = struct.Struct(">Q")
#: a `checkpoints` value: seq, pos
CHECKPOINT = struct.Struct(">QQ")
#: a `corrupt` key: segment first pos, byte offset
CORRUPT_KEY = struct.Struct(">QQ")


class Loc(msgspec.Struct, frozen=True, array_like=True):
    """Where a line is: segment (its first pos), byte offset, length; and its pos."""

    segment: int
    offset: int
    length: int
    pos: int


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What the index knows of a session without replaying it.

    `head` is the chain digest of its last line (the next line's `prev`).
    `info_seq` is the seq of its latest `session-started`; `checkpoint_*`
    describe its latest `checkpoint-committed` (0 when none). `broken_seq` is
    the first seq past which the session cannot be read (a corrupt line, a
    gap or a broken chain), 0 when it is sound.

    Usage, as providers reported it: `prompt_tokens` and `completion_tokens`
    are sums over the usage events that carried each figure, and
    `prompt_reports` / `completion_reports` count those events. A response
    (an `assistant-message`, one per answered request) whose usage was never
    reported leaves the sums short: the figures are complete only when the
    reports equal `counts["assistant-message"]`, and unknown (not 0) when
    responses came without any report. `last_usage_total_tokens` is the
    `total_tokens` of the latest usage event, i.e. of the last request that
    reported usage (None when none did, or it gave no total).

    The prompt cache, as providers reported it: `cache_reports` counts the
    usage events that reported cache reads (`cached_prompt_tokens` not
    null), `cache_prompt_tokens` sums their whole prompts (`Usage.whole_prompt`),
    `cache_read_tokens` and `cache_write_tokens` their reads and writes; the
    hit ratio is reads over those prompts, unknown when no event reported.
    `cache_breaks_by_*` count the decisions that broke a prefix a provider
    had cached (`store.index_builder`, "Cache breaks"); `cache_request_id` and
    `cache_answered` are that count's running state: the latest request of
    the compaction epoch, and whether a request of the epoch was answered.
    """

    sid: str
    last_seq: int = 0
    head: str = ""
    last_pos: int = 0
    workspace: str = ""
    model: str = ""
    created_ts: int = 0
    updated_ts: int = 0
    events: int = 0
    counts: dict[str, int] = {}
    info_seq: int = 0
    checkpoint_seq: int = 0
    checkpoint_pos: int = 0
    checkpoint_epoch: int = 0
    last_usage_total_tokens: int | None = None
    broken_seq: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_reports: int = 0
    completion_reports: int = 0
    cache_reports: int = 0
    cache_prompt_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_breaks_by_slimming: int = 0
    cache_breaks_by_checkpoint: int = 0
    cache_request_id: str = ""
    cache_answered: bool = False


class CheckpointRef(msgspec.Struct, frozen=True):
    """A `checkpoint-committed` of a session: its epoch, seq and global position."""

    epoch: int
    seq: int
    pos: int


class CorruptEntry(msgspec.Struct, frozen=True, kw_only=True):
    """An invalid line found with valid lines after it (never a torn tail)."""

    segment: int
    offset: int
    length: int
    sid: str = ""
    seq: int = 0
    reason: str = ""


class IndexMeta(msgspec.Struct, frozen=True, kw_only=True):
    """The log position indexed through: segment, byte offset just past the
    last indexed byte, the next global position, and the last line's place."""

    segment: int = 0
    offset: int = 0
    next_pos: int = 0
    last_segment: int = 0
    last_offset: int = -1
    last_length: int = 0


#: every value is msgpack, with map keys sorted: equal indexes hold equal bytes
encoder = msgspec.msgpack.Encoder(order="deterministic")
summary_decoder = msgspec.msgpack.Decoder(SessionSummary)
corrupt_decoder = msgspec.msgpack.Decoder(CorruptEntry)
_meta_decoder = msgspec.msgpack.Decoder(IndexMeta)


def decode_meta(raw: bytes | memoryview) -> IndexMeta:
    """The `IndexMeta` stored under `meta/through`."""
    return _meta_decoder.decode(raw)


def explain_entry(db: str, key: bytes, value: bytes | None) -> tuple[str, int, str]:
    """An index entry in the words of the log: (session, seq or epoch, what it says).

    `value` None: the entry is absent. For messages that speak of sessions,
    seqs, positions, segments and offsets, never of raw LMDB keys.
    """
    try:
        if db in ("events", "checkpoints"):
            sid = key[:-9].decode(errors="replace")  # sid, NUL, 8 bytes of seq or epoch (NULs among them)
            number = U64.unpack(key[-8:])[0] if len(key) >= 9 else 0
            if db == "events":
                if value is None:
                    return sid, number, f"seq {number}: not indexed"
                segment, offset, length, pos = LOC.unpack(value)
                place = f"{segment_name(segment)}@{offset}"
                return sid, number, f"seq {number} at pos {pos}, {place} ({length} bytes)"
            if value is None:
                return sid, 0, f"checkpoint of epoch {number}: not indexed"
            seq, pos = CHECKPOINT.unpack(value)
            return sid, seq, f"checkpoint of epoch {number} at seq {seq}, pos {pos}"
        if db == "sessions":
            sid = key.decode(errors="replace")
            if value is None:
                return sid, 0, "no summary"
            summary = summary_decoder.decode(value)
            broken = summary.broken_seq or "-"
            return (
                sid,
                summary.last_seq,
                (
                    f"summary: last seq {summary.last_seq} at pos {summary.last_pos}, "
                    f"{summary.events} events, broken from seq {broken}"
                ),
            )
        if db == "corrupt":
            segment, offset = CORRUPT_KEY.unpack(key)
            entry = corrupt_decoder.decode(value) if value is not None else None
            who = entry.sid if entry is not None else ""
            said = f"a corrupt line at {segment_name(segment)}@{offset}"
            return (
                who,
                entry.seq if entry is not None else 0,
                said + (" recorded" if value is not None else ": not recorded"),
            )
        if db == "meta":
            if key == b"through" and value is not None:
                meta = _meta_decoder.decode(value)
                return (
                    "",
                    0,
                    (f"recovery point {segment_name(meta.segment)}@{meta.offset}, next pos {meta.next_pos}"),
                )
            return "", 0, f"meta {key.decode(errors='replace')}" + ("" if value is not None else ": absent")
    except (struct.error, msgspec.DecodeError, UnicodeDecodeError):
        pass
    return "", 0, f"an unreadable {db} entry"


def event_key(sid: str, seq: int) -> bytes:
    """The `events` key of the session's line of `seq`."""
    return sid.encode() + b"\x00" + U64.pack(seq)


def session_prefix(sid: str) -> bytes:
    """The start of every `events` and `checkpoints` key of the session."""
    return sid.encode() + b"\x00"
