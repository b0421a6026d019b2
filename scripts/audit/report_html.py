"""The report's HTML pages: the index of sessions, verify's findings, and one page per session."""

from __future__ import annotations

import html
from collections.abc import Iterable

from cairn import _console
from cairn._cli_output import iso
from cairn.audit.report_fold import SessionEntry, SessionFold
from cairn.audit.report_totals import cost_text, tokens_text, totals
from cairn.store.verify_report import Problem, VerifyReport

#: characters of one error text shown in a table cell
MAX_TEXT = 600


def esc(value: object) -> str:
    """`value` as HTML text: non-printable characters as escapes, then entities (module doc)."""
    return html.escape(_console.printable(value), quote=True)


def esc_lines(value: str) -> str:
    """`esc`, line by line: the newlines kept (a transcript's text), every other control escaped."""
    return "\n".join(esc(line) for line in value.split("\n"))


def _clip(text: str, width: int = MAX_TEXT) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
div.wide { overflow-x: auto; max-width: 100%; }
table.sessions { font-size: 0.8em; }
td.when { white-space: nowrap; }
.bad { color: #b00020; font-weight: bold; }
.warn { color: #8a5a00; }
.ok { color: #1b5e20; }
img.timeline { max-width: 100%; border: 1px solid #ddd; }
code, .mono { font-family: ui-monospace, monospace; }
td.said { white-space: pre-wrap; max-width: 60em; }
td.event { color: #666; }
td.tool { color: #333; background: #fafafa; }
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
    table = (
        f'<table class="{css_class}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n'
    )
    return f'<div class="wide">\n{table}</div>\n'


def _td(value: object, *, number: bool = False, css: str = "") -> str:
    classes = " ".join(c for c in ("n" if number else "", css) if c)
    shown = f"{value:,}" if number and isinstance(value, int) else value
    return f'<td class="{classes}">{esc(shown)}</td>' if classes else f"<td>{esc(shown)}</td>"


def _when(ms: int) -> str:
    """A time as the pages show it: UTC to the second, `2026-12-06 10:49:30` (the log keeps the ms)."""
    if not ms:
        return ""
    stamp = iso(ms)
    return stamp[:19].replace("T", " ") if len(stamp) >= 19 and stamp[10] == "T" else stamp


def _findings(title: str, problems: Iterable[Problem], css: str) -> str:
    items = "".join(f'<li class="{css}">{esc(p)}</li>\n' for p in problems)
    return f"<h3>{esc(title)}</h3>\n<ul>\n{items}</ul>\n" if items else ""


SESSION_COLUMNS = (
    "session",
    "model",
    "events",
    "turns",
    "completed",
    "failed",
    "interrupted",
    "prompt tokens",
    "completion tokens",
    "hand-offs",
    "checkpoints",
    "errors recovered",
    "cost",
    "state",
    "last activity",
    "verify",
)
#: what a failure kind is called when there are several
_PLURAL = {
    "interrupted turn": "interrupted turns",
    "failed turn": "failed turns",
    "provider error": "provider errors",
    "compaction failed": "compactions failed",
}
#: failure kinds that ended a turn (red); the others were recovered from (a retry, the fallback)
TURN_ENDING = frozenset({"interrupted turn", "failed turn"})


def counted(n: int, kind: str) -> str:
    """`1 failed turn`, `2 failed turns`."""
    return f"{n:,} {kind if n == 1 else _PLURAL.get(kind, kind)}"


def _session_row(entry: SessionEntry) -> list[str]:
    link = f'<td><a href="sessions/{entry.key}.html">{esc(entry.sid)}</a></td>'
    verify = _td(entry.verify_result, css="bad" if entry.problems else "ok")
    fold = entry.fold
    if fold is None:
        blanks = ["<td></td>"] * (len(SESSION_COLUMNS) - 4)  # all but session, state, activity, verify
        return [link, *blanks, _td("corrupt", css="bad"), "<td></td>", verify]
    return [
        link,
        _td(fold.model),
        _td(fold.events, number=True),
        _td(fold.turns, number=True),
        _td(fold.turns_completed, number=True),
        _td(fold.turns_failed, number=True, css="bad" if fold.turns_failed else ""),
        _td(fold.turns_interrupted, number=True, css="warn" if fold.turns_interrupted else ""),
        _td(tokens_text(fold.prompt_tokens, fold.prompt_reports, fold.responses), number=True),
        _td(tokens_text(fold.completion_tokens, fold.completion_reports, fold.responses), number=True),
        _td(fold.handoffs, number=True),
        _td(fold.checkpoint_count, number=True),
        _td(fold.errors_recovered, number=True),
        _td(cost_text(fold), number=True),
        _td(entry.state, css="warn" if fold.open_turn is not None else "ok"),
        _td(_when(fold.last_ts), css="when"),
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


def index_page(
    root: str,
    entries: list[SessionEntry],
    verify: VerifyReport,
    generated: str,
    *,
    currency: str | None = None,
    chart: bool = False,
) -> str:
    """The index page; `chart`: the store's chart (`store.svg`) was drawn, and is shown."""
    corrupt = sum(1 for e in entries if e.fold is None)
    body = (
        f"<h1>cairn report of {esc(root)}</h1>\n"
        f"<p>generated {esc(generated)}; {len(entries):,} sessions"
        + (f', <span class="bad">{corrupt} corrupt</span>' if corrupt else "")
        + "</p>\n"
        + _verify_summary(verify)
        + "<h2>totals</h2>\n"
        + (
            '<img class="timeline" src="store.svg" alt="tokens and checkpoints over time">\n'
            "<p>tokens the providers reported (bars), checkpoints and failed turns (markers), over time</p>\n"
            if chart
            else ""
        )
        + _facts_table(totals([e.fold for e in entries if e.fold is not None], currency), "totals")
        + "<h2>sessions</h2>\n"
        + _table(SESSION_COLUMNS, (_session_row(e) for e in entries), "sessions")
        + "<p>tokens: as the provider reported them; ≥: some responses came without usage; "
        "unknown: none reported. failed: turns an error ended; interrupted: turns a crash or stop ended; "
        "errors recovered: provider errors retried and compactions that failed, none of which ended a "
        "turn. Times are UTC.</p>\n"
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


def _at(key: str, seq: int) -> str:
    """A seq cell that links to the row of that seq in the session's transcript."""
    return f'<td class="n"><a href="{key}-transcript.html#s{seq}">{seq:,}</a></td>'


def _checkpoints_html(fold: SessionFold, key: str) -> str:
    if not fold.checkpoints:
        return "<p>none</p>\n"
    rows = (
        [
            _td(c.epoch, number=True),
            _at(key, c.seq),
            _td(_when(c.ts), css="when"),
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


def _tools_html(fold: SessionFold) -> str:
    """The tools the session's turns called: who ran each (an MCP server, or the host), calls, errors."""
    if not fold.tools:
        return "<p>none</p>\n"
    rows = (
        [
            _td(server or "(the host)"),
            _td(remote),
            _td(shown),
            _td(calls, number=True),
            _td(errors, number=True, css="bad" if errors else ""),
        ]
        for (server, remote, shown), (calls, errors) in sorted(fold.tools.items())
    )
    return _table(("server", "tool", "name to the model", "calls", "errors"), rows, "tools")


def _facts_table(facts: list[tuple[str, str]], css_class: str) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>\n" for k, v in facts)
    return f'<table class="{css_class}">\n{rows}</table>\n'


def _failures_html(fold: SessionFold, key: str) -> str:
    if not fold.failures:
        return "<p>none</p>\n"
    counts = ", ".join(counted(n, kind) for kind, n in sorted(fold.failure_counts.items()))
    ended = sum(n for kind, n in fold.failure_counts.items() if kind in TURN_ENDING)
    counts += f"; {ended:,} ended a turn" if ended else "; none ended a turn (each was recovered)"
    rows = (
        [
            _at(key, f.seq),
            _td(_when(f.ts), css="when"),
            _td(f.turn_id or ""),
            _td(f.kind, css="bad" if f.kind in TURN_ENDING else "warn"),
            _td(_clip(f.what)),
        ]
        for f in fold.failures
    )
    return (
        f"<p>{esc(counts)}</p>\n"
        + _table(("seq", "time", "turn", "kind", "what"), rows, "failures")
        + _more(len(fold.failures), fold.failure_count, "failures")
    )


def _session_facts(fold: SessionFold, entry: SessionEntry) -> list[tuple[str, str]]:
    """The facts table of a session's page."""
    facts = [
        ("model", fold.model),
        ("workspace", fold.workspace),
        ("context window", "" if fold.context_window is None else f"{fold.context_window:,}"),
        ("events", f"{fold.events:,} (seq 1..{fold.last_seq:,})"),
        (
            "turns",
            f"{fold.turns:,} started, {fold.turns_completed:,} completed, {fold.turns_failed:,} failed, "
            f"{fold.turns_interrupted:,} interrupted{_cancelled(fold)}",
        ),
        ("requests", f"{fold.requests:,}"),
        ("hand-offs", f"{fold.handoffs:,}"),
        ("state", entry.state + (f" ({fold.open_turn})" if fold.open_turn else "")),
        ("prompt tokens", tokens_text(fold.prompt_tokens, fold.prompt_reports, fold.responses)),
        ("completion tokens", tokens_text(fold.completion_tokens, fold.completion_reports, fold.responses)),
        ("first activity", _when(fold.first_ts)),
        ("last activity", _when(fold.last_ts)),
    ]
    if fold.parent_session is not None:
        facts.append(("forked from", f"{fold.parent_session} at seq {fold.parent_seq}"))
    return facts


def session_page(entry: SessionEntry) -> str:
    head = (
        '<p><a href="../index.html">all sessions</a> · <a href="../verify.html">verify</a>'
        + (f' · <a href="{entry.key}-transcript.html">transcript</a>' if entry.transcript is not None else "")
        + "</p>\n"
    )
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
    facts = _session_facts(fold, entry)
    facts_html = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>\n" for k, v in facts)  # "facts"
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
        + _checkpoints_html(fold, entry.key)
        + f"<h2>tools ({sum(calls for calls, _ in fold.tools.values()):,} calls)</h2>\n"
        + _tools_html(fold)
        + f"<h2>errors and failures ({fold.failure_count:,})</h2>\n"
        + _failures_html(fold, entry.key)
        + verify
    )
    return _page(title, body)


def transcript_page(entry: SessionEntry) -> str:
    """A session's transcript (`report_transcript`): every row, what the user never saw in grey."""
    transcript = entry.transcript
    assert transcript is not None
    title = f"transcript of session {entry.sid}"
    head = (
        '<p><a href="../index.html">all sessions</a> · '
        f'<a href="{entry.key}.html">session {esc(entry.sid)}</a></p>\n'
    )
    rows = (
        [
            f'<td class="n" id="s{r.seq}">{r.seq:,}</td>',  # what the session page's seqs link to
            _td(_when(r.ts), css="when"),
            _td(r.turn),
            _td(r.who, css=r.css),
            f'<td class="{esc(("said " + r.css).strip())}">{esc_lines(r.text)}</td>',
        ]
        for r in transcript.rows
    )
    hidden = (
        ""
        if transcript.handoffs
        else " Hand-offs are left out (<code>cairn report --handoffs</code> shows them)."
    )
    body = (
        head
        + f"<h1>{esc(title)}</h1>\n"
        + "<p>What was said and done, in log order: the user's messages, the answers and their tool calls, "
        "the tool results, the turns' ends; in grey what the user never saw (checkpoints with what they "
        f"replaced, slimming, errors).{hidden}</p>\n"
        + (
            _table(("seq", "time", "turn", "who", "what"), rows, "transcript")
            if transcript.rows
            else "<p>none</p>\n"
        )
        + (
            f"<p>{transcript.left_out:,} more rows not listed: <code>cairn log</code> has them all.</p>\n"
            if transcript.left_out
            else ""
        )
    )
    return _page(title, body)


def _cancelled(fold: SessionFold) -> str:
    """`, 2 cancelled` when the host cancelled turns of the session, else nothing."""
    return f", {fold.turns_cancelled:,} cancelled" if fold.turns_cancelled else ""
