"""AsyncHost's event loop: how long it stalls while many sessions take turns on it, against an idle loop.

Usage: python -m cairn.bench.asyncloop [--quick] [--json]

A monitor task sleeps 1 ms on the loop over and over while a plain thread
does the same; the loop's own stall of a wake-up is the part of its wait
through which the plain thread kept running (the wait less the thread's
longest gap inside it). Three runs alternate (`interleave`), each in a
fresh store: **async**, 100 sessions x 10 turns through one `AsyncHost` on
the loop (a tool call, then a reply streamed in deltas, read live);
**idle**, the monitor alone for as long; **threaded**, the same turns
through the threaded `Host` on 100 plain threads beside an idle loop.

Target: the loop's own worst stall per async run at most 5 ms (median of
the runs; CPython's GIL switch interval, while a blocking call on the loop
costs a few to hundreds of ms), or, where the GIL does not allow that, at
most 1.25x that of the idle loop beside the threaded run
(`own_stall_vs_threaded` >= 0.8): with every CPU taken (some 220 threads)
any loop waits for a CPU or the GIL, 3-46 ms on a quiet 2-CPU machine, and
what AsyncHost answers for is not adding to that.

`--quick`: 32 sessions x 5 turns, 3 rounds. Full: 100 x 10, 7 rounds.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from cairn import AsyncHost, Host, HostConfig, SessionSettings, TextDelta
from cairn.actors.provider.base import ProviderRequest
from cairn.actors.provider.scripted import Outcome, Reply, ScriptedProvider
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.bench._figure import Comparison, Figure
from cairn.bench._measure import LoadMeter, interleave
from cairn.events.model import ToolCall

SETTINGS = SessionSettings(
    model="bench",
    context_window=128_000,
    system_prompt="You are terse.",
    tool_schemas=('{"name":"read","parameters":{"type":"object"}}',),
    read_only_tools=("read",),
)
TICK_S = 0.001
OWN_STALL_TARGET_MS = 5.0
VS_THREADED_TARGET = 0.8


def own_stall_met(own_median_ms: float, vs_threaded: float) -> bool:
    """The judged target: within 5 ms, or no worse than 1.25x an idle loop beside threads."""
    return own_median_ms <= OWN_STALL_TARGET_MS or vs_threaded >= VS_THREADED_TARGET


SHAPES = {False: (100, 10, 7), True: (32, 5, 3)}  # (sessions, turns, rounds) by `quick`
_TOOL_TEXT = " ".join(f"line {n}: nothing to see here." for n in range(40))


def _agent(request: ProviderRequest) -> Outcome:
    """Each turn: one `read` call, then (its result in) a reply. Stateless: the last message decides."""
    if request.messages and request.messages[-1].role == "tool":
        return Reply(text="I read it; nothing in there needs a change. Done for now.")
    return Reply(
        text="Let me read the file first.",
        tool_calls=(ToolCall(f"call-{len(request.messages)}", "read", '{"path": "src/app.py"}'),),
    )


def _read(invocation: ToolInvocation) -> ToolOutcome:
    return ToolOutcome(content=f"{invocation.call.id}: {_TOOL_TEXT}", effect="read")


def provider() -> ScriptedProvider:
    """The scripted agent of this bench and of the http bench's turn."""
    return ScriptedProvider(responder=_agent, chunk_chars=12, keep_requests=False)


def _options(sessions: int) -> dict[str, Any]:
    return {
        "provider": provider(),
        "tools": _read,
        "settings": SETTINGS,
        "config": HostConfig(sweep=False, max_live_sessions=sessions + 8),
    }


class Monitor:
    """The 1 ms sleeper on the loop and the plain thread beside it; `summary()` after `stop()`."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []  # (before, after) of each of the loop's sleeps
        self.reference: list[float] = []  # when the plain thread woke
        self._stop = asyncio.Event()
        self._halt = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._tick_reference, name="stall-reference", daemon=True)

    def _tick_reference(self) -> None:
        while not self._halt.is_set():
            time.sleep(TICK_S)
            self.reference.append(time.perf_counter())

    async def _tick(self) -> None:
        while not self._stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(TICK_S)
            self.spans.append((before, time.perf_counter()))

    def start(self) -> None:
        self._thread.start()
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task
        self._halt.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        """In ms: the worst lateness (`max`), the loop's own worst stall (`own`); the wake-ups (`ticks`)."""
        if not self.spans:
            raise RuntimeError("the monitor never woke: it cannot judge the loop")
        own = 0.0
        for before, after in self.spans:
            if after - before <= own / 1000:  # cannot beat the worst so far
                continue
            low = bisect.bisect_right(self.reference, before)
            high = bisect.bisect_left(self.reference, after)
            wakes = [before, *self.reference[low:high], after]
            shared = max(b - a for a, b in itertools.pairwise(wakes))
            own = max(own, (after - before - shared) * 1000)
        late = max(after - before for before, after in self.spans) - TICK_S
        return {"max": late * 1000, "own": own, "ticks": float(len(self.spans))}


async def _monitored(work: Callable[[], Awaitable[object]]) -> dict[str, float]:
    monitor = Monitor()
    monitor.start()
    await asyncio.sleep(0)  # the monitor's first tick before the work
    try:
        await work()
    finally:
        await monitor.stop()
    return monitor.summary()


async def _converse(host: AsyncHost, sid: str, turns: int, workspace: str) -> None:
    for n in range(turns):
        turn = await host.send(sid, f"turn {n}: have a look at src/app.py", workspace=workspace)
        deltas = 0
        async for item in turn.events():
            deltas += isinstance(item, TextDelta)
        result = await turn.result()
        if not result.ok or deltas == 0:
            raise RuntimeError(f"{sid} turn {n}: {result.status} {result.phase} ({deltas} deltas)")


