"""`cairn report --out DIR`: a static HTML report of a whole store, readable from the file system.

Layout of the target directory (plain HTML with inline CSS; no script, no
server, no network: it opens in any browser)::

    DIR/index.html                  the sessions table and the result of `cairn verify`
    DIR/verify.html                 every finding of `cairn verify` (problems, warnings, information)
    DIR/sessions/<key>.html         one page per session: figures, timeline, checkpoints, failures,
                                    and verify's findings that name the session
    DIR/sessions/<key>.svg          the session's timeline (`cairn.audit.timeline`), beside its page
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
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

from cairn import _console
from cairn._cli_output import iso
from cairn.audit import require
from cairn.audit.tables import TurnFold
from cairn.audit.timeline import Timeline, save, timeline_data
from cairn.events.codec import Record
from cairn.events.errors import DecodeError, InputError
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    Handoff,
    OwnerChanged,
    ProviderError,
    Request,
    SessionStarted,
    ToolResult,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.store.errors import CorruptionError
from cairn.store.verify_report import Problem, VerifyReport

MANIFEST = "cairn-report.json"
REPORT_FORMAT = "cairn-report-1"
#: the entries a report directory holds (anything else in DIR: not a report, refused)
OWN_ENTRIES = ("index.html", "verify.html", "sessions", MANIFEST)
STAGE = ".report.tmp"
#: rows listed per table of a session page (its checkpoints, its failures); the counts are complete
MAX_ROWS = 1000
#: runs of seqs the timeline of a session is reduced to (`timeline_data(buckets=...)`)
TIMELINE_RUNS = 800
#: characters of one error text shown in a table cell
MAX_TEXT = 600

Progress = Callable[[int, int], None]


class ReportRefused(InputError):
    """The target directory would make a wrong or unsafe report (exit 2); nothing was written."""


# --- what a session's log says: one streaming fold ------------------------------------


@dataclass(frozen=True)
class CheckpointRow:
    seq: int
    ts: int
    epoch: int
    through_seq: int
    trigger: str
    strategy: str
    before: int
    after: int

    @property
    def reduction(self) -> int:
        return self.before - self.after

    @property
    def reduction_share(self) -> float | None:
        return self.reduction / self.before if self.before > 0 else None


@dataclass(frozen=True)
class FailureRow:
    seq: int
    ts: int
    turn_id: str | None
    #: `failed turn`, `interrupted turn`, `provider error`, `compaction failed`
    kind: str
    what: str


@dataclass
class SessionFold:
    """The figures of one session's page and table row, folded record by record (O(MAX_ROWS)).

    Pure: `add` each record in seq order (or pass them through `tap`).
    """

    sid: str
    model: str = ""
    workspace: str = ""
    context_window: int | None = None
    parent_session: str | None = None
    parent_seq: int | None = None
    events: int = 0
    first_ts: int = 0
    last_ts: int = 0
    last_seq: int = 0
    turns: int = 0
    turns_completed: int = 0
    open_turn: str | None = None
    responses: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_reports: int = 0
    completion_reports: int = 0
    checkpoint_count: int = 0
    checkpoints: list[CheckpointRow] = field(default_factory=list)
    failure_counts: dict[str, int] = field(default_factory=dict)
    failures: list[FailureRow] = field(default_factory=list)
    _turns: TurnFold = field(default_factory=TurnFold)

    @property
    def failure_count(self) -> int:
        return sum(self.failure_counts.values())

    def add(self, record: Record) -> None:
        event = record.event
        turn = self._turns.turn_of(event)
        self.events += 1
        self.first_ts = self.first_ts or record.ts
        self.last_ts = record.ts
        self.last_seq = record.seq
        match event:
            case SessionStarted():
                self.model, self.workspace = event.model, event.workspace
                self.context_window = event.context_window
                if event.parent_session is not None:
                    self.parent_session, self.parent_seq = event.parent_session, event.parent_seq
            case TurnStarted():
                self.turns += 1
                self.open_turn = event.turn_id
            case TurnCompleted():
                self.turns_completed += 1
                self.open_turn = None
            case AssistantMessage():
                self.responses += 1
            case Usage():
                if event.prompt_tokens is not None:
                    self.prompt_tokens += event.prompt_tokens
                    self.prompt_reports += 1
                if event.completion_tokens is not None:
                    self.completion_tokens += event.completion_tokens
                    self.completion_reports += 1
            case CheckpointCommitted():
                self.checkpoint_count += 1
                if len(self.checkpoints) < MAX_ROWS:
                    self.checkpoints.append(
                        CheckpointRow(
                            record.seq,
                            record.ts,
                            event.epoch,
                            event.through_seq,
                            event.trigger,
                            event.strategy,
                            event.source_tokens,
                            event.replacement_tokens,
                        )
                    )
            case (
                UserMessage()
                | TurnFailed()
                | Request()
                | ToolResult()
                | ProviderError()
                | ContextSlimmed()
                | Handoff()
                | CompactionFailed()
                | OwnerChanged()
            ):
                pass  # not counted in the report's totals (failures: below)
            case _:
                assert_never(event)  # a new kind must be placed here: mypy says so
        failure = _failure(event)
        if failure is not None:
            kind, what = failure
            if isinstance(event, TurnFailed):
                self.open_turn = None
            self.failure_counts[kind] = self.failure_counts.get(kind, 0) + 1
            if len(self.failures) < MAX_ROWS:
                self.failures.append(FailureRow(record.seq, record.ts, turn, kind, what))

    def tap(self, records: Iterable[Record]) -> Iterator[Record]:
        """`records`, each folded here as it passes (so another fold can read the same stream)."""
        for record in records:
            self.add(record)
            yield record


def _failure(event: object) -> tuple[str, str] | None:
    """(kind, description) of a failure event, None for any other event."""
    if isinstance(event, TurnFailed):
        kind = "interrupted turn" if event.phase == "interrupted" else "failed turn"
        text = ": ".join(part for part in (event.error_class, event.error) if part)
        return kind, f"phase {event.phase}" + (f": {text}" if text else "")
    if isinstance(event, ProviderError):
        status = f" (HTTP {event.status_code})" if event.status_code is not None else ""
        delivered = ", after output was delivered" if event.output_delivered else ""
        message = f": {event.message}" if event.message else ""
        return "provider error", f"{event.error_class}{status} on {event.request_id}{delivered}{message}"
    if isinstance(event, CompactionFailed):
        detail = f": {event.detail}" if event.detail else ""
        return "compaction failed", (
            f"{event.reason} (epoch {event.epoch}, attempt {event.attempt}, "
            f"{event.consecutive_failures} in a row, trigger {event.trigger}){detail}"
        )
    return None


@dataclass
class SessionEntry:
    """One session of the report: its fold and timeline, or the error that made it unreadable."""

    sid: str
    key: str
    fold: SessionFold | None = None
    timeline: Timeline | None = None
    error: str | None = None
    #: verify's findings that name the session
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def state(self) -> str:
        if self.fold is None:
            return "corrupt"
        return "turn open" if self.fold.open_turn is not None else "ok"

    @property
    def verify_result(self) -> str:
        if self.problems:
            return f"{len(self.problems)} problem" + ("s" if len(self.problems) > 1 else "")
        if self.warnings:
            return f"ok, {len(self.warnings)} warning" + ("s" if len(self.warnings) > 1 else "")
        return "ok"


def page_key(sid: str) -> str:
    """The file name stem of a session's page and picture (see the module doc)."""
    return hashlib.sha256(sid.encode()).hexdigest()[:16]


