"""The `store` suite of `cairn bench` (issues 2, 13, 24): appends, restore, open, replay, eventsourcing.

Every ratio is a `Comparison` measured in alternating pairs within the run
(`_figure.compare`): the fsync rate of these shared machines drifts 20x
within minutes, and a drift moves both sides of a pair alike.
"""

from __future__ import annotations

import collections
import functools
import itertools
import random
import shutil
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cairn.bench import guarded
from cairn.bench._figure import Comparison, Figure, compare, unavailable
from cairn.bench._measure import LoadMeter, threads_rate, timed
from cairn.bench._workload import event_text, mixed_event, sized_event
from cairn.bench.store_replay import bench_replay, bench_restore, write_plain_session
from cairn.events.kinds import EventBase, SessionStarted
from cairn.store import Journal
from cairn.store.backend import JournalBackend

# --- durable appends -----------------------------------------------------------------------


def append_events(tokens: int | None = None) -> list[EventBase]:
    """600 events, seed 7, of about `tokens` tokens each (cl100k, +-20 %: user message, assistant
    message with a tool call, its result, in turn); with None, mixed kinds of 200-2,000 characters."""
    rng = random.Random(7)
    if tokens is None:
        return [mixed_event(rng, i, (200, 2000)) for i in range(600)]
    return [sized_event(rng, i, tokens) for i in range(600)]


def append_rate(
    journal: JournalBackend,
    sessions: int,
    per_session: int,
    events: Sequence[EventBase],
    prefix: str = "bench",
) -> float:
    """Events/s of `sessions` threads, sessions `<prefix>-<n>` new to `journal`, each appending its
    events one call at a time and waiting for each ack (`threads_rate`)."""
    sids = [f"{prefix}-{n}" for n in range(sessions)]

    def setup(n: int) -> None:
        journal.append(sids[n], [SessionStarted(workspace="/w", model="m")], expected_seq=0)

    def step(n: int, i: int) -> None:
        journal.append(sids[n], [events[(n * per_session + i) % len(events)]], expected_seq=i + 1)

    return threads_rate(sessions, per_session, step, setup)


