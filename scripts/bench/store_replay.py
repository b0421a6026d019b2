"""Store benchmarks of `cairn bench` (issue 2), reading a session's history back: restore, replay.

The restore of one long session from its checkpoint against its full
replay, the replay rate (decode + fold, and from the log), and the
comparison with eventsourcing on SQLite. Part of the `store` suite.
"""

from __future__ import annotations

import functools
import random
import time
from pathlib import Path
from typing import Any

from cairn.bench import Figure, figure
from cairn.bench._measure import best, peak_memory, timed
from cairn.bench._workload import mixed_event
from cairn.events.codec import decode_run
from cairn.events.kinds import (
    CheckpointCommitted,
    EventBase,
    Request,
    SessionStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, TextPart
from cairn.events.state import Replayer, carried_for_checkpoint
from cairn.store import Journal
from cairn.store.backend import JournalBackend
from cairn.store.segments import segment_name

# --- restore of one long session ------------------------------------------------------


def _build_long_session(root: Path, sid: str, total: int, checkpoint_every: int) -> None:
    journal = Journal.open(root)
    try:
        write_long_session(journal, sid, total, checkpoint_every)
    finally:
        journal.close()


def write_long_session(journal: JournalBackend, sid: str, total: int, checkpoint_every: int) -> None:
    """A session of `total` events (plus a tail of half a checkpoint interval), a checkpoint every
    `checkpoint_every`: requests, usages and the mixed events, in calls of one checkpoint interval."""
    journal.append(sid, [SessionStarted(workspace="/w", model="m", context_window=200_000)], expected_seq=0)
    seq = 1
    rng = random.Random(11)
    summary = tuple(Message(role="user", content=f"summary line {k}", id=f"s{k}") for k in range(8))
    while seq < total:
        batch: list[EventBase] = []
        for i in range(min(checkpoint_every - 1, total - seq - 1)):
            n = seq + i
            if n % 4 == 0:
                batch.append(
                    Request(
                        request_id=f"r{n}",
                        turn_id="t",
                        attempt=1,
                        fingerprint="f",
                        history_revision=0,
                        projected_tokens=n,
                        phase="below_handoff",
                        message_count=10,
                    )
                )
            elif n % 4 == 1:
                batch.append(
                    Usage(request_id=f"r{n - 1}", prompt_tokens=100, completion_tokens=5, total_tokens=105)
                )
            else:
                batch.append(mixed_event(rng, n, (60, 240)))
        if seq + len(batch) + 1 <= total:
            batch.append(
                CheckpointCommitted(
                    version=1,
                    epoch=(seq // checkpoint_every) + 1,
                    through_seq=seq + len(batch),
                    trigger="threshold",
                    strategy="fallback",
                    source_tokens=1000,
                    replacement_tokens=80,
                    replacement_messages=summary,
                )
            )
        journal.append(sid, batch, expected_seq=seq)
        seq += len(batch)
    # a typical tail: half a checkpoint interval of events after the last checkpoint
    tail = [mixed_event(rng, seq + i, (60, 240)) for i in range(checkpoint_every // 2)]
    journal.append(sid, tail, expected_seq=seq)


def bench_restore(workdir: Path, quick: bool) -> list[Figure]:
    long_events = 100_000 if quick else 1_000_000
    short_events = 2_000
    root = workdir / "restore"
    _build_long_session(root, "long", long_events, 200)
    _build_long_session(root, "short", short_events, 200)
    journal = Journal.open(root, readonly=True)
    try:
        load_s = timed(lambda: journal.load("long"), 15)
        full_s = timed(lambda: journal.replay_full("long"), 1)
        assert journal.load("long") == journal.replay_full("long"), "load differs from full replay"
        mem_long = peak_memory(lambda: journal.load("long"))
        mem_short = peak_memory(lambda: journal.load("short"))
    finally:
        journal.close()
    ratio = full_s / load_s
    growth = mem_long / max(mem_short, 1)
    return [
        figure(
            "restore.load_ms",
            round(load_s * 1000, 3),
            "ms",
            "< 20 ms",
            load_s < 0.020,
            f"session of {long_events + 100:,} events, checkpoint every 200, 100 after the last",
        ),
        figure("restore.full_replay_ms", round(full_s * 1000, 1), "ms"),
        figure("restore.speedup", round(ratio, 1), "x", ">= 500x full replay", ratio >= 500),
        figure(
            "restore.memory_long_vs_short",
            round(growth, 2),
            "x",
            "<= 1.5 (flat in history)",
            growth <= 1.5,
            f"peak {mem_long:,} B at {long_events:,} events vs {mem_short:,} B at {short_events:,}",
        ),
    ]


# --- replay rate and the eventsourcing comparison -------------------------------------


#: events between checkpoints in the replay bench: a 128k-token window compacts at 80 % of its
#: input budget, about 1,800 of these messages (some 50 tokens each) after the previous checkpoint
REPLAY_CHECKPOINT_EVERY = 2_000


def _build_replay_session(journal: Journal, sid: str, count: int, checkpoint_every: int | None) -> int:
    """`count` events of the mixed kinds; with `checkpoint_every`, checkpoints as a session makes them.

    Returns how many checkpoints it wrote.

    Each checkpoint holds a summary plus the newest 20 % of the context (C9),
    taken from the session's own fold, so its replacement is what replay of
    a real session decodes.
    """
    rng = random.Random(5)
    records = journal.append(sid, [SessionStarted(workspace="/w", model="m")], expected_seq=0)
    replayer = Replayer()
    replayer.feed(records)
    seq, epoch, since = 1, 0, 0
    while seq < count:
        room = min(1000, count - seq)
        if checkpoint_every is not None and since + room >= checkpoint_every:
            room = max(0, checkpoint_every - since)
        batch: list[EventBase] = [mixed_event(rng, seq + i, (60, 300)) for i in range(room)]
        if checkpoint_every is not None and since + room >= checkpoint_every and seq + room < count:
            state = replayer.state()
            if batch:
                replayer.feed(journal.append(sid, batch, expected_seq=seq))
                seq += len(batch)
                state = replayer.state()
                batch = []
            tail = list(state.context[-((len(state.context) + 4) // 5) :])
            kept_calls = {call.id for m in tail for call in m.tool_calls}
            while tail and tail[0].role == "tool" and tail[0].tool_call_id not in kept_calls:
                tail.pop(0)
            epoch += 1
            summary = Message(role="user", content="summary of the work so far " * 40, id=f"sum{epoch}")
            batch = [
                CheckpointCommitted(
                    version=1,
                    epoch=epoch,
                    through_seq=seq,
                    trigger="threshold",
                    strategy="llm",
                    source_tokens=90_000,
                    replacement_tokens=18_000,
                    replacement_messages=(summary, *tail),
                    carried=carried_for_checkpoint(state, reset_breaker=True),
                )
            ]
            since = 0
        else:
            since += len(batch)
        replayer.feed(journal.append(sid, batch, expected_seq=seq))
        seq += len(batch)
    return epoch


def bench_replay(workdir: Path, quick: bool) -> list[Figure]:
    """Replay rate: decode (frame, CRC, schema) + fold, and the same from the log.

    Best of five runs each (`best`). Judged on a session checkpointed as cairn checkpoints one (every
    REPLAY_CHECKPOINT_EVERY events), so its effective context stays the size a
    session holds. The same events with no checkpoint at all are reported
    beside it: one context of every message, which no session holds, costs
    the memory growth of keeping them all (about a third more time per event).
    """
    count = 50_000 if quick else 300_000
    root = workdir / "replay"
    journal = Journal.open(root)
    try:
        checkpoints = _build_replay_session(journal, "rc", count, REPLAY_CHECKPOINT_EVERY)
        _build_replay_session(journal, "r", count, None)
        seconds = {sid: best(functools.partial(journal.replay_full, sid), 5) for sid in ("rc", "r")}
        assert journal.load("rc") == journal.replay_full("rc"), "load differs from full replay"
        runs_of = {sid: _runs(journal, sid) for sid in ("rc", "r")}
        lines_of = {sid: journal.last_seq(sid) for sid in ("rc", "r")}
    finally:
        journal.close()

    def decode_and_fold(runs: list[tuple[bytes, list[int]]]) -> None:
        replayer = Replayer()
        for run, lengths in runs:
            replayer.feed(decode_run(run, lengths))
        replayer.state()

    fold_rate = {
        sid: lines_of[sid] / best(functools.partial(decode_and_fold, runs_of[sid]), 5) for sid in ("rc", "r")
    }
    return [
        figure(
            "replay.decode_fold_rate",
            round(fold_rate["rc"]),
            "events/s",
            ">= 500,000 events/s",
            fold_rate["rc"] >= 500_000,
            f"decode (frame, CRC, schema) + fold of {lines_of['rc']:,} lines in memory, a checkpoint "
            f"every {REPLAY_CHECKPOINT_EVERY:,} ({checkpoints} in all)",
        ),
        figure(
            "replay.decode_fold_rate.no_checkpoints",
            round(fold_rate["r"]),
            "events/s",
            detail=f"the same for {lines_of['r']:,} lines never checkpointed: one context of every "
            "message, which no session holds",
        ),
        figure(
            "replay.from_log_rate",
            round(lines_of["rc"] / seconds["rc"]),
            "events/s",
            detail=(
                "journal.replay_full of the checkpointed session: decode + fold plus index walk and reads"
            ),
        ),
        figure(
            "replay.from_log_rate.no_checkpoints",
            round(lines_of["r"] / seconds["r"]),
            "events/s",
            detail="journal.replay_full of the session never checkpointed",
        ),
        *_bench_against_eventsourcing(workdir),
    ]


def _runs(journal: Journal, sid: str) -> list[tuple[bytes, list[int]]]:
    """The session's lines in runs of 1,024, as the journal's replay path reads them (one pread a run)."""
    segments: dict[int, bytes] = {}
    lines: list[bytes] = []
    for _, segment, offset, length, _ in journal.index.raw_locations(sid, 1, journal.last_seq(sid), 1 << 30):
        if segment not in segments:
            segments[segment] = (journal.root / "log" / segment_name(segment)).read_bytes()
        lines.append(segments[segment][offset : offset + length])
    return [
        (b"".join(lines[start : start + 1024]), [len(line) for line in lines[start : start + 1024]])
        for start in range(0, len(lines), 1024)
    ]


def _bench_against_eventsourcing(workdir: Path, n: int = 10_000) -> list[Figure]:
    try:
        from eventsourcing.application import Application
        from eventsourcing.domain import Aggregate, event
    except ImportError:
        return [figure("eventsourcing.compare", 0, "", detail="skipped: pip install 'cairn[bench]'")]

    class Note(Aggregate):  # type: ignore[misc, unused-ignore]
        @event("Started")  # type: ignore[untyped-decorator, unused-ignore]
        def __init__(self, name: str) -> None:
            self.lines: list[str] = []

        @event("Added")  # type: ignore[untyped-decorator, unused-ignore]
        def add(self, text: str) -> None:
            self.lines.append(text)

    texts = [f"line {i} " + "x" * 80 for i in range(n)]
    app: Any = Application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(workdir / "es.sqlite")}
    )
    note = Note("bench")
    app.save(note)
    start = time.perf_counter()
    for text in texts:
        note.add(text)
        app.save(note)
    es_append = time.perf_counter() - start
    es_read = timed(lambda: app.repository.get(note.id), 3)

    journal = Journal.open(workdir / "vs-es")
    try:
        journal.append("note", [SessionStarted(workspace="/w", model="m")], expected_seq=0)
        start = time.perf_counter()
        for i, text in enumerate(texts):
            journal.append(
                "note", [UserMessage(message_id=f"u{i}", content=(TextPart(text),))], expected_seq=i + 1
            )
        cairn_append = time.perf_counter() - start
        cairn_read = timed(lambda: journal.replay_full("note"), 3)
    finally:
        journal.close()
    return [
        figure(
            "eventsourcing.append_ratio",
            round(es_append / cairn_append, 2),
            "x",
            detail=f"cairn {n / cairn_append:,.0f}/s vs eventsourcing+SQLite {n / es_append:,.0f}/s, "
            "one durable write per event",
        ),
        figure(
            "eventsourcing.reconstruct_ratio",
            round(es_read / cairn_read, 2),
            "x",
            detail=f"cairn {cairn_read * 1000:.1f} ms vs eventsourcing {es_read * 1000:.1f} ms "
            f"for {n:,} events of one aggregate",
        ),
    ]