def read_session(journal: Any, sid: str, span: int) -> SessionEntry:
    """Fold session `sid` of `journal` (read once, checked); corrupt: the entry holds the error only."""
    entry = SessionEntry(sid=sid, key=page_key(sid))
    fold = SessionFold(sid=sid)
    try:
        timeline = timeline_data(sid, fold.tap(journal.read(sid)), buckets=TIMELINE_RUNS, span=span)
    except (CorruptionError, DecodeError) as exc:
        entry.error = f"{type(exc).__name__}: {exc}"
        return entry
    entry.fold, entry.timeline = fold, timeline
    return entry


# --- HTML ---------------------------------------------------------------------------------


def esc(value: object) -> str:
    """`value` as HTML text: non-printable characters as escapes, then entities (module doc)."""
    return html.escape(_console.printable(value), quote=True)


def _clip(text: str, width: int = MAX_TEXT) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.bad { color: #b00020; font-weight: bold; }
.warn { color: #8a5a00; }
.ok { color: #1b5e20; }
img.timeline { max-width: 100%; border: 1px solid #ddd; }
code, .mono { font-family: ui-monospace, monospace; }
"""


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    )


def _table(headers: Iterable[str], rows: Iterable[Iterable[str]], css_class: str) -> str:
    """A table; `rows` hold cells already as HTML (`<td>...</td>`)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(f"<tr>{''.join(row)}</tr>\n" for row in rows)
    return f'<table class="{css_class}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n'


def _td(value: object, *, number: bool = False, css: str = "") -> str:
    classes = " ".join(c for c in ("n" if number else "", css) if c)
    shown = f"{value:,}" if number and isinstance(value, int) else value
    return f'<td class="{classes}">{esc(shown)}</td>' if classes else f"<td>{esc(shown)}</td>"


def _tokens(value: int, reports: int, responses: int) -> str:
    """A usage sum: `unknown` when responses came without any report, `≥` when some lacked one."""
    if reports == 0 and responses > 0:
        return "unknown"
    return f"{value:,}" if reports >= responses else f"≥{value:,}"


def _when(ms: int) -> str:
    return iso(ms) if ms else ""


def _findings(title: str, problems: Iterable[Problem], css: str) -> str:
    items = "".join(f'<li class="{css}">{esc(p)}</li>\n' for p in problems)
    return f"<h3>{esc(title)}</h3>\n<ul>\n{items}</ul>\n" if items else ""


SESSION_COLUMNS = (
    "session",
    "model",
    "events",
    "turns",
    "prompt tokens",
    "completion tokens",
    "checkpoints",
    "failures",
    "state",
    "last activity",
    "verify",
)


def _session_row(entry: SessionEntry) -> list[str]:
    link = f'<td><a href="sessions/{entry.key}.html">{esc(entry.sid)}</a></td>'
    verify = _td(entry.verify_result, css="bad" if entry.problems else "ok")
    fold = entry.fold
    if fold is None:
        return [link, *(["<td></td>"] * 7), _td("corrupt", css="bad"), "<td></td>", verify]
    return [
        link,
        _td(fold.model),
        _td(fold.events, number=True),
        _td(fold.turns, number=True),
        _td(_tokens(fold.prompt_tokens, fold.prompt_reports, fold.responses), number=True),
        _td(_tokens(fold.completion_tokens, fold.completion_reports, fold.responses), number=True),
        _td(fold.checkpoint_count, number=True),
        _td(fold.failure_count, number=True, css="bad" if fold.failure_count else ""),
        _td(entry.state, css="warn" if fold.open_turn is not None else "ok"),
        _td(_when(fold.last_ts)),
        verify,
    ]


def _verify_summary(report: VerifyReport) -> str:
    state = (
        '<span class="ok">ok</span>'
        if report.ok
        else f'<span class="bad">{len(report.problems)} problems found</span>'
    )
    counts = (
        f"{report.segments:,} segments, {report.lines:,} lines, {report.bytes:,} bytes, "
        f"{report.sessions:,} sessions, {report.blobs:,} blobs; {len(report.warnings)} warnings, "
        f"{len(report.info)} notes"
    )
    return f'<p>verify: {state} ({esc(counts)}) <a href="verify.html">all findings</a></p>\n'


def index_page(root: str, entries: list[SessionEntry], verify: VerifyReport, generated: str) -> str:
    corrupt = sum(1 for e in entries if e.fold is None)
    body = (
        f"<h1>cairn report of {esc(root)}</h1>\n"
        f"<p>generated {esc(generated)}; {len(entries):,} sessions"
        + (f', <span class="bad">{corrupt} corrupt</span>' if corrupt else "")
        + "</p>\n"
        + _verify_summary(verify)
        + "<h2>sessions</h2>\n"
        + _table(SESSION_COLUMNS, (_session_row(e) for e in entries), "sessions")
        + "<p>tokens: as the provider reported them; ≥: some responses came without usage; "
        "unknown: none reported.</p>\n"
    )
    return _page(f"cairn report of {root}", body)


def verify_page(root: str, verify: VerifyReport) -> str:
    body = (
        '<p><a href="index.html">all sessions</a></p>\n'
        f"<h1>cairn verify of {esc(root)}</h1>\n"
        + _verify_summary(verify).replace(' <a href="verify.html">all findings</a>', "")
        + _findings("problems", verify.problems, "bad")
        + _findings("warnings", verify.warnings, "warn")
        + _findings("information", verify.info, "")
    )
    return _page(f"cairn verify of {root}", body)


def _more(shown: int, total: int, what: str) -> str:
    if total <= shown:
        return ""
    return f"<p>{total - shown:,} more {esc(what)} not listed: <code>cairn export</code> has them all.</p>\n"


def _checkpoints_html(fold: SessionFold) -> str:
    if not fold.checkpoints:
        return "<p>none</p>\n"
    rows = (
        [
            _td(c.epoch, number=True),
            _td(c.seq, number=True),
            _td(_when(c.ts)),
            _td(c.trigger),
            _td(c.strategy),
            _td(c.before, number=True),
            _td(c.after, number=True),
            _td(c.reduction, number=True),
            _td("" if c.reduction_share is None else f"{c.reduction_share:.1%}", number=True),
            _td(c.through_seq, number=True),
        ]
        for c in fold.checkpoints
    )
    headers = (
        "epoch",
        "seq",
        "time",
        "trigger",
        "strategy",
        "tokens before",
        "tokens after",
        "reduction",
        "reduction %",
        "through seq",
    )
    return _table(headers, rows, "checkpoints") + _more(
        len(fold.checkpoints), fold.checkpoint_count, "checkpoints"
    )


def _failures_html(fold: SessionFold) -> str:
    if not fold.failures:
        return "<p>none</p>\n"
    counts = ", ".join(f"{n:,} {kind}" for kind, n in sorted(fold.failure_counts.items()))
    rows = (
        [
            _td(f.seq, number=True),
            _td(_when(f.ts)),
            _td(f.turn_id or ""),
            _td(f.kind, css="bad"),
            _td(_clip(f.what)),
        ]
        for f in fold.failures
    )
    return (
        f"<p>{esc(counts)}</p>\n"
        + _table(("seq", "time", "turn", "kind", "what"), rows, "failures")
        + _more(len(fold.failures), fold.failure_count, "failures")
    )


def session_page(entry: SessionEntry) -> str:
    head = '<p><a href="../index.html">all sessions</a> · <a href="../verify.html">verify</a></p>\n'
    title = f"session {entry.sid}"
    verify = (
        "<h2>verify</h2>\n"
        + (f'<p class="ok">{esc(entry.verify_result)}</p>\n' if not entry.problems else "")
        + _findings("problems", entry.problems, "bad")
        + _findings("warnings", entry.warnings, "warn")
    )
    fold, timeline = entry.fold, entry.timeline
    if fold is None or timeline is None:
        body = (
            head
            + f"<h1>{esc(title)}</h1>\n"
            + '<p class="bad">corrupt: this session cannot be read through the checked path, '
            "so none of its figures are shown.</p>\n"
            + f'<p class="mono">{esc(entry.error or "")}</p>\n'
            + verify
        )
        return _page(title, body)
    facts = [
        ("model", fold.model),
        ("workspace", fold.workspace),
        ("context window", "" if fold.context_window is None else f"{fold.context_window:,}"),
        ("events", f"{fold.events:,} (seq 1..{fold.last_seq:,})"),
        ("turns", f"{fold.turns:,} started, {fold.turns_completed:,} completed"),
        ("state", entry.state + (f" ({fold.open_turn})" if fold.open_turn else "")),
        ("prompt tokens", _tokens(fold.prompt_tokens, fold.prompt_reports, fold.responses)),
        ("completion tokens", _tokens(fold.completion_tokens, fold.completion_reports, fold.responses)),
        ("first activity", _when(fold.first_ts)),
        ("last activity", _when(fold.last_ts)),
    ]
    if fold.parent_session is not None:
        facts.append(("forked from", f"{fold.parent_session} at seq {fold.parent_seq}"))
    facts_html = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>\n" for k, v in facts)
    reduced = (
        f" (reduced to the first, lowest, highest and last point per {timeline.run_width:,} seqs)"
        if timeline.run_width > 1
        else ""
    )
    body = (
        head
        + f"<h1>{esc(title)}</h1>\n"
        + f'<table class="facts">\n{facts_html}</table>\n'
        + f"<h2>timeline</h2>\n<p>context tokens per request, thresholds and events{esc(reduced)}</p>\n"
        + f'<img class="timeline" src="{entry.key}.svg" alt="timeline of {esc(title)}">\n'
        + f"<h2>checkpoints ({fold.checkpoint_count:,})</h2>\n"
        + _checkpoints_html(fold)
        + f"<h2>failures ({fold.failure_count:,})</h2>\n"
        + _failures_html(fold)
        + verify
    )
    return _page(title, body)


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
) -> ReportResult:
    """Verify the store at `root`, read every session, and write the report into `out` (module doc).

    The target is checked first (`ReportRefused`, nothing written); the
    store is only read.
    """
    from cairn.store import Journal
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
        entries: list[SessionEntry] = []
        with Journal.open(root, readonly=True) as journal:
            summaries = [s for s in journal.sessions() if s.last_seq > 0]
            total, done = sum(s.last_seq for s in summaries), 0
            for summary in summaries:
                entry = read_session(journal, summary.sid, summary.last_seq)
                entry.problems = [p for p in verify.problems if p.sid == summary.sid]
                entry.warnings = [p for p in verify.warnings if p.sid == summary.sid]
                _write_session(stage / "sessions", entry)
                if entry.fold is None:
                    result.corrupt.append(entry.sid)
                    if warn is not None:
                        warn(f"session {entry.sid} is corrupt: {entry.error}")
                else:
                    result.events += entry.fold.events
                entry.fold, entry.timeline = _row_only(entry.fold), None  # keep the row, not the page
                entries.append(entry)
                done += summary.last_seq
                if progress is not None:
                    progress(done, total)
        result.sessions = len(entries)
        generated = iso(now_ms)
        shown_root = str(root)
        (stage / "index.html").write_text(
            index_page(shown_root, entries, verify, generated), encoding="utf-8"
        )
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
        _commit(out, stage)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return result


def _row_only(fold: SessionFold | None) -> SessionFold | None:
    """The fold without its listed rows: what the index page needs of a session already written."""
    if fold is not None:
        fold.checkpoints, fold.failures = [], []
    return fold


def _write_session(folder: Path, entry: SessionEntry) -> None:
    if entry.timeline is not None:
        save(entry.timeline, folder / f"{entry.key}.svg")
    (folder / f"{entry.key}.html").write_text(session_page(entry), encoding="utf-8")


def _commit(out: Path, stage: Path) -> None:
    """Move the staged report into `out`: the sessions folder, the pages, the manifest last."""
    old = out / "sessions"
    retired = stage / "sessions.old"
    if old.exists():
        os.rename(old, retired)
    os.rename(stage / "sessions", old)
    for name in ("index.html", "verify.html", MANIFEST):
        os.replace(stage / name, out / name)


def now_ms() -> int:
    """The current time in unix milliseconds (the report's `generated`)."""
    return int(dt.datetime.now(tz=dt.UTC).timestamp() * 1000)
