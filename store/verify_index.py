"""Verify's check of the index: it must equal an index rebuilt from the lines it claims to cover.

The store's index is read in one transaction (`snapshot_index`) before the
log is read, so that lines a writer appends meanwhile are only ever past its
recovery point: they are lag (information), never a difference. Its point
must be one the log backs (`point_doubt`), and its entries must equal those
of an index rebuilt from nothing through that point (`rebuild_through`);
differences are reported per session, in the log's terms (seqs, positions).

Memory is flat in the size of the store: the snapshot is a copy of the
index on disk (`Index.copy_to`, one read transaction, kept short), and the
two indexes are compared entry by entry in their common order; only the
entries that differ are held.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec

from cairn.store.errors import IndexOutdated, IndexUnusable, UnexpectedEntry
from cairn.store.index import Index
from cairn.store.index_pass import rebuild_through
from cairn.store.index_records import DBS, IndexMeta, explain_entry
from cairn.store.reader import LogLine
from cairn.store.recovery import point_doubt
from cairn.store.segments import segment_name
from cairn.store.verify_report import Problem, VerifyReport

_SHOWN_SESSIONS = 20
_SHOWN_PER_SESSION = 3


class IndexLag(msgspec.Struct, frozen=True):
    """The sound lines of the log at or past the index's recovery point, as the log check counted them."""

    lines: int = 0
    bytes: int = 0
    #: the first and last of their positions
    positions: tuple[int, int] = (0, 0)


Row = tuple[str, bytes, bytes]
_DB_ORDER = {name.decode(): order for order, name in enumerate(DBS)}


class IndexSnapshot:
    """The store's index as one read transaction saw it: a copy on disk (in a scratch directory that
    `close` removes), and its recovery point."""

    def __init__(self, scratch: Path, meta: IndexMeta | None) -> None:
        self.scratch = scratch
        self.meta = meta

    @contextlib.contextmanager
    def rows(self) -> Iterator[Iterator[Row]]:
        """The copy's entries in `Index.dump`'s order, one at a time."""
        index = Index(self.scratch / "index", readonly=True)
        try:
            yield index.rows()
        finally:
            index.close()

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def snapshot_index(root: Path, report: VerifyReport) -> IndexSnapshot | None:
    """The store's index, copied in one read transaction (None, with a warning or problem, when there
    is none). The caller closes it."""
    if (root / "index").is_symlink():
        return None  # named by the layout check; never read through
    if not (root / "index" / "data.mdb").exists():
        report.warnings.append(
            Problem(code="index-missing", message="no index; it is rebuilt at the next open")
        )
        return None
    try:
        index = Index(root / "index", readonly=True)
    except IndexOutdated as exc:
        report.warnings.append(
            Problem(
                code="index-outdated",
                message=f"{exc}: written by an older cairn; it is rebuilt from the log at the next "
                "open for writing, or by `cairn reindex`",
            )
        )
        return None
    except IndexUnusable as exc:
        report.problems.append(Problem(code="index-unreadable", message=str(exc)))
        return None
    except UnexpectedEntry as exc:
        report.problems.append(Problem(code="unexpected-entry", segment="index", message=str(exc)))
        return None
    scratch = Path(tempfile.mkdtemp(prefix="cairn-verify-snapshot-"))
    try:
        try:
            (scratch / "index").mkdir()
            index.copy_to(scratch / "index")
        finally:
            index.close()
        copy = Index(scratch / "index", readonly=True)
        try:
            meta = copy.meta()
        finally:
            copy.close()
    except IndexUnusable as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        report.problems.append(Problem(code="index-unreadable", message=str(exc)))
        return None
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return IndexSnapshot(scratch, meta)


class Rebuild:
    """The index rebuilt through the store's recovery point from the pieces verify's own pass reads.

    `tee` passes every piece on to verify's check and hands those before the
    point to the rebuild (`rebuild_through`), so the log is read once. A
    piece that runs across the point (which a scan that stops there would
    cut) makes the rebuild read the log itself instead, as it always could.
    """

    def __init__(self, root: Path, segments: list[int], point: tuple[int, int]) -> None:
        self.point = point
        self.scratch = Path(tempfile.mkdtemp(prefix="cairn-verify-"))
        self.index: Index | None = None
        self.usable = True
        self._root = root
        self._segments = segments

    def tee(self, lines: Iterable[LogLine], take: Callable[[LogLine], None]) -> None:
        """Give every piece of `lines` to `take`, and rebuild the index from those before the point."""
        self.index = Index(self.scratch / "index")
        try:
            rebuild_through(self._root, self.index, self._segments, self.point, self._before(lines, take))
        except BaseException:
            self.usable = False
            raise

    def _before(self, lines: Iterable[LogLine], take: Callable[[LogLine], None]) -> Iterator[LogLine]:
        segment, offset = self.point
        for line in lines:
            take(line)
            if self.usable and (line.segment < segment or (line.segment == segment and line.offset < offset)):
                if line.segment == segment and line.offset + len(line.raw) > offset:
                    self.usable = False  # cut by the point: the rebuild reads the log itself
                else:
                    yield line

    @contextlib.contextmanager
    def rows(self, root: Path, segments: list[int]) -> Iterator[Iterator[Row]]:
        """The rebuilt index's entries, one at a time (rebuilt again from the log when the pass could
        not feed it)."""
        if self.usable and self.index is not None:
            yield self.index.rows()
        else:
            with _fresh_rows(root, segments, self.point) as rows:
                yield rows

    def close(self) -> None:
        if self.index is not None:
            self.index.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def check_index(
    root: Path,
    segments: list[int],
    snapshot: IndexSnapshot | None,
    lag: IndexLag,
    report: VerifyReport,
    rebuild: Rebuild | None = None,
) -> None:
    """The index against the lines it claims to cover; what lies past its point is lag, not a problem."""
    if snapshot is None:
        return
    meta = snapshot.meta
    if meta is None:
        report.warnings.append(
            Problem(code="index-empty", message="the index covers nothing yet; it is built at the next open")
        )
        return
    if not _comparable(root, segments, meta, report):
        return
    point = (meta.segment, meta.offset)
    with contextlib.ExitStack() as stack:
        if rebuild is not None and rebuild.point == point:
            fresh = stack.enter_context(rebuild.rows(root, segments))
        else:
            fresh = stack.enter_context(_fresh_rows(root, segments, point))
        current = stack.enter_context(snapshot.rows())
        have, want = _differences(current, fresh)
    report.index_checked = True
    if have or want:
        _report_differences(have, want, point, report)
    if lag.lines:
        _report_lag(meta, lag, report)


