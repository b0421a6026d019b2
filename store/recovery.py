"""Start-up recovery of a store (DESIGN §2.5), as numbered passes.

`recover` runs, in order:

1. **segments** -- list the segment files (none: an empty log).
2. **recovery point** -- read the index's `through` position and check it
   against the log (the segment exists and is long enough, the last indexed
   line is there with the expected position). On any doubt the index is
   emptied and the point is the start of the log: the index is derived.
3. **scan** -- read every piece after the point. Sound lines are indexed
   through the one `IndexBuilder` path. An invalid piece followed by a valid
   line (or at the end of a segment that is not the last) is durable
   corruption: recorded in the index with its segment, offset and (guessed)
   session, which then fails closed; never skipped silently, never cut.
4. **torn tail** -- invalid pieces that run to the end of the last segment
   with no valid line after them are the bytes of a write that was never
   acknowledged: cut (truncate + fsync) when opening for writing, and the
   number of bytes dropped reported with a warning. This is the only repair.
5. **commit** -- the index entries and the new `through` position.

It returns a `Recovery` naming what it found and did. Runs on the opening
thread, before the writer starts; nothing else touches the store meanwhile.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from events.codec import decode_envelope
from events.errors import DecodeError
from store.index import CorruptEntry, Index, IndexBuilder, IndexMeta
from store.reader import LogLine, Progress, guess_owner, scan_log
from store.segments import FsyncFn, list_segments, segment_name

log = logging.getLogger("cairn.store")

_COMMIT_EVERY = 20_000


@dataclass(frozen=True)
class Recovery:
    """What opening the store found and did."""

    segments: int
    #: where the scan started: (segment file name, byte offset)
    scanned_from: tuple[str, int]
    lines_indexed: int
    #: the next global position, and the active (last) segment and its size
    next_pos: int
    active_segment: int
    active_size: int
    #: invalid bytes at the end of the last segment (cut unless read-only)
    tail_bytes: int = 0
    tail_at: tuple[str, int] | None = None
    truncated: bool = False
    corruptions: tuple[CorruptEntry, ...] = ()
    #: why the index was rebuilt from nothing ("" when it was trusted)
    index_rebuilt: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def bytes_dropped(self) -> int:
        return self.tail_bytes if self.truncated else 0


def recover(
    root: Path,
    index: Index,
    *,
    readonly: bool = False,
    fsync: FsyncFn = os.fsync,
    progress: Progress | None = None,
    rebuild: bool = False,
) -> Recovery:
    """Bring `index` up to the end of the log under `root`, cutting a torn tail.

    `readonly` never changes the log (the tail is reported, not cut).
    `rebuild` empties the index first (reindex from nothing).
    """
    log_dir = root / "log"

    # Pass 1: segments.
    segments = list_segments(log_dir)

    # Pass 2: the recovery point.
    reason = "reindex requested" if rebuild else _doubt(log_dir, segments, index)
    if reason:
        if not rebuild and reason != "empty index":
            log.warning("cairn: rebuilding the index of %s: %s", root, reason)
        index.reset()
        meta = IndexMeta(segment=segments[0] if segments else 0, next_pos=segments[0] if segments else 0)
    else:
        found = index.meta()
        assert found is not None
        meta = found
    start_segment, start_offset = meta.segment, meta.offset

    # Pass 3: scan and index.
    builder = IndexBuilder(index.summary, meta)
    next_pos = meta.next_pos
    last = (meta.last_segment, meta.last_offset, meta.last_length)
    pending: list[LogLine] = []
    corruptions: list[CorruptEntry] = []
    indexed = 0
    end_segment, end_offset = start_segment, start_offset

    def flush_corrupt() -> None:
        for bad in pending:
            sid, seq = guess_owner(bad.raw)
            entry = CorruptEntry(
                segment=bad.segment, offset=bad.offset, length=bad.length, sid=sid, seq=seq, reason=bad.error
            )
            builder.add_corrupt(entry)
            corruptions.append(entry)
            log.error("cairn: corrupt line at %s (session %s): %s", bad.where, sid or "unknown", bad.error)
        pending.clear()

    current = start_segment
    for line in scan_log(log_dir, start_segment=start_segment, start_offset=start_offset, progress=progress):
        if line.segment != current:
            flush_corrupt()  # invalid bytes at the end of a rolled segment are never a tail
            current = line.segment
        end_segment, end_offset = line.segment, line.offset + line.length
        if not line.framed:
            pending.append(line)
            continue
        flush_corrupt()
        env = line.envelope
        if env is None:  # framed, but the envelope is unreadable: a durable bad line
            pending.append(line)
            flush_corrupt()
            continue
        head = builder.head(env.sid)
        event = line.record.event if line.record is not None else None
        builder.add(
            head, env.seq, env.pos, env.ts, env.prev, line.digest, env.kind, event,
            line.segment, line.offset, line.length,
        )
        if line.record is None:
            entry = CorruptEntry(
                segment=line.segment, offset=line.offset, length=line.length,
                sid=env.sid, seq=env.seq, reason=line.error,
            )
            builder.add_corrupt(entry)
            corruptions.append(entry)
        next_pos = max(next_pos, env.pos + 1)
        last = (line.segment, line.offset, line.length)
        indexed += 1
        if builder.pending >= _COMMIT_EVERY:
            builder.meta = _meta(end_segment, end_offset, next_pos, last)
            index.commit(builder.take())

    # Pass 4: the torn tail (only pieces left pending in the last segment).
    tail_bytes = 0
    tail_at: tuple[str, int] | None = None
    truncated = False
    last_segment = segments[-1] if segments else 0
    if pending and pending[0].segment != last_segment:
        flush_corrupt()
    if pending:
        first_bad = pending[0]
        tail_at = (segment_name(first_bad.segment), first_bad.offset)
        tail_bytes = sum(bad.length for bad in pending)
        end_segment, end_offset = first_bad.segment, first_bad.offset
        pending.clear()
        if not readonly:
            path = log_dir / segment_name(first_bad.segment)
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, first_bad.offset)
                fsync(fd)
            finally:
                os.close(fd)
            truncated = True
            log.warning(
                "cairn: cut a torn tail of %d bytes at %s@%d (never acknowledged)",
                tail_bytes, tail_at[0], tail_at[1],
            )
    if segments and end_segment < last_segment:  # later segments are empty
        end_segment, end_offset = last_segment, 0

    # Pass 5: commit.
    builder.meta = _meta(end_segment, end_offset, next_pos, last)
    index.commit(builder.take())
    active_size = end_offset if segments else 0
    return Recovery(
        segments=len(segments),
        scanned_from=(segment_name(start_segment), start_offset),
        lines_indexed=indexed,
        next_pos=next_pos,
        active_segment=end_segment,
        active_size=active_size,
        tail_bytes=tail_bytes,
        tail_at=tail_at,
        truncated=truncated,
        corruptions=tuple(corruptions),
        index_rebuilt=reason if reason != "empty index" else "",
    )


def _meta(segment: int, offset: int, next_pos: int, last: tuple[int, int, int]) -> IndexMeta:
    return IndexMeta(
        segment=segment, offset=offset, next_pos=next_pos,
        last_segment=last[0], last_offset=last[1], last_length=last[2],
    )


def _doubt(log_dir: Path, segments: list[int], index: Index) -> str:
    """Why the index's recovery point cannot be trusted ("" when it can)."""
    meta = index.meta()
    if meta is None:
        return "empty index"
    if not segments:
        return "the index names a log that does not exist"
    if meta.segment not in segments:
        return f"the index names segment {segment_name(meta.segment)}, which is missing"
    size = (log_dir / segment_name(meta.segment)).stat().st_size
    if size < meta.offset:
        name = segment_name(meta.segment)
        return f"the index is ahead of the log ({name} has {size} < {meta.offset} bytes)"
    if meta.last_offset >= 0:
        path = log_dir / segment_name(meta.last_segment)
        try:
            with open(path, "rb") as handle:
                handle.seek(meta.last_offset)
                raw = handle.read(meta.last_length)
            env = decode_envelope(raw, where=f"{path.name}@{meta.last_offset}")
        except (OSError, DecodeError) as exc:
            return f"the last indexed line is not there: {exc}"
        if env.pos + 1 != meta.next_pos:
            return f"the last indexed line has pos {env.pos}, the index expects {meta.next_pos - 1}"
    return ""
