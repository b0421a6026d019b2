"""`cairn report`: the HTML pages, parsed with html.parser, against the log; hostile text; bad targets.

The store (conftest) holds every event kind, two forks, a blob and one
session with a corrupted line. The sessions table, each session's
checkpoints and failures, and verify's findings are compared with the log
read through `Journal.read`; every link and picture of every page must
resolve to a file of the report.
"""

from __future__ import annotations

import datetime as dt
import os
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from cairn import cli
from cairn.audit.report import MANIFEST, SessionFold, page_key
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    Handoff,
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
from cairn.store import Journal
from tests.audit.conftest import BROKEN

FAILURE_KINDS = (TurnFailed, ProviderError, CompactionFailed)


class Page(HTMLParser):
    """What a page holds: its tables (by class) as rows of cell texts, links, and every tag seen."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.links: list[tuple[str, str]] = []  # (tag, href or src)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        values = dict(attrs)
        if tag == "table":
            self._table = values.get("class") or ""
            self.tables.setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        for name in ("href", "src"):
            if values.get(name) is not None:
                self.links.append((tag, str(values[name])))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def rows(self, table: str) -> list[dict[str, str]]:
        """The rows of `table` as dicts by its header."""
        header, *body = self.tables[table]
        return [dict(zip(header, row, strict=True)) for row in body]


def report(store: Path, out: Path, *extra: str) -> int:
    return cli.main(["report", "--store", str(store), "--out", str(out), *extra])


def parse(path: Path) -> Page:
    return Page(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def reported(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "html"
    assert report(pristine, out) == 1  # 1: verify found problems, a session is corrupt
    return out


def n(value: int) -> str:
    return f"{value:,}"


def shown_time(ms: int) -> str:
    """A log time as the pages show it: UTC to the second."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def test_the_sessions_table_equals_the_log(pristine: Path, reported: Path) -> None:
    rows = {row["session"]: row for row in parse(reported / "index.html").rows("sessions")}
    assert sorted(rows) == [
        "approved",
        BROKEN,
        "cancelled",
        "demo-1",
        "demo-1-fork",
        "demo-2",
        "demo-3",
        "demo-4",
        "demo-5",
        "extra",
        "extra-fork",
        "interrupted",
    ]
    with Journal.open(pristine, readonly=True) as journal:
        for sid, row in rows.items():
            if sid == BROKEN:
                continue
            records = list(journal.read(sid))
            events = [r.event for r in records]
            usage = [e for e in events if isinstance(e, Usage)]
            models = [e.model for e in events if isinstance(e, SessionStarted)]
            failed = [e for e in events if isinstance(e, TurnFailed)]
            interrupted = sum(e.phase == "interrupted" for e in failed)
            errors = sum(isinstance(e, ProviderError | CompactionFailed) for e in events)
            assert row == {
                "session": sid,
                "model": models[-1],
                "events": n(len(records)),
                "turns": n(sum(isinstance(e, TurnStarted) for e in events)),
                "completed": n(sum(isinstance(e, TurnCompleted) for e in events)),
                "failed": n(len(failed) - interrupted),
                "interrupted": n(interrupted),
                "prompt tokens": n(sum(u.prompt_tokens or 0 for u in usage)),
                "completion tokens": n(sum(u.completion_tokens or 0 for u in usage)),
                "hand-offs": n(sum(isinstance(e, Handoff) for e in events)),
                "checkpoints": n(sum(isinstance(e, CheckpointCommitted) for e in events)),
                "errors recovered": n(errors),
                "cost": "",  # no price table given
                "state": "ok",
                "last activity": shown_time(records[-1].ts),
                "verify": "ok",
            }
    # literally, what the fixture made: the demo's checkpoints, the extra session's failed turn and
    # its provider error, the interrupted session's turn stopped mid-tool
    assert [rows[s]["checkpoints"] for s in ("demo-1", "demo-1-fork", "extra")] == ["2", "2", "0"]
    assert [(rows[s]["failed"], rows[s]["errors recovered"]) for s in ("extra", "extra-fork")] == [
        ("1", "1")
    ] * 2
    assert rows["demo-1"]["failed"] == "0" and rows["demo-1"]["interrupted"] == "0"
    assert rows["demo-1"]["events"] == "394" and rows["extra"]["turns"] == "2"
    # a corrupt session: shown as corrupt, no figure of it
    broken = rows[BROKEN]
    assert broken["state"] == "corrupt"
    assert broken["verify"] == "3 problems"
    assert [broken[c] for c in ("model", "events", "turns", "checkpoints", "failed", "last activity")] == [
        ""
    ] * 6


