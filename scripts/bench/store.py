"""The `store` suite of `cairn bench` (issues 2, 13): durable appends, restore, open, replay.

Appends and the open of a large store are measured here; restore, replay
(reading one session's history back) and the eventsourcing comparison in
`store_replay`. Every ratio is a `Comparison` measured in alternating pairs
within the run (`_figure.compare`), because these machines are shared and
their fsync rate drifts 20x within minutes: each figure is the median of its
pairs' ratios, with their range, every pair (the absolute rates or times)
and the machine's load in its detail.
"""

from __future__ import annotations

import collections
import functools
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cairn.bench import guarded
from cairn.bench._figure import Comparison, Figure, compare
from cairn.bench._measure import LoadMeter, threads_rate, timed
from cairn.bench._workload import mixed_event, sized_event
from cairn.bench.store_eventsourcing import bench_eventsourcing
from cairn.bench.store_replay import bench_replay, bench_restore
from cairn.events.codec import GENESIS, encode_line
from cairn.events.kinds import (
    EventBase,
    SessionStarted,
)
from cairn.store import Journal
from cairn.store.backend import JournalBackend

# --- durable append throughput -------------------------------------------------------


def _naive_fsync_rate(root: Path, lines: Sequence[bytes]) -> float:
    """One os.write + fsync per event, one after another: the baseline."""
    path = root / "naive.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for line in lines:
            os.write(fd, line)
            os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
    return len(lines) / elapsed


def append_events(tokens: int | None = None) -> list[EventBase]:
    """The event mix the append benches write: 600 events, seed 7.

    `tokens` None: the mixed kinds at 200-2,000 characters (the mix before
    issue 13, kept for the benches that import it); else each event carries
    about `tokens` tokens (cl100k, +-20 %): user message, assistant message
    with a tool call, its result, in turn.
    """
    rng = random.Random(7)
    if tokens is None:
        return [mixed_event(rng, i, (200, 2000)) for i in range(600)]
    return [sized_event(rng, i, tokens) for i in range(600)]


def _naive_lines(events: Sequence[EventBase]) -> list[bytes]:
    """The events as the journal frames them, for the fsync-per-event baseline to write."""
    return [
        encode_line(pos=i, sid="naive", seq=i + 1, ts=0, prev=GENESIS, event=e)[0]
        for i, e in enumerate(events)
    ]


def append_rate(
    journal: JournalBackend,
    sessions: int,
    per_session: int,
    events: Sequence[EventBase],
    prefix: str = "bench",
) -> float:
    """`sessions` threads, each appending its own events one call at a time and waiting for each ack.

    The sessions are `<prefix>-<n>`, new to `journal`; the clock runs from
    the moment every session has its first event (the barrier's release,
    stamped before any thread goes on) until the last ack.
    """
    sids = [f"{prefix}-{n}" for n in range(sessions)]

    def setup(n: int) -> None:
        journal.append(sids[n], [SessionStarted(workspace="/w", model="m")], expected_seq=0)

    def step(n: int, i: int) -> None:
        journal.append(sids[n], [events[(n * per_session + i) % len(events)]], expected_seq=i + 1)

    return threads_rate(sessions, per_session, step, setup)


def _wake_floor_rate(sessions: int, per_session: int) -> float:
    """The same threads and acks (`threads_rate`) with a writer that does no work at all.

    Every ack wakes one waiting thread, and in CPython each wake also hands
    over the GIL; this measures what that alone allows on this machine, the
    ceiling any journal with one thread per session can reach here. The
    writer takes everything queued as one batch and wakes its first waiter,
    and each woken thread wakes the next (cairn's own way,
    `store.commit_calls.acknowledge`).
    """
    queue: collections.deque[tuple[threading.Lock, list[Any]]] = collections.deque()
    work = threading.Event()
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            if not queue:
                work.clear()
                if not queue:
                    work.wait(0.05)
                    continue
            batch = [queue.popleft() for _ in range(len(queue))]
            waiters = collections.deque(batch)
            for _, box in batch:
                box[0] = waiters
            waiters.popleft()[0].release()

    def step(n: int, i: int) -> None:
        lock = threading.Lock()
        lock.acquire()
        box: list[Any] = [None]  # the relay of its batch, set before it is woken
        queue.append((lock, box))
        if not work.is_set():
            work.set()
        lock.acquire()
        if box[0]:
            box[0].popleft()[0].release()  # wake the next of the batch

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        return threads_rate(sessions, per_session, step)
    finally:
        stop.set()
        thread.join()


