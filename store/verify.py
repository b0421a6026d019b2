"""`verify_store`: the offline check of a whole store, changing nothing.

`verify_store` reads every line of the log and reports, naming segment, byte
offset and session:

- problems (`ok` is False, `cairn verify` exits 1): bad frames, checksums
  and bodies -- a whole last line with a wrong checksum included, which is
  corruption, not a torn tail; position gaps; seq gaps and duplicates per
  session; broken hash chains; blobs that are missing or altered;
  acknowledged lines the log no longer holds (`acknowledged-missing`, with
  the sessions, seqs and positions, see `store.loss`); entries cairn did not
  make in `log/` or in place of its own files (`unexpected-entry`); an
  index that disagrees with the lines it claims to cover (`index-differs`,
  in terms of sessions, seqs and positions) or whose recovery point the
  log cannot back (`index-point`).
- warnings: a torn tail past what was acknowledged (the bytes of a write a
  crash interrupted, cut at the next open, or a write in progress); a loss
  an operator accepted, and the seq gaps it explains; no index; evidence
  that cannot be read; store files others can reach.
- information: an index that lags the log (after a crash between the log's
  fsync and the index's commit, or while a writer appends) -- how many
  lines, positions and bytes; a writer indexes them.

It changes nothing and takes no lock, so it may run beside a writer: it
reads the index and the evidence of what was acknowledged first, then the
log, so that lines a writer appends meanwhile are only ever past them.

The checks, in order: the layout of cairn's own entries; the index, read
in one transaction (`store.verify_index`); the evidence and the segments;
one pass over the log (`_LogCheck`: frames, checksums, bodies, positions,
seqs, chains, blobs); the torn tail; the losses and the gaps they explain
(`store.verify_losses`);
the index against the lines it covers; the modes of the store's files.
`reindex` (the index rebuilt from the log) is in `store.reindex`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

import msgspec

from cairn.events.codec import GENESIS, Envelope, ts_in_range
from cairn.store.ack_mark import ACK_MARK
from cairn.store.blobs import BlobStore, blob_refs
from cairn.store.errors import UnexpectedEntry
from cairn.store.files import check_dir, loose_modes
from cairn.store.loss import OPERATOR_LOG, QUARANTINE, gather_evidence
from cairn.store.reader import LogLine, Progress, guess_owner, scan_log, split_tail
from cairn.store.segments import read_log_dir, segment_name
from cairn.store.verify_index import IndexLag, Rebuild, check_index, index_owners, snapshot_index
from cairn.store.verify_losses import report_losses
from cairn.store.verify_report import Problem, VerifyReport

_OWN_DIRS = ("log", "index", "blobs", QUARANTINE)
_OWN_FILES = ("LOCK", ACK_MARK, OPERATOR_LOG)


def verify_store(root: str | os.PathLike[str], progress: Progress | None = None) -> VerifyReport:
    """Check the whole store at `root` (see the module doc): the named checks below, in order."""
    path = Path(root)
    report = VerifyReport(root=str(path))
    _check_layout(path, report)
    if (path / "log").is_symlink():
        return report  # named by the layout check: the store's log is not read through a link
    # the index and the evidence first, the log after: a live writer's later lines are then past them
    snapshot = snapshot_index(path, report)  # a copy on disk, removed below
    rebuild: Rebuild | None = None
    try:
        evidence = gather_evidence(path, snapshot.meta if snapshot is not None else None)
        segments = _check_log_dir(path, report)
        evidence = evidence.with_segments(segments)
        for trouble in evidence.troubles:
            report.warnings.append(Problem(code="evidence", message=trouble))
        meta = snapshot.meta if snapshot is not None else None
        point = (meta.segment, meta.offset) if meta else None
        # one pass over the log: the checks below, and the index rebuilt through the point to compare with
        rebuild = Rebuild(path, segments, point) if point is not None else None
        scan = _LogCheck(path, report, point).run(segments, progress, rebuild)
        tail_in_acked = evidence.reaches(scan.tail_at)
        _report_torn_tail(scan, tail_in_acked, report)
        report_losses(path, segments, tail_in_acked, evidence, report, scan)
        check_index(path, segments, snapshot, scan.lag, report, rebuild)
    finally:
        if rebuild is not None:
            rebuild.close()
        if snapshot is not None:
            snapshot.close()
    _check_modes(path, segments, report)
    return report


def _check_layout(root: Path, report: VerifyReport) -> None:
    """Links or entries of the wrong type where cairn keeps its own directories and files."""
    for name in _OWN_DIRS:
        try:
            check_dir(root / name)
        except UnexpectedEntry as exc:
            report.problems.append(Problem(code="unexpected-entry", segment=name, message=str(exc)))
    for name in _OWN_FILES:
        try:
            mode = os.lstat(root / name).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            report.problems.append(
                Problem(
                    code="unexpected-entry",
                    segment=name,
                    message="not a regular file where cairn keeps one of its own",
                )
            )


def _check_log_dir(root: Path, report: VerifyReport) -> list[int]:
    """The segments of `log/`; every other entry is a problem (never opened)."""
    listing = read_log_dir(root / "log")
    report.segments = len(listing.segments)
    for name, what in listing.unexpected:
        report.problems.append(
            Problem(
                code="unexpected-entry",
                segment=f"log/{name}",
                message=f"{what}: not a segment; cairn never opens it, and a writer "
                "will not open the store while it is there",
            )
        )
    return listing.segments


class LogScan(msgspec.Struct, frozen=True):
    """What the pass over the log saw, for the checks that follow it."""

    #: the position after the last line (whole corrupt lines at the end hold one each)
    next_pos: int
    #: the invalid pieces that end the last segment after its last whole one, and where they start
    torn: tuple[LogLine, ...]
    tail_at: tuple[int, int] | None
    #: sound lines at or past the index's recovery point
    lag: IndexLag
    #: position gaps (problem, first missing, last missing) and seq gaps (problem, pos before, pos after)
    pos_gaps: tuple[tuple[Problem, int, int], ...]
    seq_gaps: tuple[tuple[Problem, int, int], ...]


class _SessionCheck:
    __slots__ = ("digest", "pos", "seq")

    def __init__(self) -> None:
        self.seq = 0
        self.pos = -1
        self.digest = GENESIS


class _LogCheck:
    """The pass over the log: every piece's frame, checksum and body, positions, seqs, chains and blobs.

    Problems go straight into the report; what later checks need (gaps a
    loss may explain, the torn tail, the index's lag) comes back as a
    `LogScan`. Lines at or past `point` (the index's recovery point) are
    counted as the index's lag.
    """

    def __init__(self, root: Path, report: VerifyReport, point: tuple[int, int] | None) -> None:
        self.root = root
        self.report = report
        self.point = point
        self.next_pos = 0
        self.expected_pos: int | None = None
        self.lag_lines = self.lag_bytes = 0
        self.lag_positions = (0, 0)
        self.pos_gaps: list[tuple[Problem, int, int]] = []
        self.seq_gaps: list[tuple[Problem, int, int]] = []
        self.sessions: dict[str, _SessionCheck] = {}
        self.blobs = BlobStore(root)
        self.checked_blobs: dict[tuple[str, int], str | None] = {}
        self.owners: dict[tuple[int, int], tuple[str, int]] | None = None

    def run(self, segments: list[int], progress: Progress | None, rebuild: Rebuild | None = None) -> LogScan:
        """Read every piece of `segments`: invalid ones are corrupt lines, but for a torn tail at the end.

        With `rebuild`, the same pass rebuilds the index through its point (`Rebuild.tee`).
        """
        self.pending: list[LogLine] = []
        self.current_segment: int | None = None
        lines = scan_log(self.root / "log", progress=progress, segments=segments)
        if rebuild is not None:
            rebuild.tee(lines, self.take)
        else:
            for line in lines:
                self.take(line)
        return self.finish(segments, self.pending)

    def take(self, line: LogLine) -> None:
        """One piece, in log order."""
        pending = self.pending
        self.report.bytes += len(line.raw)
        if line.segment != self.current_segment:
            if pending:
                self.corrupt(pending)
                pending.clear()
            self.current_segment = line.segment
            self.expected_pos = line.segment if self.expected_pos is None else self.expected_pos
        env = line.envelope
        if env is None:
            if line.framed:
                self.corrupt(pending)
                pending.clear()
                self.corrupt([line])
            else:
                pending.append(line)
            return
        if pending:
            self.corrupt(pending)
            pending.clear()
        self.line(line, env)

    def corrupt(self, bad_pieces: Iterable[LogLine]) -> None:
        """Report invalid pieces as corrupt lines, naming their sessions where the line or the index can."""
        for bad in bad_pieces:
            self.expected_pos = None  # the bad pieces account for the positions they held
            sid, seq = guess_owner(bad.raw)
            if not sid:
                if self.owners is None:
                    self.owners = index_owners(self.root)
                sid, seq = self.owners.get((bad.segment, bad.offset), ("", 0))
            self.report.problems.append(
                Problem(
                    code="corrupt-line",
                    message=bad.error,
                    segment=segment_name(bad.segment),
                    offset=bad.offset,
                    sid=sid,
                    seq=seq,
                )
            )

    def line(self, line: LogLine, env: Envelope) -> None:
        """One sound line: its position, its session's seq and chain, its blobs; past the point, lag."""
        report = self.report
        report.lines += 1
        self.next_pos = max(self.next_pos, env.pos + 1)
        if self.point is not None and (line.segment, line.offset) >= self.point:
            if not self.lag_lines:
                self.lag_positions = (env.pos, env.pos)
            self.lag_lines += 1
            self.lag_bytes += line.length
            self.lag_positions = (self.lag_positions[0], env.pos)
        if line.offset == 0 and env.pos != line.segment:
            report.problems.append(
                _at(line, env, "segment-name", f"segment named {line.segment} starts at pos {env.pos}")
            )
        if not ts_in_range(env.ts):
            report.problems.append(_at(line, env, "bad-ts", f"ts {env.ts} is outside 0..2**63-1 unix ms"))
        expected = self.expected_pos
        if expected is not None and env.pos != expected:
            gap = _at(line, env, "pos-gap", f"pos {env.pos} where {expected} was expected")
            if env.pos > expected:
                self.pos_gaps.append((gap, expected, env.pos - 1))
            else:
                report.problems.append(gap)
        self.expected_pos = env.pos + 1
        if line.record is None:
            report.problems.append(_at(line, env, "bad-event", line.error))
        if self.session_order(line, env) and line.record is not None:
            for ref in blob_refs(line.record.event):
                key = (ref.sha256, ref.size)
                if key not in self.checked_blobs:
                    self.checked_blobs[key] = self.blobs.problem(ref.sha256, ref.size)
                trouble = self.checked_blobs[key]
                if trouble is not None:
                    report.problems.append(_at(line, env, "blob", trouble))

    def session_order(self, line: LogLine, env: Envelope) -> bool:
        """The line's seq and chain within its session; False for a duplicate seq (the line is skipped)."""
        check = self.sessions.get(env.sid)
        if check is None:
            check = self.sessions[env.sid] = _SessionCheck()
        if env.seq <= check.seq:
            duplicate = _at(line, env, "seq-duplicate", f"seq {env.seq} after seq {check.seq}")
            self.report.problems.append(duplicate)
            return False
        if env.seq != check.seq + 1:
            gap = _at(line, env, "seq-gap", f"seq {env.seq} follows seq {check.seq}")
            self.seq_gaps.append((gap, check.pos, env.pos))
        elif env.prev != check.digest:
            broken = _at(line, env, "chain", "prev does not name the session's previous line")
            self.report.problems.append(broken)
        check.seq = env.seq
        check.pos = env.pos
        check.digest = line.digest
        return True

    def finish(self, segments: list[int], pending: list[LogLine]) -> LogScan:
        """Judge the invalid pieces the log ends with (`split_tail`) and sum up the pass."""
        last = segments[-1] if segments else None
        if pending and pending[0].segment != last:
            self.corrupt(pending)
            pending = []
        corrupt, torn = split_tail(pending)
        self.corrupt(corrupt)
        self.report.sessions = len(self.sessions)
        self.report.blobs = len(self.checked_blobs)
        return LogScan(
            next_pos=self.next_pos + len(corrupt),
            torn=tuple(torn),
            tail_at=(torn[0].segment, torn[0].offset) if torn else None,
            lag=IndexLag(self.lag_lines, self.lag_bytes, self.lag_positions),
            pos_gaps=tuple(self.pos_gaps),
            seq_gaps=tuple(self.seq_gaps),
        )


def _at(line: LogLine, env: Envelope, code: str, message: str) -> Problem:
    """A problem of one sound line, placed at its segment, offset, session and seq."""
    return Problem(
        code=code,
        message=message,
        segment=segment_name(line.segment),
        offset=line.offset,
        sid=env.sid,
        seq=env.seq,
    )


def _report_torn_tail(scan: LogScan, tail_in_acked: bool, report: VerifyReport) -> None:
    """A torn tail past what was acknowledged is a warning (within acknowledged bytes it is a loss)."""
    if tail_in_acked:
        return
    for bad in scan.torn:
        report.warnings.append(
            Problem(
                code="torn-tail",
                segment=segment_name(bad.segment),
                offset=bad.offset,
                message=f"{bad.length} bytes past what was acknowledged (a write a crash interrupted, cut "
                f"at the next open, or one in progress): {bad.error}",
            )
        )


def _check_modes(root: Path, segments: list[int], report: VerifyReport) -> None:
    """Store directories and files others than the owner can reach (cairn makes them 0700 / 0600)."""
    names = (
        *_OWN_DIRS,
        *_OWN_FILES,
        "index/data.mdb",
        "index/lock.mdb",
        *(f"log/{segment_name(first)}" for first in segments),
    )
    loose = loose_modes(root, names)
    if loose:
        shown = ", ".join(loose[:6]) + (f" and {len(loose) - 6} more" if len(loose) > 6 else "")
        report.warnings.append(
            Problem(
                code="permissions",
                message=(
                    f"store entries others can reach: {shown}; they carry conversation data (cairn makes its "
                    "directories 0700 and files 0600; chmod go-rwx to close them)"
                ),
            )
        )