def test_the_store_totals_add_up_the_sessions(pristine: Path, reported: Path) -> None:
    """Issue 27: the index opens with the store's totals, over every readable session."""
    page = parse(reported / "index.html")
    totals = {row[0]: row[1] for row in page.tables["totals"]}
    with Journal.open(pristine, readonly=True) as journal:
        events = [r.event for s in journal.sessions() if s.sid != BROKEN for r in journal.read(s.sid)]
    started = sum(isinstance(e, TurnStarted) for e in events)
    completed = sum(isinstance(e, TurnCompleted) for e in events)
    assert totals["sessions"] == n(len(page.rows("sessions")) - 1)  # the corrupt one is not counted
    assert totals["events"] == n(len(events))
    assert totals["turns"].startswith(f"{n(started)} started: {n(completed)} completed, ")
    assert totals["requests"].startswith(n(sum(isinstance(e, Request) for e in events)))
    assert totals["hand-offs"] == n(sum(isinstance(e, Handoff) for e in events))
    llm = sum(isinstance(e, CheckpointCommitted) and e.strategy == "llm" for e in events)
    checkpoints = sum(isinstance(e, CheckpointCommitted) for e in events)
    assert (
        totals["checkpoints"]
        == f"{n(checkpoints)} ({n(llm)} by LLM summary, {n(checkpoints - llm)} by the fallback)"
    )
    usage = [e for e in events if isinstance(e, Usage)]
    assert totals["prompt tokens"] == n(sum(u.prompt_tokens or 0 for u in usage))


def test_every_link_and_picture_resolves_to_a_file_of_the_report(reported: Path) -> None:
    pages = sorted(reported.rglob("*.html"))
    assert len(pages) == 2 + 12 + 11  # index, verify, one page per session, a transcript per sound one
    targets: set[Path] = set()
    anchored = 0
    for page in pages:
        for tag, link in parse(page).links:
            assert "://" not in link and not link.startswith(("/", "javascript:", "data:")), link
            path, _, fragment = link.partition("#")
            target = (page.parent / path).resolve()
            assert target.is_file(), f"{page.name}: {tag} {link}"
            assert reported.resolve() in target.parents
            targets.add(target)
            if fragment:  # a seq of the session page, linked to its row in the transcript (issue 27)
                ids = {dict(attrs).get("id") for _, attrs in parse(target).tags}
                assert fragment in ids, f"{page.name}: {link} names no row of {target.name}"
                anchored += 1
    assert anchored > 0
    session_pages = {p.resolve() for p in (reported / "sessions").glob("*.html")}
    assert session_pages <= targets  # every session's page and transcript is linked
    # every picture is shown by a page, and is an SVG document
    pictures = {p.resolve() for p in (reported / "sessions").glob("*.svg")}
    assert len(pictures) == 11 and pictures <= targets  # every sound session
    for picture in pictures:
        assert ET.parse(picture).getroot().tag == "{http://www.w3.org/2000/svg}svg"


