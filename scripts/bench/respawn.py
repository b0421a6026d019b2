"""Respawn benchmark: the first request of a 200,000-token session rebuilt from its log, against a warm one.

Usage: python -m cairn.bench.respawn [--quick] [--json]

The context bench's seeded session (about 2,000 messages, mostly tool
turns, a few huge outputs the tool-result budget cuts) is written to a real
store twice: once with each message's token count recorded as the session
actor records it (`actors.session.counts.with_counts`), once without (a log
written before counts were stored). The store is closed and opened again
(what a new host on the same store does), and each session is loaded through
the public path a restart uses (`Journal.load`: index walk, reads, fold).

The respawn itself is what the session actor's load does
(`SessionCore._load`): `Journal.load`, then `tracker.prepare` (a new
counter and history view walked over the loaded context: renderings,
stored counts, tool turns with their S2 classes, and the counts of the
request's fixed parts). It is timed and reported on its own
(`respawn.*.respawn_ms` = `load_ms` + `prepare_ms`), so no cost of the
respawn is left out by where the first request starts.

Measured, in alternating pairs within one run:

- warm (the baseline): the pre-request check and assembly of a session
  whose history view is up to date, right after a turn's events are folded
  in (what every request of a live session pays);
- first (the subject): the same check and assembly, the first request after
  the respawn: on a counter and view just prepared by the load.

The target is first within 2x warm (warm/first >= 0.5), for the session
with stored counts, in the hand-off band (where the check plans a snip each
turn) and below it (a 1M window, where the warm check is cheapest). With
`--explore`: the prepare and the first request together against a warm
request, the same on a log without stored counts, and the respawn's own
time. `respawn.counts_equal` checks that the counts the rebuilt view uses
are those a fresh count gives.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from cairn.actors.session.counts import with_counts
from cairn.actors.session.handoff import decide_handoff
from cairn.actors.session.request import assemble, request_event
from cairn.actors.session.slimming import plan_micro, plan_snip
from cairn.actors.session.tracker import occupancy, prepare
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter, load_encoding
from cairn.bench._figure import Comparison, Figure, compare
from cairn.bench._measure import spread
from cairn.bench.context import build_session
from cairn.events.codec import Record
from cairn.events.kinds import AssistantMessage, EventBase, ToolResult, Usage
from cairn.events.model import TextPart, ToolCall
from cairn.events.state import SessionState, evolve
from cairn.store.journal import Journal

TARGET_RATIO = 2.0
COUNTED = "respawn-counted"
UNCOUNTED = "respawn-uncounted"
BATCH = 250


def _check(state: SessionState, view: HistoryView, now_ms: int) -> None:
    """What the session actor does before a request: L1's plans (decided, not applied) and assembly."""
    occ = occupancy(state, view)
    plan_micro(state, view, occ, now_ms=now_ms)
    plan_snip(state, view, occ)
    decide_handoff(state, occ.snapshot, now_ms=now_ms)
    assemble(state, view, occ=occ)


def _write(journal: Journal, sid: str, events: list[EventBase], counter: TokenCounter | None) -> None:
    """Append the session's events in batches, counted as the session actor counts them (or not)."""
    written = 0
    for start in range(0, len(events), BATCH):
        batch = events[start : start + BATCH]
        if counter is not None:
            batch = with_counts(batch, counter, first_seq=written + 1)
        journal.append(sid, batch, expected_seq=written)
        written += len(batch)


class _Warm:
    """A live session: its state and an up-to-date view; each turn folds a request, reply, usage, result."""

    def __init__(self, state: SessionState, now_ms: int) -> None:
        self.counter = TokenCounter(load_encoding())
        self.view = HistoryView(self.counter)
        self.state = state
        self.now_ms = now_ms
        self.turn = 0
        _check(state, self.view, now_ms)

    def _fold(self, events: list[EventBase]) -> None:
        for event in with_counts(events, self.counter, first_seq=self.state.last_seq + 1):
            self.now_ms += 1_000
            record = Record(0, self.state.sid, self.state.last_seq + 1, self.now_ms, "", event)  # type: ignore[arg-type]
            self.state = evolve(self.state, record)

    def request_s(self) -> float:
        """One turn's events folded in (untimed), then the timed check and assembly."""
        self.turn += 1
        request_id = f"warm-{self.turn}"
        occ = occupancy(self.state, self.view)
        assembled = assemble(self.state, self.view, occ=occ)
        call = ToolCall(id=f"warm-call-{self.turn}", name="read", arguments='{"path": "src/app.py"}')
        self._fold(
            [
                request_event(assembled, request_id=request_id, turn_id="warm"),
                AssistantMessage(message_id=f"a-{request_id}", request_id=request_id, tool_calls=(call,)),
                Usage(request_id=request_id, prompt_tokens=assembled.projection.tokens, completion_tokens=40),
                ToolResult(
                    call_id=call.id,
                    tool_name="read",
                    status="ok",
                    effect="read",
                    content=(TextPart("def app():\n    return cache.get(key)\n" * 20),),
                ),
            ]
        )
        started = time.perf_counter()
        _check(self.state, self.view, self.now_ms)
        return time.perf_counter() - started


def _prepared(state: SessionState) -> HistoryView:
    """What the session actor's load leaves for its first request: a new counter and view, prepared."""
    view = HistoryView(TokenCounter(load_encoding()))
    prepare(state, view)
    return view


