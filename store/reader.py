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
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from cairn.events.codec import (
    Envelope,
    Record,
    chain_digest_of_content,
    decode_envelope,
    decode_line,
    line_content,
    validate_session_id,
)
from cairn.events.errors import DecodeError, InputError
from cairn.store.segments import iter_lines, list_segments, segment_name

Progress = Callable[[int, int], None]

_SID_RE = re.compile(rb'"sid":"([^"\\]{1,128})"')
#: how every line ends: the crc field (8 lowercase hex digits), the closing brace and the newline
_WHOLE_END = re.compile(rb',"crc":"[0-9a-f]{8}"}\n')
_WHOLE_END_LEN = 19
_SEQ_RE = re.compile(rb'"seq":(\d{1,19})[,}]')


@dataclass(frozen=True, slots=True)
class LogLine:
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
        for offset, raw in iter_lines(log_dir / segment_name(first), begin, end):
            yield classify(first, offset, raw)
            done += len(raw)
            if progress is not None:
                progress(done, max(total, done))
    if progress is not None:
        progress(done, max(total, done))


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
