"""`cairn timeline SESSION --out FILE.png|.svg`: one picture of a session's life, and the data it draws.

`timeline_data` is pure: it folds a session's records (in seq order) into
what the picture shows, keeping O(requests + markers), never the records.
Given `buckets` and the session's `span` (its last seq), it keeps
O(buckets) instead, flat in the session's length (`cairn report` draws
sessions of a million events so): the x axis is cut into `buckets` equal
runs of seqs; per run a series keeps its first, lowest, highest and last
point (so peaks and the saw teeth of compaction stay), each marker kind
its first marker, and the turn starts their first. `marker_counts` always
counts every marker. With runs of one seq nothing is dropped.
`render` draws it with matplotlib's Agg backend (no display needed).

The data is kept by event seq; the picture's x axis is the turn: turn N
starts at N, and the events of a turn spread across it in log order (a
session with no turn is drawn by seq). Drawn, on the main axes:
- per `request`: the local projection (`projected_tokens`) as a line, and
  the provider's figure (`prompt_tokens` of the `usage` with that
  request id) as dots at the request's seq;
- the context window, the input budget (window minus the output reserve,
  shaded between them: the reserve), and the hand-off (70 %) and compaction
  (80 %) thresholds of the budget, from the latest `session-started`
  (CONTEXT-RULES B1-B3, `actors.session.budget`);
- each checkpoint as an arrow from the context before it (the latest
  projection) to the next request's (the drop the curve shows; without a
  next request, the context less what the checkpoint saved), labelled with
  its trigger, strategy, and what it replaced (source -> replacement
  tokens: a reactive one after slimming replaces less than the drop);
- a thin vertical line at each turn start;
and below, one lane per kind of marker, so none hides another: hand-offs,
slimming (micro/snip, tokens saved), checkpoints, compaction failures,
provider errors, failed, interrupted and cancelled turns. The y axis spans
the window when the context came near the thresholds, else the context
itself (a short session is not a flat line at the bottom); the window and
thresholds are in the legend either way.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

from cairn._console import printable
from cairn.actors.session.budget import budget_for
from cairn.events.codec import Record
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
    ToolDeferred,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnDismissed,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)

#: marker kinds, in legend order: (matplotlib marker, colour, legend label)
MARKER_STYLES: dict[str, tuple[str, str, str]] = {
    "handoff": ("D", "tab:purple", "hand-off"),
    "slimmed": ("v", "tab:cyan", "slimming"),
    "checkpoint": ("s", "tab:green", "checkpoint"),
    "compaction-failed": ("X", "tab:olive", "compaction failed"),
    "provider-error": ("x", "tab:red", "provider error"),
    "turn-failed": ("P", "tab:red", "failed turn"),
    "interrupted": ("P", "tab:gray", "interrupted turn"),
    "cancelled": ("P", "tab:blue", "cancelled turn"),
}


@dataclass(frozen=True)
class Marker:
    kind: str
    seq: int
    label: str
    #: where it is drawn: the checkpoint's source tokens, else the latest projection at its seq
    y: int
    #: a checkpoint's replacement tokens (the arrow's end), else None
    y_after: int | None = None


@dataclass
class Timeline:
    sid: str
    model: str = ""
    window: int | None = None
    reserve: int | None = None
    input_budget: int | None = None
    handoff_threshold: int | None = None
    compaction_threshold: int | None = None
    #: (request seq, projected tokens) for each request with a projection
    projected: list[tuple[int, int]] = field(default_factory=list)
    #: (request seq, provider prompt tokens) for each request whose usage reported them
    provider: list[tuple[int, int]] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    #: each kept turn start's number in the session (1 for its first turn), beside `turn_starts`
    turn_numbers: list[int] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    last_seq: int = 0
    #: every marker of the session by kind, drawn or merged into a drawn one of its run
    marker_counts: dict[str, int] = field(default_factory=dict)
    #: seqs per run when the data was reduced to runs (`buckets`), else 1
    run_width: int = 1

    @property
    def title(self) -> str:
        return f"session {self.sid}" + (f" · model {self.model}" if self.model else "")


class _Series:
    """One series of (seq, tokens) points, reduced per run of `width` seqs to its first, lowest,
    highest and last point (all of them when `width` is 1): O(runs) memory."""

    def __init__(self, out: list[tuple[int, int]], width: int) -> None:
        self._out = out
        self._width = width
        self._run = -1
        self._kept: list[tuple[int, int]] = []

    def add(self, seq: int, value: int) -> None:
        if self._width == 1:
            self._out.append((seq, value))
            return
        run = (seq - 1) // self._width
        if run != self._run:
            self.flush()
            self._run = run
        kept = self._kept
        if not kept:
            kept.extend([(seq, value)] * 4)  # first, lowest, highest, last
            return
        if value < kept[1][1]:
            kept[1] = (seq, value)
        if value > kept[2][1]:
            kept[2] = (seq, value)
        kept[3] = (seq, value)

    def flush(self) -> None:
        if self._kept:
            self._out.extend(sorted(set(self._kept)))
            self._kept = []


def timeline_data(
    sid: str, records: Iterable[Record], *, buckets: int | None = None, span: int | None = None
) -> Timeline:
    # long: one match arm per event kind (assert_never keeps it total), beside the helpers they share
    """What `render` draws for one session (see the module doc); `records` in seq order.

    With `buckets` and `span` (the session's last seq, known beforehand), the
    series, markers and turn starts are reduced to at most `buckets` runs.
    """
    width = 1 if buckets is None or span is None else max(1, -(-span // max(1, buckets)))
    data = Timeline(sid=sid, run_width=width)
    projected, provider = _Series(data.projected, width), _Series(data.provider, width)
    request_seq: dict[str, int] = {}
    drawn: dict[str, int] = {}  # the run of each kind's latest drawn marker (and of the turn starts)
    level = 0  # the latest context figure, where markers without their own height sit
    turns = 0
    landing: int | None = None  # the drawn checkpoint whose arrow ends at the next projection

    def first_of_run(kind: str, seq: int) -> bool:
        run = (seq - 1) // width
        if drawn.get(kind) == run:
            return False
        drawn[kind] = run
        return True

    def add_marker(marker: Marker) -> None:
        data.marker_counts[marker.kind] = data.marker_counts.get(marker.kind, 0) + 1
        if first_of_run(marker.kind, marker.seq):
            data.markers.append(marker)

    def mark(kind: str, seq: int, label: str) -> None:
        add_marker(Marker(kind, seq, label, level))

    for record in records:
        event, seq = record.event, record.seq
        data.last_seq = seq
        match event:
            case SessionStarted():
                budget = budget_for(event.context_window, event.max_output_tokens)
                data.model = event.model
                data.window = event.context_window
                data.reserve = budget.reserve
                data.input_budget = budget.input_budget
                data.handoff_threshold = budget.handoff_threshold
                data.compaction_threshold = budget.compaction_threshold
            case TurnStarted():
                turns += 1
                if first_of_run(" turn", seq):
                    data.turn_starts.append(seq)
                    data.turn_numbers.append(turns)
                request_seq.clear()
            case Request():
                request_seq[event.request_id] = seq
                if event.model:
                    data.model = event.model
                if event.projected_tokens is not None:
                    projected.add(seq, event.projected_tokens)
                    level = event.projected_tokens
                    if landing is not None:  # the checkpoint before it lands here
                        data.markers[landing] = dataclasses.replace(data.markers[landing], y_after=level)
                        landing = None
            case Usage():
                at = request_seq.get(event.request_id)
                if at is not None and event.prompt_tokens is not None:
                    provider.add(at, event.prompt_tokens)
            case Handoff():
                mark("handoff", seq, f"hand-off (epoch {event.epoch})")
            case ContextSlimmed():
                mark("slimmed", seq, f"{event.mode} −{event.tokens_saved}")
            case CheckpointCommitted():
                label = (
                    f"checkpoint {event.trigger}/{event.strategy}: replaced "
                    f"{event.source_tokens} → {event.replacement_tokens}"
                )
                after = max(0, level - (event.source_tokens - event.replacement_tokens))
                drawn_before = len(data.markers)
                add_marker(Marker("checkpoint", seq, label, level, after))
                landing = drawn_before if len(data.markers) > drawn_before else landing
                level = after
            case CompactionFailed():
                mark("compaction-failed", seq, f"compaction failed: {event.reason}")
            case ProviderError():
                mark("provider-error", seq, f"provider error: {event.error_class}")
            case TurnFailed():
                kind = "interrupted" if event.phase == "interrupted" else "turn-failed"
                mark(kind, seq, f"turn failed ({event.phase})")
            case TurnCancelled():
                mark("cancelled", seq, "turn cancelled" + (f": {event.reason}" if event.reason else ""))
            case (
                UserMessage()
                | TurnCompleted()
                | AssistantMessage()
                | ToolResult()
                | OwnerChanged()
                | TurnDismissed()
                | ToolDeferred()
            ):
                pass  # no series or marker of the timeline
            case _:
                assert_never(event)  # a new kind must be placed here: mypy says so
    projected.flush()
    provider.flush()
    return data


def turn_axis(data: Timeline) -> Callable[[Sequence[int]], list[float]]:
    """Seqs as positions on the turn axis: turn N's start at N, its events across [N, N + 1) in log
    order (by linear interpolation between the kept turn starts); by seq when no turn started."""
    if not data.turn_starts:
        return lambda seqs: [float(seq) for seq in seqs]
    xp = [float(seq) for seq in data.turn_starts] + [float(data.last_seq + 1)]
    fp = [float(n) for n in data.turn_numbers] + [float(data.turn_numbers[-1] + 1)]
    if data.turn_starts[0] > 1:  # what came before the first turn (the session's start)
        xp.insert(0, 1.0)
        fp.insert(0, fp[0] - 0.5)

    def place(seqs: Sequence[int]) -> list[float]:
        out = []
        for seq in seqs:
            k = max(0, min(bisect.bisect_right(xp, seq) - 1, len(xp) - 2))
            out.append(fp[k] + (fp[k + 1] - fp[k]) * (seq - xp[k]) / (xp[k + 1] - xp[k]))
        return out

    return place


def render(data: Timeline) -> Any:
    """The figure of `data` (a matplotlib Figure, Agg canvas): the context and its limits on the main
    axes (the first), the markers in lanes below (the second, when there are any)."""
    from matplotlib.figure import Figure

    place = turn_axis(data)
    kinds = [kind for kind in MARKER_STYLES if any(m.kind == kind for m in data.markers)]
    figure = Figure(figsize=(12, 6.5 if kinds else 6), layout="constrained")
    grid = figure.add_gridspec(
        2 if kinds else 1, 1, height_ratios=(5, max(1, len(kinds)) * 0.45) if kinds else None
    )
    ax = figure.add_subplot(grid[0])
    _draw_limits(ax, data, place)
    if data.projected:
        seqs, ys = zip(*data.projected, strict=True)
        ax.plot(place(seqs), ys, color="tab:blue", linewidth=1.2, label="context tokens, local projection")
    if data.provider:
        seqs, ys = zip(*data.provider, strict=True)
        ax.plot(
            place(seqs), ys, linestyle="none", marker=".", color="tab:red", label="context tokens, provider"
        )
    _draw_checkpoints(ax, data, place)
    # the title quotes the log (the model): control characters shown as escapes, `$` never mathtext
    ax.set_title(printable(data.title), parse_math=False)
    ax.set_ylabel("tokens")
    ends = place([1, max(data.last_seq, 1) + 1])
    ax.set_xlim(min(0.0, ends[0]), ends[1])
    ax.set_ylim(0, _top(data))
    if ax.get_legend_handles_labels()[0]:  # a session of no request and no window draws none
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axis_label = (
        "turn (its events in log order across it)" if data.turn_starts else "event seq in the session"
    )
    if kinds:
        lanes = figure.add_subplot(grid[1], sharex=ax)
        _draw_lanes(lanes, data, kinds, place)
        lanes.set_xlabel(axis_label)
        ax.tick_params(labelbottom=False)
    else:
        ax.set_xlabel(axis_label)
    return figure


def _top(data: Timeline) -> float:
    """The y axis' top: the window's, when the context came within half the compaction threshold of
    it (or when there is no window), else the context's own highest point with room above."""
    highest = max([y for _, y in data.projected] + [y for _, y in data.provider] + [1])
    if data.window is None:
        return highest * 1.1
    near = data.compaction_threshold if data.compaction_threshold is not None else data.window
    return data.window * 1.04 if highest >= near / 2 else highest * 1.3


def _draw_limits(ax: Any, data: Timeline, place: Callable[[Sequence[int]], list[float]]) -> None:
    """The window, the output reserve, the two thresholds and the turn starts, as lines across."""
    if data.window is not None:
        ax.axhline(data.window, color="black", linewidth=1.2, label=f"context window ({data.window})")
    if data.window is not None and data.input_budget is not None:
        ax.axhspan(
            data.input_budget,
            data.window,
            color="lightgray",
            alpha=0.5,
            label=f"output reserve ({data.reserve})",
        )
    if data.compaction_threshold is not None:
        ax.axhline(
            data.compaction_threshold,
            color="tab:orange",
            linestyle="--",
            label=f"compaction threshold ({data.compaction_threshold})",
        )
    if data.handoff_threshold is not None:
        ax.axhline(
            data.handoff_threshold,
            color="tab:purple",
            linestyle=":",
            label=f"hand-off threshold ({data.handoff_threshold})",
        )
    if data.turn_starts:  # one collection, not an artist per turn: a long session has thousands
        ax.vlines(
            place(data.turn_starts),
            0,
            1,
            transform=ax.get_xaxis_transform(),
            color="gray",
            linewidth=0.4,
            alpha=0.6,
            label="turn start",
        )


def _draw_checkpoints(ax: Any, data: Timeline, place: Callable[[Sequence[int]], list[float]]) -> None:
    """Each checkpoint as an arrow down by what it saved, from the context before it, and its label."""
    colour = MARKER_STYLES["checkpoint"][1]
    right = place([max(data.last_seq, 1)])[0] / 2
    for m in data.markers:
        if m.kind != "checkpoint" or m.y_after is None:
            continue
        (x,) = place([m.seq])
        ax.annotate("", xy=(x, m.y_after), xytext=(x, m.y), arrowprops={"arrowstyle": "->", "color": colour})
        late = x > right  # a label in the right half runs leftwards: it stays inside
        ax.annotate(
            f"{m.label.removeprefix('checkpoint ')}; context {m.y} → {m.y_after}",
            xy=(x, m.y),
            xytext=(-4 if late else 4, 6),
            textcoords="offset points",
            horizontalalignment="right" if late else "left",
            fontsize="x-small",
            color=colour,
        )


def _draw_lanes(
    lanes: Any, data: Timeline, kinds: list[str], place: Callable[[Sequence[int]], list[float]]
) -> None:
    """One row per marker kind (so none hides another), each labelled with its count."""
    for row, kind in enumerate(kinds):
        symbol, colour, label = MARKER_STYLES[kind]
        chosen = [m for m in data.markers if m.kind == kind]
        lanes.plot(
            place([m.seq for m in chosen]),
            [row] * len(chosen),
            linestyle="none",
            marker=symbol,
            color=colour,
            markersize=7,
            label=f"{label} ({data.marker_counts.get(kind, len(chosen))})",
        )
    lanes.set_yticks(
        range(len(kinds)),
        [f"{MARKER_STYLES[k][2]} ({data.marker_counts.get(k, 0)})" for k in kinds],
        fontsize="x-small",
    )
    lanes.set_ylim(-0.6, len(kinds) - 0.4)
    lanes.invert_yaxis()


def save(data: Timeline, out: Path) -> None:
    """Draw `data` into `out` (.png or .svg, by its suffix)."""
    figure = render(data)
    figure.savefig(out, format=out.suffix.lstrip(".").lower(), dpi=120)
