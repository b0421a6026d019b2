"""`verify_store` and `reindex`: the offline checks and the index rebuild.

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

`reindex` rebuilds the index from nothing under the writer lock (so no
writer may run) and swaps it in; the result equals an index kept up to date
by appends (`index_dump` shows both). It refuses while acknowledged lines
are missing and not accepted: the old index is what names their sessions.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

import msgspec

from cairn.events.codec import GENESIS
from cairn.store.blobs import BlobStore, blob_refs
from cairn.store.errors import IndexUnusable, UnexpectedEntry
from cairn.store.files import check_dir, loose_modes
from cairn.store.index import Index
from cairn.store.index_pass import rebuild_through
from cairn.store.index_records import IndexMeta, decode_meta, explain_entry
from cairn.store.lock import take_lock
from cairn.store.loss import ACK_MARK, OPERATOR_LOG, QUARANTINE, Evidence, Loss, find_losses, gather_evidence
from cairn.store.reader import LogLine, Progress, guess_owner, scan_log, split_tail
from cairn.store.recovery import Recovery, point_doubt, recover
from cairn.store.segments import fsync_dir, read_log_dir, segment_name

_SHOWN_SESSIONS = 20
_SHOWN_PER_SESSION = 3
_OWN_DIRS = ("log", "index", "blobs", QUARANTINE)
_OWN_FILES = ("LOCK", ACK_MARK, OPERATOR_LOG)


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """One finding: what (`code`, `message`) and where (segment, offset, session)."""

    code: str
    message: str
    segment: str = ""
    offset: int = -1
    sid: str = ""
    seq: int = 0

    def __str__(self) -> str:
        where = f"{self.segment}@{self.offset}" if self.segment and self.offset >= 0 else self.segment
        who = f"session {self.sid}" if self.sid else ""
        seq = f"seq {self.seq}" if self.seq else ""
        place = " ".join(part for part in (where, who, seq) if part)
        return f"{place + ': ' if place else ''}[{self.code}] {self.message}"


class VerifyReport(msgspec.Struct, kw_only=True):
    """What `verify_store` found; `ok` when there is no problem (warnings and information allowed)."""

    root: str
    segments: int = 0
    lines: int = 0
    bytes: int = 0
    sessions: int = 0
    blobs: int = 0
    index_checked: bool = False
    #: lines of the log past the index's recovery point (an index that lags), and their bytes
    index_lag_lines: int = 0
    index_lag_bytes: int = 0
    problems: list[Problem] = []
    warnings: list[Problem] = []
    info: list[Problem] = []
    #: acknowledged positions the log does not hold, accepted or not
    losses: list[Loss] = []

    @property
    def ok(self) -> bool:
        return not self.problems


class _SessionCheck:
    __slots__ = ("digest", "pos", "seq")

    def __init__(self) -> None:
        self.seq = 0
        self.pos = -1
        self.digest = GENESIS


class _Snapshot(msgspec.Struct):
    """The store's index as one read transaction saw it: every entry, and its recovery point."""

    rows: list[tuple[str, bytes, bytes]]
    meta: IndexMeta | None


def verify_store(root: str | os.PathLike[str], progress: Progress | None = None) -> VerifyReport:
    """Check the whole store at `root` (see the module doc)."""
    path = Path(root)
    log_dir = path / "log"
    report = VerifyReport(root=str(path))
    _check_layout(path, report)
    if log_dir.is_symlink():
        return report  # named by the layout check: the store's log is not read through a link
    # the index and the evidence first, the log after: a live writer's later lines are then past them
    snapshot = _snapshot(path, report)
    evidence = gather_evidence(path, snapshot.meta if snapshot is not None else None)
    listing = read_log_dir(log_dir)
    segments = listing.segments
    evidence = evidence.with_segments(segments)
    report.segments = len(segments)
    for name, what in listing.unexpected:
        report.problems.append(Problem(code="unexpected-entry", segment=f"log/{name}",
                                       message=f"{what}: not a segment; cairn never opens it, and a writer "
                                       "will not open the store while it is there"))
    for trouble in evidence.troubles:
        report.warnings.append(Problem(code="evidence", message=trouble))
    point = (snapshot.meta.segment, snapshot.meta.offset) if snapshot is not None and snapshot.meta else None
    scan = _scan(path, segments, report, progress, point)
    log_next = max(scan.next_pos, segments[-1] if segments else 0)
    tail_in_acked = scan.tail_at is not None and scan.tail_at < evidence.end
    if scan.torn and not tail_in_acked:
        for bad in scan.torn:
            report.warnings.append(Problem(
                code="torn-tail", segment=segment_name(bad.segment), offset=bad.offset,
                message=f"{bad.length} bytes past what was acknowledged (a write a crash interrupted, cut "
                f"at the next open, or one in progress): {bad.error}",
            ))
    _report_losses(path, segments, log_next, tail_in_acked, evidence, report, scan)
    _check_index(path, segments, snapshot, scan, report)
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
            report.problems.append(Problem(code="unexpected-entry", segment=name,
                                           message="not a regular file where cairn keeps one of its own"))


