"""`cairn report --out DIR`: a static HTML report of a whole store, readable from the file system.

Layout of the target directory (plain HTML with inline CSS; no script, no
server, no network: it opens in any browser)::

    DIR/index.html                  the sessions table and the result of `cairn verify`
    DIR/verify.html                 every finding of `cairn verify` (problems, warnings, information)
    DIR/sessions/<key>.html         one page per session: figures, timeline, checkpoints, failures,
                                    and verify's findings that name the session
    DIR/sessions/<key>.svg          the session's timeline (`cairn.audit.timeline`), beside its page
    DIR/store.svg                   the store's tokens and checkpoints over time (`report_chart`)
    DIR/cairn-report.json           what made the report (the marker of a report directory)

`<key>` is the first 16 hex digits of the session id's SHA-256: a session id
may hold `:` (a URL scheme in a link) and differ from another only in case
(one file on a case-insensitive file system).

Every session is read once through the journal's checked path
(`Journal.read`, as replay, `cairn log` and `cairn export` read it) and
folded as it streams (`SessionFold`, and `timeline_data` reduced to
`TIMELINE_RUNS` runs of seqs): memory is flat in the number of events.
A session that fails the check is shown as corrupt with the error, and no
figure of it (nothing half read). The tables of checkpoints and failures of
one session list at most `MAX_ROWS` rows each (the counts are complete).

Everything that comes from the store (session ids, models, workspaces,
error texts, paths in verify's findings) reaches the HTML through `esc`:
non-printable characters shown as escapes (`\\x1b`, `\\u202e`), then
`& < > " '` as entities. The timeline is an SVG file shown with `<img>`, so
nothing in it can run.

The report is written into `DIR/.report.tmp` and moved into place when
complete. `DIR` must be new, empty, or a former report (it holds
`cairn-report.json` and only the report's own entries); a link, a file or
another directory is refused before anything is written.

This module checks the target and writes the report; `report_fold` folds a
session's log into what its page shows, and `report_html` makes the pages.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cairn._cli_output import iso
from cairn.audit import require
from cairn.audit.prices import Prices
from cairn.audit.report_chart import StoreChart, shown
from cairn.audit.report_fold import (
    MAX_ROWS,
    TIMELINE_RUNS,
    CheckpointRow,
    FailureRow,
    SessionEntry,
    SessionFold,
    page_key,
    read_session,
)
from cairn.audit.report_html import MAX_TEXT, esc, index_page, session_page, transcript_page, verify_page
from cairn.audit.timeline import save
from cairn.events.errors import InputError
from cairn.store.verify_report import VerifyReport

__all__ = [
    "MANIFEST",
    "MAX_ROWS",
    "MAX_TEXT",
    "OWN_ENTRIES",
    "REPORT_FORMAT",
    "STAGE",
    "TIMELINE_RUNS",
    "CheckpointRow",
    "FailureRow",
    "ReportRefused",
    "ReportResult",
    "SessionEntry",
    "SessionFold",
    "check_target",
    "esc",
    "index_page",
    "now_ms",
    "page_key",
    "read_session",
    "session_page",
    "verify_page",
    "write_report",
]

MANIFEST = "cairn-report.json"
REPORT_FORMAT = "cairn-report-1"
#: the entries a report directory holds (anything else in DIR: not a report, refused)
#: the store's chart of tokens and checkpoints over time, shown by the index
STORE_CHART = "store.svg"
OWN_ENTRIES = ("index.html", "verify.html", "sessions", MANIFEST, STORE_CHART)
STAGE = ".report.tmp"

Progress = Callable[[int, int], None]


class ReportRefused(InputError):
    """The target directory would make a wrong or unsafe report (exit 2); nothing was written."""


# --- the target directory and the run ---------------------------------------------------


@dataclass
class ReportResult:
    out: str
    sessions: int = 0
    events: int = 0
    corrupt: list[str] = field(default_factory=list)
    verify_ok: bool = True
    verify_problems: int = 0


def check_target(out: Path) -> bool:
    """Refuse an unsafe `out` before anything is written; True when it holds a former report.

    `out` must not be a link or a file; it may be new (its parent a
    directory), empty, or a former report (its manifest, and only the
    report's own entries, none of them a link).
    """
    if out.is_symlink():
        raise ReportRefused(f"{out} is a symbolic link: write the report into a real directory")
    if not out.exists():
        if not out.parent.is_dir():
            raise ReportRefused(f"{out.parent} is not a directory")
        return False
    if not out.is_dir():
        raise ReportRefused(f"{out} exists and is not a directory")
    entries = list(out.iterdir())
    if not entries:
        return False
    manifest = out / MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        raise ReportRefused(
            f"{out} is not empty and holds no {MANIFEST}: write the report into a new directory"
        )
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportRefused(f"{manifest} is unreadable: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        raise ReportRefused(f"{manifest} is not a cairn report's: write the report into a new directory")
    for entry in entries:
        if entry.is_symlink():
            raise ReportRefused(f"{entry} is a link: refusing to write there")
        if entry.name == STAGE:
            raise ReportRefused(f"{entry} is left from an interrupted run: remove it, then report again")
        if entry.name not in OWN_ENTRIES:
            raise ReportRefused(f"{entry} is not the report's own: write the report into a new directory")
    sessions = out / "sessions"
    if sessions.exists() and not sessions.is_dir():
        raise ReportRefused(f"{sessions} is not a directory")
    return True


def write_report(
    root: Path,
    out: Path,
    *,
    now_ms: int,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
    handoffs: bool = False,
    prices: Prices | None = None,
) -> ReportResult:
    """Verify the store at `root`, read every session, and write the report into `out` (module doc).

    The target is checked first (`ReportRefused`, nothing written); the
    store is only read.
    """
    from cairn.store.verify import verify_store

    check_target(out)
    require("matplotlib")
    verify = verify_store(root)
    result = ReportResult(out=str(out), verify_ok=verify.ok, verify_problems=len(verify.problems))
    out.mkdir(exist_ok=True)
    stage = out / STAGE
    stage.mkdir()
    try:
        (stage / "sessions").mkdir()
        entries = _write_sessions(root, stage / "sessions", verify, result, progress, warn, handoffs, prices)
        _write_index(stage, str(root), entries, verify, result, iso(now_ms), prices)
        _commit(out, stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return result


def _write_sessions(
    root: Path,
    folder: Path,
    verify: VerifyReport,
    result: ReportResult,
    progress: Progress | None,
    warn: Callable[[str], None] | None,
    handoffs: bool = False,
    prices: Prices | None = None,
) -> list[SessionEntry]:
    """Read every session and write its page into `folder`; their entries, each kept as its row."""
    from cairn.store import Journal

    entries: list[SessionEntry] = []
    with Journal.open(root, readonly=True) as journal:
        summaries = [s for s in journal.sessions() if s.last_seq > 0]
        total, done = sum(s.last_seq for s in summaries), 0
        times = [t for s in summaries for t in (s.created_ts, s.updated_ts) if shown(t)]
        chart = StoreChart(min(times, default=0), max(times, default=0))
        for summary in summaries:
            entry = read_session(
                journal, summary.sid, summary.last_seq, handoffs=handoffs, prices=prices, chart=chart
            )
            entry.problems = [p for p in verify.problems if p.sid == summary.sid]
            entry.warnings = [p for p in verify.warnings if p.sid == summary.sid]
            _write_session(folder, entry)
            if entry.fold is None:
                result.corrupt.append(entry.sid)
                if warn is not None:
                    warn(f"session {entry.sid} is corrupt: {entry.error}")
            else:
                result.events += entry.fold.events
            entry.fold, entry.timeline = _row_only(entry.fold), None  # keep the row, not the page
            entry.transcript = None
            entries.append(entry)
            done += summary.last_seq
            if progress is not None:
                progress(done, total)
    result.sessions = len(entries)
    if times:
        chart.save(folder.parent / STORE_CHART)
    return entries


def _write_index(
    stage: Path,
    shown_root: str,
    entries: list[SessionEntry],
    verify: VerifyReport,
    result: ReportResult,
    generated: str,
    prices: Prices | None = None,
) -> None:
    """Write the index page, verify's page and the manifest into `stage`."""
    index = index_page(
        shown_root,
        entries,
        verify,
        generated,
        currency=prices.currency if prices else None,
        chart=(stage / STORE_CHART).exists(),
    )
    (stage / "index.html").write_text(index, encoding="utf-8")
    (stage / "verify.html").write_text(verify_page(shown_root, verify), encoding="utf-8")
    manifest = {
        "format": REPORT_FORMAT,
        "store": shown_root,
        "generated": generated,
        "sessions": result.sessions,
        "events": result.events,
        "corrupt": result.corrupt,
        "verify_ok": verify.ok,
    }
    (stage / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def _row_only(fold: SessionFold | None) -> SessionFold | None:
    """The fold without its listed rows: what the index page needs of a session already written."""
    if fold is not None:
        fold.checkpoints, fold.failures = [], []
    return fold


def _write_session(folder: Path, entry: SessionEntry) -> None:
    if entry.timeline is not None:
        save(entry.timeline, folder / f"{entry.key}.svg")
    (folder / f"{entry.key}.html").write_text(session_page(entry), encoding="utf-8")
    if entry.transcript is not None:
        (folder / f"{entry.key}-transcript.html").write_text(transcript_page(entry), encoding="utf-8")


def _commit(out: Path, stage: Path) -> None:
    """Move the staged report into `out`: the sessions folder, the pages, the manifest last."""
    old = out / "sessions"
    retired = stage / "sessions.old"
    if old.exists():
        os.rename(old, retired)
    os.rename(stage / "sessions", old)
    if (stage / STORE_CHART).exists():
        os.replace(stage / STORE_CHART, out / STORE_CHART)
    else:  # a store of no session: no chart (and none left from a former report)
        (out / STORE_CHART).unlink(missing_ok=True)
    for name in ("index.html", "verify.html", MANIFEST):
        os.replace(stage / name, out / name)


def now_ms() -> int:
    """The current time in unix milliseconds (the report's `generated`)."""
    return int(dt.datetime.now(tz=dt.UTC).timestamp() * 1000)
