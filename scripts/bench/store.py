"""The `store` suite of `cairn bench` (issues 2, 13): durable appends, restore, open, replay.

Appends and the open of a large store are measured here; restore, replay
(reading one session's history back) and the eventsourcing comparison in
`store_replay`. Every ratio is measured in alternating pairs within the run
(`_measure.alternate`, `_measure.interleave`), because these machines are
shared and their fsync rate drifts 20x within minutes: each figure is the
median of its pairs' ratios, with their range, every pair and the machine's
load in its detail. Absolute numbers are reported beside.
"""

from __future__ import annotations

import collections
import contextlib
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

from cairn.actors.placement import batch_scheduled, on_one_cpu
from cairn.bench import Figure, figure, guarded
from cairn.bench._measure import (
    LoadMeter,
    Pairs,
    ThreadsRun,
    alternate,
    interleave,
    spread,
    threads_rate,
    threads_run,
)
from cairn.bench._workload import mixed_event, sized_event
from cairn.bench.store_replay import bench_eventsourcing, bench_replay, bench_restore
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


def append_run(
    journal: JournalBackend,
    sessions: int,
    per_session: int,
    events: Sequence[EventBase],
    prefix: str = "bench",
) -> ThreadsRun:
    """`append_rate`, with the rate while every session runs beside the whole run's (`threads_run`)."""
    sids = [f"{prefix}-{n}" for n in range(sessions)]

    def setup(n: int) -> None:
        journal.append(sids[n], [SessionStarted(workspace="/w", model="m")], expected_seq=0)

    def step(n: int, i: int) -> None:
        journal.append(sids[n], [events[(n * per_session + i) % len(events)]], expected_seq=i + 1)

    return threads_run(sessions, per_session, step, setup)


def _wake_floor_run(sessions: int, per_session: int, *, relay: bool = True) -> ThreadsRun:
    """The same threads and acks (`threads_run`) with a writer that does no work at all.

    Every ack wakes one waiting thread, and in CPython each wake also hands
    over the GIL; this measures what that alone allows on this machine, the
    ceiling any journal with one thread per session can reach here. The
    writer takes everything queued as one batch and wakes its waiters:

    - `relay` (the ceiling, cairn's own way, `store.group_commit._acknowledge`):
      it wakes the first, and each woken thread wakes the next;
    - else all at once, one release after the other (the ceiling up to
      session 20): measured 0.5-0.6x of the relay at 256 threads here, as
      every woken thread then waits for the GIL at once.
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
            if relay:
                waiters = collections.deque(batch)
                for _, box in batch:
                    box[0] = waiters
                waiters.popleft()[0].release()
            else:
                for lock, _ in batch:
                    lock.release()

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
        return threads_run(sessions, per_session, step)
    finally:
        stop.set()
        thread.join()


def _wake_floor_rate(sessions: int, per_session: int, *, relay: bool = True) -> float:
    """The thread-wake ceiling's rate over the whole run (`_wake_floor_run`)."""
    return _wake_floor_run(sessions, per_session, relay=relay).whole


#: the placements appends were once measured in; kept for the benches that import it (the
#: placement bench, `cairn.bench.placement`, measures them now; this suite uses the OS placement)
PLACEMENTS: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager[Any]]]] = {
    "one_cpu": ("threads on one CPU, batch-scheduled", on_one_cpu),
    "batch_only": ("threads batch-scheduled on every CPU", batch_scheduled),
    "os_placement": ("threads placed by the OS", contextlib.nullcontext),
}

#: issue 13 point 4, at 256 sessions: cairn over the thread-wake ceiling, over one fsync per event,
#: and 1,024 sessions over 256 (no lower: the median of the pairs at least 1 - NOISE)
TARGET_OF_WAKE_FLOOR = 0.30
TARGET_OVER_FSYNC = 15.0
NOISE_1024 = 0.05


def _append_plan(quick: bool) -> tuple[int, dict[int, dict[int, int]], int]:
    """(pairs, {event tokens: {sessions: events per session}}, baseline events per pair).

    1,024 sessions append 20 events each (half the rounds of 256 x 40, not a
    quarter): their start (0.25-0.57 s to leave the barrier, under load) took
    a third of a run of 10 each, and in the ceiling's runs it outlasted the
    first thread's whole run, so that no moment had every thread running.
    """
    if quick:
        return 3, {300: {1: 200, 16: 40, 256: 16, 1024: 8}, 2000: {1: 100, 16: 20, 256: 4}}, 200
    return 5, {300: {1: 600, 16: 150, 256: 40, 1024: 20}, 2000: {1: 300, 16: 60, 256: 12}}, 300


