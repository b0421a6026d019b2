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
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence

import crc32c
import msgspec
import msgspec.inspect

from cairn.events.errors import (
    ChecksumMismatch,
    CorruptLine,
    InvalidEvent,
    InvalidSessionId,
    LineTooLarge,
    MalformedEvent,
    UnknownKind,
    UnsupportedVersion,
)
from cairn.events.kinds import CHECKPOINT_VERSION, EVENT_TYPES, KINDS, Event, EventBase, raw_object_problem

SCHEMA_VERSION = 1
#: Largest line accepted on write and on read: a 16 MiB checkpoint plus envelope room.
MAX_LINE_BYTES = 20 * 1024 * 1024
#: The `prev` of every session's first event.
GENESIS = "0" * 32

_CRC_SUFFIX_LEN = len(b',"crc":"00000000"}')  # 18
#: a line's bytes up to its crc field: the content without its closing brace
#: (sid, prev and kind come as JSON strings, quotes included: see `frame_line`)
_PREFIX_FORMAT = (
    b'{"v":%d,' % SCHEMA_VERSION + b'"pos":%d,"sid":%s,"seq":%d,"ts":%d,"prev":%s,"kind":%s,"event":%s'
)
#: a line's last 19 bytes, given the crc of what comes before them
_CRC_SUFFIX_FORMAT = b',"crc":"%08x"}\n'
_CRC_HEX = re.compile(rb"[0-9a-f]{8}")
_crc32c = crc32c.crc32c
_sha256 = hashlib.sha256
_CRC_SUFFIX_HEAD = b',"crc":"'
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
        return _TAG_OF[type(self.event)]


_body_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(Event)
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


#: an event's body as JSON bytes, unchecked (the journal writes `checked_body`'s)
encode_body: Callable[[EventBase], bytes] = _body_encoder.encode

#: a str as a JSON string token, quotes included: how every string enters a line
json_string: Callable[[str], bytes] = _body_encoder.encode


def checked_body(event: EventBase) -> tuple[EventBase, bytes]:
    """The event as the log will read it back, and its body: refuse what would not read back equal.

    msgspec checks no types at construction, and its encoder turns NaN and
    infinities into null; so the body is encoded, decoded back with the kind's
    typed decoder (its types, its `Int64` bounds, its `__post_init__`
    invariants) and the result must equal the event. Returns the decoded
    copy, which holds exactly the types a later read gives (plain str and
    int, tuples), and the body to frame. Raises `InvalidEvent`, naming the
    field's `$.path`, for anything else: not an event, a field of the wrong
    type, a non-finite number, a lone surrogate, an int outside 64 bits, a
    list where the schema has a tuple, a value with no JSON form.
    """
    decode = _BODY_DECODERS.get(type(event))
    if decode is None:  # the event classes themselves: a subclass would encode another tag
        raise InvalidEvent(f"not an event: {type(event).__name__}")
    try:
        body = _body_encoder.encode(event)
        stored: EventBase = decode(body)
        same = stored == event
    except Exception as exc:  # msgspec's errors are ValueErrors; a value's own __eq__ may raise anything
        raise _refusal(event, exc) from None
    if not same:
        raise _refusal(event, None, stored)
    # msgspec escapes every control character of a string: only a Raw value could put a CR or LF
    # in the body, where it would split the line
    if type(event) in _RAW_KINDS and (b"\n" in body or b"\r" in body):
        raise InvalidEvent(f"{kind_name(event)} event: a raw line break in its JSON")
    return stored, body


def _refusal(event: EventBase, error: BaseException | None, stored: object = None) -> InvalidEvent:
    """The InvalidEvent for an event that failed `checked_body`: its kind, the field's path and why.

    The slow path: values msgspec would silently change or cannot encode are
    named first (they explain the decode error they cause), then msgspec's
    own message with its `$.path`, then the first field that read back
    different.
    """
    kind = kind_name(event)
    try:
        found = _bad_value(event, "$")
        if found is None and isinstance(error, msgspec.ValidationError):
            text = str(error)
            match = _MSGSPEC_PATH.search(text)
            return InvalidEvent(f"{kind} event: {text}", path=match.group(1) if match else "")
        if found is None and error is None:
            found = _first_difference(event, stored, "$")
    except RecursionError:  # a container that holds itself
        return InvalidEvent(f"{kind} event: nested too deeply (or holds itself)")
    except Exception as exc:  # a value whose own methods fail: the refusal must not
        return InvalidEvent(f"{kind} event: cannot be stored ({type(exc).__name__}: {exc})")
    if found is None:
        why = "does not read back equal" if error is None else f"{type(error).__name__}: {error}"
        found = ("", f"cannot be stored ({why})")
    path, problem = found
    return InvalidEvent(f"{kind} event: {problem}" + (f" - at `{path}`" if path else ""), path=path)


