"""Start-up recovery of a store (DESIGN §2.5), as numbered passes.

`recover` runs, in order:

1. **evidence** -- gather what the store acknowledged, before anything is
   changed: the index's recovery point, the `ACKED` mark and the losses an
   operator accepted (`store.loss`); then the last segment's name.
2. **log directory** -- list the segment files. Anything else in `log/`
   (a link or directory under a segment's name, a name past the largest
   position, any other entry) is never opened: a writer's open refuses
   with `UnexpectedEntry`; a read-only one skips it and says so.
3. **recovery point** -- read the index's `through` position and check it
   against the log (the segment exists and is long enough, the last indexed
   line is there with the expected position). An index whose point the log
   cannot back names lines the log may have lost: before it is forgotten,
   the end of the log is found (a scan of the last segment) and the missing
   ranges are named from it; a writer refuses to open while any of them is
   not accepted. Otherwise the index is emptied and the point is the start
   of the log: the index is derived.
4. **scan** -- read every piece after the point. Sound lines are indexed
   through the one `IndexBuilder` path. An invalid piece followed by a valid
   line (or at the end of a segment that is not the last) is durable
   corruption: recorded in the index with its segment, offset and (guessed)
   session, which then fails closed; never skipped silently, never cut.
5. **losses** -- the acknowledged positions no line holds (`find_losses`):
   the end of the log short of the evidence, a segment missing or cut short.
   A writer's open raises `AcknowledgedDataMissing` naming the sessions,
   seqs and positions, unless every one was accepted by an operator (then
   appends continue past the evidence: lost positions are never reused).
   Read-only opens report them in `Recovery.losses` and go on.
6. **torn tail** -- the invalid pieces that end the last segment, split by
   one rule (`split_tail`): a *whole* piece -- newline-terminated, shaped
   like a line at both ends (`{"v":` ... `,"crc":"<8 hex>"}`), no NUL byte
   -- is never what a crash leaves (a crash loses the bytes after the last
   fsync or leaves zero-filled blocks: a partial last line, zeros,
   garbage), so a whole piece with a wrong checksum (a flipped bit) is
   corruption: recorded, its session fails closed, and it keeps its
   position. Only the run of pieces after the last whole one is a torn
   tail, and it is cut (truncate + fsync) only when it lies past the
   acknowledged bytes (or within a loss the operator accepted): invalid
   bytes where acknowledged lines were are a loss, never cut without
   asking. The number of bytes dropped is reported with a warning. This is
   the only repair.
7. **commit** -- the index entries and the new `through` position.

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

from cairn.events.codec import decode_envelope
from cairn.events.errors import DecodeError
from cairn.store.errors import CatchUpFailed, IndexUnusable, UnexpectedEntry
from cairn.store.files import open_file
from cairn.store.index import Index
from cairn.store.index_builder import IndexBuilder
from cairn.store.index_records import CorruptEntry, IndexMeta
from cairn.store.loss import Evidence, Loss, find_losses, gather_evidence, missing_error
from cairn.store.reader import LogLine, Progress, guess_owner, scan_log, split_tail
from cairn.store.segments import FsyncFn, list_segments, parse_segment_name, read_log_dir, segment_name

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
    #: acknowledged positions the log does not hold (a writer opens only when all are accepted)
    losses: tuple[Loss, ...] = ()
    #: entries of `log/` that are not segments (a read-only open skips them; a writer refuses)
    unexpected: tuple[str, ...] = ()

    @property
    def bytes_dropped(self) -> int:
        return self.tail_bytes if self.truncated else 0

    @property
    def unaccepted_losses(self) -> tuple[Loss, ...]:
        return tuple(loss for loss in self.losses if not loss.accepted)


@dataclass(frozen=True)
class LogEnd:
    """Where the log ends: the position after its last line, and the torn tail after it."""

    next_pos: int
    tail_at: tuple[int, int] | None = None
    tail_bytes: int = 0


def recover(
    root: Path,
    index: Index,
    *,
    readonly: bool = False,
    fsync: FsyncFn = os.fsync,
    progress: Progress | None = None,
    rebuild: bool = False,
    witness: Index | None = None,
    refuse_loss: bool | None = None,
) -> Recovery:
    """Bring `index` up to the end of the log under `root`, cutting a torn tail.

    `readonly` never changes the log (the tail is reported, not cut).
    `rebuild` empties the index first (reindex from nothing). `witness` is
    the index whose recovery point is evidence of what was acknowledged and
    whose entries name the sessions of missing lines (default: `index`; a
    private or fresh index passes the store's own). `refuse_loss` (default:
    not `readonly`) raises `AcknowledgedDataMissing` for a loss no operator
    accepted, before anything is changed on disk.
    """
    log_dir = root / "log"
    refuse = (not readonly) if refuse_loss is None else refuse_loss
    witness = witness if witness is not None else index

    # Pass 1: the evidence of what was acknowledged, gathered before the listing and before anything
    # changes (a live writer's later lines are then all in the listing, see `gather_evidence`).
    evidence = gather_evidence(root, witness.meta())
    for trouble in evidence.troubles:
        log.warning("cairn: %s: %s", root, trouble)

    # Pass 2: the log directory.
    listing = read_log_dir(log_dir)
    unexpected = tuple(listing.describe_unexpected())
    if unexpected and not readonly:
        raise UnexpectedEntry(
            f"the log of {root} holds entries that are not segments: {'; '.join(unexpected)}. cairn never "
            "opens them; move them out of log/ to open the store for writing", unexpected,
        )
    segments = listing.segments
    evidence = evidence.with_segments(segments)

    # Pass 3: the recovery point.
    found = index.meta()
    reason = "reindex requested" if rebuild else _doubt(log_dir, segments, found)
    early: list[Loss] | None = None
    if reason and found is not None and witness is index:
        # the index names what the log may no longer hold: name the losses before it is emptied
        end = log_end(log_dir, segments)
        early = find_losses(log_dir, segments, end.next_pos, evidence, index,
                            tail_in_acked=_in_acked(end.tail_at, evidence))
        if refuse and any(not loss.accepted for loss in early):
            raise missing_error(root, early)
    if reason:
        if not rebuild and reason != "empty index":
            log.warning("cairn: rebuilding the index of %s: %s", root, reason)
        index.reset()
        meta = IndexMeta(segment=segments[0] if segments else 0, next_pos=segments[0] if segments else 0)
    else:
        assert found is not None
        meta = found
    start_segment, start_offset = meta.segment, meta.offset

    # Pass 4: scan and index.
    scan = _IndexPass(index, meta)
    # the segments listed above, not a fresh listing: with a writer appending meanwhile (a read-only
    # catch-up), a segment rolled after the listing must not make the old last one look rolled
    scan.run(log_dir, segments, (start_segment, start_offset), progress)
    last_segment = segments[-1] if segments else 0
    torn = scan.end_of_log(last_segment)
    next_pos, last, corruptions, indexed = scan.next_pos, scan.last, scan.corruptions, scan.indexed
    end_segment, end_offset = scan.end
    tail_bytes = sum(bad.length for bad in torn)
    tail_place = (torn[0].segment, torn[0].offset) if torn else None
    if tail_place is not None:
        end_segment, end_offset = tail_place
    if segments and end_segment < last_segment:  # later segments are empty
        end_segment, end_offset = last_segment, 0

    # Pass 5: losses -- refused before the tail is cut or anything is committed.
    log_next = max(next_pos, last_segment)
    losses = early if early is not None else find_losses(
        log_dir, segments, log_next, evidence, witness, tail_in_acked=_in_acked(tail_place, evidence))
    if refuse and any(not loss.accepted for loss in losses):
        raise missing_error(root, losses)
    for loss in losses:
        if loss.accepted:
            log.info("cairn: %s: positions %d-%d are a loss an operator accepted", root, loss.first_pos,
                     loss.last_pos)
    writer_next = max(log_next, evidence.next_pos)

    # Pass 6: the torn tail.
    truncated = False
    tail_at = (segment_name(tail_place[0]), tail_place[1]) if tail_place is not None else None
    if tail_place is not None and tail_at is not None and not readonly:
        _cut(log_dir, tail_place, fsync)
        truncated = True
        why = "within an accepted loss" if _in_acked(tail_place, evidence) else "never acknowledged"
        log.warning("cairn: cut a torn tail of %d bytes at %s@%d (%s)", tail_bytes, *tail_at, why)

    # Pass 7: commit.
    scan.builder.meta = _meta(end_segment, end_offset, next_pos, last)
    index.commit(scan.builder.take())
    active_segment, active_size = (end_segment, end_offset) if segments else (writer_next, 0)
    if writer_next > log_next:  # an accepted loss ends the log: appends start a new segment past it
        active_segment, active_size = writer_next, 0
    return Recovery(
        segments=len(segments),
        scanned_from=(segment_name(start_segment), start_offset),
        lines_indexed=indexed,
        next_pos=writer_next,
        active_segment=active_segment,
        active_size=active_size,
        tail_bytes=tail_bytes,
        tail_at=tail_at,
        truncated=truncated,
        corruptions=tuple(corruptions),
        index_rebuilt=reason if reason != "empty index" else "",
        losses=tuple(losses),
        unexpected=unexpected,
    )


class _IndexPass:
    """The scan pass: log pieces, in order, into index entries through the one `IndexBuilder` path.

    Shared by `recover` and `rebuild_through`, so that both index a line,
    and judge an invalid piece, the same way. Commits every `_COMMIT_EVERY`
    lines (entries of lines that are there: never evidence lost).
    """

    def __init__(self, index: Index, meta: IndexMeta) -> None:
        self.index = index
        self.builder = IndexBuilder(index.summary, meta)
        self.next_pos = meta.next_pos
        self.last = (meta.last_segment, meta.last_offset, meta.last_length)
        self.end = (meta.segment, meta.offset)
        self.pending: list[LogLine] = []
        self.corruptions: list[CorruptEntry] = []
        self.indexed = 0

    def flush_corrupt(self) -> None:
        for bad in self.pending:
            sid, seq = guess_owner(bad.raw)
            entry = CorruptEntry(
                segment=bad.segment, offset=bad.offset, length=bad.length, sid=sid, seq=seq, reason=bad.error
            )
            self.builder.add_corrupt(entry)
            self.corruptions.append(entry)
            log.error("cairn: corrupt line at %s (session %s): %s", bad.where, sid or "unknown", bad.error)
        self.pending.clear()

    def run(
        self,
        log_dir: Path,
        segments: list[int],
        start: tuple[int, int],
        progress: Progress | None,
        stop: tuple[int, int] | None = None,
    ) -> None:
        """Index every piece from `start` (segment, offset) to the end of `segments` (or to `stop`)."""
        builder, pending = self.builder, self.pending
        current = start[0]
        for line in scan_log(log_dir, start_segment=start[0], start_offset=start[1], progress=progress,
                             segments=segments, stop=stop):
            if line.segment != current:
                self.flush_corrupt()  # invalid bytes at the end of a rolled segment are never a tail
                current = line.segment
            self.end = (line.segment, line.offset + line.length)
            if not line.framed:
                pending.append(line)
                continue
            self.flush_corrupt()
            env = line.envelope
            if env is None:  # framed, but the envelope is unreadable: a durable bad line
                pending.append(line)
                self.flush_corrupt()
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
                self.corruptions.append(entry)
            self.next_pos = max(self.next_pos, env.pos + 1)
            self.last = (line.segment, line.offset, line.length)
            self.indexed += 1
            if builder.pending >= _COMMIT_EVERY:
                builder.meta = _meta(self.end[0], self.end[1], self.next_pos, self.last)
                self.index.commit(builder.take())

    def end_of_log(self, last_segment: int) -> list[LogLine]:
        """Judge the invalid pieces the scan ended with; return the torn tail (`split_tail`).

        Pieces at the end of a rolled segment are corruption; in the last
        segment, those up to the last whole one are corruption and keep
        their positions, the run after it is the torn tail.
        """
        pending = self.pending
        if pending and pending[0].segment != last_segment:
            self.flush_corrupt()
        corrupt, torn = split_tail(pending)
        pending[:] = corrupt
        self.next_pos += len(corrupt)
        self.flush_corrupt()
        return torn


def rebuild_through(root: Path, index: Index, segments: list[int], point: tuple[int, int]) -> None:
    """Rebuild `index` from nothing with the lines of the log up to `point` (segment, byte offset) only.

    What an index whose recovery point is `point` must hold: `verify`
    compares a store's index with this, so lines a writer appended past the
    point (an index that lags) are no difference. Never changes the log.
    """
    index.reset()
    first = segments[0] if segments else 0
    scan = _IndexPass(index, IndexMeta(segment=first, next_pos=first))
    scan.run(root / "log", [s for s in segments if s <= point[0]], (first, 0), None, stop=point)
    torn = scan.end_of_log(point[0])
    scan.pending[:] = torn  # a point never lies past a torn tail: bytes before it were judged corrupt
    scan.flush_corrupt()
    scan.builder.meta = _meta(point[0], point[1], scan.next_pos, scan.last)
    index.commit(scan.builder.take())


def _in_acked(place: tuple[int, int] | None, evidence: Evidence) -> bool:
    """Whether bytes starting at `place` (segment, offset) lie where acknowledged bytes were."""
    return place is not None and place < evidence.end


def _cut(log_dir: Path, place: tuple[int, int], fsync: FsyncFn) -> None:
    """Truncate the segment at `place` to its offset and fsync it (never through a link)."""
    fd, _ = open_file(log_dir / segment_name(place[0]), os.O_WRONLY)
    try:
        os.ftruncate(fd, place[1])
        fsync(fd)
    finally:
        os.close(fd)


def log_end(log_dir: Path, segments: list[int]) -> LogEnd:
    """Where the log ends, from a scan of its last segment alone (no index needed); changes nothing.

    The position after the last line the last segment holds (a whole
    corrupt line holds one; the segment's own first position when it holds
    none), and the torn tail after it (`split_tail`).
    """
    if not segments:
        return LogEnd(0)
    last = segments[-1]
    next_pos = last
    after: list[LogLine] = []
    for line in scan_log(log_dir, segments=[last]):
        if line.envelope is not None:
            next_pos = line.envelope.pos + 1
            after.clear()
        else:
            after.append(line)
    corrupt, torn = split_tail(after)
    next_pos += len(corrupt)
    if not torn:
        return LogEnd(next_pos)
    return LogEnd(next_pos, (torn[0].segment, torn[0].offset), sum(piece.length for piece in torn))


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
            fd, _ = open_file(path, os.O_RDONLY)
            try:
                raw = os.pread(fd, meta.last_length, meta.last_offset)
            finally:
                os.close(fd)
            env = decode_envelope(raw, where=f"{path.name}@{meta.last_offset}")
        except (OSError, DecodeError, UnexpectedEntry) as exc:
            return f"the last indexed line is not there: {exc}"
        # whole corrupt lines after the last valid one keep their positions: the point is then past them
        past_last = (meta.segment, meta.offset) > (meta.last_segment, meta.last_offset + meta.last_length)
        if env.pos + 1 != meta.next_pos and not (past_last and env.pos + 1 < meta.next_pos):
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
    #: what the store acknowledged, read before the listing (segment names not yet added)
    evidence: Evidence | None = None

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
    # the point (and the rest of the evidence) first, then the listing: a live writer may roll and
    # commit in between, and a listing taken before the point could then miss the segment it names
    meta = index.meta()
    evidence = gather_evidence(root, meta)
    segments = list_segments(log_dir)
    listed = tuple(segments)
    if meta is not None:
        point = (meta.segment, meta.offset)
        reason = _doubt(log_dir, segments, meta)
        if reason:
            return Lag(listed, meta, point, doubt=reason, evidence=evidence)
    else:
        point = (segments[0], 0) if segments else (0, 0)
    past = 0
    for first in segments:
        if first >= point[0]:
            size = (log_dir / segment_name(first)).stat().st_size
            past += size - point[1] if first == point[0] else size
    if past <= 0:
        return Lag(listed, meta, point, evidence=evidence)
    tail: list[LogLine] = []
    for line in scan_log(log_dir, start_segment=point[0], start_offset=point[1], segments=segments):
        if line.whole or (tail and tail[0].segment != line.segment):  # a line, or corruption, to index
            return Lag(listed, meta, point, bytes_past=past, unindexed=True, evidence=evidence)
        tail.append(line)
    if not tail:  # the bytes were in later segments that hold no piece yet
        return Lag(listed, meta, point, bytes_past=past, evidence=evidence)
    if tail[0].segment != segments[-1]:  # invalid bytes at the end of a rolled segment: corruption
        return Lag(listed, meta, point, bytes_past=past, unindexed=True, evidence=evidence)
    torn = tail[0]
    return Lag(
        listed, meta, point, bytes_past=past,
        tail_bytes=sum(piece.length for piece in tail), tail_at=(segment_name(torn.segment), torn.offset),
        evidence=evidence,
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

    Whichever index it reads through, it also checks what was acknowledged
    against what the log holds: missing lines are reported (a warning and
    `Recovery.losses`), never a reason to refuse reading what is left.
    Entries of `log/` that are not segments are skipped (never opened) and
    named in `Recovery.unexpected`.

    The third value is the private index's directory (None for the store's
    own); the caller removes it after closing the index. Raises
    `CatchUpFailed` when the log cannot be checked or no private index can be
    built.
    """
    index, recovery, private = _open_for_reading(root, map_size, progress)
    unexpected = tuple(read_log_dir(root / "log").describe_unexpected())
    if unexpected:
        note = f"entries of log/ that are not segments were skipped: {'; '.join(unexpected)}"
        log.warning("cairn: read-only open of %s: %s", root, note)
        recovery = replace(recovery, unexpected=unexpected, notes=(*recovery.notes, note))
    if recovery.unaccepted_losses:
        listed = "; ".join(loss.describe() for loss in recovery.unaccepted_losses)
        note = f"acknowledged lines are missing from the log: {listed}; showing what is left"
        log.warning("cairn: read-only open of %s: %s (a writer will not open the store until an operator "
                    "accepts the loss: cairn repair --accept-loss)", root, note)
        recovery = replace(recovery, notes=(*recovery.notes, note))
    return index, recovery, private


