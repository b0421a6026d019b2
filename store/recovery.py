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

Read-only opens (`open_for_reading`) change nothing on disk: when the log
holds lines past the store's index (a crash between the log's fsync and the
index's relaxed-sync commit, or a live writer between the two), they run
`recover(readonly=True)` on a private copy of the index, so audit readers see
every acknowledged line, indexed by the same path. A writer may then be
appending meanwhile; a line it is still writing looks like a torn tail.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from events.codec import decode_envelope
from events.errors import DecodeError
from store.errors import CatchUpFailed
from store.index import CorruptEntry, Index, IndexBuilder, IndexMeta, IndexUnusable
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
    found = index.meta()
    reason = "reindex requested" if rebuild else _doubt(log_dir, segments, found)
    if reason:
        if not rebuild and reason != "empty index":
            log.warning("cairn: rebuilding the index of %s: %s", root, reason)
        index.reset()
        meta = IndexMeta(segment=segments[0] if segments else 0, next_pos=segments[0] if segments else 0)
    else:
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
    # the segments listed above, not a fresh listing: with a writer appending meanwhile (a read-only
    # catch-up), a segment rolled after the listing must not make the old last one look rolled
    scan = scan_log(log_dir, start_segment=start_segment, start_offset=start_offset, progress=progress,
                    segments=segments)
    for line in scan:
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


def _doubt(log_dir: Path, segments: list[int], meta: IndexMeta | None) -> str:
    """Why the index's recovery point `meta` cannot be trusted ("" when it can)."""
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


# -- read-only opens ---------------------------------------------------------------------


@dataclass(frozen=True)
class Lag:
    """How the log stands past an index's recovery point, as `index_lag` found it."""

    segments: tuple[int, ...]
    meta: IndexMeta | None
    #: the recovery point: (segment, byte offset); the start of the log when the index has none
    point: tuple[int, int]
    #: why the point cannot be trusted ("" when it can): a rebuild from nothing is needed
    doubt: str = ""
    #: bytes of the log past the point (0: the index is current)
    bytes_past: int = 0
    #: a framed line past the point (or durable corruption): only indexing it shows it
    unindexed: bool = False
    #: invalid bytes past the point that run to the end of the last segment, and where they start
    tail_bytes: int = 0
    tail_at: tuple[str, int] | None = None

    @property
    def behind(self) -> bool:
        """The index misses something of the log that a reader must see."""
        return bool(self.doubt) or self.unindexed


def index_lag(root: Path, index: Index) -> Lag:
    """Whether the log under `root` holds anything past `index`'s recovery point; writes nothing.

    Cheap when the index is current: a listing of the segments, a stat of
    those from the point on and a read of the last indexed line (the check
    recovery makes) -- no scan, whatever the size of the store. When bytes
    follow the point, it reads pieces from there up to the first framed line
    (which needs indexing) or the end of the log: invalid pieces only, at the
    end of the last segment, are a torn tail (or a write in flight), which
    recovery would report and index nothing for.
    """
    log_dir = root / "log"
    # the point first, then the listing: a live writer may roll and commit in between, and a
    # listing taken before the point could then miss the segment the point names
    meta = index.meta()
    segments = list_segments(log_dir)
    listed = tuple(segments)
    if meta is not None:
        point = (meta.segment, meta.offset)
        reason = _doubt(log_dir, segments, meta)
        if reason:
            return Lag(listed, meta, point, doubt=reason)
    else:
        point = (segments[0], 0) if segments else (0, 0)
    past = 0
    for first in segments:
        if first >= point[0]:
            size = (log_dir / segment_name(first)).stat().st_size
            past += size - point[1] if first == point[0] else size
    if past <= 0:
        return Lag(listed, meta, point)
    tail: list[LogLine] = []
    for line in scan_log(log_dir, start_segment=point[0], start_offset=point[1], segments=segments):
        if line.framed or (tail and tail[0].segment != line.segment):
            return Lag(listed, meta, point, bytes_past=past, unindexed=True)
        tail.append(line)
    if not tail:  # the bytes were in later segments that hold no piece yet
        return Lag(listed, meta, point, bytes_past=past)
    if tail[0].segment != segments[-1]:  # invalid bytes at the end of a rolled segment: corruption
        return Lag(listed, meta, point, bytes_past=past, unindexed=True)
    torn = tail[0]
    return Lag(
        listed, meta, point, bytes_past=past,
        tail_bytes=sum(piece.length for piece in tail), tail_at=(segment_name(torn.segment), torn.offset),
    )


