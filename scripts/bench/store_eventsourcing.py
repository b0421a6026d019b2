"""The eventsourcing comparison of `cairn bench`'s `store` suite: cairn against eventsourcing on SQLite.

Durable appends on both sides (one thread per session, one event per call,
each waiting until its event is durable) and the reconstruction of one
session's events, in alternating pairs; eventsourcing is the `bench` extra
(`unavailable` without it).
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn.bench._figure import Comparison, Figure, compare, unavailable
from cairn.bench._measure import threads_rate, timed
from cairn.bench._workload import event_text
from cairn.events.kinds import EventBase, SessionStarted
from cairn.store import Journal


def bench_eventsourcing(workdir: Path, quick: bool) -> list[Figure]:
    """cairn against eventsourcing on SQLite, the same ~300-token events, durable on both sides.

    Appends with 1 and 16 sessions (one thread each, one event per call,
    each waiting until its event is durable), in alternating pairs: against
    eventsourcing's defaults (SQLite in WAL mode, `synchronous=FULL`: the WAL
    is fsynced at every commit, one commit per `save`), and against its
    fastest durable use (the same settings, 16 events per commit: the 16
    sessions' next events in one `save`, or one session's next 16). Then the
    reconstruction of one session's events, in pairs too.
    """
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

    runs = _Runs(workdir, Application, Note)
    plan = {1: 150, 16: 15} if quick else {1: 500, 16: 60}
    measures: list[tuple[str, Callable[[], float]]] = []
    for sessions, per_session in plan.items():
        measures += [
            (f"es/{sessions}", functools.partial(runs.es_rate, sessions, per_session, 1)),
            (f"cairn/{sessions}", functools.partial(runs.cairn_rate, sessions, per_session)),
        ]
    measures.append(("es16/16", functools.partial(runs.es_rate, 16, plan[16], 16)))
    figures = compare(measures, _comparisons(plan), 3 if quick else 5).figures
    figures.append(
        _reconstruct(workdir, runs.application, Note, runs.events, runs.texts, 2_000 if quick else 10_000)
    )
    return figures


class _Runs:
    """The append measures of both sides: each run on a store (or SQLite file) of its own."""

    def __init__(self, workdir: Path, application_type: Any, note_type: Any) -> None:
        from cairn.bench.store import append_events

        self.workdir = workdir
        self.application_type = application_type
        self.note_type = note_type
        self.events = append_events(300)
        self.texts = [event_text(e) for e in self.events]
        self.runs = iter(range(1 << 30))

    def application(self) -> Any:
        db = self.workdir / f"es-{next(self.runs)}.sqlite"
        return self.application_type(
            env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(db)}
        )

    def es_rate(self, sessions: int, per_session: int, per_commit: int) -> float:
        app = self.application()
        notes = [self.note_type(f"s{n}") for n in range(sessions)]
        app.save(*notes)
        if _sqlite_synchronous(app) != 2:  # FULL: the WAL fsynced at every commit, as cairn fsyncs
            raise RuntimeError("eventsourcing's SQLite is not synchronous=FULL: not a durable comparison")
        texts = self.texts
        if per_commit == 1:
            rate = threads_rate(sessions, per_session, lambda n, i: _es_save(app, notes[n], texts, n, i))
        else:
            rate = _es_batched_rate(app, notes, per_session, per_commit, texts)
        app.close()
        return rate

    def cairn_rate(self, sessions: int, per_session: int) -> float:
        from cairn.bench.store import append_rate

        root = self.workdir / f"vs-es-{next(self.runs)}"
        journal = Journal.open(root)
        try:
            return append_rate(journal, sessions, per_session, self.events, prefix="es")
        finally:
            journal.close()
            shutil.rmtree(root, ignore_errors=True)


def _comparisons(plan: dict[int, int]) -> list[Comparison]:
    """cairn over eventsourcing at each number of sessions of `plan` (judged at 16), and over its
    fastest durable use at 16."""
    comparisons = []
    for sessions, per_session in plan.items():
        what = f"{sessions} session{'s' if sessions > 1 else ''} x {per_session}, one event per call"
        comparisons.append(
            Comparison(
                f"eventsourcing.append_ratio.sessions_{sessions}",
                f"es/{sessions}",
                f"cairn/{sessions}",
                f"cairn over eventsourcing on SQLite (WAL, synchronous=FULL: one commit, one fsync per "
                f"event), {what}, ~300-token events",
                target=1.0 if sessions > 1 else None,
            )
        )
    comparisons.append(
        Comparison(
            "eventsourcing.append_ratio.sessions_16.fastest_durable",
            "es16/16",
            "cairn/16",
            "cairn (16 sessions, one event per call) over eventsourcing's fastest durable use: the 16 "
            "sessions' next events in one save (16 events a commit and an fsync)",
        )
    )
    return comparisons


def _reconstruct(
    workdir: Path,
    application: Callable[[], Any],
    note_type: Any,
    events: list[EventBase],
    texts: list[str],
    n: int,
) -> Figure:
    """One session of `n` events read back whole: cairn's replay_full against eventsourcing's
    `repository.get`, in alternating pairs (times; the ratio is eventsourcing's over cairn's)."""
    app = application()
    note = note_type("long")
    for i in range(n):
        note.add(texts[i % len(texts)])
    app.save(note)
    root = workdir / "vs-es-read"
    journal = Journal.open(root)
    try:
        journal.append("note", [SessionStarted(workspace="/w", model="m")], expected_seq=0)
        seq = 1
        while seq <= n:
            batch = [events[(seq - 1 + k) % len(events)] for k in range(min(1_000, n - seq + 1))]
            journal.append("note", batch, expected_seq=seq)
            seq += len(batch)
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


def _es_save(app: Any, note: Any, texts: list[str], n: int, i: int) -> None:
    note.add(texts[(n * 7919 + i) % len(texts)])
    app.save(note)


def _es_batched_rate(
    app: Any, notes: list[Any], per_session: int, per_commit: int, texts: list[str]
) -> float:
    """eventsourcing's fastest durable use: `per_commit` events in each `save` (one transaction)."""
    total = len(notes) * per_session
    started = time.perf_counter()
    done = 0
    while done < total:
        pending = []
        for k in range(min(per_commit, total - done)):
            note = notes[(done + k) % len(notes)]
            note.add(texts[(done + k) % len(texts)])
            pending.append(note)
        app.save(*{id(note): note for note in pending}.values())
        done += len(pending)
    return total / (time.perf_counter() - started)


def _sqlite_synchronous(app: Any) -> int:
    """The `synchronous` setting of eventsourcing's own SQLite connections (2 = FULL)."""
    with app.recorder.datastore.get_connection(commit=False) as conn:
        value = conn._sqlite_conn.execute("PRAGMA synchronous").fetchone()[0]
    return int(value)