def _open_for_reading(
    root: Path, map_size: int, progress: Progress | None
) -> tuple[Index, Recovery, Path | None]:
    index_dir = root / "index"
    trouble = ""
    if (index_dir / "data.mdb").exists():
        try:
            store_index = Index(index_dir, readonly=True, map_size=map_size)
        except (IndexUnusable, UnexpectedEntry) as exc:
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
                try:
                    return store_index, _current(root, lag, store_index), None
                except OSError as exc:
                    store_index.close()
                    raise CatchUpFailed(f"cannot check the log of {root}: {exc}") from exc
                except BaseException:
                    store_index.close()
                    raise
            try:
                if lag.doubt:
                    log.warning("cairn: the index of %s cannot be trusted (%s); reading through a private "
                                "index rebuilt from the log", root, lag.doubt)
                    return _private_index(root, None, map_size, progress, lag.doubt, store_index)
                return _private_index(root, store_index, map_size, progress, "", store_index)
            finally:
                store_index.close()
    return _private_index(root, None, map_size, progress, trouble, None)


def _current(root: Path, lag: Lag, index: Index) -> Recovery:
    """The `Recovery` of a read-only open through the store's own index (nothing indexed)."""
    meta = lag.meta
    segments = list(lag.segments)
    evidence = (lag.evidence or gather_evidence(root, meta)).with_segments(segments)
    log_next = max(meta.next_pos if meta else 0, segments[-1] if segments else 0)
    tail_place = None
    if lag.tail_at is not None:
        first = parse_segment_name(lag.tail_at[0])
        tail_place = (first, lag.tail_at[1]) if first is not None else None
    losses = find_losses(root / "log", segments, log_next, evidence, index,
                         tail_in_acked=_in_acked(tail_place, evidence))
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
        losses=tuple(losses),
    )


def _private_index(
    root: Path, source: Index | None, map_size: int, progress: Progress | None, rebuilt: str,
    witness: Index | None,
) -> tuple[Index, Recovery, Path]:
    """A private index in a new temporary directory, brought up to the end of the log.

    It starts as a copy of `source` (then only the log past its point is
    scanned) or, when there is none or the copy fails, empty (the whole log is
    scanned). `rebuilt` says why the store's index was not used at all.
    `witness` is the store's own index when it could be opened: its point
    is evidence of what was acknowledged, and it names the sessions of
    missing lines.
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
            recovery = recover(root, index, readonly=True, progress=progress, witness=witness)
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
