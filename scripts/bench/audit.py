"""Audit benchmarks: memory of `cairn export --format parquet`, `report` and `verify` on 250k and 1M events.

Two stores of 8 sessions are built with the journal's batch append (one
turn-shaped batch of about 2,000 events per call): 250,000 events and
1,000,000 (so its sessions are also 4x longer), holding what a host writes:
requests, tool calls and results, usage, slimming, provider errors, failed
turns, a checkpoint every 150 turns. Each command runs on each store in a
fresh child process (`--child`), small and large in alternating pairs,
sampling its peak anonymous RSS (`RssAnon` every 10 ms: heap and stacks,
not the file pages of the mmapped log and index, which the kernel reclaims).
Target: the small store's peak over the large one's at least 0.8 (the large
within 1.25x): memory flat in the number of events. With `--explore`, each
command's time. `--quick`: 25,000 and 100,000 events, one pair.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cairn.bench import guarded
from cairn.bench._figure import Comparison, Figure, compare
from cairn.bench._measure import proc_status_kib
from cairn.bench._workload import payload
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    ContextSlimmed,
    EventBase,
    ProviderError,
    Request,
    SessionStarted,
    ToolResult,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, TextPart, ToolCall

SESSIONS = 8
BATCH = 2_000
MEMORY_TARGET = 1.25
#: what runs in the children (`cairn verify` too: the report runs it first)
TASKS = ("export", "report", "verify")
#: (small, large) events of the stores, and pairs
FULL = (250_000, 1_000_000, 2)
QUICK = (25_000, 100_000, 1)


class _Session:
    """One session's events, written turn by turn: the state a turn's events need."""

    def __init__(self, sid: str, rng: random.Random) -> None:
        self.sid = sid
        self.rng = rng
        self.turn = 0
        self.tokens = 2_000
        self.epoch = 0
        self.seq = 0

    def turn_events(self) -> list[EventBase]:
        """One turn: 3 requests (2 with a tool call and its result), each with its usage; now and
        then slimming, a provider error and retry, a failed turn, and a checkpoint every 150 turns."""
        n, rng = self.turn, self.rng
        self.turn += 1
        tid = f"t{n}"
        events: list[EventBase] = [
            TurnStarted(turn_id=tid, message_id=f"u{n}"),
            UserMessage(message_id=f"u{n}", content=(TextPart(payload(rng, 40, 160)),)),
        ]
        for k in range(3):
            events += self._request(n, k, tid)
        if n % 13 == 5:
            events.append(ContextSlimmed(mode="micro", removed_call_ids=(f"c{n}.0",), tokens_saved=120))
            self.tokens -= 120
        if n % 97 == 50:
            events.append(TurnFailed(turn_id=tid, phase="tool", error_class="ToolError", error="it broke"))
        else:
            events.append(TurnCompleted(turn_id=tid, requests=3))
        if n % 150 == 149:
            self.epoch += 1
            events.append(
                CheckpointCommitted(
                    version=1,
                    epoch=self.epoch,
                    through_seq=self.seq + len(events),
                    trigger="threshold",
                    strategy="fallback",
                    source_tokens=self.tokens,
                    replacement_tokens=3_000,
                    replacement_messages=(Message(role="user", content=payload(rng, 400, 800), id=f"s{n}"),),
                )
            )
            self.tokens = 3_000
        return events

    def _request(self, n: int, k: int, tid: str) -> list[EventBase]:
        """Request `k` of turn `n`: a provider error now and then, else the answer with its usage and,
        for the first two, a tool call's result."""
        rng, rid = self.rng, f"r{n}.{k}"
        self.tokens += rng.randint(300, 900)
        request = Request(
            request_id=rid,
            turn_id=tid,
            attempt=1,
            fingerprint="f",
            history_revision=n,
            projected_tokens=self.tokens,
            phase="below_handoff",
            message_count=10 + k,
            model="bench",
        )
        if n % 40 == 7 and k == 0:
            return [request, ProviderError(request_id=rid, error_class="server", output_delivered=False)]
        calls = (ToolCall(id=f"c{n}.{k}", name="read", arguments='{"path": "src/app.py"}'),) if k < 2 else ()
        said = payload(rng, 20, 80)
        events: list[EventBase] = [
            request,
            AssistantMessage(message_id=f"a{n}.{k}", request_id=rid, text=said, tool_calls=calls),
            Usage(
                request_id=rid, prompt_tokens=self.tokens - 50, completion_tokens=40, total_tokens=self.tokens
            ),
        ]
        if calls:
            text = payload(rng, 60, 240)
            events.append(
                ToolResult(
                    call_id=calls[0].id,
                    tool_name="read",
                    status="ok",
                    effect="read",
                    content=(TextPart(text),),
                    original_chars=len(text),
                )
            )
        return events


