"""`accept_loss`: the operator's explicit, logged decision that acknowledged lines are gone.

A store whose log lost acknowledged lines refuses writers (DESIGN §2.5)
until an operator decides. `cairn repair --accept-loss` is that decision;
it asks nothing, so the flag is the consent. Under the writer lock, in an
order that a crash at any step leaves safe to run again:

1. find the loss exactly as a writer's open would (`store.loss`), naming
   the sessions and seqs from the index while it still has them; refuse
   (`NothingToRepair`) when nothing acknowledged is missing, or when only
   accepted losses are;
2. copy what is left of the lost lines -- the invalid bytes that end the
   log where acknowledged lines were, a partial line that ends a segment
   before a gap -- to `quarantine/<segment>@<offset>`, fsynced: the log is
   never cut without keeping what was cut;
3. append the decision to `operator.jsonl` and fsync it: the ranges of
   positions, the sessions and seqs known lost, the quarantined bytes,
   who, when, why; and log a warning;
4. cut those bytes from the segment (fsync) and rebuild the index from the
   log that is left.

Afterwards a writer opens; its appends continue past the acknowledged mark,
so no lost position is ever used again, and `verify` reports the recorded
gap as a warning. Sessions that lost lines continue from the last seq the
log holds (their next seq is the one after it); a session that lost lines
in the middle of its history stays unreadable past the gap (fail closed).
"""

from __future__ import annotations

import getpass
import hashlib
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from cairn.store.errors import IndexUnusable, NothingToRepair, StorageError, UnexpectedEntry
from cairn.store.files import check_dir, open_file, private_dir
from cairn.store.index import Index
from cairn.store.lock import take_lock
from cairn.store.loss import (
    QUARANTINE,
    AcceptedLoss,
    Loss,
    PositionRange,
    Quarantined,
    append_operator_record,
    find_losses,
    gather_evidence,
)
from cairn.store.reader import Progress
from cairn.store.recovery import LogEnd, cut_tail, log_end
from cairn.store.reindex import reindex_locked
from cairn.store.segments import (
    FsyncFn,
    fsync_dir,
    partial_end,
    read_log_dir,
    segment_end,
    segment_name,
    write_all,
)

log = logging.getLogger("cairn.store")


def accept_loss(
    root: str | os.PathLike[str],
    *,
    reason: str = "",
    fsync: FsyncFn = os.fsync,
    clock_ms: Callable[[], int] | None = None,
    progress: Progress | None = None,
) -> AcceptedLoss:
    """Record that the acknowledged lines missing from the store at `root` are lost; return the record.

    Raises `StoreLocked` while a writer runs, `UnexpectedEntry` for entries
    cairn did not make (move them first), `NothingToRepair` when no
    unaccepted loss is found (nothing is changed then).
    """
    path = Path(root)
    if not check_dir(path / "log"):
        raise StorageError(f"no cairn store at {path} (no log directory)")
    lock_fd = take_lock(path)
    try:
        found = _find_losses(path)
        unaccepted = [loss for loss in found.losses if not loss.accepted]
        if not unaccepted:
            raise NothingToRepair(
                f"no acknowledged line is missing from the log of {path}"
                + (" beyond the losses already accepted" if found.losses else "")
                + "; nothing was changed"
            )
        cuts = _remains(path, found.segments, unaccepted)
        if found.tail_in_acked and found.end.tail_at is not None:
            cuts.append((found.end.tail_at, found.end.tail_bytes))
        quarantined = [_quarantine(path, place, length, fsync) for place, length in cuts]
        record = _operator_record(unaccepted, quarantined, reason, clock_ms)
        append_operator_record(path, record, fsync=fsync)
        log.warning(
            "cairn: %s: an operator accepted the loss of acknowledged lines: %s%s",
            path,
            "; ".join(loss.describe() for loss in unaccepted),
            f" ({reason})" if reason else "",
        )
        for place, _ in cuts:
            cut_tail(path / "log", place, fsync)
        reindex_locked(path, progress)
        return record
    finally:
        os.close(lock_fd)


