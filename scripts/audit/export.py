"""`cairn export --format parquet|csv`: a store's log as typed tables, one file per table per run.

Layout of the target directory::

    DIR/cairn-export.json                 the manifest: format, schema version, session filter,
                                          `next_since`, and every run (its part number, its
                                          [since, until) position range, rows per table, and
                                          the sessions it skipped and why)
    DIR/<table>/part-000001.parquet       run 1's rows of <table> (`.csv` with --format csv)
    DIR/<table>/part-000002.parquet       run 2's rows: events with since <= pos < until

Every run writes one file per table (an empty one when it has no rows, so a
glob over a table always finds its schema); a Parquet file holds row groups
of at most `BATCH_ROWS` rows (fewer when their text passes `BATCH_CHARS`).
Read a table with `DIR/<table>/*.parquet`.

A run exports the lines with `since <= pos < until`, where `until` is one
past the highest position the store's index held when the run began;
`next_since` in the manifest is that `until`. Run again on the same
directory (without `--since`, or with `--since` equal to `next_since`)
and it appends a part with the lines written since: the union of the parts
equals one full export. A `--since` that would repeat or leave out lines of
an existing export is refused.

Every session is read twice through the journal's checked path (`Journal.read`:
frame, CRC, envelope, seq, position and hash chain, as replay and
`cairn log` read it): once to check it whole, then to write its rows. A
session that fails the check (a corrupt line, a broken chain, a line of an
unknown kind) is reported (in the manifest, on stderr, in --json) and
none of its rows are written (the command exits 1). A session that breaks
after an earlier run exported it keeps that run's rows and gets none
newer. Each run writes into a staging directory
(`DIR/.part-NNNNNN.tmp`) and moves its files into place only when it is
complete; the manifest is replaced last (write, fsync, rename).

Memory is flat in the number of events: rows are buffered per table up to
`BATCH_ROWS` rows or `BATCH_CHARS` characters and written as record
batches; the turn fold keeps one turn.
The tables and their columns are in `cairn.audit.tables`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cairn.audit import require
from cairn.audit.prices import Prices
from cairn.audit.table_rows import TurnFold, rows_of
from cairn.audit.tables import BOOL, INT, SCHEMA_VERSION, STR, TABLES, TS, columns
from cairn.events.codec import validate_session_id
from cairn.events.errors import DecodeError, InputError
from cairn.store.errors import CorruptionError

MANIFEST = "cairn-export.json"
FORMATS = ("parquet", "csv")
#: rows buffered per table before they are written as one record batch (one Parquet row group)
BATCH_ROWS = 1024
#: ... or fewer, when their text passes this many characters (checkpoints carry up to 16 MiB each)
BATCH_CHARS = 8 * 1024 * 1024
_PROGRESS_EVERY = 256

Progress = Callable[[int, int], None]


class ExportRefused(InputError):
    """The target directory or the arguments would make a wrong or unsafe export (exit 2)."""


@dataclass(frozen=True)
class Skipped:
    sid: str
    error: str


@dataclass
class ExportReport:
    format: str
    to: str
    part: int
    since: int
    until: int
    sessions: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)


def _arrow_schema(pa: Any, table: str) -> Any:
    types = {STR: pa.string(), INT: pa.int64(), BOOL: pa.bool_(), TS: pa.timestamp("ms", tz="UTC")}
    return pa.schema([pa.field(name, types.get(kind, pa.string())) for name, kind in columns(table)])


class _Sink:
    """One table's file of one run: rows buffered, written in record batches."""

    def __init__(self, pa: Any, fmt: str, path: Path, table: str) -> None:
        self._pa = pa
        self.schema = _arrow_schema(pa, table)
        self.rows = 0
        self._buffer: list[dict[str, Any]] = []
        self._chars = 0
        if fmt == "parquet":
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(str(path), self.schema, compression="zstd")
        else:
            import pyarrow.csv as pacsv

            self._writer = pacsv.CSVWriter(str(path), self.schema)

    def add(self, row: dict[str, Any]) -> None:
        self._buffer.append(row)
        self._chars += sum(len(value) for value in row.values() if isinstance(value, str))
        if len(self._buffer) >= BATCH_ROWS or self._chars >= BATCH_CHARS:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            batch = self._pa.RecordBatch.from_pylist(self._buffer, schema=self.schema)
            self._writer.write_batch(batch)
            self.rows += len(self._buffer)
            self._buffer = []
            self._chars = 0

    def close(self) -> None:
        self.flush()
        self._writer.close()