def bench_appends(workdir: Path, quick: bool) -> list[Figure]:
    """Durable appends of ~300- and ~2,000-token events, 1 to 1,024 sessions, in alternating pairs.

    Every journal run has its own fsync-per-event baseline (one write + fsync
    per event, one thread, the same events) run right next to it, so the
    disk's drifting fsync rate moves both sides of each pair alike; the run
    at 256 sessions also sits next to the thread-wake ceiling (a writer that
    does no work) and to the run at 1,024 sessions. `interleave` runs the
    whole list once per pair, reversed every other time. Threads are placed
    by the OS (nothing pinned), as an embedding process gets them; the
    256-session run and the wake ceiling are also measured with every thread
    on one CPU, reported beside (not judged).

    The ceiling wakes its threads as cairn does, in a relay; the ceiling that
    wakes a batch all at once (the one judged before session 21, slower at 256
    threads) is measured beside it. The 1,024-over-256 figures are also given
    for the appends acknowledged while every thread ran (`threads_run`):
    with few appends a session, the start (1,024 threads leaving one barrier)
    and the end weigh on the whole run far more at 1,024 sessions than at 256.

    Targets (issue 13, point 4), at 256 sessions of ~300-token events:
    at least 0.30 of the wake ceiling, at least 15x the baseline, and 1,024
    sessions no lower than 256 (median ratio >= 0.95, the noise allowed).
    """
    pairs, plan, naive_n = _append_plan(quick)
    mixes = {tokens: append_events(tokens) for tokens in plan}
    lines = {tokens: _naive_lines(events[:naive_n]) for tokens, events in mixes.items()}
    line_bytes = {tokens: statistics.fmean(len(line) for line in lines[tokens]) for tokens in plan}

    def naive(tokens: int) -> Callable[[], float]:
        return lambda: _naive_fsync_rate(workdir, lines[tokens])

    #: the window while every thread ran (`threads_run`), of the runs that report it, by measure name
    runs: dict[str, list[ThreadsRun]] = collections.defaultdict(list)

    def journal(tokens: int, sessions: int, name: str | None = None) -> Callable[[], float]:
        def measure() -> float:
            root = workdir / f"append-{tokens}-{sessions}"
            try:
                journal = Journal.open(root)
                try:
                    run = append_run(journal, sessions, plan[tokens][sessions], mixes[tokens])
                finally:
                    journal.close()
            finally:
                shutil.rmtree(root, ignore_errors=True)
            if name is not None:
                runs[name].append(run)
            return run.whole

        return measure

    def ceiling(sessions: int, per_session: int, name: str, relay: bool = True) -> Callable[[], float]:
        def measure() -> float:
            run = _wake_floor_run(sessions, per_session, relay=relay)
            runs[name].append(run)
            return run.whole

        return measure

    measures: list[tuple[str, Callable[[], float]]] = []
    for tokens, sizes in plan.items():
        for sessions, per_session in sizes.items():
            name = f"j{tokens}/{sessions}"
            if sessions == 1024:
                measures.append((name, journal(tokens, sessions, name)))
                measures.append((f"naive{tokens}@{sessions}", naive(tokens)))
                if tokens == 300:  # the ceiling at 1,024 threads: how much of the drop is the threads'
                    measures.append(("wake1024", ceiling(1024, per_session * 2, "wake1024")))
                    measures.append(("wake1024bulk", ceiling(1024, per_session * 2, "wake1024bulk", False)))
                continue
            measures.append((f"naive{tokens}@{sessions}", naive(tokens)))
            measures.append((name, journal(tokens, sessions, name)))
            if tokens == 300 and sessions == 256:
                measures.append(("wake256", ceiling(256, per_session * 2, "wake256")))
                measures.append(("wake256bulk", ceiling(256, per_session * 2, "wake256bulk", False)))

    def one_cpu(measure: Callable[[], float]) -> Callable[[], float]:
        def placed() -> float:
            with on_one_cpu():  # the journal's writer and the sessions' threads start inside
                return measure()

        return placed

    # the ceiling and cairn again with every thread on one CPU (batch-scheduled), where the issue
    # measured 11-20 %: reported beside the target, not judged (the placement bench compares more)
    measures.append(
        ("wake256@one_cpu", one_cpu(functools.partial(_wake_floor_rate, 256, plan[300][256] * 2)))
    )
    measures.append(("j300/256@one_cpu", one_cpu(journal(300, 256))))
    with LoadMeter() as load:
        values = interleave(measures, pairs)

    baselines = [v for name, v_list in values.items() if name.startswith("naive300@") for v in v_list]
    figures = [
        figure(
            "append.naive_fsync_per_event",
            round(statistics.median(baselines)),
            "events/s",
            detail=f"one write + fsync per ~300-token event ({line_bytes[300]:,.0f} B), one thread; "
            f"{spread(baselines)} (one beside every journal run)",
            load=load,
        )
    ]
    for tokens, sizes in plan.items():
        prefix = "append" if tokens == 300 else "append.2k"
        for sessions, per_session in sizes.items():
            versus = Pairs(values[f"naive{tokens}@{sessions}"], values[f"j{tokens}/{sessions}"])
            rate = versus.subject
            name = f"{prefix}.sessions_{sessions}"
            mib = rate * line_bytes[tokens] / 2**20
            what = (
                f"~{tokens:,}-token events ({line_bytes[tokens]:,.0f} B a line), {sessions:,} session(s) x "
                f"{per_session:,}, each waiting for its ack; OS placement; {mib:,.1f} MiB/s"
            )
            figures.append(figure(name, round(rate), "events/s", detail=what, load=load))
            checked = tokens == 300 and sessions == 256
            figures.append(
                figure(
                    f"{name}.ratio",
                    round(versus.ratio, 2),
                    "x",
                    f">= {TARGET_OVER_FSYNC:g}x fsync per event" if checked else None,
                    versus.ratio >= TARGET_OVER_FSYNC if checked else None,
                    "over one write + fsync per event (baseline->journal events/s)",
                    pairs=versus,
                    load=load,
                )
            )
    floor = Pairs(values["wake256"], values["j300/256"])
    figures.append(
        figure(
            "append.wake_floor_256",
            round(floor.baseline),
            "events/s",
            detail="256 threads acked by a writer that does nothing, each woken thread waking the next "
            "(cairn's relay): the thread-wake ceiling",
            load=load,
        )
    )
    mechanisms = Pairs(values["wake256"], values["wake256bulk"])
    figures.append(
        figure(
            "append.wake_floor_256.all_at_once",
            round(mechanisms.ratio, 3),
            "x",
            detail="the same ceiling with the writer waking its batch's threads all at once (the ceiling "
            f"before session 21; {mechanisms.subject:,.0f}/s), over the relay (relay->at once events/s)",
            pairs=mechanisms,
            load=load,
        )
    )
    figures.append(
        figure(
            "append.sessions_256.of_wake_floor",
            round(floor.ratio, 3),
            "x",
            f">= {TARGET_OF_WAKE_FLOOR:g} of the wake ceiling",
            floor.ratio >= TARGET_OF_WAKE_FLOOR,
            "cairn at 256 sessions over the wake ceiling (ceiling->journal events/s)",
            pairs=floor,
            load=load,
        )
    )
    former = Pairs(values["wake256bulk"], values["j300/256"])
    figures.append(
        figure(
            "append.sessions_256.of_wake_floor.all_at_once",
            round(former.ratio, 3),
            "x",
            detail="the same over the ceiling that wakes all at once (the figure judged before session 21; "
            "reported, not judged) (ceiling->journal events/s)",
            pairs=former,
            load=load,
        )
    )
    pinned = Pairs(values["wake256@one_cpu"], values["j300/256@one_cpu"])
    figures.append(
        figure(
            "append.sessions_256.of_wake_floor.one_cpu",
            round(pinned.ratio, 3),
            "x",
            detail="the same with every thread on one CPU, batch-scheduled (actors.placement.on_one_cpu); "
            f"cairn {pinned.subject:,.0f}/s (ceiling->journal events/s)",
            pairs=pinned,
            load=load,
        )
    )
    scale = Pairs(values["j300/256"], values["j300/1024"])
    starts = [run.start * 1000 for run in runs["j300/1024"]]
    figures.append(
        figure(
            "append.sessions_1024.vs_256",
            round(scale.ratio, 3),
            "x",
            f">= 1.0 (median of the pairs >= {1 - NOISE_1024:g}: the noise allowed)",
            scale.ratio >= 1 - NOISE_1024,
            f"1,024 sessions x {plan[300][1024]} over 256 x {plan[300][256]} (256->1,024 events/s), whole "
            f"runs, the start included: the 1,024 threads took {spread(starts, ',.0f')} (ms) to leave "
            "the start barrier",
            pairs=scale,
            load=load,
        )
    )
    figures += _all_running(
        "append.sessions_1024.vs_256.all_running", runs["j300/256"], runs["j300/1024"], load
    )
    ceiling_scale = Pairs(values["wake256"], values["wake1024"])
    figures.append(
        figure(
            "append.wake_floor_1024.vs_256",
            round(ceiling_scale.ratio, 3),
            "x",
            detail="the thread-wake ceiling itself at 1,024 threads over 256 (reported beside "
            "append.sessions_1024.vs_256, not judged): what one thread per session allows",
            pairs=ceiling_scale,
            load=load,
        )
    )
    figures += _all_running(
        "append.wake_floor_1024.vs_256.all_running", runs["wake256"], runs["wake1024"], load
    )
    at_once = Pairs(values["wake1024"], values["wake1024bulk"])
    figures.append(
        figure(
            "append.wake_floor_1024.all_at_once",
            round(at_once.ratio, 3),
            "x",
            detail=f"at 1,024 threads, waking all at once ({at_once.subject:,.0f}/s) over the relay "
            "(relay->at once events/s)",
            pairs=at_once,
            load=load,
        )
    )
    return figures


