"""The log line format (DESIGN §2.2): envelope, body, checksum, hash chain, limits.

A line is one JSON object, UTF-8, newline-terminated::

    {"v":1,"pos":P,"sid":"S","seq":N,"ts":MS,"prev":"H","kind":"usage","event":{"kind":"usage",...},"crc":"c0ffee00"}

- `v` schema version (1); `pos` global position in the log (0, 1, 2, ...);
  `sid` session id; `seq` per-session sequence (1, 2, 3, ... no gaps); `ts`
  unix milliseconds; `prev` the chain digest of the session's previous line
  (`GENESIS` for seq 1); `kind` the event kind, so the envelope alone says
  what the line is; `event` the body, tagged with the same kind.
- The body is nested rather than flattened so that one typed decode reads a
  whole line into a `Record` (flattening needs two passes: measured 3x slower).
- `crc` is CRC-32C, 8 lowercase hex digits, over every byte of the line
  before the `,"crc":"` that ends it. The line's *content* is those bytes
  plus a closing `}`: the JSON object without the crc field.
- The chain digest of a line is the first 128 bits of SHA-256 over its
  content, hex. Each line names its predecessor's digest, so removing,
  reordering or editing a line (even with a recomputed crc) breaks the chain.

Unknown fields are ignored on decode; an unknown `v` or `kind` is an error,
but `decode_envelope` still reads the envelope of an unknown kind for audit.
What a line's body may hold is checked before it is framed
(`events.body_check.checked_body`); kinds are named by `events.kinds`' tag table.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

import crc32c
import msgspec

from cairn.events.body_check import checked_body
from cairn.events.crc_fields import CRC_HEX, CRC_SUFFIX_HEAD, CRC_SUFFIX_LEN
from cairn.events.crc_fields import CRC_SUFFIX_FORMAT as CRC_SUFFIX_FORMAT
from cairn.events.crc_fields import crc_fields_match as crc_fields_match
from cairn.events.crc_fields import frames_sound as frames_sound
from cairn.events.errors import (
    ChecksumMismatch,
    CorruptLine,
    InvalidSessionId,
    LineTooLarge,
    MalformedEvent,
    UnknownKind,
    UnsupportedVersion,
)
from cairn.events.kinds import CHECKPOINT_VERSION, KINDS, TAG_JSON, TAG_OF, Event, EventBase, kind_name

SCHEMA_VERSION = 1
#: Largest line accepted on write and on read: a 16 MiB checkpoint plus envelope room.
MAX_LINE_BYTES = 20 * 1024 * 1024
#: The `prev` of every session's first event.
GENESIS = "0" * 32
#: the largest `ts` a line may carry (unix ms; a line's `ts` is in 0..MAX_TS_MS)
MAX_TS_MS = (1 << 63) - 1


def ts_in_range(ts: int) -> bool:
    """Whether `ts` is a time a line may carry: an int in 0..`MAX_TS_MS` unix ms. The writers refuse
    others; a reader may still meet one in a log an older cairn wrote."""
    return 0 <= ts <= MAX_TS_MS


#: a line's content up to its body: the envelope and the kind (sid, prev and kind come as JSON
#: strings, quotes included: see `frame_line`); then the body, the crc field and a closing brace
_HEAD_FORMAT = (
    b'{"v":%d,' % SCHEMA_VERSION + b'"pos":%d,"sid":%s,"seq":%d,"ts":%d,"prev":%s,"kind":%s,"event":'
)
_crc32c = crc32c.crc32c
_sha256 = hashlib.sha256
#: used with fullmatch: with `^...$` and `match`, `$` also matches before a final newline
_SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}")


class Envelope(msgspec.Struct, frozen=True, gc=False):
    """The envelope of a line, readable whatever its kind."""

    v: int
    pos: int
    sid: str
    seq: int
    ts: int
    prev: str
    kind: str


class Record(msgspec.Struct, frozen=True, gc=False):
    """An event with its envelope, as stored at `pos`.

    `v` and `line_kind` (`kind` on disk) are read from the line and checked by
    `decode_line`; code that builds a Record by hand may leave them out.
    """

    pos: int
    sid: str
    seq: int
    ts: int
    prev: str
    event: Event
    v: int = SCHEMA_VERSION
    line_kind: str = msgspec.field(default="", name="kind")

    @property
    def kind(self) -> str:
        return TAG_OF[type(self.event)]


_body_encoder = msgspec.json.Encoder()
_record_decoder = msgspec.json.Decoder(Record)
_envelope_decoder = msgspec.json.Decoder(Envelope)


def validate_session_id(sid: str) -> str:
    """Return `sid` if it is a safe session id, else raise InvalidSessionId.

    1..128 characters of letters, digits and `._:@+=-`, starting with a letter
    or digit, and no `..`: ids name LMDB keys and appear in paths and shells.
    """
    if not isinstance(sid, str) or not _SESSION_ID_RE.fullmatch(sid) or ".." in sid:
        shown = sid[:40] + "..." if isinstance(sid, str) and len(sid) > 40 else sid
        raise InvalidSessionId(
            f"invalid session id {shown!r}: use 1..128 of [A-Za-z0-9._:@+=-], "
            "starting with a letter or digit, without '..'"
        )
    return sid


#: a str as a JSON string token, quotes included: how every string enters a line
json_string: Callable[[str], bytes] = _body_encoder.encode


def encode_line(*, pos: int, sid: str, seq: int, ts: int, prev: str, event: EventBase) -> tuple[bytes, str]:
    """Encode one line (with its newline) and return it with its chain digest.

    The event is checked as the journal checks it (`checked_body`); the session
    id is written as a JSON string whatever it is (the journal validates it).
    Raises InvalidEvent, InvalidSessionId or LineTooLarge before anything could be written.
    """
    _, body = checked_body(event)
    try:
        sid_json = json_string(sid) if isinstance(sid, str) else b""
    except ValueError:  # a lone surrogate
        sid_json = b""
    if not sid_json:
        raise InvalidSessionId(f"session id {sid!r} is not a str that JSON can hold")
    return frame_line(pos, sid_json, seq, ts, prev, TAG_JSON[type(event)], body)


def frame_line(
    pos: int, sid: bytes, seq: int, ts: int, prev: str, kind: bytes, body: bytes
) -> tuple[bytes, str]:
    """The line of an already encoded body, and its chain digest.

    The writer's hot path: positional arguments, no checks of the event (the
    caller has them, see `checked_body`). `sid` and `kind` are JSON string
    tokens (`json_string`), `prev` a str that is encoded here the same way,
    so no string enters the line unescaped; `kind` only names the event when
    the line is too large. Raises LineTooLarge for a line over MAX_LINE_BYTES.
    """
    # the content is head + body + "}": the crc covers head and body, the chain digest the content;
    # both are taken piece by piece, so the line is the one bytes object built here
    head = _HEAD_FORMAT % (pos, sid, seq, ts, _body_encoder.encode(prev), kind)
    size = len(head) + len(body) + CRC_SUFFIX_LEN + 1
    if size > MAX_LINE_BYTES:
        raise LineTooLarge(
            f"{kind.decode()} event of session {sid.decode()} seq {seq} encodes to {size} bytes, "
            f"over the {MAX_LINE_BYTES}-byte line limit"
        )
    digest = _sha256(head)
    if len(body) <= _HASH_PIECE:
        digest.update(body)
    else:
        _feed(digest.update, body)
    digest.update(b"}")
    crc = _crc32c(body, _crc32c(head))
    return b"".join((head, body, CRC_SUFFIX_FORMAT % crc)), digest.hexdigest()[:32]


#: hashlib lets go of the GIL for inputs of 2 KiB and more; on the journal's writer thread, getting
#: it back from hundreds of busy appenders costs far more than the hash, so longer inputs are fed in
#: pieces under that size
_HASH_PIECE = 2047


def _feed(update: Callable[[memoryview], object], data: bytes) -> None:
    view = memoryview(data)
    for start in range(0, len(data), _HASH_PIECE):
        update(view[start : start + _HASH_PIECE])


def chain_digest_of_content(content: bytes) -> str:
    """The chain digest of a line's content (its object without the crc field)."""
    if len(content) <= _HASH_PIECE:
        return hashlib.sha256(content).hexdigest()[:32]
    digest = hashlib.sha256()
    _feed(digest.update, content)
    return digest.hexdigest()[:32]