def _snapshot(root: Path, report: VerifyReport) -> _Snapshot | None:
    """The store's index, read in one transaction (None, with a warning or problem, when there is none)."""
    if (root / "index").is_symlink():
        return None  # named by the layout check; never read through
    if not (root / "index" / "data.mdb").exists():
        report.warnings.append(Problem(code="index-missing",
                                       message="no index; it is rebuilt at the next open"))
        return None
    try:
        index = Index(root / "index", readonly=True)
    except IndexUnusable as exc:
        report.problems.append(Problem(code="index-unreadable", message=str(exc)))
        return None
    except UnexpectedEntry as exc:
        report.problems.append(Problem(code="unexpected-entry", segment="index", message=str(exc)))
        return None
    try:
        rows = index.dump()
    finally:
        index.close()
    through = [value for db, key, value in rows if db == "meta" and key == b"through"]
    return _Snapshot(rows, decode_meta(through[0]) if through else None)


class _Scan:
    """What the pass over the log saw, for the checks that follow it."""

    def __init__(self) -> None:
        #: the position after the last line (whole corrupt lines at the end hold one each)
        self.next_pos = 0
        #: the invalid pieces that end the last segment after its last whole one, and where they start
        self.torn: list[LogLine] = []
        self.tail_at: tuple[int, int] | None = None
        #: sound lines at or past the index's recovery point: how many, their bytes, first and last pos
        self.lag_lines = 0
        self.lag_bytes = 0
        self.lag_positions = (0, 0)
        #: position gaps (problem, first missing, last missing) and seq gaps (problem, pos before, pos after)
        self.pos_gaps: list[tuple[Problem, int, int]] = []
        self.seq_gaps: list[tuple[Problem, int, int]] = []