def new_journal_rate(
    root: Path, sessions: int, per: int, events: list[EventBase], prefix: str = "bench"
) -> float:
    """`append_rate` on a new journal at `root`, removed after."""
    try:
        with Journal.open(root) as journal:
            return append_rate(journal, sessions, per, events, prefix)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _wake_floor_rate(sessions: int, per_session: int) -> float:
    """The same threads and acks (`threads_rate`) with a writer that does no work at all.

    Every ack wakes one waiting thread, and in CPython each wake also hands
    over the GIL: the ceiling any journal with one thread per session can
    reach on this machine. The writer takes everything queued as one batch
    and wakes its first waiter, each woken thread the next (as
    `store.commit_calls.acknowledge` does).
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


#: issue 24 point 5: judged against this machine's own ceiling, measured in the same run (one fsync
#: per event is no ceiling: 15x of it lies above what thread wake-ups allow here). At 256 sessions
#: cairn reaches at least half of it; from 256 to 1,024 sessions it falls no more than 0.05 below
#: the ceiling's own fall.
OF_WAKE_FLOOR = Comparison(
    "append.sessions_256.of_wake_floor",
    "wake256",
    "j300/256",
    "cairn at 256 sessions over the thread-wake ceiling (256 threads acked by a writer that does "
    "nothing, each woken thread waking the next, events/s)",
    target=0.5,
)
FALL_MARGIN_1024 = 0.05


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


def bench_appends(workdir: Path, quick: bool) -> list[Figure]:
    """Durable appends of ~300-token events by 256 and 1,024 sessions (threads placed by the OS), each
    beside the thread-wake ceiling (twice as many acks a thread), 5 rounds even `--quick` (with fewer
    the fall is too noisy to judge). 1,024 sessions append fewer events each, lest their start (1,024
    threads leaving one barrier) weigh on the run."""
    per_session = {256: 24, 1024: 16} if quick else {256: 40, 1024: 20}
    events = append_events(300)
    measures: list[tuple[str, Callable[[], float]]] = []
    for n, per in per_session.items():
        root = workdir / f"append-300-{n}"
        measures.append((f"j300/{n}", functools.partial(new_journal_rate, root, n, per, events)))
        measures.append((f"wake{n}", functools.partial(_wake_floor_rate, n, per * 2)))
    done = compare(measures, [OF_WAKE_FLOOR], 5)
    return [*done.figures, fall_beside_ceiling(done.values, done.load)]


# --- opening a large store -----------------------------------------------------------------


def _build_store(root: Path, sessions: int, per_session: int) -> None:
    rng = random.Random(3)
    events = [mixed_event(rng, i, (60, 200)) for i in range(300)]
    with Journal.open(root) as journal:
        for n in range(sessions):
            batch: list[EventBase] = [SessionStarted(workspace="/w", model="m")]
            batch += [events[(n + i) % len(events)] for i in range(per_session - 1)]
            journal.append_async(f"s{n:05d}", batch, expected_seq=0).result(timeout=120)


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
    big_root, small_root = workdir / "open-big", workdir / "open-small"
    _build_store(big_root, *((200, 500) if quick else (1000, 1000)))
    _build_store(small_root, 10, 10)
    measures = [
        ("small", lambda: timed(lambda: Journal.open(small_root).close(), 1)),
        ("large", lambda: timed(lambda: Journal.open(big_root).close(), 1)),
    ]
    return compare(measures, [OPEN], 7).figures


# --- against eventsourcing on SQLite (the `bench` extra) -----------------------------------


def bench_eventsourcing(workdir: Path, quick: bool) -> list[Figure]:
    """cairn against eventsourcing's defaults (SQLite in WAL mode, `synchronous=FULL`: the WAL fsynced
    at every commit, one commit per `save`), the same ~300-token events, in alternating pairs: appends
    by 16 sessions (a thread each, one event per call, each waiting until it is durable), then a read."""
    try:
        from eventsourcing.application import Application
        from eventsourcing.domain import Aggregate, event
    except ImportError:
        return [unavailable("eventsourcing", "skipped: pip install 'cairn[bench]'")]

    class Note(Aggregate):  # type: ignore[misc, unused-ignore]
        @event("Started")  # type: ignore[untyped-decorator, unused-ignore]
        def __init__(self, name: str) -> None:
            self.lines: list[str] = []

        @event("Added")  # type: ignore[untyped-decorator, unused-ignore]
        def add(self, text: str) -> None:
            self.lines.append(text)

    dbs = itertools.count()
    events = append_events(300)
    texts = [event_text(e) for e in events]
    sessions, per_session = 16, 15 if quick else 60

    def application() -> Any:
        db = workdir / f"es-{next(dbs)}.sqlite"
        return Application(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(db)})

    def es_rate() -> float:
        app = application()
        notes = [Note(f"s{n}") for n in range(sessions)]
        app.save(*notes)
        with app.recorder.datastore.get_connection(commit=False) as conn:
            synchronous = conn._sqlite_conn.execute("PRAGMA synchronous").fetchone()[0]
        if synchronous != 2:  # FULL: the WAL fsynced at every commit, as cairn fsyncs
            raise RuntimeError("eventsourcing's SQLite is not synchronous=FULL: not a durable comparison")

        def save(n: int, i: int) -> None:
            notes[n].add(texts[(n * 7919 + i) % len(texts)])
            app.save(notes[n])

        rate = threads_rate(sessions, per_session, save)
        app.close()
        return rate

    cairn_rate = functools.partial(new_journal_rate, workdir / "vs-es", sessions, per_session, events, "es")
    appends = Comparison(
        "eventsourcing.append_ratio.sessions_16",
        "es/16",
        "cairn/16",
        "cairn over eventsourcing on SQLite (WAL, synchronous=FULL: one commit, one fsync per event), "
        f"16 sessions x {per_session}, one event per call, ~300-token events",
        target=1.0,
    )
    compared = compare([("es/16", es_rate), ("cairn/16", cairn_rate)], [appends], 3 if quick else 5)
    return [*compared.figures, _reconstruct(workdir, application(), Note, events, 2_000 if quick else 10_000)]


def _reconstruct(workdir: Path, app: Any, note_type: Any, events: list[EventBase], n: int) -> Figure:
    """One session of `n` events read back whole: cairn's replay_full against eventsourcing's
    `repository.get`, in alternating pairs (times; the ratio is eventsourcing's over cairn's)."""
    history = [events[i % len(events)] for i in range(n)]
    note = note_type("long")
    for e in history:
        note.add(event_text(e))
    app.save(note)
    journal = Journal.open(workdir / "vs-es-read")
    try:
        write_plain_session(journal, "note", (history[k : k + 1_000] for k in range(0, n, 1_000)))
        read = Comparison(
            "eventsourcing.reconstruct_ratio",
            "eventsourcing",
            "cairn",
            f"eventsourcing's time over cairn's to read one session of {n:,} ~300-token events back whole "
            "(repository.get vs replay_full)",
            target=1.0,
            better="lower",
            fmt=",.1f",
            scale=1000,
        )
        measures = [
            ("eventsourcing", lambda: timed(lambda: app.repository.get(note.id), 1)),
            ("cairn", lambda: timed(lambda: journal.replay_full("note"), 1)),
        ]
        return compare(measures, [read], 5).figures[0]
    finally:
        journal.close()
        app.close()


def run(quick: bool) -> list[Figure]:
    """The `store` suite, in a scratch directory removed at the end."""
    workdir = Path(tempfile.mkdtemp(prefix="cairn-bench-"))
    try:
        return [
            *guarded("append", lambda: bench_appends(workdir, quick)),
            *guarded("restore", lambda: bench_restore(workdir, quick)),
            *guarded("open", lambda: bench_open(workdir, quick)),
            *guarded("replay", lambda: bench_replay(workdir, quick)),
            *guarded("eventsourcing", lambda: bench_eventsourcing(workdir, quick)),
        ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    from cairn import bench

    sys.exit(bench.main(suite="store"))
