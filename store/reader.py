"""Read-only access to the log in position order, for audits and scans.

`scan_log` walks every line of every segment (or from a given place) and
says what each one is: a sound record, a well-framed line of a kind this
version does not know (its envelope still readable, PITFALLS 23), or an
invalid piece (bad frame, checksum or JSON, or a final line without its
newline). Recovery, verify and reindex are built on it; `iter_records`
is the audit listing with filters.

Nothing here writes or locks: it can run while a writer appends (a line
being written shows up as an unterminated final piece).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import msgspec

from cairn.events.codec import (
    MAX_LINE_BYTES,
    SCHEMA_VERSION,
    Envelope,
    Record,
    chain_digest_of_content,
    crc_fields_match,
    decode_envelope,
    decode_line,
    line_content,
    record_decoder,
    validate_session_id,
)
from cairn.events.errors import DecodeError, InputError
from cairn.events.kinds import TAG_OF, EventBase
from cairn.store.segments import iter_chunks, list_segments, segment_name

Progress = Callable[[int, int], None]

_SID_RE = re.compile(rb'"sid":"([^"\\]{1,128})"')
#: how every line ends: the crc field (8 lowercase hex digits), the closing brace and the newline
_WHOLE_END = re.compile(rb',"crc":"[0-9a-f]{8}"}\n')
_WHOLE_END_LEN = 19
_SEQ_RE = re.compile(rb'"seq":(\d{1,19})[,}]')


class LogLine(msgspec.Struct, frozen=True, gc=False):
    """One piece of a segment: a line, or an invalid run of bytes.

    `record` is set for a sound line of a known kind; `envelope` for any line
    whose frame and checksum hold (also unknown kinds); `error` says what is
    wrong when either is missing. `digest` is the line's chain digest.
    """

    segment: int
    offset: int
    raw: bytes
    envelope: Envelope | None
    record: Record | None
    digest: str
    error: str

    @property
    def where(self) -> str:
        return f"{segment_name(self.segment)}@{self.offset}"

    @property
    def framed(self) -> bool:
        """Frame and checksum hold: a durable line, never a torn one."""
        return self.envelope is not None or self.error.startswith("framed:")

    @property
    def length(self) -> int:
        return len(self.raw)

    @property
    def whole(self) -> bool:
        """Framed, or shaped like a complete line at both ends with no NUL byte: never what a crash leaves.

        A crash loses the bytes after the last fsync or leaves blocks of
        zeros; it cannot make a newline-terminated piece that starts like a
        line and ends in a crc field. An invalid whole piece (a wrong crc:
        a flipped bit, an edit) is corruption wherever it is, never a torn tail.
        """
        if self.framed:
            return True
        raw = self.raw
        return (
            raw.startswith(b'{"v":')
            and _WHOLE_END.fullmatch(raw, len(raw) - _WHOLE_END_LEN) is not None
            and b"\x00" not in raw
        )


def split_tail(pieces: list[LogLine]) -> tuple[list[LogLine], list[LogLine]]:
    """Invalid pieces that end the log, as (corrupt, torn): the torn tail is what follows the last whole one.

    `pieces` are the invalid pieces after the last valid line of the last
    segment, in order. Those up to the last whole piece are corruption (each
    held a line); the run after it -- partial lines, zeros, garbage -- is
    the torn tail a crash may leave (see `LogLine.whole`).
    """
    last_whole = max((i for i, piece in enumerate(pieces) if piece.whole), default=-1)
    return pieces[: last_whole + 1], pieces[last_whole + 1 :]


def classify(segment: int, offset: int, raw: bytes) -> LogLine:
    """Check one piece of a segment: newline, frame, checksum, envelope, body."""
    where = f"{segment_name(segment)}@{offset}"
    if not raw.endswith(b"\n"):
        return LogLine(segment, offset, raw, None, None, "", "no newline at the end (torn line)")
    try:
        content = line_content(raw, where=where)
    except DecodeError as exc:
        return LogLine(segment, offset, raw, None, None, "", str(exc))
    digest = chain_digest_of_content(content)
    try:
        envelope = decode_envelope(raw, where=where)
    except DecodeError as exc:
        return LogLine(segment, offset, raw, None, None, digest, f"framed: {exc}")
    try:
        record = decode_line(raw, where=where)
    except DecodeError as exc:
        return LogLine(segment, offset, raw, envelope, None, digest, str(exc))
    return LogLine(segment, offset, raw, envelope, record, digest, "")


def guess_owner(raw: bytes) -> tuple[str, int]:
    """Best guess of the (sid, seq) an invalid line belonged to, ("", 0) if none."""
    sid = ""
    match = _SID_RE.search(raw)
    if match:
        try:
            sid = validate_session_id(match.group(1).decode())
        except (UnicodeDecodeError, InputError):
            sid = ""
    seq = 0
    if sid:
        seq_match = _SEQ_RE.search(raw)
        if seq_match:
            seq = int(seq_match.group(1))
    return sid, seq


def log_size(log_dir: Path, segments: Iterable[int] | None = None) -> int:
    total = 0
    for first in segments if segments is not None else list_segments(log_dir):
        with contextlib.suppress(FileNotFoundError):
            total += (log_dir / segment_name(first)).stat().st_size
    return total


def scan_log(
    log_dir: Path,
    *,
    start_segment: int | None = None,
    start_offset: int = 0,
    progress: Progress | None = None,
    segments: Iterable[int] | None = None,
    stop: tuple[int, int] | None = None,
) -> Iterator[LogLine]:
    """Every piece of the log from (start_segment, start_offset), in position order.

    `segments` is the list of segments to read (default: those there now), so
    that a caller that listed them already scans exactly what it listed.
    `stop` (segment, byte offset) ends the scan there instead of at the end.

    One pass over each segment's bytes, a chunk of whole lines at a time
    (`_chunk_lines`: one msgspec call per chunk); a chunk that does not
    check whole goes piece by piece through `classify`, so every piece is
    what `classify` says of it.
    """
    segments = list(segments) if segments is not None else list_segments(log_dir)
    if start_segment is not None:
        segments = [s for s in segments if s >= start_segment]
    if stop is not None:
        segments = [s for s in segments if s <= stop[0]]
    total = log_size(log_dir, segments) - start_offset
    done = 0
    for first in segments:
        begin = start_offset if first == start_segment else 0
        end = stop[1] if stop is not None and first == stop[0] else None
        for offset, data in iter_chunks(log_dir / segment_name(first), begin, end, _CHUNK_BYTES):
            lines = _chunk_lines(first, offset, data) if len(data) <= _CHUNK_LIMIT else None
            if lines is None:
                lines = [classify(first, offset + start, raw) for start, raw in _pieces(data)]
            yield from lines
            done += len(data)
            if progress is not None:
                progress(done, max(total, done))
    if progress is not None:
        progress(done, max(total, done))


#: bytes per chunk of a segment scan (a longer line makes its chunk longer)
_CHUNK_BYTES = 128 << 10
#: a chunk longer than this (a line near MAX_LINE_BYTES) goes piece by piece
_CHUNK_LIMIT = MAX_LINE_BYTES
_LINE_HEAD = b'{"v":%d,' % SCHEMA_VERSION


def _pieces(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset in `data`, piece): its lines, newline kept, and a final piece without one."""
    start, size = 0, len(data)
    while start < size:
        newline = data.find(b"\n", start)
        stop = size if newline < 0 else newline + 1
        yield start, data[start:stop]
        start = stop