def line_content(line: bytes, *, where: str = "") -> bytes:
    """Check a line's frame and checksum; return its content (the object without crc)."""
    return _checked_prefix(line, where) + b"}"


def _checked_prefix(line: bytes, where: str) -> bytes:
    """The bytes the crc covers, after checking the frame and the crc."""
    end = len(line) - 1 if line.endswith(b"\n") else len(line)
    if end > MAX_LINE_BYTES:
        raise CorruptLine(f"line of {end} bytes is over the limit", where=where)
    cut = end - CRC_SUFFIX_LEN
    if (
        cut < 2
        or line[0] != 0x7B  # "{"
        or line[cut : cut + len(CRC_SUFFIX_HEAD)] != CRC_SUFFIX_HEAD
        or line[end - 2 : end] != b'"}'
    ):
        raise CorruptLine("not a framed log line (no trailing crc field)", where=where)
    field = line[end - 10 : end - 2]
    if not CRC_HEX.fullmatch(field):
        raise CorruptLine(f"crc field {field!r} is not 8 lowercase hex digits", where=where)
    stated = int(field, 16)
    prefix = line[:cut]
    actual = crc32c.crc32c(prefix)
    if actual != stated:
        raise ChecksumMismatch(
            f"checksum mismatch: line says {stated:08x}, content has {actual:08x}", where=where
        )
    return prefix