def _refuse_links(path: Path) -> None:
    if path.is_symlink():
        raise ExportRefused(f"{path} is a symbolic link: export into a real directory")


def read_manifest(to: Path, fmt: str) -> dict[str, Any] | None:
    """The existing export's manifest, None for a new or empty directory; refuses an unsafe target.

    Checked before anything is written: `to` must not be a link, a file, or a
    non-empty directory that is not an export of the same format; no table
    entry inside it may be a link or other than a directory.
    """
    if fmt not in FORMATS:
        raise ExportRefused(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    _refuse_links(to)
    if not to.exists():
        if not to.parent.is_dir():
            raise ExportRefused(f"{to.parent} is not a directory")
        return None
    if not to.is_dir():
        raise ExportRefused(f"{to} exists and is not a directory")
    entries = list(to.iterdir())
    if not entries:
        return None
    manifest_path = to / MANIFEST
    if manifest_path.is_symlink() or not manifest_path.is_file():
        raise ExportRefused(f"{to} is not empty and holds no {MANIFEST}: export into a new directory")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ExportRefused(f"{manifest_path} is unreadable: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SCHEMA_VERSION:
        raise ExportRefused(f"{manifest_path} is not a cairn table export of schema {SCHEMA_VERSION}")
    if manifest.get("format") != fmt:
        raise ExportRefused(f"{to} holds a {manifest.get('format')} export, not {fmt}")
    for entry in entries:
        if entry.name == MANIFEST:
            continue
        if entry.is_symlink() or (entry.name in TABLES and not entry.is_dir()):
            raise ExportRefused(f"{entry} is a link or not a directory: refusing to write there")
        if entry.name.startswith(".part-"):
            raise ExportRefused(f"{entry} is left from an interrupted run: remove it, then export again")
    return manifest


def export_tables(
    journal: Any,
    to: Path,
    fmt: str,
    *,
    session: str | None = None,
    since: int | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
    prices: Prices | None = None,
) -> ExportReport:
    """Export `journal`'s sessions (or `session`) from position `since` as tables in `to`; with
    `prices`, the usage rows' cost.

    `journal` is a local `Journal` open read-only. Refuses (`ExportRefused`,
    nothing written) a bad target, a bad session id, an unknown session, or a
    `since` that does not continue an existing export (see the module doc).
    """
    if session is not None:
        validate_session_id(session)
    manifest = read_manifest(to, fmt)
    pa = require("pyarrow")
    require("pyarrow.parquet" if fmt == "parquet" else "pyarrow.csv")
    if manifest is not None:
        if manifest.get("session") != session:
            raise ExportRefused(
                f"{to} exports session filter {manifest.get('session')!r}, not {session!r}: "
                "export into a new directory"
            )
        expected = int(manifest["next_since"])
        if since is not None and since != expected:
            raise ExportRefused(f"{to} continues from position {expected}: pass --since {expected} or none")
        since = expected
    since = 0 if since is None else since
    if since < 0:
        raise ExportRefused(f"--since must be a position (0 or more), got {since}")
    summaries, until = sessions_to_export(journal, session, since)
    part = len(manifest["runs"]) + 1 if manifest is not None else 1
    report = ExportReport(format=fmt, to=str(to), part=part, since=since, until=until)

    to.mkdir(exist_ok=True)
    stage = to / f".part-{part:06d}.tmp"
    stage.mkdir()
    try:
        _run(journal, pa, fmt, stage, summaries, report, progress, warn, prices)
        _commit(to, stage, fmt, part, manifest, session, report)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return report


def sessions_to_export(journal: Any, session: str | None, since: int) -> tuple[list[Any], int]:
    """The summaries of the sessions to read (all, or `session`), and the run's `until` position.

    `until` is one past the highest position the index held; an unknown `session` is refused, and
    so is a `since` past `until`: that run would export nothing, and the next one, continuing
    from it, would skip every line written up to it.
    """
    if session is not None:
        summary = journal.session(session)
        if summary is None:
            raise ExportRefused(f"no session {session!r} in the store")
        summaries = [summary]
    else:
        summaries = list(journal.sessions())
    until = max([s.last_pos + 1 for s in summaries if s.last_seq > 0], default=0)
    if since > until:
        held = f"session {session!r} ends before position {until}" if session else f"the log ends at {until}"
        raise ExportRefused(f"--since {since} is past what there is to export ({held}): pass {until} or less")
    return summaries, until


def check_session(
    journal: Any, sid: str, until: int, progress: Progress | None = None, done: int = 0, total: int = 0
) -> Skipped | None:
    """Read `sid`'s lines below position `until` through the checked path; why it is skipped, or None.

    The first pass of every export (tables and traces): a session that fails
    it is reported and none of its rows or spans are written.
    """
    try:
        for count, record in enumerate(journal.read(sid), 1):
            if record.pos >= until:
                break
            if progress is not None and count % _PROGRESS_EVERY == 0:
                progress(done + count, total)
    except (CorruptionError, DecodeError) as exc:
        return Skipped(sid, f"{type(exc).__name__}: {exc}")
    return None


def _run(
    journal: Any,
    pa: Any,
    fmt: str,
    stage: Path,
    summaries: list[Any],
    report: ExportReport,
    progress: Progress | None,
    warn: Callable[[str], None] | None,
    prices: Prices | None = None,
) -> None:
    since, until = report.since, report.until
    todo = [s for s in summaries if s.last_seq > 0 and s.last_pos >= since]
    total = 2 * sum(s.last_seq for s in todo)
    done = 0
    sinks = {table: _Sink(pa, fmt, stage / f"{table}.{fmt}", table) for table in TABLES}
    try:
        for summary in todo:
            sid = summary.sid
            problem = check_session(journal, sid, until, progress, done, total)  # pass 1
            if problem is not None:
                report.skipped.append(problem)
                if warn is not None:
                    warn(f"skipped session {sid}: {problem.error}")
                done += 2 * summary.last_seq
                continue
            done += summary.last_seq
            fold = TurnFold(prices=prices)
            for count, record in enumerate(journal.read(sid), 1):  # pass 2: its rows
                if record.pos >= until:
                    break
                turn = fold.turn_of(record.event)
                if record.pos >= since:
                    for table, row in rows_of(record, turn, fold):
                        sinks[table].add(row)
                if progress is not None and count % _PROGRESS_EVERY == 0:
                    progress(done + count, total)
            done += summary.last_seq
            report.sessions += 1
        if progress is not None:
            progress(total, total)
    finally:
        for sink in sinks.values():
            sink.close()
    report.rows = {table: sinks[table].rows for table in TABLES}


def _commit(
    to: Path,
    stage: Path,
    fmt: str,
    part: int,
    manifest: dict[str, Any] | None,
    session: str | None,
    report: ExportReport,
) -> None:
    """Move the run's files into place, then replace the manifest (the run counts once it is there)."""
    for table in TABLES:
        folder = to / table
        _refuse_links(folder)
        folder.mkdir(exist_ok=True)
        target = folder / f"part-{part:06d}.{fmt}"
        if target.exists() or target.is_symlink():
            raise ExportRefused(f"{target} exists already: the manifest does not describe {to}")
        os.rename(stage / f"{table}.{fmt}", target)
    run = {k: v for k, v in asdict(report).items() if k not in ("format", "to")}
    new = {
        "format": fmt,
        "schema_version": SCHEMA_VERSION,
        "session": session,
        "next_since": report.until,
        "runs": [*(manifest["runs"] if manifest is not None else []), run],
    }
    tmp = to / f".{MANIFEST}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(new, handle, indent=1)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, to / MANIFEST)
    with contextlib.suppress(OSError):
        fd = os.open(to, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
