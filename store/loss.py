"""What the store acknowledged, what of it the log no longer holds, and what an operator accepted.

"Acknowledged" is a durable fact here, not an inference (DESIGN §2.5). The
evidence that positions below P were acknowledged, strongest first:

- `ACKED` (the *acknowledgement mark*), a one-line file at the store root:
  the next position, and the segment and byte offset the acknowledged
  bytes reach. The writer rewrites it in place (one `pwrite`, no fsync) in
  every group commit, after the log's fsync and before any caller is
  answered, so it never claims a line that was not on disk; it is fsynced
  when it is made, when a writer opens and when it closes. After a power
  loss it may lag (it is not fsynced per batch), never lead. It survives
  the loss of the index. Its record and writer are `store.ack_mark`.
- The index's recovery point (`meta/through`): committed after the log's
  fsync, so it too can lag, never lead.
- Segment names: a segment named N means positions below N were written.
- Losses an operator accepted (below).

The log *holds* a position when a line for it is there, valid or damaged
but whole (a corrupt line is corruption, not loss). A position below the
evidence that no line holds -- the end of the log cut, emptied or deleted,
a segment missing or cut short, the first segments gone -- is *missing*:
`find_losses` names each missing range, and the sessions and seqs that the
index says it held. A writer refuses to open while any missing range is
not accepted (`AcknowledgedDataMissing`); read-only opens and `verify`
report it.

`operator.jsonl` at the store root is the operator's log: one JSON line per
decision, appended and fsynced by `cairn repair --accept-loss`. An accepted
loss records the ranges of positions, the sessions and seqs known lost,
the bytes moved to `quarantine/`, who, when and why. Positions below the
mark are never reused: after an accepted loss, appends continue past it
and `verify` reports the recorded gap as a warning.

The evidence has limits: with the index and `ACKED` both gone, only
segment names remain, and the end of the last segment cannot be checked.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from cairn.store.ack_mark import ACK_MARK, read_ack_mark
from cairn.store.errors import AcknowledgedDataMissing, UnexpectedEntry
from cairn.store.files import open_file, read_file
from cairn.store.index import Index
from cairn.store.index_records import IndexMeta
from cairn.store.segments import FsyncFn, fsync_dir, segment_end, segment_name, write_all

OPERATOR_LOG = "operator.jsonl"
QUARANTINE = "quarantine"

_SHOWN_SESSIONS = 8


# -- the operator's log --------------------------------------------------------------------


class PositionRange(msgspec.Struct, frozen=True, kw_only=True):
    """Positions first_pos..last_pos (inclusive), and what the log showed there."""

    first_pos: int
    last_pos: int
    where: str = ""


class SessionLoss(msgspec.Struct, frozen=True, kw_only=True):
    """A session's seqs first_seq..last_seq (inclusive) that a missing range held."""

    sid: str
    first_seq: int
    last_seq: int

    def __str__(self) -> str:
        seqs = (
            f"seq {self.first_seq}"
            if self.first_seq == self.last_seq
            else f"seqs {self.first_seq}-{self.last_seq}"
        )
        return f"{self.sid} {seqs}"


class Quarantined(msgspec.Struct, frozen=True, kw_only=True):
    """Bytes a repair moved out of the log: kept in `file` (under the store root), with their place."""

    file: str
    segment: str
    offset: int
    length: int
    sha256: str


class AcceptedLoss(msgspec.Struct, frozen=True, kw_only=True):
    """One line of `operator.jsonl`: an operator accepted that these acknowledged lines are gone."""

    action: str = "accept-loss"
    ts: int
    ranges: tuple[PositionRange, ...]
    sessions: tuple[SessionLoss, ...] = ()
    sessions_known: bool = True
    quarantined: tuple[Quarantined, ...] = ()
    reason: str = ""
    user: str = ""
    host: str = ""
    pid: int = 0


_accepted_decoder = msgspec.json.Decoder(AcceptedLoss)


def read_operator_log(root: Path) -> tuple[list[AcceptedLoss], list[str]]:
    """The accepted losses of `operator.jsonl`, and a note for each line that could not be read.

    A line that cannot be read accepts nothing (a torn last line is a
    repair that never finished: the loss is still unaccepted).
    """
    try:
        raw = read_file(root / OPERATOR_LOG)
    except (OSError, UnexpectedEntry) as exc:
        return [], [f"{OPERATOR_LOG} cannot be read: {exc}"]
    if not raw:
        return [], []
    accepted: list[AcceptedLoss] = []
    troubles: list[str] = []
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            record = _accepted_decoder.decode(line)
        except msgspec.DecodeError as exc:
            troubles.append(
                f"{OPERATOR_LOG} line {number} is not an accepted loss cairn can read ({exc}); "
                "it accepts nothing"
            )
            continue
        if record.action == "accept-loss":
            accepted.append(record)
    return accepted, troubles