#: issue 24 point 5: the append targets against this machine's own ceiling, measured in the same
#: run (one fsync per event is no ceiling: 15x of it lies above what thread wake-ups allow here).
#: At 256 sessions cairn reaches at least half the thread-wake ceiling; from 256 to 1,024 sessions
#: it falls no more than 0.05 below the ceiling's own fall.
TARGET_OF_WAKE_FLOOR = 0.5
FALL_MARGIN_1024 = 0.05

APPENDS = [
    Comparison(
        "append.sessions_256.of_wake_floor",
        "wake256",
        "j300/256",
        "cairn at 256 sessions over the thread-wake ceiling (256 threads acked by a writer that does "
        "nothing, each woken thread waking the next, events/s)",
        target=TARGET_OF_WAKE_FLOOR,
    ),
    Comparison(
        "append.sessions_256.ratio",
        "naive300@256",
        "j300/256",
        "256 sessions of ~300-token events, each waiting for its ack, over one write + fsync per event "
        "(one thread, events/s)",
    ),
    Comparison("append.sessions_1024.vs_256", "j300/256", "j300/1024", "1,024 sessions over 256 (events/s)"),
    Comparison(
        "append.wake_floor_1024.vs_256", "wake256", "wake1024", "the thread-wake ceiling at 1,024 over 256"
    ),
    Comparison("append.sessions_1.ratio", "naive300@1", "j300/1", "1 session over one fsync per event"),
    Comparison("append.sessions_16.ratio", "naive300@16", "j300/16", "16 sessions over one fsync per event"),
    Comparison(
        "append.2k.sessions_256.ratio",
        "naive2000@256",
        "j2000/256",
        "~2,000-token events, 256 sessions over one fsync per event",
    ),
]


def fall_beside_ceiling(values: dict[str, list[float]], load: LoadMeter) -> Figure:
    """From 256 to 1,024 sessions, cairn's fall against the thread-wake ceiling's own, pair by pair:
    (cairn at 1,024 / at 256) - (ceiling at 1,024 / at 256); the median at least -0.05."""
    cairn = [b / a for a, b in zip(values["j300/256"], values["j300/1024"], strict=True)]
    ceiling = [b / a for a, b in zip(values["wake256"], values["wake1024"], strict=True)]
    gaps = [c - w for c, w in zip(cairn, ceiling, strict=True)]
    gap = statistics.median(gaps)
    detail = (
        f"cairn at 1,024 sessions over 256 minus the thread-wake ceiling's same ratio, {len(gaps)} rounds: "
        f"cairn {', '.join(f'{c:.2f}' for c in cairn)}; ceiling {', '.join(f'{w:.2f}' for w in ceiling)}"
    )
    return Figure.measured(
        "append.sessions_1024.fall_beside_ceiling",
        round(gap, 3),
        "ratio points",
        detail,
        load,
        target=f">= -{FALL_MARGIN_1024:g}",
        met=gap >= -FALL_MARGIN_1024,
    )


def _append_plan(quick: bool) -> tuple[int, dict[tuple[int, int], int], int]:
    """(pairs, {(event tokens, sessions): events per session}, baseline events per pair).

    1,024 sessions append 20 events each (half the rounds of 256 x 40): their
    start (1,024 threads leaving one barrier) would otherwise weigh on the run.
    `--quick` keeps 5 pairs and 24 and 16 events at 256 and 1,024 sessions: with
    3 pairs of 16 and 8, the fall beside the ceiling came out -0.125 to -0.017
    in seven runs of the same code (-0.003 to -0.022 in four runs of this plan).
    """
    if quick:
        return 5, {(300, 1): 200, (300, 16): 40, (300, 256): 24, (300, 1024): 16, (2000, 256): 4}, 200
    return 5, {(300, 1): 600, (300, 16): 150, (300, 256): 40, (300, 1024): 20, (2000, 256): 12}, 300