def _chunk_lines(
    segment: int,
    base: int,
    data: bytes,
    *,
    _decode_many: Callable[[bytes], list[Record]] = record_decoder.decode_lines,
    _crc: Callable[[bytes], int] = crc32c.crc32c,
    _sha256: Callable[[bytes | memoryview], Any] = hashlib.sha256,
    _tags: dict[type[EventBase], str] = TAG_OF,
    _head: bytes = _LINE_HEAD,
) -> list[LogLine] | None:
    # long: the bulk read's hot path, one pass over a chunk in locals (a call per line would cost)
    """The sound lines of a chunk of whole lines at `base`, as `classify` gives them; None at any doubt.

    Each line must start with `{"v":1,` and end in the crc field its bytes
    give, and the chunk must decode in one msgspec call to one record per
    line of the version and kind it names: then each is a sound line, with
    the envelope its record holds (an envelope decode reads the same
    fields) and its chain digest.
    """
    count = data.count(b"\n")
    if not count or data[-1] != 0x0A:
        return None
    try:
        records = _decode_many(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if len(records) != count:
        return None
    ends_with = data.startswith
    find = data.find
    out: list[LogLine] = []
    crcs: list[int] = []
    tails: list[bytes] = []
    start = 0
    for record in records:
        stop = find(b"\n", start) + 1
        cut = stop - 19  # where `,"crc":"` starts: 18 bytes of crc field, then the newline
        if not (
            cut > start
            and ends_with(_head, start)
            and record.v == SCHEMA_VERSION
            and record.line_kind == _tags[type(record.event)]
        ):
            return None
        prefix = data[start:cut]
        crcs.append(_crc(prefix))
        tails.append(data[cut:stop])  # its crc field: all checked at once below
        digest = _sha256(prefix)
        digest.update(b"}")
        out.append(
            LogLine(
                segment,
                base + start,
                data[start:stop],
                Envelope(
                    record.v, record.pos, record.sid, record.seq, record.ts, record.prev, record.line_kind
                ),
                record,
                digest.hexdigest()[:32],
                "",
            )
        )
        start = stop
    return out if crc_fields_match(crcs, tails) else None


class AuditRecord(msgspec.Struct, frozen=True):
    """A line for an audit listing: its place, its envelope, and its record when known."""

    segment: str
    offset: int
    envelope: Envelope
    record: Record | None
    error: str = ""


def iter_records(
    root: Path | str,
    *,
    sid: str | None = None,
    kinds: Iterable[str] | None = None,
    from_seq: int = 1,
    to_seq: int | None = None,
) -> Iterator[AuditRecord]:
    """Audit listing of the whole log in position order, filtered.

    Lines of unknown kinds are listed with their envelope and `record=None`;
    invalid pieces are skipped here (use `verify_store` to find them).
    """
    wanted = set(kinds) if kinds is not None else None
    for line in scan_log(Path(root) / "log"):
        env = line.envelope
        if env is None:
            continue
        if sid is not None and env.sid != sid:
            continue
        if wanted is not None and env.kind not in wanted:
            continue
        if env.seq < from_seq or (to_seq is not None and env.seq > to_seq):
            continue
        yield AuditRecord(segment_name(line.segment), line.offset, env, line.record, line.error)
