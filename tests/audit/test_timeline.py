"""`cairn timeline`: the data drawn (series, thresholds, markers) against the log, and its figure."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from cairn import cli
from cairn.audit.timeline import Marker, render, timeline_data
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    CheckpointCommitted,
    EventBase,
    ProviderError,
    Request,
    SessionStarted,
    TurnFailed,
    TurnStarted,
    Usage,
)
from cairn.store import Journal
from tests.audit.conftest import BROKEN
from tests.store.helpers import checkpoint

#: the marker kind each event kind makes in the timeline
MARKER_OF = {
    "handoff": "handoff",
    "context-slimmed": "slimmed",
    "checkpoint-committed": "checkpoint",
    "compaction-failed": "compaction-failed",
    "provider-error": "provider-error",
    "turn-failed": "turn-failed",
}


def records(events: list[EventBase]) -> list[Record]:
    return [Record(pos=i, sid="s", seq=i + 1, ts=0, prev=GENESIS, event=e) for i, e in enumerate(events)]


def request(rid: str, projected: int | None) -> Request:
    return Request(
        request_id=rid,
        turn_id="t1",
        attempt=1,
        fingerprint="f",
        history_revision=0,
        projected_tokens=projected,
        phase="below_handoff",
        message_count=1,
        model="m-2",
    )


def test_the_data_of_a_handmade_session() -> None:
    data = timeline_data(
        "s",
        records(
            [
                SessionStarted(workspace="/w", model="m-1", context_window=100_000),
                TurnStarted(turn_id="t1"),
                request("r1", 500),
                Usage(request_id="r1", prompt_tokens=480),
                request("r2", None),  # no projection: no point, and its usage finds its request
                Usage(request_id="r2", prompt_tokens=900),
                ProviderError(request_id="r3", error_class="server", output_delivered=False),
                checkpoint(1, 6),
                TurnFailed(turn_id="t1", phase="interrupted"),
                TurnStarted(turn_id="t2"),
                Usage(request_id="r1", prompt_tokens=1),  # a request of another turn: not drawn
            ]
        ),
    )
    assert (data.window, data.reserve, data.input_budget) == (100_000, 10_000, 90_000)
    assert (data.handoff_threshold, data.compaction_threshold) == (63_000, 72_000)
    assert data.title == "session s · model m-2"
    assert data.projected == [(3, 500)]
    assert data.provider == [(3, 480), (5, 900)]
    assert data.turn_starts == [2, 10]
    assert data.markers == [
        Marker("provider-error", 7, "provider error: server", 500),
        Marker("checkpoint", 8, "checkpoint threshold/fallback: 1000 → 100", 1000, 100),
        Marker("interrupted", 9, "turn failed (interrupted)", 100),
    ]
    assert data.last_seq == 11
    labels = [text.get_text() for text in render(data).axes[0].texts if text.get_text()]
    assert labels == ["threshold/fallback: 1000 → 100"]


def test_the_data_of_every_session_equals_its_log(pristine: Path) -> None:
    with Journal.open(pristine, readonly=True) as journal:
        summaries = [s for s in journal.sessions() if s.sid != BROKEN]
        for summary in summaries:
            rs = list(journal.read(summary.sid))
            data = timeline_data(summary.sid, rs)
            requests = [r for r in rs if isinstance(r.event, Request)]
            assert data.projected == [
                (r.seq, r.event.projected_tokens) for r in requests if r.event.projected_tokens is not None
            ]
            usage = {r.event.request_id: r.event.prompt_tokens for r in rs if isinstance(r.event, Usage)}
            assert data.provider == [
                (r.seq, usage[r.event.request_id])
                for r in requests
                if usage.get(r.event.request_id) is not None
            ]
            assert len(data.turn_starts) == summary.counts.get("turn-started", 0)
            expected = Counter({MARKER_OF[k]: n for k, n in summary.counts.items() if k in MARKER_OF})
            assert Counter(m.kind for m in data.markers) == expected
            for m in data.markers:
                if m.kind == "checkpoint":
                    (cp,) = [r.event for r in rs if r.seq == m.seq]
                    assert isinstance(cp, CheckpointCommitted)
                    assert (m.y, m.y_after) == (cp.source_tokens, cp.replacement_tokens)
            assert (data.window, data.reserve, data.handoff_threshold, data.compaction_threshold) == (
                16_000,
                2_000,
                9_800,
                11_200,
            )
        demo_1 = timeline_data("demo-1", journal.read("demo-1"))
    assert Counter(m.kind for m in demo_1.markers) == {"slimmed": 29, "handoff": 2, "checkpoint": 2}
    assert len(demo_1.projected) == 84


def test_the_figure_draws_the_data() -> None:
    data = timeline_data(
        "s",
        records(
            [
                SessionStarted(workspace="/w", model="m-1", context_window=100_000),
                TurnStarted(turn_id="t1"),
                request("r1", 500),
                Usage(request_id="r1", prompt_tokens=480),
                request("r2", 700),
                Usage(request_id="r2", prompt_tokens=650),
                TurnFailed(turn_id="t1", phase="provider"),
            ]
        ),
    )
    figure = render(data)
    (ax,) = figure.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    projection = lines["context tokens, local projection"]
    assert list(projection.get_xdata()) == [3, 5] and list(projection.get_ydata()) == [500, 700]
    provider = lines["context tokens, provider"]
    assert list(provider.get_xdata()) == [3, 5] and list(provider.get_ydata()) == [480, 650]
    assert list(lines["failed turn (1)"].get_xdata()) == [7]
    assert list(lines["context window (100000)"].get_ydata()) == [100_000, 100_000]
    assert list(lines["compaction threshold (72000)"].get_ydata()) == [72_000, 72_000]
    assert list(lines["hand-off threshold (63000)"].get_ydata()) == [63_000, 63_000]
    assert [text.get_text() for text in ax.texts] == []  # no checkpoint, no checkpoint label
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "output reserve (10000)" in legend and "turn start" in legend
    assert ax.get_title() == "session s · model m-2"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("event seq in the session", "tokens")


def test_the_command_writes_png_and_svg_and_refuses_bad_input(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png, svg = tmp_path / "t.png", tmp_path / "t.svg"
    assert cli.main(["timeline", "demo-1", "--store", str(pristine), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["timeline", "extra", "--store", str(pristine), "--out", str(svg)]) == 0
    assert b"<svg" in svg.read_bytes()[:2000]
    bad = tmp_path / "bad.svg"
    assert cli.main(["timeline", BROKEN, "--store", str(pristine), "--out", str(bad)]) == 1
    assert cli.main(["timeline", "../x", "--store", str(pristine), "--out", str(bad)]) == 2
    assert cli.main(["timeline", "nope", "--store", str(pristine), "--out", str(bad)]) == 2
    assert cli.main(["timeline", "demo-1", "--store", str(pristine), "--out", str(tmp_path / "t.pdf")]) == 2
    assert cli.main(["timeline", "demo-1", "--store", str(pristine), "--out", str(tmp_path)]) == 2
    assert not bad.exists() and not (tmp_path / "t.pdf").exists()
    err = capsys.readouterr().err
    assert "checksum mismatch" in err and "no session 'nope'" in err
