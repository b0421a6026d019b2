"""The report's store chart: the tokens the providers reported, and the checkpoints, over time.

The store's time span (its sessions' first and last events, from the index;
times outside 1970..9999, which a host's clock gone wrong can write, left
out) is cut into `BUCKETS` equal runs; every usage line adds its prompt and
completion tokens to its run, every checkpoint and every failed turn counts
in its run. O(BUCKETS) memory whatever the store's size: sessions pass
their records through `tap` as the report reads them. `save` draws it with
matplotlib (Agg): the tokens as bars, checkpoints and failed turns as
markers on a second axis, time on the x axis.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from pathlib import Path

from cairn.events.codec import Record
from cairn.events.kinds import CheckpointCommitted, TurnFailed, Usage

BUCKETS = 200
#: the times a chart can show (ms since 1970 up to the end of year 9999, as calendars go)
LAST_SHOWN_MS = 253_402_300_799_999


def shown(ts: int) -> bool:
    return 0 <= ts <= LAST_SHOWN_MS


def tick_label(ms: int, span_ms: int) -> str:
    """A time axis tick, UTC: the clock to the second (to the millisecond, trailing zeros dropped,
    where a tick falls between seconds) on a span under a day, which the axis label dates; the date
    and the minute on a longer one."""
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    if span_ms >= 86_400_000:
        return when.strftime("%Y-%m-%d %H:%M")
    clock = when.strftime("%H:%M:%S")
    millis = when.microsecond // 1000
    return f"{clock}.{millis:03d}".rstrip("0") if millis else clock


def axis_label(first_ms: int, span_ms: int) -> str:
    """The time axis's label: UTC, and the day when every tick is a clock time of it."""
    if span_ms >= 86_400_000:
        return "time (UTC)"
    day = datetime.datetime.fromtimestamp(first_ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%d")
    return f"time (UTC), {day}"


class StoreChart:
    """Tokens, checkpoints and failed turns per run of time from `first_ms` to `last_ms`."""

    def __init__(self, first_ms: int, last_ms: int, buckets: int = BUCKETS) -> None:
        first_ms, last_ms = (min(max(t, 0), LAST_SHOWN_MS) for t in (first_ms, last_ms))
        self.first_ms = first_ms
        self.width_ms = max(1, -(-(max(last_ms, first_ms) - first_ms + 1) // buckets))
        self.tokens = [0] * buckets
        self.checkpoints = [0] * buckets
        self.failed = [0] * buckets

    def _run(self, ts: int) -> int:
        return max(0, min(len(self.tokens) - 1, (ts - self.first_ms) // self.width_ms))

    def add(self, record: Record) -> None:
        if not shown(record.ts):
            return
        event = record.event
        if isinstance(event, Usage):
            self.tokens[self._run(record.ts)] += (event.prompt_tokens or 0) + (event.completion_tokens or 0)
        elif isinstance(event, CheckpointCommitted):
            self.checkpoints[self._run(record.ts)] += 1
        elif isinstance(event, TurnFailed) and event.phase != "interrupted":
            self.failed[self._run(record.ts)] += 1

    def tap(self, records: Iterable[Record]) -> Iterator[Record]:
        for record in records:
            self.add(record)
            yield record

    def save(self, out: Path) -> None:
        """Draw the chart into `out` (.svg or .png, by its suffix)."""
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        # matplotlib's dates: days since its epoch, 1970-01-01 UTC (the default since matplotlib 3.3)
        first, width = self.first_ms / 86_400_000, self.width_ms / 86_400_000
        starts = [float(first + i * width) for i in range(len(self.tokens))]
        figure = Figure(figsize=(12, 4), layout="constrained")
        ax = figure.add_subplot()
        ax.bar(starts, self.tokens, width=width, align="edge", color="tab:blue", label="tokens reported")
        ax.xaxis_date(tz=datetime.UTC)
        span_ms = self.width_ms * len(self.tokens)
        ax.xaxis.set_major_formatter(
            FuncFormatter(lambda days, _pos: tick_label(round(days * 86_400_000), span_ms))
        )
        ax.set_ylabel("tokens (prompt + completion)")
        ax.set_xlabel(axis_label(self.first_ms, span_ms))
        events = ax.twinx()
        for counts, marker, colour, label in (
            (self.checkpoints, "s", "tab:green", "checkpoints"),
            (self.failed, "P", "tab:red", "failed turns"),
        ):
            shown = [(start + width / 2, n) for start, n in zip(starts, counts, strict=True) if n]
            if shown:
                xs, ys = zip(*shown, strict=True)
                events.plot(
                    xs, ys, linestyle="none", marker=marker, color=colour, label=f"{label} ({sum(counts)})"
                )
        events.set_ylabel("checkpoints, failed turns")
        events.set_ylim(bottom=0)
        events.yaxis.set_major_locator(MaxNLocator(integer=True))
        bars, bar_labels = ax.get_legend_handles_labels()
        marks, mark_labels = events.get_legend_handles_labels()
        ax.legend(bars + marks, bar_labels + mark_labels, loc="upper left", fontsize="small")
        figure.savefig(out, format=out.suffix.lstrip(".").lower(), dpi=100)
