"""Read-only opens of a store: the index a reader reads through, caught up privately when it lags.

A read-only open changes nothing on disk. When the store's own index covers
the whole log (`index_lag`: a cheap check, no scan) it reads through it.
When the log holds lines past the index's recovery point -- a crash between
the log's fsync and the index's relaxed-sync commit, or a live writer
between the two -- it reads through a private copy of the index in a
temporary directory, caught up by `recover(readonly=True)`, so audit readers
see every acknowledged line, indexed by the same path. A writer may then be
appending meanwhile; a line it is still writing looks like a torn tail.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from cairn.store.errors import CatchUpFailed, IndexUnusable, UnexpectedEntry
from cairn.store.index import Index
from cairn.store.index_records import IndexMeta
from cairn.store.loss import Evidence, find_losses, gather_evidence
from cairn.store.reader import LogLine, Progress, scan_log
from cairn.store.recovery import Recovery, point_doubt, recover
from cairn.store.segments import list_segments, parse_segment_name, read_log_dir, segment_name

log = logging.getLogger("cairn.store")


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
        reason = point_doubt(log_dir, segments, meta)
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
        listed,
        meta,
        point,
        bytes_past=past,
        tail_bytes=sum(piece.length for piece in tail),
        tail_at=(segment_name(torn.segment), torn.offset),
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
        log.warning(
            "cairn: read-only open of %s: %s (a writer will not open the store until an operator "
            "accepts the loss: cairn repair --accept-loss)",
            root,
            note,
        )
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
                    log.warning(
                        "cairn: the index of %s cannot be trusted (%s); reading through a private "
                        "index rebuilt from the log",
                        root,
                        lag.doubt,
                    )
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
    losses = find_losses(
        root / "log", segments, log_next, evidence, index, tail_in_acked=evidence.reaches(tail_place)
    )
    if lag.tail_at is not None:
        log.info(
            "cairn: %d invalid bytes at %s@%d end the log of %s past its index (a torn tail, or a "
            "write in progress); left as they are",
            lag.tail_bytes,
            lag.tail_at[0],
            lag.tail_at[1],
            root,
        )
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
    root: Path,
    source: Index | None,
    map_size: int,
    progress: Progress | None,
    rebuilt: str,
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
        note = (
            f"the index lagged the log: {recovery.lines_indexed} lines from {start}@{offset} "
            "caught up in a private index"
        )
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
        log.warning(
            "cairn: cannot copy the index of %s (%s); building a private one from the whole log", root, exc
        )
        for leftover in private.iterdir():
            leftover.unlink()
        return None
