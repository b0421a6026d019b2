"""Start-up recovery of a store (DESIGN §2.5), as numbered passes that each return a named value.

`recover` runs, in order (each pass a function; the reading passes change
nothing, and every refusal comes before the first change to the log):

1. **evidence** (`_gather_evidence` -> `Evidence`) -- gather what the store
   acknowledged, before anything is changed: the index's recovery point, the
   `ACKED` mark and the losses an operator accepted (`store.loss`); then the
   last segment's name.
2. **log directory** (`_list_log` -> `LogDir`) -- list the segment files.
   Anything else in `log/` (a link or directory under a segment's name, a
   name past the largest position, any other entry) is never opened: a
   writer's open refuses with `UnexpectedEntry`; a read-only one skips it
   and says so.
3. **recovery point** (`_recovery_point` -> `RecoveryPoint`) -- read the
   index's `through` position and check it against the log (the segment
   exists and is long enough, the last indexed line is there with the
   expected position). An index whose point the log cannot back names lines
   the log may have lost: before it is forgotten, the end of the log is
   found (a scan of the last segment) and the missing ranges are named from
   it; a writer refuses to open while any of them is not accepted. Otherwise
   the index is emptied and the point is the start of the log: the index is
   derived.
4. **scan** (`_scan` -> `Scanned`, through `store.index_pass`) -- read every
   piece after the point. Sound lines are indexed through the one
   `IndexBuilder` path. An invalid piece followed by a valid line (or at the
   end of a segment that is not the last) is durable corruption: recorded in
   the index with its segment, offset and (guessed) session, which then
   fails closed; never skipped silently, never cut.
5. **losses** (`_check_losses` -> `LossCheck`) -- the acknowledged positions
   no line holds (`find_losses`): the end of the log short of the evidence,
   a segment missing or cut short. A writer's open raises
   `AcknowledgedDataMissing` naming the sessions, seqs and positions, unless
   every one was accepted by an operator (then appends continue past the
   evidence: lost positions are never reused). Read-only opens report them
   in `Recovery.losses` and go on.
6. **torn tail** (`_cut_torn_tail`) -- the invalid pieces that end the last
   segment, split by one rule (`split_tail`): a *whole* piece --
   newline-terminated, shaped like a line at both ends (`{"v":` ...
   `,"crc":"<8 hex>"}`), no NUL byte -- is never what a crash leaves (a
   crash loses the bytes after the last fsync or leaves zero-filled blocks:
   a partial last line, zeros, garbage), so a whole piece with a wrong
   checksum (a flipped bit) is corruption: recorded, its session fails
   closed, and it keeps its position. Only the run of pieces after the last
   whole one is a torn tail, and it is cut (truncate + fsync) only when it
   lies past the acknowledged bytes (or within a loss the operator
   accepted): invalid bytes where acknowledged lines were are a loss, never
   cut without asking. The number of bytes dropped is reported with a
   warning. This is the only repair.
7. **commit** -- the index entries and the new `through` position.

It returns a `Recovery` naming what it found and did (`_recovery`). Runs on the opening
thread, before the writer starts; nothing else touches the store meanwhile.

Read-only opens (`store.readonly`) change nothing on disk: when the log
holds lines past the store's index they run `recover(readonly=True)` on a
private copy of it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from cairn.events.codec import decode_envelope
from cairn.events.errors import DecodeError
from cairn.store.errors import UnexpectedEntry
from cairn.store.files import open_file
from cairn.store.index import Index
from cairn.store.index_pass import IndexPass
from cairn.store.index_records import CorruptEntry, IndexMeta
from cairn.store.loss import Evidence, Loss, find_losses, gather_evidence, missing_error
from cairn.store.reader import LogLine, Progress, scan_log, split_tail
from cairn.store.segments import FsyncFn, LogDir, read_log_dir, segment_name

log = logging.getLogger("cairn.store")


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


class RecoveryPoint(msgspec.Struct, frozen=True):
    """Pass 3's answer: where the scan starts, and why the index's own point was not trusted."""

    #: the point the scan starts from: the index's own, or the start of the log for an emptied index
    meta: IndexMeta
    #: why the index is emptied first ("" when its point is trusted, "empty index" when it had none)
    reason: str
    #: the losses named from the index before it is emptied (None: they are looked for after the scan)
    early_losses: tuple[Loss, ...] | None


class Scanned(msgspec.Struct, frozen=True):
    """Pass 4's answer: what the scan indexed past the point (not committed yet) and where the log ends."""

    lines_indexed: int
    corruptions: tuple[CorruptEntry, ...]
    #: the position after the log's last line (whole corrupt lines hold one each)
    next_pos: int
    #: (segment, byte offset) after the last line: the new recovery point, where the writer continues
    end: tuple[int, int]
    #: the torn tail that ends the last segment: where it starts (None: there is none), and its bytes
    tail_place: tuple[int, int] | None
    tail_bytes: int