def _verify_frame(line: bytes, where: str) -> None:
    """The hot path of decode_line: the common case in few operations, else the precise error."""
    cut = len(line) - 19
    if cut > 0 and line.startswith(CRC_SUFFIX_FORMAT % _crc32c(line[:cut]), cut):
        return
    _checked_prefix(line, where)


def chain_digest(line: bytes) -> str:
    """The chain digest of a (verified) line: what the session's next line names as prev."""
    return chain_digest_of_content(line_content(line))


def decode_envelope(line: bytes, *, where: str = "") -> Envelope:
    """Verify the checksum and read the envelope only; works for unknown kinds."""
    _verify_frame(line, where)
    try:
        env = _envelope_decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise CorruptLine(f"bad envelope: {exc}", where=where) from None
    except msgspec.DecodeError as exc:
        raise CorruptLine(f"not JSON: {exc}", where=where) from None
    except RecursionError:
        raise CorruptLine("JSON nested too deeply to decode", where=where) from None
    if env.v != SCHEMA_VERSION:
        raise UnsupportedVersion(f"unsupported schema version v={env.v}", where=where)
    return env


def decode_line(line: bytes, *, where: str = "") -> Record:
    """Decode one line strictly: frame, checksum, version, kind and the body's schema."""
    return decode_run(line, (len(line),), where=where)[0]


def decode_lines(lines: Sequence[bytes], *, where: str = "") -> list[Record]:
    """Decode lines strictly, as `decode_line` does each (see `decode_run`)."""
    return decode_run(b"".join(lines), [len(line) for line in lines], where=where)