def build_store(root: Path, events: int, sessions: int = SESSIONS) -> int:
    """A store of about `events` events in `sessions` sessions, by batch appends; the events written."""
    from cairn.store import Journal

    per_session = events // sessions
    written = 0
    with Journal.open(root) as journal:
        for s in range(sessions):
            session = _Session(f"bench-{s}", random.Random(s))
            batch: list[EventBase] = [
                SessionStarted(workspace="/w", model="bench", context_window=200_000, max_output_tokens=8_000)
            ]
            while session.seq + len(batch) < per_session:
                batch += session.turn_events()
                if len(batch) >= BATCH or session.seq + len(batch) >= per_session:
                    journal.append(session.sid, batch, expected_seq=session.seq)
                    session.seq += len(batch)
                    batch = []
            written += session.seq
    return written


def _child(task: str, store: Path, out: Path) -> dict[str, Any]:
    """Run `task` on `store` into `out`: its time and peak memory (this process's)."""
    from cairn import cli

    peak_anon = proc_status_kib("RssAnon")[0]
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_anon
        while not done.wait(0.01):
            peak_anon = max(peak_anon, proc_status_kib("RssAnon")[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    argv = {
        "export": ["export", "--format", "parquet", "--to", str(out)],
        "report": ["report", "--out", str(out)],
        "verify": ["verify"],
    }[task]
    started = time.perf_counter()
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        code = cli.main([*argv, "--store", str(store), "--json"])
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    peak_anon = max(peak_anon, proc_status_kib("RssAnon")[0])
    return {"code": code, "seconds": seconds, "hwm_kib": proc_status_kib("VmHWM")[0], "anon_kib": peak_anon}


def measure(task: str, store: Path, workdir: Path) -> dict[str, Any]:
    """One child run of `task` on `store` (its output removed after)."""
    with tempfile.TemporaryDirectory(prefix=f"{task}-", dir=workdir) as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "cairn.bench.audit", "--child", task, str(store), f"{tmp}/out"],
            capture_output=True,
            text=True,
            timeout=3600,
            check=True,
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["code"] != 0:
        raise RuntimeError(f"{task} of {store} exited {result['code']}: {done.stderr.strip()[-300:]}")
    return result


def bench_task(task: str, stores: dict[int, Path], workdir: Path, pairs: int) -> list[Figure]:
    """`task` on the small and the large store in alternating pairs: the growth of its peak memory."""
    (small, small_store), (large, large_store) = sorted(stores.items())
    runs: dict[int, list[dict[str, Any]]] = {small: [], large: []}

    def run(size: int, store: Path) -> float:
        result = measure(task, store, workdir)
        runs[size].append(result)
        return float(result["anon_kib"])

    what = f"`cairn {'export --format parquet' if task == 'export' else task}`"
    growth = Comparison(
        f"{task}.memory_growth",
        "small",
        "large",
        f"peak anonymous RSS of {what} in a fresh process, small store over large "
        f"({small:,} vs {large:,} events in {SESSIONS} sessions; KiB)",
        target=1 / MEMORY_TARGET,
        says=f"large within {MEMORY_TARGET}x small (>= {1 / MEMORY_TARGET:.2f}x)",
        better="lower",
    )
    done = compare(
        [("small", lambda: run(small, small_store)), ("large", lambda: run(large, large_store))],
        [growth],
        pairs,
    )
    seconds = statistics.median(r["seconds"] for r in runs[large])
    hwm = statistics.median(r["hwm_kib"] for r in runs[large])
    took = (
        f"{large / seconds:,.0f} events/s at {large:,} events; peak RSS (VmHWM, file pages of the mmapped "
        f"log and index included) {hwm / 1024:,.0f} MiB"
    )
    return [
        *done.figures,
        Figure.measured(f"{task}.seconds", round(seconds, 1), "s", took, done.load, explore=True),
    ]


def run(quick: bool) -> list[Figure]:
    small, large, pairs = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="cairn-bench-audit-") as tmp:
        stores = {size: Path(tmp, f"store-{size}") for size in (small, large)}
        for size, store in stores.items():
            build_store(store, size)
        figures: list[Figure] = []
        for task in TASKS:
            figures += guarded(task, functools.partial(bench_task, task, stores, Path(tmp), pairs))
        return figures


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # a measuring child: `--child TASK STORE OUT`
        print(json.dumps(_child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))))
    else:
        from cairn import bench

        sys.exit(bench.main(suite="audit"))