class Runs:
    """The three measures; each records its monitor's summary and returns the loop's own worst stall."""

    def __init__(self, sessions: int, turns: int) -> None:
        self.sids = [f"s{n:03d}" for n in range(sessions)]
        self.turns = turns
        self.summaries: dict[str, list[dict[str, float]]] = {"idle": [], "async": [], "threaded": []}
        self.async_seconds = 1.0

    def _record(self, name: str, summary: dict[str, float]) -> float:
        self.summaries[name].append(summary)
        return summary["own"]

    def idle(self) -> float:
        return self._record("idle", asyncio.run(_monitored(lambda: asyncio.sleep(self.async_seconds))))

    def on_loop(self) -> float:
        async def main(root: str) -> dict[str, float]:
            async with AsyncHost.open(Path(root) / "store", **_options(len(self.sids))) as host:
                started = time.perf_counter()
                summary = await _monitored(
                    lambda: asyncio.gather(*(_converse(host, sid, self.turns, root) for sid in self.sids))
                )
                self.async_seconds = time.perf_counter() - started
                return summary

        with tempfile.TemporaryDirectory(prefix="cairn-bench-asyncloop-", ignore_cleanup_errors=True) as root:
            return self._record("async", asyncio.run(main(root)))

    def threaded(self) -> float:
        with tempfile.TemporaryDirectory(prefix="cairn-bench-asyncloop-", ignore_cleanup_errors=True) as root:
            host = Host.open(Path(root) / "store", **_options(len(self.sids)))
            errors: list[str] = []
            go = threading.Event()

            def converse(sid: str) -> None:
                go.wait()
                for n in range(self.turns):
                    turn = host.send(sid, f"turn {n}: have a look at src/app.py", workspace=root)
                    deltas = sum(isinstance(item, TextDelta) for item in turn.events())
                    result = turn.result()
                    if not result.ok or deltas == 0:
                        errors.append(f"{sid} turn {n}: {result.status} {result.phase} ({deltas} deltas)")

            # started before the monitor, off its watch: `Thread.start` waits for the new thread to run
            threads = [threading.Thread(target=converse, args=(sid,)) for sid in self.sids]
            for thread in threads:
                thread.start()

            async def everyone() -> None:
                go.set()
                while any(thread.is_alive() for thread in threads):
                    await asyncio.sleep(0.01)  # the loop only waits; the clients are plain threads

            try:
                summary = asyncio.run(_monitored(everyone))
            finally:
                go.set()
                for thread in threads:
                    thread.join()
                host.close()
        if errors:
            raise RuntimeError(f"{len(errors)} threaded turns failed, first: {errors[0]}")
        return self._record("threaded", summary)


def _own(summaries: list[dict[str, float]]) -> list[float]:
    return [round(s["own"], 2) for s in summaries]


def measure(sessions: int, turns: int, rounds: int) -> list[Figure]:
    runs = Runs(sessions, turns)
    runs.on_loop()  # a warm-up, not counted: imports, the first store, the pool's first threads
    runs.summaries["async"].clear()
    with LoadMeter() as load:
        interleave([("idle", runs.idle), ("async", runs.on_loop), ("threaded", runs.threaded)], rounds)
    every_run = {name: _own(summaries) for name, summaries in runs.summaries.items()}
    own = every_run["async"]
    own_median = statistics.median(own)
    work = f"{sessions} sessions x {turns} turns on one loop (one tool call and a streamed reply each)"
    pairs_said = ", ".join(f"{b:.2f}->{a:.2f}" for b, a in zip(every_run["idle"], own, strict=True))
    threaded = ", ".join(f"{v:.2f}" for v in every_run["threaded"])
    versus = _vs_threaded(runs.summaries, work, load)
    judged = Figure.measured(
        "asyncloop.own_stall_ms",
        round(own_median, 2),
        "ms",
        f"the loop's own worst stall per async run (worst {max(own):.2f}), {work}; against an idle loop "
        f"in {len(own)} pairs (idle->async ms): {pairs_said}; the same work on plain threads beside an "
        f"idle loop: {threaded} ms",
        load,
        target=f"<= {OWN_STALL_TARGET_MS:g} ms (median of the runs), or own_stall_vs_threaded >= "
        f"{VS_THREADED_TARGET:g}",
        met=own_stall_met(own_median, float(versus.value or 0)),
    )
    return [msgspec.structs.replace(judged, runs=every_run), versus]


#: the async run's own worst stall against the threaded run's idle loop, round by round (the
#: alternative of own_stall_ms's target, so explore on its own)
VS_THREADED = Comparison(
    "asyncloop.own_stall_vs_threaded",
    "threaded",
    "async",
    "the own worst stall of an idle loop beside the same work on plain threads over that of the loop "
    f"running it (part of own_stall_ms's target: at least {VS_THREADED_TARGET:g} where the loop's own "
    f"stall is over {OWN_STALL_TARGET_MS:g} ms)",
    better="lower",
    fmt=".2f",
)


def _vs_threaded(s: dict[str, list[dict[str, float]]], work: str, load: LoadMeter) -> Figure:
    """VS_THREADED over the runs' own stalls, each at least 0.001 ms (a ratio's side, never zero)."""
    values = {name: [max(v, 0.001) for v in _own(s[name])] for name in ("threaded", "async")}
    return VS_THREADED.judge(values, load, work)


def run(quick: bool) -> list[Figure]:
    return measure(*SHAPES[quick])


if __name__ == "__main__":
    from cairn import bench

    sys.exit(bench.main(suite="asyncloop"))