class LossCheck(msgspec.Struct, frozen=True):
    """Pass 5's answer: the acknowledged positions no line holds, and where appends continue."""

    losses: tuple[Loss, ...]
    #: the position after the log's last line, at least the last segment's name
    log_next: int
    #: past the log and past every acknowledged position: lost positions are never reused
    writer_next: int


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
    """Bring `index` up to the end of the log under `root`, cutting a torn tail (the passes: module doc).

    `readonly` never changes the log (the tail is reported, not cut).
    `rebuild` empties the index first (reindex from nothing). `witness` is
    the index whose recovery point is evidence of what was acknowledged and
    whose entries name the sessions of missing lines (default: `index`; a
    private or fresh index passes the store's own). `refuse_loss` (default:
    not `readonly`) raises `AcknowledgedDataMissing` for a loss no operator
    accepted, before anything is changed on disk.
    """
    refuse = (not readonly) if refuse_loss is None else refuse_loss
    witness = witness if witness is not None else index
    evidence = _gather_evidence(root, witness)
    listing = _list_log(root, readonly)
    evidence = evidence.with_segments(listing.segments)
    point = _recovery_point(
        root, index, listing.segments, evidence, rebuild=rebuild, names_losses=witness is index
    )
    if refuse and point.early_losses is not None:
        _refuse_unaccepted(root, point.early_losses)
    if point.reason:
        _forget_index(root, index, point.reason, rebuild)
    scan = IndexPass(index, point.meta)
    scanned = _scan(scan, root / "log", listing.segments, point.meta, progress)
    checked = _check_losses(root, listing.segments, scanned, evidence, witness, point.early_losses)
    if refuse:  # refused before the tail is cut or anything is committed
        _refuse_unaccepted(root, checked.losses)
    _note_accepted(root, checked.losses)
    truncated = scanned.tail_place is not None and not readonly
    if truncated:
        _cut_torn_tail(root / "log", scanned, evidence, fsync)
    scan.commit(scanned.end)
    return _recovery(listing, point, scanned, checked, truncated)


def _gather_evidence(root: Path, witness: Index) -> Evidence:
    """Pass 1: the evidence of what was acknowledged, before the listing and before anything changes.

    Read first, a live writer's later lines are then all in the listing (see `gather_evidence`).
    """
    evidence = gather_evidence(root, witness.meta())
    for trouble in evidence.troubles:
        log.warning("cairn: %s: %s", root, trouble)
    return evidence


def _list_log(root: Path, readonly: bool) -> LogDir:
    """Pass 2: the segments of `log/`; a writer refuses entries that are not segments (`UnexpectedEntry`)."""
    listing = read_log_dir(root / "log")
    unexpected = listing.describe_unexpected()
    if unexpected and not readonly:
        raise UnexpectedEntry(
            f"the log of {root} holds entries that are not segments: {'; '.join(unexpected)}. cairn never "
            "opens them; move them out of log/ to open the store for writing",
            tuple(unexpected),
        )
    return listing


def _recovery_point(
    root: Path, index: Index, segments: list[int], evidence: Evidence, *, rebuild: bool, names_losses: bool
) -> RecoveryPoint:
    """Pass 3: the index's recovery point, checked against the log (`point_doubt`); changes nothing.

    An index whose point the log cannot back names lines the log may have
    lost: when it is the witness (`names_losses`), the missing ranges are
    named from it now, from the end of the log (`log_end`), before it is
    emptied. Otherwise the scan starts at the start of the log.
    """
    log_dir = root / "log"
    found = index.meta()
    reason = "reindex requested" if rebuild else point_doubt(log_dir, segments, found)
    if not reason:
        assert found is not None
        return RecoveryPoint(found, "", None)
    early: tuple[Loss, ...] | None = None
    if found is not None and names_losses:
        end = log_end(log_dir, segments)
        early = tuple(
            find_losses(
                log_dir, segments, end.next_pos, evidence, index, tail_in_acked=evidence.reaches(end.tail_at)
            )
        )
    first = segments[0] if segments else 0
    return RecoveryPoint(IndexMeta(segment=first, next_pos=first), reason, early)