def test_each_session_page_lists_its_checkpoints_and_failures_from_the_log(
    pristine: Path, reported: Path
) -> None:
    with Journal.open(pristine, readonly=True) as journal:
        for summary in journal.sessions():
            if summary.sid == BROKEN:
                continue
            page = parse(reported / "sessions" / f"{page_key(summary.sid)}.html")
            records = list(journal.read(summary.sid))
            checkpoints = [r for r in records if isinstance(r.event, CheckpointCommitted)]
            if checkpoints:
                assert [
                    (
                        row["seq"],
                        row["trigger"],
                        row["strategy"],
                        row["tokens before"],
                        row["tokens after"],
                        row["reduction"],
                    )
                    for row in page.rows("checkpoints")
                ] == [
                    (
                        n(r.seq),
                        r.event.trigger,
                        r.event.strategy,
                        n(r.event.source_tokens),
                        n(r.event.replacement_tokens),
                        n(r.event.source_tokens - r.event.replacement_tokens),
                    )
                    for r in checkpoints
                ]
            else:
                assert "checkpoints" not in page.tables
            failures = [r for r in records if isinstance(r.event, FAILURE_KINDS)]
            if failures:
                assert [(row["seq"], row["kind"]) for row in page.rows("failures")] == [
                    (n(r.seq), _failure_kind(r.event)) for r in failures
                ]
            else:
                assert "failures" not in page.tables
            results = [r.event for r in records if isinstance(r.event, ToolResult)]
            if results:  # issue 26 point 3: who ran each tool (an MCP server, or the host), with counts
                expected = Counter(
                    (e.server or "(the host)", e.server_tool or e.tool_name, e.tool_name) for e in results
                )
                shown = {
                    (row["server"], row["tool"], row["name to the model"]): row["calls"]
                    for row in page.rows("tools")
                }
                assert shown == {key: n(count) for key, count in expected.items()}
            else:
                assert "tools" not in page.tables
            facts = {row[0]: row[1] for row in page.tables["facts"]}
            assert facts["events"] == f"{n(len(records))} (seq 1..{n(records[-1].seq)})"
            (img,) = [link for tag, link in page.links if tag == "img"]
            assert img == f"{page_key(summary.sid)}.svg"
    extra = parse(reported / "sessions" / f"{page_key('extra')}.html")
    kinds = Counter(row["kind"] for row in extra.rows("failures"))
    assert kinds == {"provider error": 1, "failed turn": 1}
    (error,) = [row for row in extra.rows("failures") if row["kind"] == "provider error"]
    assert "bad-request (HTTP 400)" in error["what"] and "this request is malformed" in error["what"]


def _failure_kind(event: Any) -> str:
    if isinstance(event, TurnFailed):
        return "interrupted turn" if event.phase == "interrupted" else "failed turn"
    return "provider error" if isinstance(event, ProviderError) else "compaction failed"


def test_the_corrupt_session_page_shows_the_error_and_no_figures(reported: Path) -> None:
    page = parse(reported / "sessions" / f"{page_key(BROKEN)}.html")
    text = "".join(page.text)
    assert "corrupt: this session cannot be read" in text and "checksum mismatch" in text
    assert not any(tag == "img" for tag, _ in page.links)
    assert set(page.tables) == set()  # no facts, no checkpoints, no failures
    assert "[corrupt-line]" in text and "[seq-gap]" in text  # verify's findings naming it
    assert not (reported / "sessions" / f"{page_key(BROKEN)}.svg").exists()


def test_the_verify_page_lists_what_verify_found(reported: Path, pristine: Path) -> None:
    from cairn.store.verify import verify_store

    found = verify_store(pristine)
    page = parse(reported / "verify.html")
    items = [text for text in page.text if "[" in text and "]" in text]
    assert items == [str(p) for p in found.problems]
    assert len(items) == 4
    index = "".join(parse(reported / "index.html").text)
    assert "4 problems found" in index


HOSTILE = "$\\frac{$</td><script>alert('x')</script>\"'&\x1b[31m\x07\u202e<!--"


