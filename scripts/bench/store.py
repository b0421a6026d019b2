"""The `store` suite of `cairn bench` (issue 2): durable appends, restore, open, replay.

Appends and the open of a large store are measured here; restore and replay
(reading one session's history back) in `store_replay`. Every figure is a
ratio against a baseline measured in the same run, because these machines
are shared and noisy; absolute numbers are reported beside.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cairn.actors.placement import batch_scheduled, on_one_cpu
from cairn.bench import Figure, figure
from cairn.bench._measure import timed
from cairn.bench._workload import mixed_event
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


def append_events() -> list[EventBase]:
    """The event mix the append benches write: 600 of the mixed kinds, 200-2,000 characters, seed 7."""
    rng = random.Random(7)
    return [mixed_event(rng, i, (200, 2000)) for i in range(600)]


def append_rate(
    journal: JournalBackend,
    sessions: int,
    per_session: int,
    events: Sequence[EventBase],
    prefix: str = "bench",
) -> float:
    """`sessions` threads, each appending its own events one call at a time and waiting for each ack.

    The sessions are `<prefix>-<n>`, new to `journal`; the clock runs from
    the moment every session has its first event until the last ack.
    """
    barrier = threading.Barrier(sessions + 1)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        sid = f"{prefix}-{n}"
        try:
            journal.append(sid, [SessionStarted(workspace="/w", model="m")], expected_seq=0)
            barrier.wait()
            for i in range(per_session):
                event = events[(n * per_session + i) % len(events)]
                journal.append(sid, [event], expected_seq=i + 1)
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(sessions)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a session failed: raised below
        barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sessions * per_session / elapsed


def _journal_rate(root: Path, sessions: int, per_session: int, events: Sequence[EventBase]) -> float:
    """`append_rate` on a local journal opened at `root`."""
    journal = Journal.open(root)
    try:
        return append_rate(journal, sessions, per_session, events)
    finally:
        journal.close()


def _wake_floor_rate(sessions: int, per_session: int) -> float:
    """The same threads and acks with a writer that does no work at all.

    Every ack wakes one waiting thread, and in CPython each wake also hands
    over the GIL; this measures what that alone allows on this machine, the
    ceiling any journal with one thread per session can reach here.
    """
    queue: collections.deque[threading.Lock] = collections.deque()
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
            for lock in batch:
                lock.release()

    def producer() -> None:
        for _ in range(per_session):
            lock = threading.Lock()
            lock.acquire()
            queue.append(lock)
            if not work.is_set():
                work.set()
            lock.acquire()

    thread = threading.Thread(target=writer)
    thread.start()
    producers = [threading.Thread(target=producer) for _ in range(sessions)]
    start = time.perf_counter()
    for p in producers:
        p.start()
    for p in producers:
        p.join()
    elapsed = time.perf_counter() - start
    stop.set()
    thread.join()
    return sessions * per_session / elapsed


def _median_ratio(rates: Sequence[float], baselines: Sequence[float]) -> float:
    """The median over rounds of each round's rate against that round's own baseline."""
    return statistics.median(rate / base for rate, base in zip(rates, baselines, strict=True))


#: the placements appends are measured in: figure suffix -> (what it is, how to enter it)
PLACEMENTS: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager[Any]]]] = {
    "one_cpu": ("threads on one CPU, batch-scheduled", on_one_cpu),
    "batch_only": ("threads batch-scheduled on every CPU", batch_scheduled),
    "os_placement": ("threads placed by the OS", contextlib.nullcontext),
}


def bench_appends(workdir: Path, quick: bool) -> list[Figure]:
    """Durable appends with 1, 16 and 256 sessions against one write + fsync per event.

    Long on purpose: the alternating pairs, their order and their medians in one place, so the
    comparison's fairness can be read at once.

    The disk's fsync rate drifts by 1.5x within minutes here, so every round
    measures the baseline again before its journal runs and each ratio is
    against its own round's baseline; the figures are medians over the
    rounds, and the order of the placements rotates from round to round.
    Each journal run happens in three placements (`actors.placement`):
    threads on one CPU, batch-scheduled (as `cairn demo` runs and the README
    recommends for hosts; the target is judged there),
    batch scheduling alone on every CPU, and the OS's placement (what an
    embedding process gets by default). The baseline is one thread, placed by
    the OS.
    """
    events = append_events()
    lines = [
        encode_line(pos=i, sid="naive", seq=i + 1, ts=0, prev=GENESIS, event=e)[0]
        for i, e in enumerate(events)
    ]
    rounds = 2 if quick else 3
    plan = {1: 300, 16: 60, 256: 8} if quick else {1: 1000, 16: 250, 256: 40}
    baselines: list[float] = []
    rates: dict[tuple[int, str], list[float]] = collections.defaultdict(list)
    floors: dict[str, list[float]] = collections.defaultdict(list)
    names = list(PLACEMENTS)
    for round_no in range(rounds):
        baselines.append(_naive_fsync_rate(workdir, lines[: 300 if quick else 600]))
        # each round starts with another placement, so none is always the nearest to its baseline
        for placement in names[round_no % len(names) :] + names[: round_no % len(names)]:
            with PLACEMENTS[placement][1]():
                for sessions, per_session in plan.items():
                    root = workdir / f"append-{sessions}"
                    rates[sessions, placement].append(_journal_rate(root, sessions, per_session, events))
                    shutil.rmtree(root, ignore_errors=True)
                floors[placement].append(_wake_floor_rate(256, plan[256] * 2))
    baseline = statistics.median(baselines)
    figures = [
        figure(
            "append.naive_fsync_per_event",
            round(baseline),
            "events/s",
            detail=f"one write + fsync per event, sequential; median of {rounds} rounds, "
            f"range {min(baselines):,.0f}-{max(baselines):,.0f}",
        )
    ]
    for placement, (label, _) in PLACEMENTS.items():
        suffix = "" if placement == "one_cpu" else f".{placement}"
        for sessions in plan:
            rate = statistics.median(rates[sessions, placement])
            ratio = _median_ratio(rates[sessions, placement], baselines)
            checked = sessions == 256 and placement == "one_cpu"
            detail = f"{label}; {ratio:.1f}x the naive baseline (median of {rounds} rounds)"
            name = f"append.sessions_{sessions}{suffix}"
            figures.append(figure(name, round(rate), "events/s", detail=detail))
            figures.append(
                figure(
                    f"{name}.ratio",
                    round(ratio, 2),
                    "x",
                    ">= 10x baseline" if checked else None,
                    ratio >= 10 if checked else None,
                )
            )
        floor = statistics.median(floors[placement])
        floor_ratio = _median_ratio(floors[placement], baselines)
        figures.append(
            figure(
                f"append.wake_floor_256{suffix}",
                round(floor),
                "events/s",
                detail=f"{label}; {floor_ratio:.1f}x the baseline: 256 threads acked by a "
                "writer that does nothing (the thread-wake ceiling)",
            )
        )
    return figures


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


def bench_open(workdir: Path, quick: bool) -> list[Figure]:
    big = (200, 500) if quick else (1000, 1000)
    small = (10, 10)
    big_root, small_root = workdir / "open-big", workdir / "open-small"
    _build_store(big_root, *big)
    _build_store(small_root, *small)

    def open_close(root: Path) -> None:
        Journal.open(root).close()

    big_s = timed(lambda: open_close(big_root), 5)
    small_s = timed(lambda: open_close(small_root), 5)
    log_bytes = sum(f.stat().st_size for f in (big_root / "log").glob("*.jsonl"))
    ratio = big_s / small_s
    return [
        figure(
            "open.large_store_ms",
            round(big_s * 1000, 2),
            "ms",
            detail=f"{big[0]:,} sessions x {big[1]:,} events, {log_bytes / 2**20:.0f} MiB of log",
        ),
        figure("open.small_store_ms", round(small_s * 1000, 2), "ms", detail="10 sessions x 10 events"),
        figure("open.large_vs_small", round(ratio, 2), "x", "<= 3x (no log scan)", ratio <= 3),
    ]


def run(quick: bool) -> list[Figure]:
    """The `store` suite, in a scratch directory removed at the end."""
    workdir = Path(tempfile.mkdtemp(prefix="cairn-bench-"))
    try:
        figures: list[Figure] = []
        figures += bench_appends(workdir, quick)
        figures += bench_restore(workdir, quick)
        figures += bench_open(workdir, quick)
        figures += bench_replay(workdir, quick)
        return figures
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