def _forget_index(root: Path, index: Index, reason: str, rebuild: bool) -> None:
    """Empty an index whose point cannot be trusted (it is derived: the scan rebuilds it)."""
    if not rebuild and reason != "empty index":
        log.warning("cairn: rebuilding the index of %s: %s", root, reason)
    index.reset()


def _scan(
    scan: IndexPass, log_dir: Path, segments: list[int], start: IndexMeta, progress: Progress | None
) -> Scanned:
    """Pass 4: index every piece past the point `start`; judge the invalid pieces that end the log."""
    # the segments listed in pass 2, not a fresh listing: with a writer appending meanwhile (a read-only
    # catch-up), a segment rolled after the listing must not make the old last one look rolled
    scan.run(log_dir, segments, (start.segment, start.offset), progress)
    last_segment = segments[-1] if segments else 0
    torn = scan.end_of_log(last_segment)
    tail_place = (torn[0].segment, torn[0].offset) if torn else None
    end = tail_place if tail_place is not None else scan.end
    if segments and end[0] < last_segment:  # later segments are empty
        end = (last_segment, 0)
    return Scanned(
        lines_indexed=scan.indexed,
        corruptions=tuple(scan.corruptions),
        next_pos=scan.next_pos,
        end=end,
        tail_place=tail_place,
        tail_bytes=sum(bad.length for bad in torn),
    )


def _check_losses(
    root: Path,
    segments: list[int],
    scanned: Scanned,
    evidence: Evidence,
    witness: Index,
    early: tuple[Loss, ...] | None,
) -> LossCheck:
    """Pass 5: the acknowledged positions no line holds (`find_losses`, or those pass 3 named); reads only."""
    log_next = max(scanned.next_pos, segments[-1] if segments else 0)
    losses = early
    if losses is None:
        losses = tuple(
            find_losses(
                root / "log",
                segments,
                log_next,
                evidence,
                witness,
                tail_in_acked=evidence.reaches(scanned.tail_place),
            )
        )
    return LossCheck(losses, log_next, max(log_next, evidence.next_pos))


def _refuse_unaccepted(root: Path, losses: tuple[Loss, ...]) -> None:
    """`AcknowledgedDataMissing` when a loss is one no operator accepted."""
    if any(not loss.accepted for loss in losses):
        raise missing_error(root, losses)


def _note_accepted(root: Path, losses: tuple[Loss, ...]) -> None:
    for loss in losses:
        if loss.accepted:
            log.info(
                "cairn: %s: positions %d-%d are a loss an operator accepted",
                root,
                loss.first_pos,
                loss.last_pos,
            )


def _cut_torn_tail(log_dir: Path, scanned: Scanned, evidence: Evidence, fsync: FsyncFn) -> None:
    """Pass 6: cut the torn tail (truncate + fsync), with a warning naming the bytes dropped."""
    place = scanned.tail_place
    assert place is not None
    cut_tail(log_dir, place, fsync)
    why = "within an accepted loss" if evidence.reaches(place) else "never acknowledged"
    log.warning(
        "cairn: cut a torn tail of %d bytes at %s@%d (%s)",
        scanned.tail_bytes,
        segment_name(place[0]),
        place[1],
        why,
    )


def _recovery(
    listing: LogDir, point: RecoveryPoint, scanned: Scanned, checked: LossCheck, truncated: bool
) -> Recovery:
    """What recovery found and did (pass 7 committed it), and where the writer continues."""
    segments = listing.segments
    active = scanned.end if segments else (checked.writer_next, 0)
    if checked.writer_next > checked.log_next:  # an accepted loss ends the log: appends start a new segment
        active = (checked.writer_next, 0)
    place = scanned.tail_place
    return Recovery(
        segments=len(segments),
        scanned_from=(segment_name(point.meta.segment), point.meta.offset),
        lines_indexed=scanned.lines_indexed,
        next_pos=checked.writer_next,
        active_segment=active[0],
        active_size=active[1],
        tail_bytes=scanned.tail_bytes,
        tail_at=(segment_name(place[0]), place[1]) if place is not None else None,
        truncated=truncated,
        corruptions=scanned.corruptions,
        index_rebuilt=point.reason if point.reason != "empty index" else "",
        losses=checked.losses,
        unexpected=tuple(listing.describe_unexpected()),
    )


def cut_tail(log_dir: Path, place: tuple[int, int], fsync: FsyncFn) -> None:
    """Truncate the segment at `place` (segment, offset) to its offset and fsync it (never through a link)."""
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


def point_doubt(log_dir: Path, segments: list[int], meta: IndexMeta | None) -> str:
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