def open_for_reading(
    root: Path, *, map_size: int, progress: Progress | None = None
) -> tuple[Index, Recovery, Path | None]:
    """The index a read-only opener reads through, what opening found, and the private index's directory.

    Nothing under `root` is written (LMDB's reader table in `index/lock.mdb`
    aside, as for any LMDB reader). In order:

    - The store's own index, opened read-only, when nothing past its recovery
      point needs indexing (`index_lag`): no copy and no scan. A torn tail past
      the point is reported in the `Recovery`, never cut.
    - When the log holds lines past the point -- a crash after the log's fsync
      and before the index's relaxed-sync commit reached the disk, or a live
      writer between the two -- a private copy of the index in a temporary
      directory, caught up by `recover(readonly=True)`: the one indexing path,
      so the reader sees what a writer's next open will index (corrupt lines
      included, failing their sessions closed). A live writer's later appends
      are not seen: the private index is a snapshot.
    - No usable index, or one whose point cannot be trusted: a private index
      rebuilt from the whole log.

    The third value is the private index's directory (None for the store's
    own); the caller removes it after closing the index. Raises
    `CatchUpFailed` when the log cannot be checked or no private index can be
    built.
    """
    index_dir = root / "index"
    trouble = ""
    if (index_dir / "data.mdb").exists():
        try:
            store_index = Index(index_dir, readonly=True, map_size=map_size)
        except IndexUnusable as exc:
            trouble = str(exc)
            log.warning("cairn: cannot read the index of %s (%s); building a private one", root, exc)
        else:
            try:
                lag = index_lag(root, store_index)
                if lag.behind and store_index.meta() != lag.meta:  # a live writer indexed meanwhile
                    lag = index_lag(root, store_index)
            except OSError as exc:
                store_index.close()
                raise CatchUpFailed(f"cannot check the log of {root} against its index: {exc}") from exc
            except BaseException:
                store_index.close()
                raise
            if not lag.behind:
                return store_index, _current(root, lag), None
            try:
                if lag.doubt:
                    log.warning("cairn: the index of %s cannot be trusted (%s); reading through a private "
                                "index rebuilt from the log", root, lag.doubt)
                    return _private_index(root, None, map_size, progress, lag.doubt)
                return _private_index(root, store_index, map_size, progress, "")
            finally:
                store_index.close()
    return _private_index(root, None, map_size, progress, trouble)


def _current(root: Path, lag: Lag) -> Recovery:
    """The `Recovery` of a read-only open through the store's own index (nothing indexed)."""
    meta = lag.meta
    if lag.tail_at is not None:
        log.info("cairn: %d invalid bytes at %s@%d end the log of %s past its index (a torn tail, or a "
                 "write in progress); left as they are", lag.tail_bytes, lag.tail_at[0], lag.tail_at[1], root)
    return Recovery(
        segments=len(lag.segments),
        scanned_from=(segment_name(lag.point[0]), lag.point[1]) if lag.bytes_past else ("", 0),
        lines_indexed=0,
        next_pos=meta.next_pos if meta else 0,
        active_segment=meta.segment if meta else 0,
        active_size=meta.offset if meta else 0,
        tail_bytes=lag.tail_bytes,
        tail_at=lag.tail_at,
    )


def _private_index(
    root: Path, source: Index | None, map_size: int, progress: Progress | None, rebuilt: str
) -> tuple[Index, Recovery, Path]:
    """A private index in a new temporary directory, brought up to the end of the log.

    It starts as a copy of `source` (then only the log past its point is
    scanned) or, when there is none or the copy fails, empty (the whole log is
    scanned). `rebuilt` says why the store's index was not used at all.
    """
    try:
        private = Path(tempfile.mkdtemp(prefix="cairn-index-"))
    except OSError as exc:
        raise CatchUpFailed(f"cannot make a private index for reading {root}: {exc}") from exc
    try:
        index = _private_copy(root, source, private, map_size) if source is not None else None
        if index is None:
            index = Index(private, map_size=map_size)
        try:
            recovery = recover(root, index, readonly=True, progress=progress)
        except BaseException:
            index.close()
            raise
    except (OSError, IndexUnusable) as exc:
        shutil.rmtree(private, ignore_errors=True)
        raise CatchUpFailed(f"cannot bring a private index of {root} up to its log: {exc}") from exc
    except BaseException:
        shutil.rmtree(private, ignore_errors=True)
        raise
    if rebuilt:
        recovery = replace(recovery, index_rebuilt=rebuilt)
    if source is not None and recovery.lines_indexed:
        start, offset = recovery.scanned_from
        note = (f"the index lagged the log: {recovery.lines_indexed} lines from {start}@{offset} "
                "caught up in a private index")
        torn = recovery.tail_at
        tail = f"; a torn tail of {recovery.tail_bytes} bytes at {torn[0]}@{torn[1]} kept" if torn else ""
        bad = f"; {len(recovery.corruptions)} corrupt lines" if recovery.corruptions else ""
        log.warning("cairn: read-only open of %s: %s%s%s", root, note, tail, bad)
        recovery = replace(recovery, notes=(*recovery.notes, note))
    return index, recovery, private


def _private_copy(root: Path, source: Index, private: Path, map_size: int) -> Index | None:
    """`source` copied into the empty directory `private` and opened; None (`private` emptied) on failure."""
    try:
        source.copy_to(private)
        return Index(private, map_size=map_size)
    except (IndexUnusable, OSError) as exc:
        log.warning("cairn: cannot copy the index of %s (%s); building a private one from the whole log",
                    root, exc)
        for leftover in private.iterdir():
            leftover.unlink()
        return None