def _first_request(state: SessionState, now_ms: int) -> Callable[[], float]:
    """The first request after a respawn: the check on a view the load prepared (the prepare untimed)."""

    def run() -> float:
        view = _prepared(state)
        started = time.perf_counter()
        _check(state, view, now_ms)
        return time.perf_counter() - started

    return run


def _prepare_and_first(state: SessionState, now_ms: int) -> Callable[[], float]:
    """The prepare and the first request together, timed as one."""

    def run() -> float:
        started = time.perf_counter()
        _check(state, _prepared(state), now_ms)
        return time.perf_counter() - started

    return run


def _respawn_ms(journal: Journal, sid: str, runs: int) -> tuple[list[float], list[float]]:
    """The respawn as the session actor's load does it, `runs` times: (load ms, prepare ms) of each."""
    loads: list[float] = []
    prepares: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        state = journal.load(sid)
        loaded = time.perf_counter()
        _prepared(state)
        prepares.append((time.perf_counter() - loaded) * 1_000)
        loads.append((loaded - started) * 1_000)
    return loads, prepares


def _counts_equal(state: SessionState) -> bool:
    """The rebuilt view's counts (stored ones trusted) equal a fresh count of every message."""
    stored = _prepared(state)  # what the load leaves
    fresh = HistoryView(TokenCounter(load_encoding()))
    fresh.sync(msgspec.structs.replace(state, context_counts=()))
    return [stored.message_tokens(i) for i in range(len(state.context))] == [
        fresh.message_tokens(i) for i in range(len(state.context))
    ]


def _comparisons(prefix: str) -> list[Comparison]:
    """The first request against a warm one (judged), and the prepare with it (reported beside)."""
    return [
        Comparison(
            f"{prefix}.first_vs_warm",
            "warm",
            "first",
            "a warm request's check over the first one's after the respawn (the view the load prepared)",
            target=1 / TARGET_RATIO,
            says=f">= {1 / TARGET_RATIO:g}x (first within {TARGET_RATIO:g}x warm)",
            better="lower",
            fmt=",.2f",
            scale=1000,
        ),
        Comparison(
            f"{prefix}.prepare_and_first_vs_warm",
            "warm",
            "prepared",
            "the same with the load's prepare timed with the first request",
            better="lower",
            fmt=",.2f",
            scale=1000,
        ),
        Comparison(
            f"{prefix}.uncounted_vs_warm",
            "warm",
            "uncounted",
            "the prepare and first request of the log without stored counts (every message encoded)",
            better="lower",
            fmt=",.2f",
            scale=1000,
        ),
    ]


def _measure(window: int, cap: int | None, label: str, pairs: int, root: Path) -> tuple[list[Figure], int]:
    """Both sessions of one window: write, reopen, load, then first vs warm in alternating pairs.

    Returns the figures and the history tokens of the loaded session.
    """
    log, _, _ = build_session(window=window, cap=cap)
    events: list[EventBase] = [record.event for record in log.records]
    store = root / label
    with Journal.open(store) as journal:
        _write(journal, COUNTED, events, TokenCounter(load_encoding()))
        _write(journal, UNCOUNTED, events, None)
    with Journal.open(store) as journal:  # the respawn: a new host on the same store
        loads, prepares = _respawn_ms(journal, COUNTED, 5)
        counted = journal.load(COUNTED)
        uncounted = journal.load(UNCOUNTED)
    now = log.ts
    stored = sum(1 for count in counted.context_counts if count is not None)
    warm = _Warm(counted, now)
    measures = [
        ("warm", warm.request_s),
        ("first", _first_request(counted, now)),
        ("prepared", _prepare_and_first(counted, now)),
        ("uncounted", _prepare_and_first(uncounted, now)),
    ]
    prefix = f"respawn.{label}"
    done = compare(measures, _comparisons(prefix), pairs)
    equal = _counts_equal(counted)
    history_tokens = _history_tokens(counted)
    where = (
        f"{len(counted.context):,} messages ({stored:,} with a stored count), "
        f"{history_tokens:,} history tokens, window {window:,}"
    )
    first, *beside = done.figures
    respawns = [load_ms + prepare_ms for load_ms, prepare_ms in zip(loads, prepares, strict=True)]
    return [
        msgspec.structs.replace(first, met=bool(first.met) and equal, detail=f"{first.detail}; {where}"),
        *beside,
        Figure(
            f"{prefix}.respawn_ms",
            round(statistics.median(respawns), 1),
            "ms",
            detail=f"the whole respawn, what a passivated session pays before its first request: "
            f"{spread(respawns, '.1f')}; Journal.load {spread(loads, '.1f')}, tracker.prepare "
            f"{spread(prepares, '.2f')}",
            explore=True,
        ),
        Figure(
            f"{prefix}.counts_equal",
            "yes" if equal else "NO",
            "",
            "equal",
            equal,
            "every count the rebuilt view uses equals a fresh count of the message as the model sees it",
        ),
    ], history_tokens


def _history_tokens(state: SessionState) -> int:
    view = HistoryView(TokenCounter(load_encoding()))
    view.sync(state)
    return view.total


def run(quick: bool) -> list[Figure]:
    """The `respawn` suite: below the hand-off band (1M window), then in it."""
    pairs = 5 if quick else 11
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-respawn-"))
    try:
        figures, history = _measure(1_000_000, None, "below_handoff", pairs, root)
        band_window = history * 100 // 75 + 10_000  # as the context bench's band: 75 % of the budget
        figures += _measure(band_window, 10_000, "handoff_band", pairs, root)[0]
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`."""
    from cairn import bench

    return bench.main(argv, suite="respawn")


if __name__ == "__main__":
    sys.exit(main())