def _scan(
    root: Path,
    segments: list[int],
    report: VerifyReport,
    progress: Progress | None,
    point: tuple[int, int] | None,
) -> _Scan:
    """Read every line of `segments`: frames, checksums, bodies, positions, seqs, chains, blobs.

    Lines at or past `point` (the index's recovery point) are counted as the index's lag.
    """
    log_dir = root / "log"
    result = _Scan()
    blobs = BlobStore(root)
    checked_blobs: dict[tuple[str, int], str | None] = {}
    sessions: dict[str, _SessionCheck] = {}
    pending: list[LogLine] = []
    expected_pos: int | None = None
    current_segment: int | None = None
    owners: dict[tuple[int, int], tuple[str, int]] | None = None

    def owner(bad: LogLine) -> tuple[str, int]:
        nonlocal owners
        sid, seq = guess_owner(bad.raw)
        if sid:
            return sid, seq
        if owners is None:
            owners = _index_owners(root)
        return owners.get((bad.segment, bad.offset), ("", 0))

    def flush(bad_pieces: Iterable[LogLine]) -> None:
        nonlocal expected_pos
        for bad in bad_pieces:
            expected_pos = None  # the bad pieces account for the positions they held
            sid, seq = owner(bad)
            where = segment_name(bad.segment)
            report.problems.append(Problem(code="corrupt-line", message=bad.error, segment=where,
                                           offset=bad.offset, sid=sid, seq=seq))

    for line in scan_log(log_dir, progress=progress, segments=segments):
        report.bytes += line.length
        if line.segment != current_segment:
            flush(pending)
            pending.clear()
            current_segment = line.segment
            expected_pos = line.segment if expected_pos is None else expected_pos
        env = line.envelope
        if env is None:
            if line.framed:
                flush(pending)
                pending.clear()
                flush([line])
            else:
                pending.append(line)
            continue
        flush(pending)
        pending.clear()
        report.lines += 1
        seg_name = segment_name(line.segment)
        result.next_pos = max(result.next_pos, env.pos + 1)
        if point is not None and (line.segment, line.offset) >= point:
            if not result.lag_lines:
                result.lag_positions = (env.pos, env.pos)
            result.lag_lines += 1
            result.lag_bytes += line.length
            result.lag_positions = (result.lag_positions[0], env.pos)

        def problem(code: str, message: str, seg: str = seg_name, off: int = line.offset,
                    sid: str = env.sid, seq: int = env.seq) -> Problem:
            return Problem(code=code, message=message, segment=seg, offset=off, sid=sid, seq=seq)

        if line.offset == 0 and env.pos != line.segment:
            report.problems.append(
                problem("segment-name", f"segment named {line.segment} starts at pos {env.pos}")
            )
        if expected_pos is not None and env.pos != expected_pos:
            gap = problem("pos-gap", f"pos {env.pos} where {expected_pos} was expected")
            if env.pos > expected_pos:
                result.pos_gaps.append((gap, expected_pos, env.pos - 1))
            else:
                report.problems.append(gap)
        expected_pos = env.pos + 1
        if line.record is None:
            report.problems.append(problem("bad-event", line.error))
        check = sessions.get(env.sid)
        if check is None:
            check = sessions[env.sid] = _SessionCheck()
        if env.seq <= check.seq:
            report.problems.append(
                problem("seq-duplicate", f"seq {env.seq} after seq {check.seq}")
            )
            continue
        if env.seq != check.seq + 1:
            gap = problem("seq-gap", f"seq {env.seq} follows seq {check.seq}")
            result.seq_gaps.append((gap, check.pos, env.pos))
        elif env.prev != check.digest:
            report.problems.append(
                problem("chain", "prev does not name the session's previous line")
            )
        check.seq = env.seq
        check.pos = env.pos
        check.digest = line.digest
        if line.record is not None:
            for ref in blob_refs(line.record.event):
                key = (ref.sha256, ref.size)
                if key not in checked_blobs:
                    checked_blobs[key] = blobs.problem(ref.sha256, ref.size)
                trouble = checked_blobs[key]
                if trouble is not None:
                    report.problems.append(problem("blob", trouble))
    last = segments[-1] if segments else None
    if pending and pending[0].segment != last:
        flush(pending)
        pending.clear()
    corrupt, torn = split_tail(pending)
    flush(corrupt)
    result.next_pos += len(corrupt)
    result.torn = torn
    result.tail_at = (torn[0].segment, torn[0].offset) if torn else None
    report.sessions = len(sessions)
    report.blobs = len(checked_blobs)
    return result


def _report_losses(
    root: Path, segments: list[int], log_next: int, tail_in_acked: bool, evidence: Evidence,
    report: VerifyReport, scan: _Scan,
) -> None:
    """Acknowledged positions the log does not hold (problems), those accepted (warnings), and the gaps
    they explain."""
    names: Index | None = None
    try:
        names = Index(root / "index", readonly=True)
    except (IndexUnusable, UnexpectedEntry):
        names = None
    try:
        losses = find_losses(root / "log", segments, log_next, evidence, names, tail_in_acked=tail_in_acked)
    finally:
        if names is not None:
            names.close()
    report.losses = losses
    for loss in losses:
        if loss.accepted:
            report.warnings.append(Problem(code="accepted-loss",
                                           message=f"{loss.describe()}; {_who(loss, evidence)}"))
            continue
        report.problems.append(Problem(code="acknowledged-missing", message=(
            f"{loss.describe()}. Acknowledged lines are gone: a writer will not open the store until an "
            "operator accepts the loss (cairn repair --accept-loss)"
        )))
        for session in loss.sessions[:_SHOWN_SESSIONS]:
            report.problems.append(Problem(
                code="acknowledged-missing", sid=session.sid, seq=session.first_seq,
                message=f"{session} (within positions {loss.first_pos}-{loss.last_pos}) acknowledged, not in "
                "the log",
            ))
    spans = [(loss.first_pos, loss.last_pos) for loss in losses]
    for gap, first, last in scan.pos_gaps:
        if not any(low <= first and last <= high for low, high in _merged(spans)):
            report.problems.append(gap)
    accepted = [(loss.first_pos, loss.last_pos) for loss in losses if loss.accepted]
    for gap, before, after in scan.seq_gaps:
        if any(low < after and high > before for low, high in accepted):  # lines between were lost
            report.warnings.append(msgspec.structs.replace(
                gap, message=gap.message + " (the seqs between were lost in a loss an operator accepted; "
                "the session stays unreadable past the gap)"))
        else:
            report.problems.append(gap)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _who(loss: Loss, evidence: Evidence) -> str:
    """Who accepted `loss`, when and why, from the operator log."""
    for record in evidence.accepted:
        if any(span.first_pos <= loss.last_pos and loss.first_pos <= span.last_pos for span in record.ranges):
            when = dt.datetime.fromtimestamp(record.ts / 1000, tz=dt.UTC).isoformat(timespec="seconds")
            why = f" ({record.reason})" if record.reason else ""
            return f"accepted by {record.user or 'an operator'} at {when}{why}"
    return "accepted"


