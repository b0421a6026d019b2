"""`verify_store` and `reindex`: the offline checks and the index rebuild.

`verify_store` reads every line of the log and reports, naming segment, byte
offset and session: bad frames, checksums and bodies, position gaps, seq
gaps and duplicates per session, broken hash chains, blobs that are missing
or altered, and an index that differs from a fresh rebuild. A torn final
line (the unacknowledged tail a crash leaves, cut at the next open) is a
warning, not a problem. It changes nothing and takes no lock.

`reindex` rebuilds the index from nothing under the writer lock (so no
writer may run) and swaps it in; the result equals an index kept up to date
by appends (`index_dump` shows both).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import msgspec

from events.codec import GENESIS
from store.blobs import BlobStore, blob_refs
from store.index import Index, IndexUnusable
from store.reader import LogLine, Progress, guess_owner, scan_log
from store.recovery import Recovery, recover
from store.segments import fsync_dir, list_segments, segment_name


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """One finding: what (`code`, `message`) and where (segment, offset, session)."""

    code: str
    message: str
    segment: str = ""
    offset: int = -1
    sid: str = ""
    seq: int = 0

    def __str__(self) -> str:
        where = f"{self.segment}@{self.offset}" if self.segment else "index"
        who = f" session {self.sid}" if self.sid else ""
        seq = f" seq {self.seq}" if self.seq else ""
        return f"{where}{who}{seq}: [{self.code}] {self.message}"


class VerifyReport(msgspec.Struct, kw_only=True):
    """What `verify_store` found; `ok` when there is no problem (warnings allowed)."""

    root: str
    segments: int = 0
    lines: int = 0
    bytes: int = 0
    sessions: int = 0
    blobs: int = 0
    index_checked: bool = False
    problems: list[Problem] = []
    warnings: list[Problem] = []

    @property
    def ok(self) -> bool:
        return not self.problems


class _SessionCheck:
    __slots__ = ("digest", "seq")

    def __init__(self) -> None:
        self.seq = 0
        self.digest = GENESIS


def verify_store(root: str | os.PathLike[str], progress: Progress | None = None) -> VerifyReport:
    """Check the whole store at `root` (see the module doc)."""
    path = Path(root)
    log_dir = path / "log"
    segments = list_segments(log_dir)
    report = VerifyReport(root=str(path), segments=len(segments))
    blobs = BlobStore(path)
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
            owners = _index_owners(path)
        return owners.get((bad.segment, bad.offset), ("", 0))

    def flush(as_problem: bool) -> None:
        nonlocal expected_pos
        if pending:
            expected_pos = None  # the bad pieces account for the positions they held
        for bad in pending:
            sid, seq = owner(bad)
            finding = Problem(
                code="corrupt-line" if as_problem else "torn-tail",
                message=bad.error if as_problem else f"{bad.length} unacknowledged bytes: {bad.error}",
                segment=segment_name(bad.segment), offset=bad.offset, sid=sid, seq=seq,
            )
            (report.problems if as_problem else report.warnings).append(finding)
        pending.clear()

    for line in scan_log(log_dir, progress=progress):
        report.bytes += line.length
        if line.segment != current_segment:
            flush(True)
            current_segment = line.segment
            expected_pos = line.segment if expected_pos is None else expected_pos
        env = line.envelope
        if env is None:
            if line.framed:
                flush(True)
                pending.append(line)
                flush(True)
            else:
                pending.append(line)
            continue
        flush(True)
        report.lines += 1
        seg_name = segment_name(line.segment)

        def problem(code: str, message: str, seg: str = seg_name, off: int = line.offset,
                    sid: str = env.sid, seq: int = env.seq) -> Problem:
            return Problem(code=code, message=message, segment=seg, offset=off, sid=sid, seq=seq)

        if line.offset == 0 and env.pos != line.segment:
            report.problems.append(
                problem("segment-name", f"segment named {line.segment} starts at pos {env.pos}")
            )
        if expected_pos is not None and env.pos != expected_pos:
            report.problems.append(
                problem("pos-gap", f"pos {env.pos} where {expected_pos} was expected")
            )
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
            report.problems.append(
                problem("seq-gap", f"seq {env.seq} follows seq {check.seq}")
            )
        elif env.prev != check.digest:
            report.problems.append(
                problem("chain", "prev does not name the session's previous line")
            )
        check.seq = env.seq
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
    flush(not pending or pending[0].segment != last)
    report.sessions = len(sessions)
    report.blobs = len(checked_blobs)
    _check_index(path, report)
    return report


def _index_owners(root: Path) -> dict[tuple[int, int], tuple[str, int]]:
    """(segment, offset) -> (sid, seq) from the index, to name the session of an unreadable line."""
    try:
        index = Index(root / "index", readonly=True)
    except IndexUnusable:
        return {}
    try:
        owners: dict[tuple[int, int], tuple[str, int]] = {}
        for db, key, value in index.dump():
            if db == "events":
                sid, _, seq = key.rpartition(b"\x00")
                segment, offset = int.from_bytes(value[:8], "big"), int.from_bytes(value[8:16], "big")
                owners[(segment, offset)] = (sid.decode(), int.from_bytes(seq, "big"))
        return owners
    finally:
        index.close()


def _check_index(root: Path, report: VerifyReport) -> None:
    if not (root / "index" / "data.mdb").exists():
        report.warnings.append(
            Problem(code="index-missing", message="no index; it is rebuilt at the next open")
        )
        return
    try:
        current = index_dump(root)
    except IndexUnusable as exc:
        report.problems.append(Problem(code="index-unreadable", message=str(exc)))
        return
    fresh = _fresh_dump(root)
    report.index_checked = True
    if current == fresh:
        return
    have, want = set(current), set(fresh)
    extra = sorted(have - want)
    missing = sorted(want - have)
    shown = [f"unexpected {db}/{key!r}" for db, key, _ in extra[:3]]
    shown += [f"missing {db}/{key!r}" for db, key, _ in missing[:3]]
    report.problems.append(
        Problem(
            code="index-differs",
            message=f"the index differs from a rebuild ({len(extra)} unexpected, {len(missing)} missing "
            f"entries): " + "; ".join(shown),
        )
    )


def _fresh_dump(root: Path) -> list[tuple[str, bytes, bytes]]:
    scratch = Path(tempfile.mkdtemp(prefix="cairn-verify-"))
    try:
        index = Index(scratch / "index")
        try:
            recover(root, index, readonly=True, rebuild=True)
            return index.dump()
        finally:
            index.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


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
    changed: a torn tail is left for the next open to cut.
    """
    from store.journal import _take_lock

    path = Path(root)
    if not (path / "log").is_dir():
        raise IndexUnusable(f"no cairn store at {path}")
    lock_fd = _take_lock(path)
    try:
        fresh_dir = path / "index.new"
        shutil.rmtree(fresh_dir, ignore_errors=True)
        index = Index(fresh_dir)
        try:
            result = recover(path, index, readonly=True, progress=progress, rebuild=True)
        finally:
            index.close()
        old = path / "index.old"
        shutil.rmtree(old, ignore_errors=True)
        if (path / "index").exists():
            os.rename(path / "index", old)
        os.rename(fresh_dir, path / "index")
        fsync_dir(path)
        shutil.rmtree(old, ignore_errors=True)
        return result
    finally:
        os.close(lock_fd)
