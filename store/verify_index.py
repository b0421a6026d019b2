"""Verify's check of the index: it must equal an index rebuilt from the lines it claims to cover.

The store's index is read in one transaction (`snapshot_index`) before the
log is read, so that lines a writer appends meanwhile are only ever past its
recovery point: they are lag (information), never a difference. Its point
must be one the log backs (`point_doubt`), and its entries must equal those
of an index rebuilt from nothing through that point (`rebuild_through`);
differences are reported per session, in the log's terms (seqs, positions).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec

from cairn.store.errors import IndexUnusable, UnexpectedEntry
from cairn.store.index import Index
from cairn.store.index_pass import rebuild_through
from cairn.store.index_records import IndexMeta, decode_meta, explain_entry
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


class IndexSnapshot(msgspec.Struct):
    """The store's index as one read transaction saw it: every entry, and its recovery point."""

    rows: list[tuple[str, bytes, bytes]]
    meta: IndexMeta | None


def snapshot_index(root: Path, report: VerifyReport) -> IndexSnapshot | None:
    """The store's index, read in one transaction (None, with a warning or problem, when there is none)."""
    if (root / "index").is_symlink():
        return None  # named by the layout check; never read through
    if not (root / "index" / "data.mdb").exists():
        report.warnings.append(
            Problem(code="index-missing", message="no index; it is rebuilt at the next open")
        )
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
    return IndexSnapshot(rows, decode_meta(through[0]) if through else None)


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

    def dump(self, root: Path, segments: list[int]) -> list[tuple[str, bytes, bytes]]:
        if self.usable and self.index is not None:
            return self.index.dump()
        return _fresh_dump(root, segments, self.point)

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
    if rebuild is not None and rebuild.point == point:
        fresh = rebuild.dump(root, segments)
    else:
        fresh = _fresh_dump(root, segments, point)
    report.index_checked = True
    current = [row for row in snapshot.rows if not (row[0] == "meta" and row[1] == b"through")]
    fresh = [row for row in fresh if not (row[0] == "meta" and row[1] == b"through")]
    if current != fresh:
        _report_differences(current, fresh, point, report)
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


def _report_differences(
    current: list[tuple[str, bytes, bytes]],
    fresh: list[tuple[str, bytes, bytes]],
    point: tuple[int, int],
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