def _index_owners(root: Path) -> dict[tuple[int, int], tuple[str, int]]:
    """(segment, offset) -> (sid, seq) from the index, to name the session of an unreadable line."""
    try:
        index = Index(root / "index", readonly=True)
    except (IndexUnusable, UnexpectedEntry):
        return {}
    try:
        owners: dict[tuple[int, int], tuple[str, int]] = {}
        for db, key, value in index.dump():
            if db == "events":  # sid, NUL, then 8 bytes of seq (which may hold NULs too)
                sid, seq = key[:-9], key[-8:]
                segment, offset = int.from_bytes(value[:8], "big"), int.from_bytes(value[8:16], "big")
                owners[(segment, offset)] = (sid.decode(), int.from_bytes(seq, "big"))
        return owners
    finally:
        index.close()


def _check_index(
    root: Path, segments: list[int], snapshot: _Snapshot | None, scan: _Scan, report: VerifyReport
) -> None:
    """The index against the lines it claims to cover; what lies past its point is lag, not a problem."""
    if snapshot is None:
        return
    meta = snapshot.meta
    if meta is None:
        report.warnings.append(Problem(code="index-empty",
                                       message="the index covers nothing yet; it is built at the next open"))
        return
    if any(not loss.accepted and loss.first_pos < meta.next_pos for loss in report.losses):
        report.info.append(Problem(code="index-not-compared", message=(
            "the index covers acknowledged lines the log lost (acknowledged-missing); it is compared with "
            "the log once the loss is accepted")))
        return
    reason = point_doubt(root / "log", segments, meta)
    last_line = (segment_name(meta.last_segment), meta.last_offset)
    if reason and any(p.code == "corrupt-line" and (p.segment, p.offset) == last_line
                      for p in report.problems):
        report.info.append(Problem(code="index-not-compared", message=(
            "the last line the index covers is corrupt (corrupt-line); a writer's next open rebuilds the "
            "index")))
        return
    if reason:
        report.problems.append(Problem(code="index-point", message=(
            f"the index claims lines the log does not back ({reason}); a writer's next open rebuilds it "
            "once any loss is accepted")))
        return
    point = (meta.segment, meta.offset)
    fresh = _fresh_dump(root, segments, point)
    report.index_checked = True
    current = [row for row in snapshot.rows if not (row[0] == "meta" and row[1] == b"through")]
    fresh = [row for row in fresh if not (row[0] == "meta" and row[1] == b"through")]
    if current != fresh:
        _report_differences(current, fresh, point, report)
    if scan.lag_lines:
        report.index_lag_lines = scan.lag_lines
        report.index_lag_bytes = scan.lag_bytes
        first, last = scan.lag_positions
        report.info.append(Problem(code="index-lag", message=(
            f"the index covers the log through pos {meta.next_pos - 1} "
            f"({segment_name(point[0])}@{point[1]}); {scan.lag_lines} lines past it "
            f"(positions {first}-{last}, {scan.lag_bytes} bytes) are not indexed yet: a writer indexes them "
            "as it commits, or at its next open"
        )))


