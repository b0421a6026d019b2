"""The log line format (DESIGN §2.2): envelope, body, checksum, hash chain, limits.

A line is one JSON object, UTF-8, newline-terminated::

    {"v":1,"pos":P,"sid":"S","seq":N,"ts":MS,"prev":"H","kind":"usage",...body...,"crc":"c0ffee00"}

- `v` schema version (1); `pos` global position in the log (0, 1, 2, ...);
  `sid` session id; `seq` per-session sequence (1, 2, 3, ... no gaps); `ts`
  unix milliseconds; `prev` the chain digest of the session's previous line
  (`GENESIS` for seq 1); then the event body with its `kind` tag.
- `crc` is CRC-32C, 8 lowercase hex digits, over the line's *content*: the
  line without its newline and with the trailing `,"crc":"........"` removed
  (so the content is itself the JSON object without the crc field).
- The chain digest of a line is the first 128 bits of SHA-256 over its
  content, hex. Each line names its predecessor's digest, so removing,
  reordering or editing a line (even with a recomputed crc) breaks the chain.

Unknown fields are ignored on decode; an unknown `v` or `kind` is an error,
but `decode_envelope` still reads the envelope of an unknown kind for audit.
"""

from __future__ import annotations

import hashlib
import re

import crc32c
import msgspec

from events.errors import (
    ChecksumMismatch,
    CorruptLine,
    InvalidSessionId,
    LineTooLarge,
    MalformedEvent,
    UnknownKind,
    UnsupportedVersion,
)
from events.kinds import CHECKPOINT_VERSION, EVENT_TYPES, KINDS, Event, EventBase

SCHEMA_VERSION = 1
#: Largest line accepted on write and on read: a 16 MiB checkpoint plus envelope room.
MAX_LINE_BYTES = 20 * 1024 * 1024
#: The `prev` of every session's first event.
GENESIS = "0" * 32

_CRC_SUFFIX_LEN = len(b',"crc":"00000000"}')
_CRC_SUFFIX_HEAD = b',"crc":"'
_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$")
_ENVELOPE_FIELDS = frozenset({"v", "pos", "sid", "seq", "ts", "prev", "kind", "crc"})

for _cls in EVENT_TYPES:  # a body field must never shadow an envelope field
    _clash = _ENVELOPE_FIELDS.intersection(_cls.__struct_fields__)
    assert not _clash, f"{_cls.__name__} has envelope field names {_clash}"


class Envelope(msgspec.Struct, frozen=True):
    """The envelope of a line, readable whatever its kind."""

    v: int
    pos: int
    sid: str
    seq: int
    ts: int
    prev: str
    kind: str


class Record(msgspec.Struct, frozen=True):
    """An event with its envelope, as stored at `pos`."""

    pos: int
    sid: str
    seq: int
    ts: int
    prev: str
    event: Event

    @property
    def kind(self) -> str:
        return str(type(self.event).__struct_config__.tag)


_body_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(Event)
_envelope_decoder = msgspec.json.Decoder(Envelope)


def validate_session_id(sid: str) -> str:
    """Return `sid` if it is a safe session id, else raise InvalidSessionId.

    1..128 characters of letters, digits and `._:@+=-`, starting with a letter
    or digit, and no `..`: ids name LMDB keys and appear in paths and shells.
    """
    if not isinstance(sid, str) or not _SESSION_ID_RE.match(sid) or ".." in sid:
        shown = sid[:40] + "..." if isinstance(sid, str) and len(sid) > 40 else sid
        raise InvalidSessionId(
            f"invalid session id {shown!r}: use 1..128 of [A-Za-z0-9._:@+=-], "
            "starting with a letter or digit, without '..'"
        )
    return sid


def encode_body(event: EventBase) -> bytes:
    return _body_encoder.encode(event)


