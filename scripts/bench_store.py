"""Store benchmarks of `cairn bench` (issue 2): durable appends, restore, open, replay.

Every figure is a ratio against a baseline measured in the same run, because
these machines are shared and noisy; absolute numbers are reported beside.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cairn.actors.placement import batch_scheduled, on_one_cpu
from cairn.bench import Figure, figure
from cairn.events.codec import GENESIS, decode_run, encode_line
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    EventBase,
    Request,
    SessionStarted,
    ToolResult,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, TextPart, ToolCall
from cairn.events.state import Replayer, carried_for_checkpoint
from cairn.store import Journal
from cairn.store.segments import segment_name


def _payload(rng: random.Random, low: int, high: int) -> str:
    size = rng.randint(low, high)
    return ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]


def _mixed_event(rng: random.Random, i: int, size_range: tuple[int, int]) -> EventBase:
    text = _payload(rng, *size_range)
    if i % 3 == 0:
        return UserMessage(message_id=f"u{i}", content=(TextPart(text),))
    if i % 3 == 1:
        call = ToolCall(id=f"c{i}", name="read", arguments='{"path": "src/app.py"}')
        return AssistantMessage(message_id=f"a{i}", request_id=f"r{i}", text=text[:80], tool_calls=(call,))
    return ToolResult(call_id=f"c{i - 1}", tool_name="read", status="ok", effect="read",
                      content=(TextPart(text),), original_chars=len(text))


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


def _journal_rate(root: Path, sessions: int, per_session: int, events: Sequence[EventBase]) -> float:
    """`sessions` threads, each appending its own events and waiting for each ack."""
    journal = Journal.open(root)
    try:
        barrier = threading.Barrier(sessions + 1)
        errors: list[BaseException] = []

        def work(n: int) -> None:
            sid = f"bench-{n}"
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
        barrier.wait()
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        if errors:
            raise errors[0]
        return sessions * per_session / elapsed
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
    rng = random.Random(7)
    events = [_mixed_event(rng, i, (200, 2000)) for i in range(600)]
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
        for placement in names[round_no % len(names):] + names[: round_no % len(names)]:
            with PLACEMENTS[placement][1]():
                for sessions, per_session in plan.items():
                    root = workdir / f"append-{sessions}"
                    rates[sessions, placement].append(_journal_rate(root, sessions, per_session, events))
                    shutil.rmtree(root, ignore_errors=True)
                floors[placement].append(_wake_floor_rate(256, plan[256] * 2))
    baseline = statistics.median(baselines)
    figures = [figure("append.naive_fsync_per_event", round(baseline), "events/s",
                      detail=f"one write + fsync per event, sequential; median of {rounds} rounds, "
                      f"range {min(baselines):,.0f}-{max(baselines):,.0f}")]
    for placement, (label, _) in PLACEMENTS.items():
        suffix = "" if placement == "one_cpu" else f".{placement}"
        for sessions in plan:
            rate = statistics.median(rates[sessions, placement])
            ratio = _median_ratio(rates[sessions, placement], baselines)
            checked = sessions == 256 and placement == "one_cpu"
            detail = f"{label}; {ratio:.1f}x the naive baseline (median of {rounds} rounds)"
            name = f"append.sessions_{sessions}{suffix}"
            figures.append(figure(name, round(rate), "events/s", detail=detail))
            figures.append(figure(f"{name}.ratio", round(ratio, 2), "x",
                                  ">= 10x baseline" if checked else None, ratio >= 10 if checked else None))
        floor = statistics.median(floors[placement])
        floor_ratio = _median_ratio(floors[placement], baselines)
        figures.append(figure(f"append.wake_floor_256{suffix}", round(floor), "events/s",
                              detail=f"{label}; {floor_ratio:.1f}x the baseline: 256 threads acked by a "
                              "writer that does nothing (the thread-wake ceiling)"))
    return figures


# --- restore of one long session ------------------------------------------------------


def _build_long_session(root: Path, sid: str, total: int, checkpoint_every: int) -> None:
    journal = Journal.open(root)
    try:
        seq = 0
        journal.append(sid, [SessionStarted(workspace="/w", model="m", context_window=200_000)],
                       expected_seq=0)
        seq = 1
        rng = random.Random(11)
        summary = tuple(Message(role="user", content=f"summary line {k}", id=f"s{k}") for k in range(8))
        while seq < total:
            batch: list[EventBase] = []
            for i in range(min(checkpoint_every - 1, total - seq - 1)):
                n = seq + i
                if n % 4 == 0:
                    batch.append(Request(request_id=f"r{n}", turn_id="t", attempt=1, fingerprint="f",
                                         history_revision=0, projected_tokens=n, phase="below_handoff",
                                         message_count=10))
                elif n % 4 == 1:
                    batch.append(Usage(request_id=f"r{n - 1}", prompt_tokens=100, completion_tokens=5,
                                       total_tokens=105))
                else:
                    batch.append(_mixed_event(rng, n, (60, 240)))
            if seq + len(batch) + 1 <= total:
                batch.append(CheckpointCommitted(
                    version=1, epoch=(seq // checkpoint_every) + 1, through_seq=seq + len(batch),
                    trigger="threshold", strategy="fallback", source_tokens=1000, replacement_tokens=80,
                    replacement_messages=summary))
            journal.append(sid, batch, expected_seq=seq)
            seq += len(batch)
        # a typical tail: half a checkpoint interval of events after the last checkpoint
        tail = [_mixed_event(rng, seq + i, (60, 240)) for i in range(checkpoint_every // 2)]
        journal.append(sid, tail, expected_seq=seq)
    finally:
        journal.close()


def _samples(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _timed(fn: Callable[[], object], repeat: int) -> float:
    """The median time of `repeat` runs."""
    return statistics.median(_samples(fn, repeat))


def _best(fn: Callable[[], object], repeat: int) -> float:
    """The shortest of `repeat` runs: for CPU-bound work, what the code costs when nothing else runs.

    Noise on a shared machine only ever adds time, so the minimum is the
    estimate of the code's own cost (as `timeit` reports it).
    """
    return min(_samples(fn, repeat))


def _peak_memory(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench_restore(workdir: Path, quick: bool) -> list[Figure]:
    long_events = 100_000 if quick else 1_000_000
    short_events = 2_000
    root = workdir / "restore"
    _build_long_session(root, "long", long_events, 200)
    _build_long_session(root, "short", short_events, 200)
    journal = Journal.open(root, readonly=True)
    try:
        load_s = _timed(lambda: journal.load("long"), 15)
        full_s = _timed(lambda: journal.replay_full("long"), 1)
        assert journal.load("long") == journal.replay_full("long"), "load differs from full replay"
        mem_long = _peak_memory(lambda: journal.load("long"))
        mem_short = _peak_memory(lambda: journal.load("short"))
    finally:
        journal.close()
    ratio = full_s / load_s
    growth = mem_long / max(mem_short, 1)
    return [
        figure("restore.load_ms", round(load_s * 1000, 3), "ms", "< 20 ms", load_s < 0.020,
               f"session of {long_events + 100:,} events, checkpoint every 200, 100 after the last"),
        figure("restore.full_replay_ms", round(full_s * 1000, 1), "ms"),
        figure("restore.speedup", round(ratio, 1), "x", ">= 500x full replay", ratio >= 500),
        figure("restore.memory_long_vs_short", round(growth, 2), "x", "<= 1.5 (flat in history)",
               growth <= 1.5, f"peak {mem_long:,} B at {long_events:,} events vs {mem_short:,} B at "
               f"{short_events:,}"),
    ]


# --- opening a large store -------------------------------------------------------------


def _build_store(root: Path, sessions: int, per_session: int) -> None:
    journal = Journal.open(root)
    try:
        rng = random.Random(3)
        events = [_mixed_event(rng, i, (60, 200)) for i in range(300)]
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

    big_s = _timed(lambda: open_close(big_root), 5)
    small_s = _timed(lambda: open_close(small_root), 5)
    log_bytes = sum(f.stat().st_size for f in (big_root / "log").glob("*.jsonl"))
    ratio = big_s / small_s
    return [
        figure("open.large_store_ms", round(big_s * 1000, 2), "ms",
               detail=f"{big[0]:,} sessions x {big[1]:,} events, {log_bytes / 2**20:.0f} MiB of log"),
        figure("open.small_store_ms", round(small_s * 1000, 2), "ms", detail="10 sessions x 10 events"),
        figure("open.large_vs_small", round(ratio, 2), "x", "<= 3x (no log scan)", ratio <= 3),
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
        batch: list[EventBase] = [_mixed_event(rng, seq + i, (60, 300)) for i in range(room)]
        if checkpoint_every is not None and since + room >= checkpoint_every and seq + room < count:
            state = replayer.state()
            if batch:
                replayer.feed(journal.append(sid, batch, expected_seq=seq))
                seq += len(batch)
                state = replayer.state()
                batch = []
            tail = list(state.context[-((len(state.context) + 4) // 5):])
            kept_calls = {call.id for m in tail for call in m.tool_calls}
            while tail and tail[0].role == "tool" and tail[0].tool_call_id not in kept_calls:
                tail.pop(0)
            epoch += 1
            summary = Message(role="user", content="summary of the work so far " * 40, id=f"sum{epoch}")
            batch = [CheckpointCommitted(
                version=1, epoch=epoch, through_seq=seq, trigger="threshold", strategy="llm",
                source_tokens=90_000, replacement_tokens=18_000, replacement_messages=(summary, *tail),
                carried=carried_for_checkpoint(state, reset_breaker=True))]
            since = 0
        else:
            since += len(batch)
        replayer.feed(journal.append(sid, batch, expected_seq=seq))
        seq += len(batch)
    return epoch


def bench_replay(workdir: Path, quick: bool) -> list[Figure]:
    """Replay rate: decode (frame, CRC, schema) + fold, and the same from the log.

    Best of five runs each (`_best`). Judged on a session checkpointed as cairn checkpoints one (every
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
        seconds = {sid: _best(functools.partial(journal.replay_full, sid), 5) for sid in ("rc", "r")}
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

    fold_rate = {sid: lines_of[sid] / _best(functools.partial(decode_and_fold, runs_of[sid]), 5)
                 for sid in ("rc", "r")}
    return [
        figure("replay.decode_fold_rate", round(fold_rate["rc"]), "events/s", ">= 500,000 events/s",
               fold_rate["rc"] >= 500_000,
               f"decode (frame, CRC, schema) + fold of {lines_of['rc']:,} lines in memory, a checkpoint "
               f"every {REPLAY_CHECKPOINT_EVERY:,} ({checkpoints} in all)"),
        figure("replay.decode_fold_rate.no_checkpoints", round(fold_rate["r"]), "events/s",
               detail=f"the same for {lines_of['r']:,} lines never checkpointed: one context of every "
               "message, which no session holds"),
        figure("replay.from_log_rate", round(lines_of["rc"] / seconds["rc"]), "events/s", detail=(
            "journal.replay_full of the checkpointed session: decode + fold plus index walk and reads")),
        figure("replay.from_log_rate.no_checkpoints", round(lines_of["r"] / seconds["r"]), "events/s",
               detail="journal.replay_full of the session never checkpointed"),
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
    return [(b"".join(lines[start : start + 1024]), [len(line) for line in lines[start : start + 1024]])
            for start in range(0, len(lines), 1024)]


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
    app: Any = Application(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                           "SQLITE_DBNAME": str(workdir / "es.sqlite")})
    note = Note("bench")
    app.save(note)
    start = time.perf_counter()
    for text in texts:
        note.add(text)
        app.save(note)
    es_append = time.perf_counter() - start
    es_read = _timed(lambda: app.repository.get(note.id), 3)

    journal = Journal.open(workdir / "vs-es")
    try:
        journal.append("note", [SessionStarted(workspace="/w", model="m")], expected_seq=0)
        start = time.perf_counter()
        for i, text in enumerate(texts):
            journal.append("note", [UserMessage(message_id=f"u{i}", content=(TextPart(text),))],
                           expected_seq=i + 1)
        cairn_append = time.perf_counter() - start
        cairn_read = _timed(lambda: journal.replay_full("note"), 3)
    finally:
        journal.close()
    return [
        figure("eventsourcing.append_ratio", round(es_append / cairn_append, 2), "x",
               detail=f"cairn {n / cairn_append:,.0f}/s vs eventsourcing+SQLite {n / es_append:,.0f}/s, "
               "one durable write per event"),
        figure("eventsourcing.reconstruct_ratio", round(es_read / cairn_read, 2), "x",
               detail=f"cairn {cairn_read * 1000:.1f} ms vs eventsourcing {es_read * 1000:.1f} ms "
               f"for {n:,} events of one aggregate"),
    ]


def run(quick: bool) -> list[Figure]:
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
