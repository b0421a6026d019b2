"""Respawn benchmark: the first request of a 200,000-token session rebuilt from its log, against a warm one.

The context bench's seeded session (about 2,000 messages) is written to a
real store with each message's token count as the session actor records it
(`with_counts`); the store is reopened (a new host on it) and the session
respawned as the actor's load does it: `Journal.load`, then
`tracker.prepare` (a new counter and history view walked over the loaded
context). In alternating pairs: warm (the baseline), the pre-request check
and assembly of a live session right after a turn's events are folded in;
first (the subject), the same check on the view the respawn prepared.
Target: first within 2x warm (warm/first >= 0.5), in the hand-off band
(where the check plans a snip each turn) and below it (a 1M window), with
`counts_equal`: the counts the rebuilt view uses are those a fresh count
gives. The respawn itself (`respawn_ms`, load + prepare, shown with
`--explore`) is what the first request no longer pays.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from cairn.actors.session.counts import with_counts
from cairn.actors.session.request import assemble
from cairn.actors.session.tracker import occupancy, prepare
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.bench._figure import Comparison, Figure, compare
from cairn.bench._measure import spread, timed
from cairn.bench.context import build_session, check, turn_events
from cairn.events.codec import Record
from cairn.events.kinds import EventBase
from cairn.events.state import SessionState, evolve
from cairn.store.journal import Journal

TARGET_RATIO = 2.0
SID = "respawn-counted"
BATCH = 250
OUTPUT = "def app():\n    return cache.get(key)\n" * 20


class _Warm:
    """A live session: its state and an up-to-date view; each turn folds a request, reply, usage, result."""

    def __init__(self, state: SessionState, now_ms: int) -> None:
        self.counter = TokenCounter()
        self.view = HistoryView(self.counter)
        self.state = state
        self.now_ms = now_ms
        self.turn = 0
        check(state, self.view, now_ms)

    def request_s(self) -> float:
        """One turn's events folded in (untimed), then the timed check and assembly."""
        self.turn += 1
        assembled = assemble(self.state, self.view, occ=occupancy(self.state, self.view))
        events = turn_events(assembled, f"warm-{self.turn}", f"warm-call-{self.turn}", "warm", OUTPUT)
        for event in with_counts(events, self.counter, first_seq=self.state.last_seq + 1):
            self.now_ms += 1_000
            record = Record(0, self.state.sid, self.state.last_seq + 1, self.now_ms, "", event)  # type: ignore[arg-type]
            self.state = evolve(self.state, record)
        return _check_s(self.state, self.view, self.now_ms)


def _check_s(state: SessionState, view: HistoryView, now_ms: int) -> float:
    return timed(lambda: check(state, view, now_ms), 1)


def _prepared(state: SessionState) -> HistoryView:
    """What the session actor's load leaves for its first request: a new counter and view, prepared."""
    view = HistoryView(TokenCounter())
    prepare(state, view)
    return view


def _counts_equal(state: SessionState) -> bool:
    """The rebuilt view's counts (stored ones trusted) equal a fresh count of every message."""
    stored = _prepared(state)
    fresh = HistoryView(TokenCounter())
    fresh.sync(msgspec.structs.replace(state, context_counts=()))
    indexes = range(len(state.context))
    return [stored.message_tokens(i) for i in indexes] == [fresh.message_tokens(i) for i in indexes]


def _write_and_respawn(store: Path, events: list[EventBase]) -> tuple[SessionState, list[float], list[float]]:
    """Write the session with its counts, reopen the store (a new host on it), and respawn it 5 times
    as the session actor's load does (`Journal.load`, then `tracker.prepare`): the state, and the
    load's and the prepare's ms of each respawn."""
    with Journal.open(store) as journal:
        counter = TokenCounter()
        for start in range(0, len(events), BATCH):
            batch = with_counts(events[start : start + BATCH], counter, first_seq=start + 1)
            journal.append(SID, batch, expected_seq=start)
    loads: list[float] = []
    prepares: list[float] = []
    with Journal.open(store) as journal:
        for _ in range(5):
            started = time.perf_counter()
            state = journal.load(SID)
            loaded = time.perf_counter()
            _prepared(state)
            prepares.append((time.perf_counter() - loaded) * 1_000)
            loads.append((loaded - started) * 1_000)
    return state, loads, prepares


def _measure(window: int, cap: int | None, label: str, pairs: int, root: Path) -> tuple[list[Figure], int]:
    """One window: write, reopen, respawn, then first vs warm; the figures and the history tokens."""
    records, _, _ = build_session(window=window, cap=cap)
    state, loads, prepares = _write_and_respawn(root / label, [record.event for record in records])
    prefix = f"respawn.{label}"
    judged = Comparison(
        f"{prefix}.first_vs_warm",
        "warm",
        "first",
        "a warm request's check over the first one's after the respawn (the view the load prepared)",
        target=1 / TARGET_RATIO,
        says=f">= {1 / TARGET_RATIO:g}x (first within {TARGET_RATIO:g}x warm)",
        better="lower",
        fmt=",.2f",
        scale=1000,
    )
    now_ms = records[-1].ts
    # the first request after the respawn: the check on a view the load prepared (the prepare untimed)
    measures = [
        ("warm", _Warm(state, now_ms).request_s),
        ("first", lambda: _check_s(state, _prepared(state), now_ms)),
    ]
    first = compare(measures, [judged], pairs).figures[0]
    equal = _counts_equal(state)
    history = _prepared(state).total
    stored = sum(1 for count in state.context_counts if count is not None)
    where = (
        f"{len(state.context):,} messages ({stored:,} with a stored count), "
        f"{history:,} history tokens, window {window:,}"
    )
    respawns = [load_ms + prepare_ms for load_ms, prepare_ms in zip(loads, prepares, strict=True)]
    return [
        msgspec.structs.replace(first, met=bool(first.met) and equal, detail=f"{first.detail}; {where}"),
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
    ], history


def run(quick: bool) -> list[Figure]:
    """The `respawn` suite: below the hand-off band (1M window), then in it."""
    pairs = 5 if quick else 11
    with tempfile.TemporaryDirectory(prefix="cairn-bench-respawn-") as tmp:
        figures, history = _measure(1_000_000, None, "below_handoff", pairs, Path(tmp))
        band_window = history * 100 // 75 + 10_000  # the hand-off band: history at 75 % of the budget
        return figures + _measure(band_window, 10_000, "handoff_band", pairs, Path(tmp))[0]


if __name__ == "__main__":
    from cairn import bench

    sys.exit(bench.main(suite="respawn"))
