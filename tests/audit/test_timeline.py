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
    "turn-cancelled": "cancelled",
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
    assert data.turn_starts == [2, 10] and data.turn_numbers == [1, 2]
    # the checkpoint's arrow: from the context before it (500) by what it saved (900): no request after
    assert data.markers == [
        Marker("provider-error", 7, "provider error: server", 500),
        Marker("checkpoint", 8, "checkpoint threshold/fallback: replaced 1000 → 100", 500, 0),
        Marker("interrupted", 9, "turn failed (interrupted)", 0),
    ]
    assert data.last_seq == 11
    labels = [text.get_text() for text in render(data).axes[0].texts if text.get_text()]
    assert labels == ["threshold/fallback: replaced 1000 → 100; context 500 → 0"]


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
            stopped = sum(1 for r in rs if isinstance(r.event, TurnFailed) and r.event.phase == "interrupted")
            expected.subtract({"turn-failed": stopped})  # an interrupted turn has a marker of its own
            expected.update({"interrupted": stopped})
            expected = +expected
            assert Counter(m.kind for m in data.markers) == expected
            projections = [
                (r.seq, r.event.projected_tokens) for r in requests if r.event.projected_tokens is not None
            ]
            for m in data.markers:
                if m.kind == "checkpoint":  # drawn as the drop the curve shows (issue 27)
                    (cp,) = [r.event for r in rs if r.seq == m.seq]
                    assert isinstance(cp, CheckpointCommitted)
                    assert f"replaced {cp.source_tokens} → {cp.replacement_tokens}" in m.label
                    before = [y for seq, y in projections if seq < m.seq]
                    after = [y for seq, y in projections if seq > m.seq]
                    assert m.y == (before[-1] if before else 0)
                    if after:
                        assert m.y_after == after[0]
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
    ax, lanes = figure.axes  # the context above, the markers' lanes below (issue 27: none hides another)
    lines = {line.get_label(): line for line in ax.get_lines()}
    # the x axis is the turn: turn 1 starts at 1 (seq 2) and its events spread across [1, 2) by seq
    # (seqs 2..7 of 7 events: seq s at 1 + (s - 2) / 6); seq 1 (the session's start) at 0.5
    projection = lines["context tokens, local projection"]
    assert list(projection.get_xdata()) == pytest.approx([1 + 1 / 6, 1 + 3 / 6])
    assert list(projection.get_ydata()) == [500, 700]
    provider = lines["context tokens, provider"]
    assert list(provider.get_xdata()) == pytest.approx([1 + 1 / 6, 1 + 3 / 6])
    assert list(provider.get_ydata()) == [480, 650]
    lane = {line.get_label(): line for line in lanes.get_lines()}
    assert list(lane["failed turn (1)"].get_xdata()) == pytest.approx([1 + 5 / 6])
    assert [t.get_text() for t in lanes.get_yticklabels()] == ["failed turn (1)"]
    (turns,) = [c for c in ax.collections if c.get_label() == "turn start"]
    assert [segment[0][0] for segment in turns.get_segments()] == [1]
    # far below the thresholds: the y axis spans the context (700 with 30 % above), not the window
    assert ax.get_ylim() == pytest.approx((0, 910))
    assert list(lines["context window (100000)"].get_ydata()) == [100_000, 100_000]
    assert list(lines["compaction threshold (72000)"].get_ydata()) == [72_000, 72_000]
    assert list(lines["hand-off threshold (63000)"].get_ydata()) == [63_000, 63_000]
    assert [text.get_text() for text in ax.texts] == []  # no checkpoint, no checkpoint label
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "output reserve (10000)" in legend and "turn start" in legend
    assert ax.get_title() == "session s · model m-2"
    assert (lanes.get_xlabel(), ax.get_ylabel()) == ("turn (its events in log order across it)", "tokens")


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


def long_session(requests: int) -> list[EventBase]:
    """Turns of 10 requests with a saw-tooth projection (up by 7 per request, a checkpoint every 500
    requests drops it to 100), each request's usage, and a provider error every 100 requests."""
    events: list[EventBase] = [SessionStarted(workspace="/w", model="m", context_window=100_000)]
    tokens = 100
    for i in range(requests):
        if i % 10 == 0:
            events.append(TurnStarted(turn_id=f"t{i}"))
        tokens += 7
        events.append(request(f"r{i}", tokens))
        events.append(Usage(request_id=f"r{i}", prompt_tokens=tokens - 3))
        if i % 100 == 99:
            events.append(ProviderError(request_id=f"r{i}", error_class="server", output_delivered=False))
        if i % 500 == 499:
            events.append(checkpoint(i // 500 + 1, len(events)))
            tokens = 100
    return events


def test_reduced_to_runs_the_data_keeps_every_peak_and_counts_every_marker() -> None:
    events = long_session(20_000)
    span = len(events)
    full = timeline_data("s", records(events))
    reduced = timeline_data("s", records(events), buckets=100, span=span)
    assert reduced.run_width == -(-span // 100)
    assert len(full.projected) == 20_000 and len(reduced.projected) <= 400
    assert len(reduced.provider) <= 400 and len(reduced.turn_starts) == 100
    # the peaks (before each checkpoint) and the troughs after them are all drawn
    assert max(y for _, y in reduced.projected) == max(y for _, y in full.projected) == 100 + 500 * 7
    full_peaks = {x for x, y in full.projected if y == 3600}
    assert full_peaks <= {x for x, _ in reduced.projected} and len(full_peaks) == 40
    assert set(reduced.projected) <= set(full.projected) and set(reduced.provider) <= set(full.provider)
    assert reduced.projected == sorted(reduced.projected)
    assert reduced.marker_counts == full.marker_counts == {"provider-error": 200, "checkpoint": 40}
    assert len(reduced.markers) <= 200 and set(reduced.markers) <= set(full.markers)
    figure = render(reduced)
    lanes = [text.get_text() for text in figure.axes[1].get_yticklabels()]
    assert lanes == ["checkpoint (40)", "provider error (200)"]


def test_a_session_shorter_than_its_runs_is_not_reduced() -> None:
    events = long_session(120)
    full = timeline_data("s", records(events))
    assert timeline_data("s", records(events), buckets=1000, span=len(events)) == full
    assert full.run_width == 1


def test_a_session_near_its_thresholds_is_drawn_up_to_its_window_with_a_lane_per_marker_kind(
    pristine: Path,
) -> None:
    with Journal.open(pristine, readonly=True) as journal:
        data = timeline_data("demo-1", journal.read("demo-1"))
    ax, lanes = render(data).axes
    assert ax.get_ylim() == pytest.approx((0, 16_000 * 1.04))
    kinds = [t.get_text().rsplit(" (", 1)[0] for t in lanes.get_yticklabels()]
    assert kinds == ["hand-off", "slimming", "checkpoint"]  # one row each: no marker hides another
    assert ax.get_xlim()[1] == pytest.approx(data.turn_numbers[-1] + 1)  # the last turn ends the axis