def test_hostile_text_from_the_log_reaches_the_html_escaped(tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "out"
    with Journal.open(store) as journal:
        journal.append(
            "evil",
            [
                SessionStarted(workspace=f"/w/{HOSTILE}", model=f"<script>m</script>{HOSTILE}"),
                TurnStarted(turn_id=f"t{HOSTILE}"),
                ProviderError(
                    request_id=f"r{HOSTILE}",
                    error_class="server",
                    output_delivered=False,
                    message=f"<img src=x onerror=alert(1)>{HOSTILE}",
                ),
                CompactionFailed(epoch=1, attempt=1, reason="error", consecutive_failures=1, detail=HOSTILE),
                TurnFailed(turn_id=f"t{HOSTILE}", phase="provider", error_class="X", error=HOSTILE),
            ],
            expected_seq=0,
        )
    assert report(store, out) == 0
    shown = HOSTILE.replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\u202e", "\\u202e")
    for path in out.rglob("*.html"):
        raw = path.read_text(encoding="utf-8")
        assert not any(c in raw for c in "\x1b\x07\u202e\x00")
        assert "<script" not in raw.lower() and "<img src=x" not in raw and "<!--" not in raw
        page = parse(path)
        for tag, attrs in page.tags:
            assert tag in (
                "html",
                "head",
                "meta",
                "title",
                "style",
                "body",
                "div",
                "h1",
                "h2",
                "h3",
                "p",
                "a",
                "span",
                "table",
                "thead",
                "tbody",
                "tr",
                "th",
                "td",
                "ul",
                "li",
                "img",
                "code",
            )
            assert not any(name.startswith("on") for name, _ in attrs)
    page = parse(out / "sessions" / f"{page_key('evil')}.html")
    facts = {row[0]: row[1] for row in page.tables["facts"]}
    assert facts["model"] == f"<script>m</script>{shown}"
    assert facts["workspace"] == f"/w/{shown}"
    what = [row["what"] for row in page.rows("failures")]
    assert what == [
        f"server on r{shown}: <img src=x onerror=alert(1)>{shown}",
        f"error (epoch 1, attempt 1, 1 in a row, trigger threshold): {shown}",
        f"phase provider: X: {shown}",
    ]
    assert [row["turn"] for row in page.rows("failures")] == [f"t{shown}"] * 3
    (row,) = parse(out / "index.html").rows("sessions")
    assert row["model"] == f"<script>m</script>{shown}"
    assert (row["failed"], row["errors recovered"]) == ("1", "2")
    assert row["state"] == "ok"


def test_bad_targets_are_refused_before_anything_is_written(pristine: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "file.html"
    a_file.write_text("mine")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    for bad in (a_file, foreign, link, tmp_path / "no" / "such" / "dir"):
        assert report(pristine, bad) == 2
    assert cli.main(["report", "--nats", "nats://127.0.0.1:1", "--out", str(tmp_path / "new")]) == 2
    assert report(tmp_path / "no-store", tmp_path / "new") == 2
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert a_file.read_text() == "mine" and list(real.iterdir()) == []


def test_a_former_report_is_replaced_and_a_link_inside_it_refused(pristine: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with Journal.open(tmp_path / "small") as journal:
        journal.append("only", [SessionStarted(workspace="/w", model="m")], expected_seq=0)
    assert report(tmp_path / "small", out) == 0
    key = page_key("only")
    assert sorted(p.name for p in (out / "sessions").iterdir()) == [
        f"{key}-transcript.html",
        f"{key}.html",
        f"{key}.svg",
    ]
    assert report(pristine, out) == 1  # the same directory, now of the other store
    assert len(list((out / "sessions").glob("*.html"))) == 12 + 11  # and a transcript per sound session
    assert not (out / "sessions" / f"{page_key('only')}.html").exists()
    assert sorted(p.name for p in out.iterdir()) == [
        "cairn-report.json",
        "index.html",
        "sessions",
        "store.svg",
        "verify.html",
    ]
    os.symlink(tmp_path, out / "elsewhere")
    assert report(pristine, out) == 2
    (out / "elsewhere").unlink()
    (out / MANIFEST).write_text("{}")
    assert report(pristine, out) == 2  # not a report's manifest


def test_the_fold_lists_at_most_a_thousand_rows_and_counts_them_all() -> None:
    events = [SessionStarted(workspace="/w", model="m"), TurnStarted(turn_id="t1")]
    events += [
        ProviderError(request_id=f"r{i}", error_class="server", output_delivered=False) for i in range(1005)
    ]
    fold = SessionFold(sid="s")
    for i, event in enumerate(events):
        fold.add(Record(pos=i, sid="s", seq=i + 1, ts=1000 + i, prev=GENESIS, event=event))
    assert len(fold.failures) == 1000 and fold.failure_count == 1005
    assert fold.failures[0].turn_id == "t1" and fold.failures[-1].seq == 1002
    assert (fold.events, fold.turns, fold.last_ts, fold.open_turn) == (1007, 1, 2006, "t1")


def test_failure_counts_are_said_in_words_that_agree(pristine: Path, reported: Path) -> None:
    """Issue 27's text bugs: `2 interrupted turn`, and `interrupted: interrupted`."""
    with Journal.open(pristine, readonly=True) as journal:
        interrupted = [r.event for r in journal.read("interrupted") if isinstance(r.event, TurnFailed)]
    assert len(interrupted) >= 2 and all(e.phase == "interrupted" for e in interrupted)
    page = parse(reported / "sessions" / f"{page_key('interrupted')}.html")
    text = " ".join(page.text)
    assert f"{len(interrupted)} interrupted turns" in text
    kinds = [(row["kind"], row["what"]) for row in page.rows("failures")]
    assert all(kind == "interrupted turn" and "interrupted" not in what.split(":")[0] for kind, what in kinds)


def test_each_session_has_a_transcript_with_what_was_said_and_the_checkpoints_where_they_happened(
    pristine: Path, reported: Path, tmp_path: Path
) -> None:
    """Issue 27: a transcript per session, linked from its page: every message, answer, tool result and
    turn end, each checkpoint at its seq with what it replaced, hand-offs only when asked."""
    with Journal.open(pristine, readonly=True) as journal:
        records = list(journal.read("demo-1"))
    session = parse(reported / "sessions" / f"{page_key('demo-1')}.html")
    assert ("a", f"{page_key('demo-1')}-transcript.html") in session.links
    page = parse(reported / "sessions" / f"{page_key('demo-1')}-transcript.html")
    rows = page.rows("transcript")
    by_seq = {int(row["seq"].replace(",", "")): row for row in rows}
    said = [r for r in records if isinstance(r.event, UserMessage | AssistantMessage | ToolResult)]
    assert [(r.seq, _who(r.event)) for r in said] == [
        (seq, row["who"].split(" (")[0])
        for seq, row in by_seq.items()
        if row["who"] in _WHO or row["who"].startswith("tool ")
    ]
    for record in records:
        if isinstance(record.event, CheckpointCommitted):
            e = record.event
            assert by_seq[record.seq]["who"] == "checkpoint"
            assert (
                f"seq 1..{e.through_seq} replaced, {n(e.source_tokens)} -> {n(e.replacement_tokens)} tokens"
                in (by_seq[record.seq]["what"])
            )
    handoffs = [r.seq for r in records if isinstance(r.event, Handoff)]
    assert handoffs and not any(by_seq.get(seq, {}).get("who") == "hand-off" for seq in handoffs)
    out = tmp_path / "with-handoffs"
    assert report(pristine, out, "--handoffs") == 1
    shown = parse(out / "sessions" / f"{page_key('demo-1')}-transcript.html").rows("transcript")
    assert [int(row["seq"].replace(",", "")) for row in shown if row["who"] == "hand-off"] == handoffs


_WHO = {"user", "assistant"}


def _who(event: Any) -> str:
    if isinstance(event, UserMessage):
        return "user"
    if isinstance(event, AssistantMessage):
        return "assistant"
    return f"tool {event.tool_name}"


def test_the_index_charts_the_stores_tokens_and_checkpoints_over_time(pristine: Path, reported: Path) -> None:
    """Issue 27: a chart of tokens and compactions over time, on the index; its data from the log."""
    from cairn.audit.report_chart import StoreChart

    page = parse(reported / "index.html")
    assert ("img", "store.svg") in page.links
    assert ET.parse(reported / "store.svg").getroot().tag == "{http://www.w3.org/2000/svg}svg"
    with Journal.open(pristine, readonly=True) as journal:
        sound = [s for s in journal.sessions() if s.sid != BROKEN]
        chart = StoreChart(min(s.created_ts for s in sound), max(s.updated_ts for s in sound))
        events = []
        for summary in sound:
            for record in chart.tap(journal.read(summary.sid)):
                events.append(record.event)
    usage = [e for e in events if isinstance(e, Usage)]
    assert sum(chart.tokens) == sum((u.prompt_tokens or 0) + (u.completion_tokens or 0) for u in usage) > 0
    assert sum(chart.checkpoints) == sum(isinstance(e, CheckpointCommitted) for e in events) > 0
    failed = sum(isinstance(e, TurnFailed) and e.phase != "interrupted" for e in events)
    assert sum(chart.failed) == failed > 0


def test_the_store_charts_time_ticks_read_as_clock_times() -> None:
    """The chart's time axis once read `49:28.500000` (minutes, seconds, microseconds) on a short
    store: ticks are the clock to the second, or to the millisecond between seconds, under a day
    (the axis label dates them), and date and minute over a longer span."""
    from cairn.audit.report_chart import axis_label, tick_label

    at = int(dt.datetime(2026, 12, 6, 10, 49, 28, 500_000, tzinfo=dt.UTC).timestamp() * 1000)
    assert tick_label(at, 3_000) == "10:49:28.5"
    assert tick_label(at + 500, 3_000) == "10:49:29"
    assert tick_label(at + 125, 3_000) == "10:49:28.625"
    assert axis_label(at, 3_000) == "time (UTC), 2026-12-06"
    assert tick_label(at, 3 * 86_400_000) == "2026-12-06 10:49"
    assert axis_label(at, 3 * 86_400_000) == "time (UTC)"
