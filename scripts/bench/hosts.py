"""Host bookkeeping: user CPU per spawn and per passivation at 1k and 10k live sessions.

Two child processes each hold one host, one with 1,000 live sessions and
one with 10,000 (one scripted turn each, so every session has a real log to
replay); each host in its own process, so neither pykka's process-wide
actor registry nor a heap grown by the other side skews a figure. Each
round, a child passivates its 800 least recently used sessions by the idle
timeout (`passivate_idle`) and spawns them again by replay (`Host.state`,
one at a time); the children take rounds in alternating pairs. The figure
is the growth of user CPU per session (cairn's and Python's own work), at
10k live over 1k, the median of the pairs; target at most 1.5x. Wall time
and system CPU are shown beside it, with what a bare thread's start and end
cost in the same processes: the kernel's cost of a new thread grows with
the threads a process has (two per live session), which no bookkeeping of
cairn's can take away. This kernel splits CPU time into user and system by
sampling at its 4 ms tick, so a round must last a few hundred ms for the
split to settle. `--quick`: 250 and 2,500 live, rounds of 200.
"""

from __future__ import annotations

import collections
import concurrent.futures
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cairn import Host, HostConfig, SessionSettings
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.bench._figure import Comparison, Figure
from cairn.bench._measure import LoadMeter, Pairs, alternate

SETTINGS = SessionSettings(model="bench", context_window=128_000, system_prompt="You are terse.")
#: sessions passivated then spawned again per round: full run, and `--quick` (its small host has 250)
ROUND = 800
QUICK_ROUND = 200
BARE_THREADS = 50  # bare threads started and ended per round, for the OS's part
CLIENTS = 16
IDLE_MS = 60_000
GROWTH_TARGET = 1.5


def _one_turn_each(host: Host, workspace: Path, sids: list[str]) -> None:
    """One scripted turn per session, from `CLIENTS` threads."""

    def turn(sid: str) -> str:
        result = host.send(sid, "hello", workspace=workspace).result(timeout=300)
        return "" if result.ok else f"{sid}: {result.status} {result.phase} {result.error_class}"

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        errors = [error for error in pool.map(turn, sids) if error]
    if errors:
        raise RuntimeError(f"{len(errors)} turns failed, first: {errors[0]}")


def _clocks() -> tuple[float, float, float]:
    """(wall, user CPU, system CPU) of this process so far, in seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), usage.ru_utime, usage.ru_stime


def _spent(since: tuple[float, float, float], per: int) -> dict[str, float]:
    """Wall, user and system time since `since`, per item, in microseconds."""
    now = _clocks()
    return {k: (b - a) * 1e6 / per for k, a, b in zip(("wall", "user", "sys"), since, now, strict=True)}


def _bare_threads(count: int) -> dict[str, float]:
    """Wall, user and system time to start a bare thread and see it end, per thread: the OS's part."""
    started = _clocks()
    for _ in range(count):
        thread = threading.Thread(target=int, daemon=True)
        thread.start()
        thread.join()
    return _spent(started, count)


def _child(live: int) -> None:
    """A host with `live` live sessions, then a round of `N` sessions per `round N` line on stdin."""
    clock = [1_000_000_000]
    order: collections.deque[tuple[int, str]] = collections.deque()  # (last touched, sid), oldest first

    def touch(sids: list[str]) -> None:
        """Each session's state, in order, one clock tick apart: the idle order is then known exactly."""
        for sid in sids:
            clock[0] += 1
            host.state(sid)
            order.append((clock[0], sid))

    with tempfile.TemporaryDirectory(prefix="cairn-bench-hosts-") as tmp:
        root = Path(tmp)
        host = Host.open(
            root / "store",
            provider=ScriptedProvider(default=Reply(text="ok"), keep_requests=False),
            settings=SETTINGS,
            clock_ms=lambda: clock[0],
            config=HostConfig(sweep=False, max_live_sessions=live + 8, idle_timeout_s=IDLE_MS / 1000),
        )
        _one_turn_each(host, root / "ws", ["warm-up"])
        time.sleep(0.2)  # the turn's own release runs just after its result
        host.passivate_idle(now_ms=1 << 62)
        sids = [f"s{n:05d}" for n in range(live)]
        _one_turn_each(host, root / "ws", sids)
        time.sleep(0.5)
        touch(sids)
        print(json.dumps({"live": len(host.live_sessions)}), flush=True)
        for command in sys.stdin:
            size = int(command.split()[1])
            oldest = [order.popleft() for _ in range(size)]
            sids = [sid for _, sid in oldest]
            gc.collect()  # untimed: each round starts from the same collector state on both sides
            started = _clocks()
            stopped = host.passivate_idle(now_ms=oldest[-1][0] + IDLE_MS)
            passivated = _spent(started, size)
            if stopped != size:
                raise RuntimeError(f"passivated {stopped} sessions, expected {size}")
            started = _clocks()
            touch(sids)
            spawned = _spent(started, size)
            thread = _bare_threads(BARE_THREADS)
            print(json.dumps({"spawn": spawned, "passivate": passivated, "thread": thread}), flush=True)
        host.close()