def append_operator_record(root: Path, record: AcceptedLoss, *, fsync: FsyncFn = os.fsync) -> None:
    """Append `record` to `operator.jsonl` and make it durable (file, and the root when the file is new)."""
    fd, created = open_file(root / OPERATOR_LOG, os.O_WRONLY | os.O_APPEND, create=True)
    try:
        write_all(fd, msgspec.json.encode(record) + b"\n")
        fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(root, fsync)


# -- evidence and losses -----------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """Everything the store says it acknowledged, gathered before anything is changed."""

    #: positions below were acknowledged (0: no evidence of anything)
    next_pos: int
    #: (segment, byte offset) the acknowledged bytes reach, from the index or the mark
    end: tuple[int, int]
    #: what said so, in words
    sources: tuple[str, ...]
    accepted: tuple[AcceptedLoss, ...] = ()
    #: evidence that could not be read (a damaged mark, an unreadable operator log line)
    troubles: tuple[str, ...] = ()

    @property
    def accepted_ranges(self) -> list[tuple[int, int]]:
        return sorted((r.first_pos, r.last_pos) for record in self.accepted for r in record.ranges)

    def reaches(self, place: tuple[int, int] | None) -> bool:
        """Whether bytes starting at `place` (segment, offset) lie where acknowledged bytes were."""
        return place is not None and place < self.end

    def with_segments(self, segments: Sequence[int]) -> Evidence:
        """This evidence and the last segment's name (a segment named N: positions below N were written)."""
        if not segments or segments[-1] <= self.next_pos:
            return self
        source = f"the name of segment {segment_name(segments[-1])} (through pos {segments[-1] - 1})"
        return replace(self, next_pos=segments[-1], sources=(*self.sources, source))


def gather_evidence(root: Path, meta: IndexMeta | None) -> Evidence:
    """The evidence of what the store under `root` acknowledged, from its index point `meta`, its
    mark and its operator log; reads, never writes.

    Read it *before* listing the segments: with a writer appending
    meanwhile, a listing taken after the evidence holds every line the
    evidence claims (they were fsynced first), never the other way round.
    Segment names are added from that listing by `Evidence.with_segments`.
    """
    next_pos, end = 0, (0, 0)
    sources: list[str] = []
    troubles: list[str] = []
    if meta is not None and meta.next_pos:
        next_pos, end = meta.next_pos, (meta.segment, meta.offset)
        sources.append(f"the index (through pos {meta.next_pos - 1})")
    mark, trouble = read_ack_mark(root)
    if trouble:
        troubles.append(trouble)
    if mark is not None and mark.next_pos:
        sources.append(f"{ACK_MARK} (through pos {mark.next_pos - 1})")
        if mark.next_pos > next_pos:
            next_pos = mark.next_pos
        end = max(end, (mark.segment, mark.offset))
    accepted, unreadable = read_operator_log(root)
    troubles += unreadable
    for record in accepted:
        for span in record.ranges:
            if span.last_pos + 1 > next_pos:
                next_pos = span.last_pos + 1
                sources.append(f"an accepted loss (through pos {span.last_pos})")
    return Evidence(next_pos, end, tuple(sources), tuple(accepted), tuple(troubles))


class Loss(msgspec.Struct, frozen=True, kw_only=True):
    """Acknowledged positions first_pos..last_pos that no line of the log holds.

    `sessions` are the sessions and seqs the index says they held;
    `sessions_known` is False when the index does not cover the whole range
    (it was lost too, or lagged): other sessions may have lost lines there.
    """

    first_pos: int
    last_pos: int
    where: str
    sessions: tuple[SessionLoss, ...] = ()
    sessions_known: bool = True
    accepted: bool = False

    def describe(self) -> str:
        span = (
            f"pos {self.first_pos}"
            if self.first_pos == self.last_pos
            else f"positions {self.first_pos}-{self.last_pos}"
        )
        shown = ", ".join(str(s) for s in self.sessions[:_SHOWN_SESSIONS])
        if len(self.sessions) > _SHOWN_SESSIONS:
            shown += f" and {len(self.sessions) - _SHOWN_SESSIONS} more sessions"
        if not self.sessions_known:
            shown = (shown + "; " if shown else "") + "other sessions unknown (the index does not cover them)"
        return f"{span} ({self.where}): {shown or 'no session known'}"


def _subtract(first: int, last: int, covered: Iterable[tuple[int, int]]) -> list[tuple[int, int, bool]]:
    """first..last cut into pieces (first, last, covered?) by the inclusive ranges `covered`."""
    pieces: list[tuple[int, int, bool]] = []
    cursor = first
    for low, high in sorted(covered):
        if high < cursor or low > last:
            continue
        if low > cursor:
            pieces.append((cursor, low - 1, False))
        pieces.append((max(cursor, low), min(high, last), True))
        cursor = min(high, last) + 1
        if cursor > last:
            break
    if cursor <= last:
        pieces.append((cursor, last, False))
    return pieces