_MSGSPEC_PATH = re.compile(r"at `(\$[^`]*)`$")
#: what the walkers below look into rather than try to encode
_CONTAINERS = (msgspec.Struct, list, tuple, dict)


def _children(value: object, path: str) -> list[tuple[str, object]]:
    """The named parts of a Struct, list, tuple or dict, with their paths (none for a leaf)."""
    if isinstance(value, msgspec.Struct):
        return [(f"{path}.{name}", getattr(value, name)) for name in value.__struct_fields__]
    if isinstance(value, list | tuple):
        return [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return [(f"{path}[{key!r}]", item) for key, item in value.items()]
    return []


def _bad_value(value: object, path: str) -> tuple[str, str] | None:
    """The first value in `value` that cannot read back: non-finite float, lone surrogate, no JSON form."""
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return path, f"non-finite number {value!r} (JSON has none: it would be stored as null)"
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            return path, (
                f"lone surrogate U+{ord(value[exc.start]):04X} at character {exc.start} "
                "(not valid Unicode: UTF-8 cannot hold it)"
            )
    elif isinstance(value, msgspec.Raw):
        problem = raw_object_problem(value)
        return None if problem is None else (path, problem)
    elif isinstance(value, dict):
        for key in value:
            found = _bad_value(key, f"{path} key {key!r}")
            if found is not None:
                return found
    for child_path, child in _children(value, path):
        found = _bad_value(child, child_path)
        if found is not None:
            return found
    if type(value) not in (str, int, bool, type(None)) and not isinstance(value, _CONTAINERS):
        try:
            _body_encoder.encode(value)
        except (TypeError, ValueError, OverflowError) as exc:
            return path, f"a {type(value).__name__}, which has no JSON form ({exc})"
    return None


def _first_difference(original: object, stored: object, path: str) -> tuple[str, str] | None:
    """Where `stored` (the decoded copy) first differs from `original`, and how."""
    if original == stored:
        return None
    if type(original) is not type(stored):
        return path, f"a {type(original).__name__} where the schema reads back a {type(stored).__name__}"
    theirs = _children(original, path)
    ours = _children(stored, path)
    if len(theirs) != len(ours):
        return path, f"{len(theirs)} items read back as {len(ours)}"
    for (child_path, left), (_, right) in zip(theirs, ours, strict=True):
        found = _first_difference(left, right, child_path)
        if found is not None:
            return found
    return path, f"{_shown(original)} reads back as {_shown(stored)}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def encode_line(
    *, pos: int, sid: str, seq: int, ts: int, prev: str, event: EventBase
) -> tuple[bytes, str]:
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
    return frame_line(pos, sid_json, seq, ts, prev, _TAG_JSON[type(event)], body)


def frame_line(
    pos: int, sid: bytes, seq: int, ts: int, prev: str, kind: bytes, body: bytes
) -> tuple[bytes, str]:
    """The line of an already encoded body, and its chain digest: the writer's hot path.

    Positional arguments, no checks of the event: the caller has them (see
    `checked_body`). `sid` and `kind` are JSON string tokens (`json_string`),
    `prev` a str that is encoded here the same way, so no string enters the
    line unescaped. Raises LineTooLarge for a line over MAX_LINE_BYTES.
    """
    # the content is `prefix}`; the crc covers `prefix`, the chain digest the content
    prefix = _PREFIX_FORMAT % (pos, sid, seq, ts, _body_encoder.encode(prev), kind, body)
    size = len(prefix) + _CRC_SUFFIX_LEN + 1  # the whole line, newline included
    if size > MAX_LINE_BYTES:
        raise LineTooLarge(
            f"{kind.decode()} event of session {sid.decode()} seq {seq} encodes to {size} bytes, "
            f"over the {MAX_LINE_BYTES}-byte line limit"
        )
    if size <= _HASH_PIECE:
        digest = _sha256(prefix)
        digest.update(b"}")
        return prefix + _CRC_SUFFIX_FORMAT % _crc32c(prefix), digest.hexdigest()[:32]
    return prefix + _CRC_SUFFIX_FORMAT % _crc32c(prefix), chain_digest_of_content(prefix + b"}")