class _Child:
    """A child process holding one host, spoken to by JSON lines."""

    def __init__(self, live: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "cairn.bench.hosts", "--child", str(live)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts in every run
        )

    def ask(self, command: str | None = None) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if command is not None:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait(timeout=60)
            err = self._proc.stderr.read() if self._proc.stderr is not None else ""
            raise RuntimeError(f"bench child failed ({self._proc.returncode}): {err[-2000:]}")
        return json.loads(line)  # type: ignore[no-any-return]

    def finish(self) -> None:
        """End of input: the child closes its host and removes its store (killed if it does not)."""
        try:
            self._proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=60)


def _rounds(
    small: int, large: int, pairs: int, size: int
) -> tuple[dict[int, list[dict[str, Any]]], LoadMeter]:
    """Rounds of `size` sessions on the host of `small` and the one of `large` live, alternating."""
    children = {small: _Child(small), large: _Child(large)}
    rounds: dict[int, list[dict[str, Any]]] = {small: [], large: []}
    try:
        for child in children.values():
            child.ask()  # ready

        def round_of(n: int) -> float:
            rounds[n].append(children[n].ask(f"round {size}"))
            return float(rounds[n][-1]["spawn"]["user"])

        with LoadMeter() as load:
            children[small].ask(f"round {size}")  # a first round each, not counted: warm both
            children[large].ask(f"round {size}")
            alternate(lambda: round_of(small), lambda: round_of(large), pairs)
    finally:
        for child in children.values():
            child.finish()
    return rounds, load


def run(quick: bool) -> list[Figure]:
    small, large = (250, 2_500) if quick else (1_000, 10_000)
    size = QUICK_ROUND if quick else ROUND
    rounds, load = _rounds(small, large, 9, size)

    def growth(what: str, clock: str) -> str:
        """The time per item at `small` live -> at `large` live, and the median of the pairs' growth."""
        p = Pairs([r[what][clock] for r in rounds[small]], [r[what][clock] for r in rounds[large]])
        return f"{p.baseline:,.0f} -> {p.subject:,.0f} us (growth {p.ratio:.2f}x)"

    bare = (
        f"a bare thread started and ended in the same processes ({2 * small:,} vs {2 * large:,} threads): "
        f"wall {growth('thread', 'wall')}, system CPU {growth('thread', 'sys')}"
    )
    figures = []
    for what, how in (
        ("spawn", "spawn by replay (Host.state), one at a time"),
        ("passivate", "by the idle timeout"),
    ):
        comparison = Comparison(
            f"hosts.{what}_growth",
            f"live_{small}",
            f"live_{large}",
            f"user CPU per session, {how} (cairn's and Python's work), at {small:,} live over at {large:,}, "
            f"{size} sessions a round (us)",
            target=1 / GROWTH_TARGET,
            says=f"<= {GROWTH_TARGET}x growth (>= {1 / GROWTH_TARGET:.2f}x)",
            better="lower",
        )
        values = {f"live_{n}": [r[what]["user"] for r in rounds[n]] for n in (small, large)}
        detail = f"wall time per session {growth(what, 'wall')}, system CPU {growth(what, 'sys')}; {bare}"
        figures.append(comparison.judge(values, load, detail))
    return figures


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:  # a measuring child: `--child N` holds a host of N live sessions
        _child(int(sys.argv[2]))
    else:
        from cairn import bench

        sys.exit(bench.main(suite="hosts"))