def decode_run(
    run: bytes,
    lengths: Sequence[int],
    *,
    where: str = "",
    _decode_many: Callable[[bytes], list[Record]] = _record_decoder.decode_lines,
    _tags: dict[type[EventBase], str] = TAG_OF,
) -> list[Record]:
    """Decode a run of whole lines, given their lengths: the replay hot path.

    The whole run is decoded in one msgspec call, every line's frame and CRC
    are checked in place (`frames_sound`) and its record's version and kind
    in one pass; nothing is returned before every line passed. Anything
    unexpected sends the run through `_decode_slowly`, line by line, which
    raises the precise typed error (naming `where` and the line's number
    when it is not the first).
    """
    records: list[Record] = []
    if frames_sound(run, lengths):
        try:
            records = _decode_many(run)
        except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError; deep nesting
            records = []  # the slow path checks each line's CRC first and names the bad one
    if len(records) == len(lengths):
        for record in records:
            if record.v != SCHEMA_VERSION or record.line_kind != _tags[type(record.event)]:
                break
        else:
            return records
    out: list[Record] = []
    start = 0
    for index, length in enumerate(lengths):
        line = run[start : start + length]
        start += length
        out.append(_decode_slowly(line, where if not index else f"{where} line {index + 1}".strip()))
    return out


def decode_session_run(
    run: bytes,
    lengths: Sequence[int],
    sid: str,
    first_seq: int,
    first_pos: int,
    *,
    _decode_many: Callable[[bytes], list[Record]] = _record_decoder.decode_lines,
    _tags: dict[type[EventBase], str] = TAG_OF,
) -> list[Record] | None:
    """The records of a run of one session's adjacent lines, all checked; None at any doubt.

    `lengths` are the lines' lengths as an index holds them; the first line
    is at seq `first_seq` and pos `first_pos`, each next one at the next seq
    and pos. One msgspec call decodes the run, `frames_sound` checks every
    line's frame and CRC, then one pass checks what `decode_run` checks of
    each record (version, kind) and that it is the one the index names
    (session, seq, pos). Never raises for bad input: a caller that gets
    None reads the run again line by line to name the bad one.
    """
    if not frames_sound(run, lengths):
        return None
    try:
        records = _decode_many(run)
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(records) != len(lengths):
        return None
    seq = first_seq
    pos = first_pos
    for record in records:
        if (
            record.seq != seq
            or record.pos != pos
            or record.sid != sid
            or record.v != SCHEMA_VERSION
            or record.line_kind != _tags[type(record.event)]
        ):
            return None
        seq += 1
        pos += 1
    return records


def _decode_slowly(line: bytes, where: str) -> Record:
    """The checks of `decode_lines` one at a time, raising the precise error for a bad line."""
    _checked_prefix(line, where)
    try:
        record = _record_decoder.decode(line)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _explain(line, exc, where) from None
    except RecursionError:
        raise CorruptLine("JSON nested too deeply to decode", where=where) from None
    if record.v != SCHEMA_VERSION:
        raise UnsupportedVersion(f"unsupported schema version v={record.v}", where=where)
    if record.line_kind != kind_name(record.event):
        raise MalformedEvent(
            f"envelope kind {record.line_kind!r} differs from body kind {kind_name(record.event)!r}",
            where=where,
        )
    return record


def _explain(line: bytes, exc: Exception, where: str) -> Exception:
    """The precise typed error for a line the record decoder refused."""
    env = decode_envelope(line, where=where)  # raises for bad JSON, envelope or version
    if env.kind not in KINDS:
        return UnknownKind(env.kind, where=where)
    text = str(exc)
    if env.kind == "checkpoint-committed" and "unsupported checkpoint version" in text:
        return UnsupportedVersion(f"{text} (this cairn reads version {CHECKPOINT_VERSION})", where=where)
    if isinstance(exc, msgspec.ValidationError):
        return MalformedEvent(f"{env.kind} event: {text}", where=where)
    return CorruptLine(f"not JSON: {text}", where=where)


#: for readers that check lines in bulk (`store.reader`): the record decoder (their crc fields:
#: `CRC_SUFFIX_FORMAT`, `crc_fields_match`, re-exported from `events.crc_fields`)
record_decoder = _record_decoder