def _report_differences(
    current: list[tuple[str, bytes, bytes]], fresh: list[tuple[str, bytes, bytes]], point: tuple[int, int],
    report: VerifyReport,
) -> None:
    """Where the index and a rebuild through the same point disagree, per session, in the log's terms."""
    have = {(db, key): value for db, key, value in current}
    want = {(db, key): value for db, key, value in fresh}
    by_session: dict[str, list[tuple[int, str]]] = {}
    for db_key in sorted(set(have) | set(want)):
        if have.get(db_key) == want.get(db_key):
            continue
        db, key = db_key
        sid, seq, in_index = explain_entry(db, key, have.get(db_key))
        _, _, in_log = explain_entry(db, key, want.get(db_key))
        by_session.setdefault(sid, []).append((seq, f"the index has {in_index}; the log has {in_log}"))
    where = f"{segment_name(point[0])}@{point[1]}"
    for sid, found in list(by_session.items())[:_SHOWN_SESSIONS]:
        shown = "; ".join(text for _, text in found[:_SHOWN_PER_SESSION])
        more = f"; and {len(found) - _SHOWN_PER_SESSION} more" if len(found) > _SHOWN_PER_SESSION else ""
        report.problems.append(Problem(
            code="index-differs", sid=sid, seq=min((seq for seq, _ in found if seq), default=0),
            message=f"the index disagrees with the log it covers (through {where}): {shown}{more}",
        ))
    if len(by_session) > _SHOWN_SESSIONS:
        report.problems.append(Problem(code="index-differs", message=(
            f"and {len(by_session) - _SHOWN_SESSIONS} more sessions whose index entries disagree with the log"
        )))


def _fresh_dump(root: Path, segments: list[int], point: tuple[int, int]) -> list[tuple[str, bytes, bytes]]:
    scratch = Path(tempfile.mkdtemp(prefix="cairn-verify-"))
    try:
        index = Index(scratch / "index")
        try:
            rebuild_through(root, index, segments, point)
            return index.dump()
        finally:
            index.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_modes(root: Path, segments: list[int], report: VerifyReport) -> None:
    """Store directories and files others than the owner can reach (cairn makes them 0700 / 0600)."""
    names = (*_OWN_DIRS, *_OWN_FILES, "index/data.mdb", "index/lock.mdb",
             *(f"log/{segment_name(first)}" for first in segments))
    loose = loose_modes(root, names)
    if loose:
        shown = ", ".join(loose[:6]) + (f" and {len(loose) - 6} more" if len(loose) > 6 else "")
        report.warnings.append(Problem(code="permissions", message=(
            f"store entries others can reach: {shown}; they carry conversation data (cairn makes its "
            "directories 0700 and files 0600; chmod go-rwx to close them)"
        )))


def index_dump(root: str | os.PathLike[str]) -> list[tuple[str, bytes, bytes]]:
    """Every (db, key, value) of the store's index, in order (raises IndexUnusable)."""
    index = Index(Path(root) / "index", readonly=True)
    try:
        return index.dump()
    finally:
        index.close()


def reindex(root: str | os.PathLike[str], progress: Progress | None = None) -> Recovery:
    """Rebuild the index of the store at `root` from nothing and swap it in.

    Takes the writer lock (`StoreLocked` while a writer runs). The log is not
    changed: a torn tail is left for the next open to cut. Refuses with
    `AcknowledgedDataMissing` while acknowledged lines are missing and no
    operator accepted their loss (the old index names their sessions), and
    with `UnexpectedEntry` for entries cairn did not make.
    """
    path = Path(root)
    if not check_dir(path / "log"):
        raise IndexUnusable(f"no cairn store at {path}")
    lock_fd = take_lock(path)
    try:
        return reindex_locked(path, progress)
    finally:
        os.close(lock_fd)


def reindex_locked(path: Path, progress: Progress | None = None) -> Recovery:
    """`reindex`, for a caller that holds the writer lock."""
    listing = read_log_dir(path / "log")
    if listing.unexpected:
        raise UnexpectedEntry(f"the log of {path} holds entries that are not segments: "
                              f"{'; '.join(listing.describe_unexpected())}", listing.describe_unexpected())
    check_dir(path / "index")
    witness: Index | None = None
    if (path / "index" / "data.mdb").exists():
        try:
            witness = Index(path / "index")
        except IndexUnusable:
            witness = None
    try:
        fresh_dir = path / "index.new"
        shutil.rmtree(fresh_dir, ignore_errors=True)
        index = Index(fresh_dir)
        try:
            result = recover(path, index, readonly=True, progress=progress, rebuild=True, witness=witness,
                             refuse_loss=True)
        except BaseException:
            index.close()
            shutil.rmtree(fresh_dir, ignore_errors=True)
            raise
        index.close()
    finally:
        if witness is not None:
            witness.close()
    old = path / "index.old"
    shutil.rmtree(old, ignore_errors=True)
    if (path / "index").exists():
        os.rename(path / "index", old)
    os.rename(fresh_dir, path / "index")
    fsync_dir(path)
    shutil.rmtree(old, ignore_errors=True)
    return result