_TAG_OF: dict[type, str] = {cls: tag for tag, cls in KINDS.items()}
#: each kind's tag as a JSON string token, for the envelope
_TAG_JSON: dict[type, bytes] = {cls: json_string(tag) for tag, cls in KINDS.items()}
def _holds_raw(info: msgspec.inspect.Type, seen: set[type]) -> bool:
    """Whether a value of this type may hold a msgspec.Raw (written into a line as it is)."""
    if isinstance(info, msgspec.inspect.RawType):
        return True
    if isinstance(info, msgspec.inspect.StructType):
        if info.cls in seen:
            return False
        seen.add(info.cls)
        return any(_holds_raw(field.type, seen) for field in info.fields)
    inner: list[msgspec.inspect.Type] = []
    for name in ("item_type", "key_type", "value_type"):
        if isinstance(getattr(info, name, None), msgspec.inspect.Type):
            inner.append(getattr(info, name))
    for name in ("types", "item_types"):
        inner.extend(getattr(info, name, ()))
    return any(_holds_raw(item, seen) for item in inner)


#: the kinds with a Raw field somewhere (the hand-off): their bodies are scanned for line breaks
_RAW_KINDS: frozenset[type] = frozenset(
    cls for cls in EVENT_TYPES if _holds_raw(msgspec.inspect.type_info(cls), set())
)
#: each kind's typed decoder, for the round trip of `checked_body`
_BODY_DECODERS: dict[type, Callable[[bytes], EventBase]] = {
    cls: msgspec.json.Decoder(cls).decode for cls in EVENT_TYPES
}


def kind_name(event: EventBase) -> str:
    return _TAG_OF[type(event)]


_HASH_PIECE = 2047


def chain_digest_of_content(content: bytes) -> str:
    # hashlib lets go of the GIL for inputs of 2 KiB and more; on the journal's
    # writer thread, getting it back from hundreds of busy appenders costs far
    # more than the hash, so long contents are fed in pieces under that size.
    if len(content) <= _HASH_PIECE:
        return hashlib.sha256(content).hexdigest()[:32]
    digest = hashlib.sha256()
    view = memoryview(content)
    for start in range(0, len(content), _HASH_PIECE):
        digest.update(view[start : start + _HASH_PIECE])
    return digest.hexdigest()[:32]


def line_content(line: bytes, *, where: str = "") -> bytes:
    """Check a line's frame and checksum; return its content (the object without crc)."""
    return _checked_prefix(line, where) + b"}"


def _checked_prefix(line: bytes, where: str) -> bytes:
    """The bytes the crc covers, after checking the frame and the crc."""
    end = len(line) - 1 if line.endswith(b"\n") else len(line)
    if end > MAX_LINE_BYTES:
        raise CorruptLine(f"line of {end} bytes is over the limit", where=where)
    cut = end - _CRC_SUFFIX_LEN
    if (
        cut < 2
        or line[0] != 0x7B  # "{"
        or line[cut : cut + len(_CRC_SUFFIX_HEAD)] != _CRC_SUFFIX_HEAD
        or line[end - 2 : end] != b'"}'
    ):
        raise CorruptLine("not a framed log line (no trailing crc field)", where=where)
    field = line[end - 10 : end - 2]
    if not _CRC_HEX.fullmatch(field):
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
    if cut > 0 and line.startswith(_CRC_SUFFIX_FORMAT % _crc32c(line[:cut]), cut):
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
    _crc: Callable[[bytes | memoryview], int] = crc32c.crc32c,
    _suffix: bytes = _CRC_SUFFIX_FORMAT,
    _decode_many: Callable[[bytes], list[Record]] = _record_decoder.decode_lines,
    _tags: dict[type, str] = _TAG_OF,
) -> list[Record]:
    """Decode a run of whole lines, given their lengths: the replay hot path.

    The whole run is decoded in one msgspec call, then one pass checks each
    line's frame and CRC in place (no copy of the line) and its record's
    version and kind; nothing is returned before every line passed. Anything
    unexpected sends the run through
    `_decode_slowly`, line by line, which raises the precise typed error
    (naming `where` and the line's number when it is not the first).
    """
    records: list[Record] = []
    if len(run) == sum(lengths):
        try:
            records = _decode_many(run)
        except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError; deep nesting
            records = []  # the slow path checks each line's CRC first and names the bad one
    if len(records) == len(lengths):
        # one pass for the frame and CRC of every line and the version and kind of its record
        view = memoryview(run)
        ends_with = run.startswith
        start = 0
        for record, length in zip(records, lengths, strict=True):
            cut = start + length - 19  # where `,"crc":"` starts: 18 bytes of crc field, then the newline
            # the line must end in exactly the crc field its content gives, newline included
            if not (
                length > _CRC_SUFFIX_LEN + 1
                and ends_with(_suffix % _crc(view[start:cut]), cut)
                and record.v == SCHEMA_VERSION
                and record.line_kind == _tags[type(record.event)]
            ):
                break
            start += length
        else:
            return records
    out: list[Record] = []
    start = 0
    for index, length in enumerate(lengths):
        line = run[start : start + length]
        start += length
        out.append(_decode_slowly(line, where if not index else f"{where} line {index + 1}".strip()))
    return out


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
