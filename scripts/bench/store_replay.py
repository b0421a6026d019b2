"""Reading a session's history back, for the `store` suite: restore from a checkpoint, full replay.

Sessions are written as a host writes them (`host_events`), with checkpoints
made by cairn's own compactor (`write_compacted_session`), so a restore
decodes what a real one decodes.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from cairn.actors.compactor import CompactionRequest, Compactor
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.actors.tokens import TokenCounter
from cairn.bench._figure import Comparison, Figure, compare
from cairn.bench._measure import LoadMeter, peak_memory, spread
from cairn.bench._workload import mixed_event, payload
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
from cairn.events.protocol import HEADINGS
from cairn.events.state import Replayer, SessionState
from cairn.store import Journal
from cairn.store.backend import JournalBackend

#: events between checkpoints: a 128k-token window compacts at 80 % of its input budget, about
#: 2,000 of these events (half of them context messages of some 50 tokens) after the previous one
REPLAY_CHECKPOINT_EVERY = 2_000
#: C9: the newest fifth of the source's messages is carried into the replacement
CARRIED_SHARE = 0.20
#: issue 13 point 5: full replay (no checkpoint) through the real path
TARGET_REPLAY_RATE = 400_000


def _request(request_id: str, turn_id: str, projected: int) -> Request:
    return Request(
        request_id=request_id,
        turn_id=turn_id,
        attempt=1,
        fingerprint="f",
        history_revision=0,
        projected_tokens=projected,
        phase="below_handoff",
        message_count=10,
    )


def write_long_session(journal: JournalBackend, sid: str, total: int, checkpoint_every: int) -> None:
    """`total` events (requests, usages, mixed events) and then half an interval more, with a toy
    checkpoint every `checkpoint_every`, appended one interval a call (the `cluster` suite's load)."""
    journal.append(sid, [SessionStarted(workspace="/w", model="m", context_window=200_000)], expected_seq=0)
    seq = 1
    rng = random.Random(11)
    summary = tuple(Message(role="user", content=f"summary line {k}", id=f"s{k}") for k in range(8))
    while seq < total:
        batch: list[EventBase] = []
        for n in range(seq, seq + min(checkpoint_every - 1, total - seq - 1)):
            if n % 4 == 0:
                batch.append(_request(f"r{n}", "t", n))
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
    tail = [mixed_event(rng, seq + i, (60, 240)) for i in range(checkpoint_every // 2)]
    journal.append(sid, tail, expected_seq=seq)


def host_events(rng: random.Random, first: int, count: int) -> list[EventBase]:
    """`count` events of a session's turns, numbered from `first`: a user message every ten turns,
    then a request, an assistant message with a tool call, its usage and the tool's result."""
    out: list[EventBase] = []
    for n in range(first, first + count):
        turn, step = divmod(n, 5)
        r, c = f"r{turn}", f"c{turn}"
        event: EventBase
        if step == 0 and turn % 10 == 0:
            event = UserMessage(message_id=f"u{turn}", content=(TextPart(payload(rng, 60, 600)),))
        elif step == 0:
            event = _request(r, f"t{turn // 10}", turn)
        elif step == 1:
            call = ToolCall(id=c, name="read", arguments=f'{{"path": "src/mod{turn % 97}.py"}}')
            event = AssistantMessage(
                message_id=f"a{turn}", request_id=r, text=payload(rng, 20, 200), tool_calls=(call,)
            )
        elif step == 2:
            event = Usage(request_id=r, prompt_tokens=1000, completion_tokens=50, total_tokens=1050)
        elif step == 3:
            text = payload(rng, 60, 600)
            event = ToolResult(
                call_id=c,
                tool_name="read",
                status="ok",
                effect="read",
                content=(TextPart(text),),
                original_chars=len(text),
            )
        else:
            event = AssistantMessage(message_id=f"b{turn}", request_id=r, text=payload(rng, 20, 300))
        out.append(event)
    return out


def write_plain_session(journal: JournalBackend, sid: str, batches: Iterable[list[EventBase]]) -> None:
    """A session started, then each of `batches` appended in one call, never checkpointed."""
    journal.append(sid, [SessionStarted(workspace="/w", model="m")], expected_seq=0)
    seq = 1
    for batch in batches:
        journal.append(sid, batch, expected_seq=seq)
        seq += len(batch)


@dataclass
class Written:
    """What `write_compacted_session` wrote: its checkpoints' shapes, for the detail and the check."""

    checkpoints: int = 0
    #: per checkpoint: (context messages compacted, replacement messages, carried messages, bytes)
    shapes: list[tuple[int, int, int, int]] = field(default_factory=list)
    summaries_ok: int = 0  # summaries with the seven ledger headings
    tail: int = 0  # events after the last checkpoint

    def describe(self) -> str:
        if not self.shapes:
            return "no checkpoint"
        source, _, carried, size = (statistics.median(s[k] for s in self.shapes) for k in range(4))
        return (
            f"{self.checkpoints:,} checkpoints by the compactor (every {REPLAY_CHECKPOINT_EVERY:,} events): "
            f"median {carried:,.0f} of {source:,.0f} context messages carried + the summary, "
            f"{size / 1024:,.0f} KiB each"
        )

    def problem(self) -> str | None:
        """Why these are not checkpoints as the compactor writes them, or None when they are."""
        if not self.shapes:
            return "no checkpoint written"
        if self.summaries_ok < self.checkpoints:
            return f"{self.checkpoints - self.summaries_ok} of {self.checkpoints} summaries lack the ledger"
        for source, _, carried, _ in self.shapes:
            # C9 carries ceil(20 %) of the source, less orphan tool results at its start
            if carried < math.ceil(source * CARRIED_SHARE) - 2:
                return f"a checkpoint carries {carried} of {source} context messages, under 20 %"
        return None

    def figure(self) -> Figure:
        problem = self.problem()
        target = "as the compactor writes them: ledger summary + >= 20 % of the context carried"
        detail = problem or self.describe()
        return Figure(
            "restore.checkpoint_shape", self.checkpoints, "checkpoints", target, problem is None, detail
        )

    def add(self, checkpoint: CheckpointCommitted, source: int) -> None:
        messages = checkpoint.replacement_messages
        first = messages[0] if messages else None
        summary = first.content if first is not None and first.meta.origin == "summary" else ""
        ledger = isinstance(summary, str) and all(f"## {heading}" in summary for heading in HEADINGS)
        carried = sum(1 for m in messages[1:] if m.meta.origin == "")  # not synthesized: from the source
        self.checkpoints += 1
        self.summaries_ok += ledger
        self.shapes.append((source, len(messages), carried, len(msgspec.json.encode(checkpoint))))


def write_compacted_session(
    journal: JournalBackend, sid: str, total: int, checkpoint_every: int = REPLAY_CHECKPOINT_EVERY
) -> Written:
    """A session of `total` events (`host_events`), then half an interval more, with a checkpoint
    every `checkpoint_every` events made by cairn's compactor from the session's own fold (the
    LLM path with the scripted ledger summary), persisted as a session persists it."""
    rng = random.Random(11)
    started = SessionStarted(workspace="/w", model="m", context_window=200_000)
    replayer = Replayer()
    replayer.feed(journal.append(sid, [started], expected_seq=0))
    compactor = Compactor(ScriptedProvider(), model="summary", sleep=lambda _s: None, counter=TokenCounter())
    written = Written()
    seq = 1
    while seq + checkpoint_every <= total + 1:
        batch = host_events(rng, seq, checkpoint_every - 1)
        replayer.feed(journal.append(sid, batch, expected_seq=seq))
        seq += len(batch)
        state = replayer.state()
        request = CompactionRequest(state=state, workspace="/w", trigger="threshold", now_ms=10**12 + seq)
        outcome = compactor.compact(request)
        written.add(outcome.checkpoint, len(state.context))
        replayer.feed(journal.append(sid, list(outcome.events), expected_seq=seq))
        seq += len(outcome.events)
    tail = host_events(rng, seq, max(0, total - seq) + checkpoint_every // 2)
    journal.append(sid, tail, expected_seq=seq)
    written.tail = len(tail)
    return written


def _read_after_restart(
    root: Path, read: Callable[[Journal], SessionState], cpu: list[float] | None = None
) -> float:
    """The read's time on a journal just opened (the open not timed: `open.*` judges it); the
    process's CPU time for it is appended to `cpu` when given."""
    with Journal.open(root, readonly=True) as opened:
        started, cpu_started = time.perf_counter(), time.process_time()
        read(opened)
        elapsed = time.perf_counter() - started
        if cpu is not None:
            cpu.append(time.process_time() - cpu_started)
        return elapsed


def bench_restore(workdir: Path, quick: bool) -> list[Figure]:
    """Loading a long session from its latest checkpoint against its full replay, in pairs, both as a
    restart does: a fresh `Journal.open`, then `load` (checkpoint + tail) or `replay_full`."""
    long_events, short_events = (100_000 if quick else 1_000_000), 4_000
    root = workdir / "restore"
    with Journal.open(root) as journal:
        built = write_compacted_session(journal, "long", long_events)
        write_compacted_session(journal, "short", short_events)
        events = journal.last_seq("long")
    load = functools.partial(_read_after_restart, root, lambda j: j.load("long"))
    full = functools.partial(_read_after_restart, root, lambda j: j.replay_full("long"))
    with Journal.open(root, readonly=True) as opened:
        assert opened.load("long") == opened.replay_full("long"), "load differs from full replay"
        mem_long = peak_memory(lambda: opened.load("long"))
        mem_short = peak_memory(lambda: opened.load("short"))
    speedup = Comparison(
        "restore.speedup",
        "full",
        "load",
        f"full replay time over load time of a session of {events:,} events, {built.describe()}, "
        f"{built.tail:,} events after the last; on a journal just opened (the open not timed)",
        # 500x at a million events; the full replay grows with the history and the load does not,
        # so --quick's ten times shorter session is held to a tenth of it
        target=500 * long_events / 1_000_000,
        better="lower",
        fmt=",.2f",
        scale=1000,
    )
    done = compare([("full", full), ("load", load)], [speedup], 3)
    with LoadMeter() as meter:
        loads = [load() for _ in range(9)] + done.values["load"]
    load_s = statistics.median(loads)
    growth = mem_long / max(mem_short, 1)
    return [
        built.figure(),
        Figure.measured(
            "restore.load_ms",
            round(load_s * 1000, 3),
            "ms",
            f"Journal.load of the {events:,}-event session: index walk, reads, decode and fold; "
            f"{spread([s * 1000 for s in loads], ',.2f')} ms",
            meter,
            target="< 20 ms",
            met=load_s < 0.020,
        ),
        *done.figures,
        Figure(
            "restore.memory_long_vs_short",
            round(growth, 2),
            "x",
            "<= 1.5 (flat in history)",
            growth <= 1.5,
            f"peak {mem_long:,} B at {long_events:,} events vs {mem_short:,} B at {short_events:,}",
        ),
    ]


def bench_replay(workdir: Path, quick: bool) -> list[Figure]:
    """Full replay of a session never checkpointed, as a restart does it: `Journal.open` then `load`
    (which folds every event), on a warm page cache as on a host that restarts; events/s of the wall
    clock (judged) and of this process's CPU time beside it (what a busy machine leaves out)."""
    count = 50_000 if quick else 300_000
    root = workdir / "replay"
    with Journal.open(root) as journal:
        rng = random.Random(5)
        write_plain_session(
            journal, "r", (host_events(rng, s, min(2_000, count - s)) for s in range(1, count, 2_000))
        )
        events = journal.last_seq("r")
        assert journal.load("r") == journal.replay_full("r"), "load differs from full replay"
    cpu: list[float] = []
    with LoadMeter() as meter:
        rates = [events / _read_after_restart(root, lambda j: j.load("r"), cpu) for _ in range(5)]
    rate = statistics.median(rates)
    cpu_rates = [events / s for s in cpu]
    return [
        Figure.measured(
            "replay.full_rate",
            round(rate),
            "events/s",
            f"load of {events:,} events never checkpointed (host turns: requests, usages, messages, "
            f"tool results) on a journal just opened (index walk, reads, decode, fold): {spread(rates)}; "
            f"per CPU-second of this process {spread(cpu_rates)}",
            meter,
            target=f">= {TARGET_REPLAY_RATE:,} events/s",
            met=rate >= TARGET_REPLAY_RATE,
        )
    ]