def bench_appends(workdir: Path, quick: bool) -> list[Figure]:
    """Durable appends of ~300- and ~2,000-token events, 1 to 1,024 sessions, in alternating pairs.

    Every journal run has its own fsync-per-event baseline (one write + fsync
    per event, one thread, the same events) run right next to it, so the
    disk's drifting fsync rate moves both sides of each pair alike; the run
    at 256 sessions also sits next to the thread-wake ceiling. Threads are
    placed by the OS, as an embedding process gets them.
    """
    pairs, plan, naive_n = _append_plan(quick)
    mixes = {tokens: append_events(tokens) for tokens in {t for t, _ in plan}}
    lines = {tokens: _naive_lines(events[:naive_n]) for tokens, events in mixes.items()}

    def naive(tokens: int) -> Callable[[], float]:
        return lambda: _naive_fsync_rate(workdir, lines[tokens])

    def journal(tokens: int, sessions: int) -> Callable[[], float]:
        def measure() -> float:
            root = workdir / f"append-{tokens}-{sessions}"
            try:
                with Journal.open(root) as journal:
                    return append_rate(journal, sessions, plan[tokens, sessions], mixes[tokens])
            finally:
                shutil.rmtree(root, ignore_errors=True)

        return measure

    measures: list[tuple[str, Callable[[], float]]] = []
    for tokens, sessions in plan:
        if sessions != 1024:
            measures.append((f"naive{tokens}@{sessions}", naive(tokens)))
        measures.append((f"j{tokens}/{sessions}", journal(tokens, sessions)))
        if tokens == 300 and sessions in (256, 1024):
            per = plan[300, sessions] * 2
            measures.append((f"wake{sessions}", functools.partial(_wake_floor_rate, sessions, per)))
    done = compare(measures, APPENDS, pairs)
    return [*done.figures, fall_beside_ceiling(done.values, done.load)]


# --- opening a large store -------------------------------------------------------------


def _build_store(root: Path, sessions: int, per_session: int) -> None:
    journal = Journal.open(root)
    try:
        rng = random.Random(3)
        events = [mixed_event(rng, i, (60, 200)) for i in range(300)]
        for n in range(sessions):
            sid = f"s{n:05d}"
            batch: list[EventBase] = [SessionStarted(workspace="/w", model="m")]
            batch += [events[(n + i) % len(events)] for i in range(per_session - 1)]
            futures = [journal.append_async(sid, batch, expected_seq=0)]
            for future in futures:
                future.result(timeout=120)
    finally:
        journal.close()


OPEN = Comparison(
    "open.large_vs_small",
    "small",
    "large",
    "open time of a store of 10 sessions x 10 events over a large one's (no log scan)",
    target=1 / 3,
    says="large within 3x small (>= 0.33x)",
    better="lower",
    fmt=",.2f",
    scale=1000,
)


def bench_open(workdir: Path, quick: bool) -> list[Figure]:
    big = (200, 500) if quick else (1000, 1000)
    big_root, small_root = workdir / "open-big", workdir / "open-small"
    _build_store(big_root, *big)
    _build_store(small_root, 10, 10)

    def open_close(root: Path) -> None:
        Journal.open(root).close()

    measures = [
        ("small", lambda: timed(lambda: open_close(small_root), 1)),
        ("large", lambda: timed(lambda: open_close(big_root), 1)),
    ]
    return compare(measures, [OPEN], 7).figures


def run(quick: bool) -> list[Figure]:
    """The `store` suite, in a scratch directory removed at the end."""
    workdir = Path(tempfile.mkdtemp(prefix="cairn-bench-"))
    try:
        figures: list[Figure] = []
        figures += guarded("append", lambda: bench_appends(workdir, quick))
        figures += guarded("restore", lambda: bench_restore(workdir, quick))
        figures += guarded("open", lambda: bench_open(workdir, quick))
        figures += guarded("replay", lambda: bench_replay(workdir, quick))
        figures += guarded("eventsourcing", lambda: bench_eventsourcing(workdir, quick))
        return figures
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`."""
    from cairn import bench

    return bench.main(argv, suite="store")


if __name__ == "__main__":
    sys.exit(main())