class _Found(msgspec.Struct, frozen=True):
    """The losses of a store as `accept_loss` finds them, and the end of its log."""

    segments: list[int]
    losses: list[Loss]
    end: LogEnd
    #: the torn tail lies where acknowledged bytes were (it is quarantined with the loss)
    tail_in_acked: bool


def _find_losses(path: Path) -> _Found:
    """Every acknowledged position the log does not hold, named from the index when it can; changes nothing.

    Raises `UnexpectedEntry` for entries of `log/` that are not segments.
    """
    listing = read_log_dir(path / "log")
    if listing.unexpected:
        entries = listing.describe_unexpected()
        raise UnexpectedEntry(
            f"the log of {path} holds entries that are not segments: "
            f"{'; '.join(entries)}; move them out of log/ first",
            entries,
        )
    segments = listing.segments
    names: Index | None = None
    if (path / "index" / "data.mdb").exists():
        try:
            names = Index(path / "index", readonly=True)
        except IndexUnusable as exc:
            log.warning("cairn: the index of %s cannot name the lost sessions: %s", path, exc)
    try:
        meta = names.meta() if names is not None else None
        evidence = gather_evidence(path, meta).with_segments(segments)
        end = log_end(path / "log", segments)
        tail_in_acked = evidence.reaches(end.tail_at)
        losses = find_losses(
            path / "log",
            segments,
            max(end.next_pos, segments[-1] if segments else 0),
            evidence,
            names,
            tail_in_acked=tail_in_acked,
        )
    finally:
        if names is not None:
            names.close()
    return _Found(segments, losses, end, tail_in_acked)


def _operator_record(
    unaccepted: list[Loss], quarantined: list[Quarantined], reason: str, clock_ms: Callable[[], int] | None
) -> AcceptedLoss:
    """The operator log's record of accepting `unaccepted`: what, who, where, when and why."""
    return AcceptedLoss(
        ts=clock_ms() if clock_ms is not None else time.time_ns() // 1_000_000,
        ranges=tuple(
            PositionRange(first_pos=loss.first_pos, last_pos=loss.last_pos, where=loss.where)
            for loss in unaccepted
        ),
        sessions=tuple(session for loss in unaccepted for session in loss.sessions),
        sessions_known=all(loss.sessions_known for loss in unaccepted),
        quarantined=tuple(quarantined),
        reason=reason,
        user=_user(),
        host=socket.gethostname(),
        pid=os.getpid(),
    )


def _remains(root: Path, segments: list[int], losses: list[Loss]) -> list[tuple[tuple[int, int], int]]:
    """The partial lines that end a rolled segment right before a loss being accepted: what is left of
    a lost line, ((segment, offset), length) each. (The end of the last segment is `log_end`'s.)"""
    starts = {loss.first_pos for loss in losses}
    found = []
    for first, following in itertools.pairwise(segments):
        path = root / "log" / segment_name(first)
        end = segment_end(path, first)
        if end is None or end >= following or end not in starts:
            continue
        partial = partial_end(path)
        if partial is not None:
            found.append(((first, partial[0]), partial[1]))
    return found


def _quarantine(root: Path, place: tuple[int, int], length: int, fsync: FsyncFn) -> Quarantined:
    """Copy `length` bytes of the log at `place` to `quarantine/`, durably, before they are cut."""
    segment, offset = place
    fd, _ = open_file(root / "log" / segment_name(segment), os.O_RDONLY)
    try:
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    made = private_dir(root / QUARANTINE)
    name = f"{QUARANTINE}/{segment_name(segment)}@{offset}"
    out, _ = open_file(root / name, os.O_WRONLY | os.O_TRUNC, create=True)
    try:
        write_all(out, data)
        fsync(out)
    finally:
        os.close(out)
    fsync_dir(root / QUARANTINE, fsync)
    if made:
        fsync_dir(root, fsync)
    return Quarantined(
        file=name,
        segment=segment_name(segment),
        offset=offset,
        length=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