def encode_line(
    *, pos: int, sid: str, seq: int, ts: int, prev: str, event: EventBase
) -> tuple[bytes, str]:
    """Encode one line (with its newline) and return it with its chain digest.

    Raises LineTooLarge before anything could be written.
    """
    if not isinstance(event, EVENT_TYPES):
        raise MalformedEvent(f"not an event: {type(event).__name__}")
    body = _body_encoder.encode(event)
    head = b'{"v":%d,"pos":%d,"sid":"%s","seq":%d,"ts":%d,"prev":"%s",' % (
        SCHEMA_VERSION,
        pos,
        sid.encode(),
        seq,
        ts,
        prev.encode(),
    )
    content = head + body[1:]
    size = len(content) + _CRC_SUFFIX_LEN
    if size > MAX_LINE_BYTES:
        raise LineTooLarge(
            f"{kind_name(event)} event of session {sid} seq {seq} encodes to {size} bytes, "
            f"over the {MAX_LINE_BYTES}-byte line limit"
        )
    crc = crc32c.crc32c(content)
    line = b"%s,\"crc\":\"%08x\"}\n" % (content[:-1], crc)
    return line, chain_digest_of_content(content)


def kind_name(event: EventBase) -> str:
    return str(type(event).__struct_config__.tag)


def chain_digest_of_content(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()[:32]


def line_content(line: bytes, *, where: str = "") -> bytes:
    """Check a line's frame and checksum; return its content (what the crc covers)."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if len(line) > MAX_LINE_BYTES:
        raise CorruptLine(f"line of {len(line)} bytes is over the limit", where=where)
    if (
        len(line) < _CRC_SUFFIX_LEN + 2
        or not line.startswith(b"{")
        or line[-_CRC_SUFFIX_LEN : -_CRC_SUFFIX_LEN + len(_CRC_SUFFIX_HEAD)] != _CRC_SUFFIX_HEAD
        or not line.endswith(b'"}')
    ):
        raise CorruptLine("not a framed log line (no trailing crc field)", where=where)
    try:
        stated = int(line[-10:-2], 16)
    except ValueError:
        raise CorruptLine("crc field is not hex", where=where) from None
    content = line[:-_CRC_SUFFIX_LEN] + b"}"
    actual = crc32c.crc32c(content)
    if actual != stated:
        raise ChecksumMismatch(
            f"checksum mismatch: line says {stated:08x}, content has {actual:08x}", where=where
        )
    return content


def chain_digest(line: bytes) -> str:
    """The chain digest of a (verified) line: what the session's next line names as prev."""
    return chain_digest_of_content(line_content(line))


def decode_envelope(line: bytes, *, where: str = "") -> Envelope:
    """Verify the checksum and read the envelope only; works for unknown kinds."""
    content = line_content(line, where=where)
    try:
        env = _envelope_decoder.decode(content)
    except msgspec.ValidationError as exc:
        raise CorruptLine(f"bad envelope: {exc}", where=where) from None
    except msgspec.DecodeError as exc:
        raise CorruptLine(f"not JSON: {exc}", where=where) from None
    if env.v != SCHEMA_VERSION:
        raise UnsupportedVersion(f"unsupported schema version v={env.v}", where=where)
    return env


def decode_line(line: bytes, *, where: str = "") -> Record:
    """Decode one line strictly: frame, checksum, version, kind and the body's schema."""
    env = decode_envelope(line, where=where)
    if env.kind not in KINDS:
        raise UnknownKind(env.kind, where=where)
    try:
        event = _event_decoder.decode(line)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if env.kind == "checkpoint-committed" and "unsupported checkpoint version" in text:
            raise UnsupportedVersion(
                f"{text} (this cairn reads version {CHECKPOINT_VERSION})", where=where
            ) from None
        raise MalformedEvent(f"{env.kind} event: {text}", where=where) from None
    except msgspec.DecodeError as exc:
        raise CorruptLine(f"not JSON: {exc}", where=where) from None
    return Record(env.pos, env.sid, env.seq, env.ts, env.prev, event)


def encode_event_json(event: EventBase) -> bytes:
    """The body alone as JSON (for `--json` listings and tests)."""
    return _body_encoder.encode(event)


def decode_event_json(data: bytes | str) -> Event:
    """Decode a body written by `encode_event_json`."""
    try:
        return _event_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise MalformedEvent(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise CorruptLine(f"not JSON: {exc}") from None