def _comparable(root: Path, segments: list[int], meta: IndexMeta, report: VerifyReport) -> bool:
    """Whether the index can be compared with a rebuild; if not, why is reported (info or problem)."""
    if any(not loss.accepted and loss.first_pos < meta.next_pos for loss in report.losses):
        report.info.append(
            Problem(
                code="index-not-compared",
                message=(
                    "the index covers acknowledged lines the log lost (acknowledged-missing); "
                    "it is compared with the log once the loss is accepted"
                ),
            )
        )
        return False
    reason = point_doubt(root / "log", segments, meta)
    last_line = (segment_name(meta.last_segment), meta.last_offset)
    if reason and any(
        p.code == "corrupt-line" and (p.segment, p.offset) == last_line for p in report.problems
    ):
        report.info.append(
            Problem(
                code="index-not-compared",
                message=(
                    "the last line the index covers is corrupt (corrupt-line); "
                    "a writer's next open rebuilds the index"
                ),
            )
        )
        return False
    if reason:
        report.problems.append(
            Problem(
                code="index-point",
                message=(
                    f"the index claims lines the log does not back ({reason}); "
                    "a writer's next open rebuilds it once any loss is accepted"
                ),
            )
        )
        return False
    return True


def _report_lag(meta: IndexMeta, lag: IndexLag, report: VerifyReport) -> None:
    """Lines past the index's point: information (a writer indexes them), never a problem."""
    report.index_lag_lines = lag.lines
    report.index_lag_bytes = lag.bytes
    first, last = lag.positions
    report.info.append(
        Problem(
            code="index-lag",
            message=(
                f"the index covers the log through pos {meta.next_pos - 1} "
                f"({segment_name(meta.segment)}@{meta.offset}); {lag.lines} lines past it "
                f"(positions {first}-{last}, {lag.bytes} bytes) are not indexed yet: "
                "a writer indexes them as it commits, or at its next open"
            ),
        )
    )


def _differences(
    current: Iterator[Row], fresh: Iterator[Row]
) -> tuple[dict[tuple[str, bytes], bytes], dict[tuple[str, bytes], bytes]]:
    """The entries where two indexes differ, as (the first's, the second's) values by (db, key):
    both walked once in their common order (db, then key bytes), the recovery point left out."""
    have: dict[tuple[str, bytes], bytes] = {}
    want: dict[tuple[str, bytes], bytes] = {}

    def ordered(rows: Iterator[Row]) -> Iterator[tuple[tuple[int, bytes], str, bytes]]:
        for db, key, value in rows:
            if not (db == "meta" and key == b"through"):
                yield (_DB_ORDER[db], key), db, value

    ours, theirs = ordered(current), ordered(fresh)
    a, b = next(ours, None), next(theirs, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            assert a is not None
            have[(a[1], a[0][1])] = a[2]
            a = next(ours, None)
        elif a is None or b[0] < a[0]:
            want[(b[1], b[0][1])] = b[2]
            b = next(theirs, None)
        else:
            if a[2] != b[2]:
                have[(a[1], a[0][1])] = a[2]
                want[(b[1], b[0][1])] = b[2]
            a, b = next(ours, None), next(theirs, None)
    return have, want


def _report_differences(
    have: dict[tuple[str, bytes], bytes],
    want: dict[tuple[str, bytes], bytes],
    point: tuple[int, int],
    report: VerifyReport,
) -> None:
    """Where the index and a rebuild through the same point disagree, per session, in the log's terms."""
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
        report.problems.append(
            Problem(
                code="index-differs",
                sid=sid,
                seq=min((seq for seq, _ in found if seq), default=0),
                message=f"the index disagrees with the log it covers (through {where}): {shown}{more}",
            )
        )
    if len(by_session) > _SHOWN_SESSIONS:
        report.problems.append(
            Problem(
                code="index-differs",
                message=(
                    f"and {len(by_session) - _SHOWN_SESSIONS} more sessions"
                    " whose index entries disagree with the log"
                ),
            )
        )


@contextlib.contextmanager
def _fresh_rows(root: Path, segments: list[int], point: tuple[int, int]) -> Iterator[Iterator[Row]]:
    """The entries of an index rebuilt from the log through `point`, in a scratch directory."""
    scratch = Path(tempfile.mkdtemp(prefix="cairn-verify-"))
    try:
        index = Index(scratch / "index")
        try:
            rebuild_through(root, index, segments, point)
            yield index.rows()
        finally:
            index.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def index_owners(root: Path) -> dict[tuple[int, int], tuple[str, int]]:
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