def _all_running(
    name: str, at_256: list[ThreadsRun], at_1024: list[ThreadsRun], load: LoadMeter
) -> list[Figure]:
    """1,024 over 256 while every thread ran (`ThreadsRun.all_running`), of the pairs that had such a
    window (a run too short for one has none); reported, not judged."""
    pairs = [
        (low.all_running, high.all_running)
        for low, high in zip(at_256, at_1024, strict=True)
        if low.all_running is not None and high.all_running is not None
    ]
    what = (
        "the same, counting only the appends acknowledged while every thread ran (from the last one "
        "out of the start barrier to the first one done; reported, not judged)"
    )
    if not pairs:
        return [figure(name, None, "x", detail=what + ": no run had such a window", load=load)]
    versus = Pairs([low for low, _ in pairs], [high for _, high in pairs])
    return [figure(name, round(versus.ratio, 3), "x", detail=what, pairs=versus, load=load)]


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

    with LoadMeter() as load:
        # the open times (seconds) of the small store and the large one, in alternating pairs
        versus = alternate(
            functools.partial(_seconds, open_close, small_root),
            functools.partial(_seconds, open_close, big_root),
            7,
        )
    log_bytes = sum(f.stat().st_size for f in (big_root / "log").glob("*.jsonl"))
    ratio = versus.ratio  # large over small: the subject's time over the baseline's
    return [
        figure(
            "open.large_store_ms",
            round(versus.subject * 1000, 2),
            "ms",
            detail=f"{big[0]:,} sessions x {big[1]:,} events, {log_bytes / 2**20:.0f} MiB of log; "
            + spread([s * 1000 for s in versus.subjects], ",.2f"),
        ),
        figure(
            "open.small_store_ms",
            round(versus.baseline * 1000, 2),
            "ms",
            detail="10 sessions x 10 events; " + spread([s * 1000 for s in versus.baselines], ",.2f"),
        ),
        figure(
            "open.large_vs_small",
            round(ratio, 2),
            "x",
            "<= 3x (no log scan)",
            ratio <= 3,
            "open time of the large store over the small one (small->large ms)",
            pairs=Pairs([s * 1000 for s in versus.baselines], [s * 1000 for s in versus.subjects]),
            load=load,
            fmt=",.2f",
        ),
    ]


def _seconds(fn: Callable[[Path], None], root: Path) -> float:
    started = time.perf_counter()
    fn(root)
    return time.perf_counter() - started


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