def missing_ranges(
    log_dir: Path, segments: Sequence[int], log_next: int, tail_in_acked: bool, evidence: Evidence
) -> list[tuple[int, int, str]]:
    """Acknowledged positions no line holds, as (first, last, what the log shows there).

    `log_next` is the position after the last line the last segment holds
    (its own first position when it holds none); `tail_in_acked` says
    invalid bytes end the log before the acknowledged end. The segments
    between are checked from their ends (`segment_end`: one read each).
    """
    found: list[tuple[int, int, str]] = []
    if not segments:
        if evidence.next_pos:
            found.append((0, evidence.next_pos - 1, "the log holds no segment"))
        return found
    if segments[0] > 0:
        found.append((0, segments[0] - 1, f"no segment holds them: the first is {segment_name(segments[0])}"))
    for first, following in itertools.pairwise(segments):
        end = segment_end(log_dir / segment_name(first), first)
        if end is not None and end < following:
            shown = "holds no line" if end == first else f"ends at pos {end - 1}"
            found.append(
                (
                    end,
                    following - 1,
                    f"segment {segment_name(first)} {shown}; the next segment starts at pos {following}",
                )
            )
    target = evidence.next_pos
    if tail_in_acked:
        target = max(target, log_next + 1)
    if log_next < target:
        last = segment_name(segments[-1])
        shown = (
            f"the log ends at pos {log_next - 1} in {last}"
            if log_next > segments[-1]
            else f"the last segment, {last}, holds no line"
        )
        if tail_in_acked:
            shown += ", then invalid bytes"
        found.append(
            (
                log_next,
                target - 1,
                f"{shown}; acknowledged through pos {evidence.next_pos - 1} by "
                + ", ".join(evidence.sources),
            )
        )
    return found


def find_losses(
    log_dir: Path,
    segments: Sequence[int],
    log_next: int,
    evidence: Evidence,
    names: Index | None,
    *,
    tail_in_acked: bool = False,
) -> list[Loss]:
    """Every missing range of acknowledged positions, split by what the operator accepted.

    Unaccepted ranges name the sessions and seqs the index `names` holds
    for them (when there is an index and it covers them).
    """
    losses: list[Loss] = []
    accepted = evidence.accepted_ranges
    meta = names.meta() if names is not None else None
    for first, last, where in missing_ranges(log_dir, segments, log_next, tail_in_acked, evidence):
        for low, high, was_accepted in _subtract(first, last, accepted):
            if was_accepted:
                records = [
                    r
                    for r in evidence.accepted
                    if any(span.first_pos <= high and low <= span.last_pos for span in r.ranges)
                ]
                sessions = tuple(session for record in records for session in record.sessions)
                known = all(record.sessions_known for record in records)
                losses.append(
                    Loss(
                        first_pos=low,
                        last_pos=high,
                        where=where,
                        sessions=sessions,
                        sessions_known=known,
                        accepted=True,
                    )
                )
                continue
            sessions = name_sessions(names, low, high) if names is not None else ()
            known = meta is not None and meta.next_pos > high
            losses.append(
                Loss(first_pos=low, last_pos=high, where=where, sessions=sessions, sessions_known=known)
            )
    return losses


def name_sessions(index: Index, first_pos: int, last_pos: int) -> tuple[SessionLoss, ...]:
    """The sessions (and their seqs) whose lines the index places at positions first_pos..last_pos."""
    named: list[SessionLoss] = []
    for summary in index.summaries():
        if summary.last_pos < first_pos:
            continue
        seqs = index.seqs_at_positions(summary.sid, first_pos, last_pos)
        if seqs is not None:
            named.append(SessionLoss(sid=summary.sid, first_seq=seqs[0], last_seq=seqs[1]))
    return tuple(named)


def missing_error(root: Path, losses: Sequence[Loss]) -> AcknowledgedDataMissing:
    """The error a writer's open raises for unaccepted `losses`, naming them."""
    unaccepted = [loss for loss in losses if not loss.accepted]
    listed = "; ".join(loss.describe() for loss in unaccepted)
    return AcknowledgedDataMissing(
        f"acknowledged lines are missing from the log of {root}: {listed}. The store is not opened for "
        "writing; read-only opens and `cairn verify` show what is left, and `cairn repair --accept-loss` "
        "records the loss so that writers may continue past it",
        unaccepted,
    )


def accepted_covers(evidence: Evidence, low: int, high: int) -> bool:
    """Whether some position strictly between `low` and `high` lies in an accepted loss."""
    return any(first < high and last > low for first, last in evidence.accepted_ranges)
