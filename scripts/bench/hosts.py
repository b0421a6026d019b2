"""Host bookkeeping: time per spawn and per passivation at 1k and 10k live sessions, and what each costs.

Usage: python -m cairn.bench.hosts [--quick] [--json]

1. Spawn and passivation. Two child processes each hold one host, one
   with 1,000 live sessions and one with 10,000 (one scripted turn each, so
   every session has a real log to replay). Each round, a child passivates
   its 800 least recently used sessions by the idle timeout
   (`passivate_idle`) and spawns them again by replay (`Host.state`, one at a
   time). The two children take rounds in alternating pairs; the figure is
   the growth of user CPU per session (cairn's and Python's own work: the
   host's bookkeeping, the actors, the replay), at 10k live over 1k, the
   median of the pairs (target: at most 1.5x, no growth beyond noise). Wall
   time and system CPU are reported beside it, with what a bare thread's
   start and end cost in the same two processes: the kernel's cost of a new
   thread grows with the threads a process has (two per live session), and
   no bookkeeping of cairn's can take that away. Closing each host is timed
   at the end (per session). This kernel (like many VMs') splits a
   process's CPU time into user and system by sampling at its tick (4 ms
   here), so a round must last long enough for that split to settle: with
   rounds of 200 sessions (36-115 ms of passivation) the user-CPU growth
   ranged 0.9-3.7x between pairs on a quiet machine; rounds of 800 last a
   few hundred ms.
2. Threads and memory. Threads and anonymous RSS (heap and stacks) per live
   session, read in those children: the growth over the idle host, divided
   by the sessions. Per passivated session: a fresh child touches 1k (10k)
   sessions with one turn each through a host capped at 64 live sessions;
   what a session touched past the cap adds.

Each host lives in its own process, so neither pykka's process-wide actor
registry nor a heap grown by the other side skews a figure. `--quick`
measures 250 and 2,500 instead (seconds).
"""

from __future__ import annotations

import collections
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from cairn import Host, HostConfig, SessionSettings
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.bench._figure import Comparison, Figure
from cairn.bench._measure import LoadMeter, Pairs, alternate

SETTINGS = SessionSettings(model="bench", context_window=128_000, system_prompt="You are terse.")
#: sessions passivated then spawned again per round: full run, and `--quick` (its small host has 250)
ROUND = 800
QUICK_ROUND = 200
BARE_THREADS = 50  # bare threads started and ended per round, for the OS's part
PASSIVATED_CAP = 64
CLIENTS = 16
IDLE_MS = 60_000
GROWTH_TARGET = 1.5
_START_MS = 1_000_000_000


def _size(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else f"{n / 1000:g}k" if n >= 1000 else str(n)


def _proc_readings() -> dict[str, int]:
    """Threads, anonymous RSS and total RSS (KiB) of this process, from /proc."""
    found = {"threads": 0, "anon_kib": 0, "rss_kib": 0}
    keys = {"Threads:": "threads", "RssAnon:": "anon_kib", "VmRSS:": "rss_kib"}
    with open("/proc/self/status") as status:
        for line in status:
            key = keys.get(line.split(":", 1)[0] + ":")
            if key is not None:
                found[key] = int(line.split()[1])
    return found


def _open(root: Path, cap: int, clock: list[int]) -> Host:
    return Host.open(
        root / "store",
        provider=ScriptedProvider(default=Reply(text="ok"), keep_requests=False),
        settings=SETTINGS,
        clock_ms=lambda: clock[0],
        config=HostConfig(sweep=False, max_live_sessions=cap, idle_timeout_s=IDLE_MS / 1000),
    )


def _one_turn_each(host: Host, workspace: Path, sids: list[str]) -> None:
    """One scripted turn per session, from `CLIENTS` threads."""
    cursor = iter(sids)
    lock = threading.Lock()
    errors: list[str] = []

    def client() -> None:
        while True:
            with lock:
                sid = next(cursor, None)
            if sid is None:
                return
            result = host.send(sid, "hello", workspace=workspace).result(timeout=300)
            if not result.ok:
                with lock:
                    errors.append(f"{sid}: {result.status} {result.phase} {result.error_class}")

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
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


def _say(out: IO[str], **fields: Any) -> None:
    out.write(json.dumps(fields) + "\n")
    out.flush()


def _live_child(live: int) -> None:
    """A host with `live` live sessions; then rounds on command (stdin: `round`, `close`)."""
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-hosts-"))
    clock = [_START_MS]
    try:
        host = _open(root, live + 8, clock)
        workspace = root / "ws"
        _one_turn_each(host, workspace, ["warm-up"])
        time.sleep(0.2)  # the turn's own release runs just after its result
        host.passivate_idle(now_ms=1 << 62)
        idle = _proc_readings()
        sids = [f"s{n:05d}" for n in range(live)]
        _one_turn_each(host, workspace, sids)
        time.sleep(0.5)
        # one touch each, in order, one clock tick apart: the idle order is then known exactly
        order: collections.deque[tuple[int, str]] = collections.deque()
        for sid in sids:
            clock[0] += 1
            host.state(sid)
            order.append((clock[0], sid))
        full = _proc_readings()
        _say(sys.stdout, idle=idle, full=full, live=len(host.live_sessions))
        for command in sys.stdin:
            words = command.split()
            if words[:1] == ["round"]:
                size = int(words[1])
                oldest = [order.popleft() for _ in range(size)]
                gc.collect()  # untimed: each round starts from the same collector state on both sides
                started = _clocks()
                stopped = host.passivate_idle(now_ms=oldest[-1][0] + IDLE_MS)
                passivated = _spent(started, size)
                if stopped != size:
                    raise RuntimeError(f"passivated {stopped} sessions, expected {size}")
                started = _clocks()
                for _, sid in oldest:
                    clock[0] += 1
                    host.state(sid)
                    order.append((clock[0], sid))
                spawned = _spent(started, size)
                _say(sys.stdout, spawn=spawned, passivate=passivated, thread=_bare_threads(BARE_THREADS))
            elif words[:1] == ["close"]:
                started = _clocks()
                host.close()
                _say(sys.stdout, close=_spent(started, live))
                return
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _passivated_child(touched: int) -> None:
    """Touch `touched` sessions (one turn each) through a host capped at `PASSIVATED_CAP` live."""
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-hosts-"))
    clock = [_START_MS]
    try:
        host = _open(root, PASSIVATED_CAP, clock)
        try:
            workspace = root / "ws"
            _one_turn_each(host, workspace, [f"w{n:03d}" for n in range(PASSIVATED_CAP)])
            time.sleep(0.2)
            at_cap = _proc_readings()  # the cap is full: each further session evicts one
            _one_turn_each(host, workspace, [f"p{n:06d}" for n in range(touched)])
            time.sleep(0.2)
            after = _proc_readings()
            _say(sys.stdout, at_cap=at_cap, after=after, passivated=host.stats.passivated_lru)
        finally:
            host.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- the parent: children, pairs, figures ------------------------------------------------------


class _Child:
    """A child process of this module, spoken to by JSON lines."""

    def __init__(self, *args: str) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "cairn.bench.hosts", "--child", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts in every run
        )

    def read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait(timeout=60)
            err = self._proc.stderr.read() if self._proc.stderr is not None else ""
            raise RuntimeError(f"bench child failed ({self._proc.returncode}): {err[-2000:]}")
        return json.loads(line)  # type: ignore[no-any-return]

    def ask(self, command: str) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return self.read()

    def finish(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait(timeout=60)


def _per_session(before: dict[str, int], after: dict[str, int], sessions: int, key: str) -> float:
    return (after[key] - before[key]) / max(1, sessions)


def _timing(small: int, large: int, pairs: int, size: int) -> tuple[list[Figure], dict[int, dict[str, Any]]]:
    """The spawn and passivation growth from `small` to `large` live sessions (and the close's), and
    what each timing child said when ready."""
    rounds, closes, ready, load = _timing_rounds(small, large, pairs, size)
    return _timing_figures(rounds, closes, (small, large), size, load), ready


def _timing_rounds(
    small: int, large: int, pairs: int, size: int
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, dict[str, Any]], dict[int, dict[str, Any]], LoadMeter]:
    """Rounds of `size` sessions on a host of `small` and one of `large` live sessions (each in a child
    process), alternating; then each host's close."""
    children = {small: _Child("live", str(small)), large: _Child("live", str(large))}
    try:
        ready = {n: child.read() for n, child in children.items()}
        rounds: dict[int, list[dict[str, Any]]] = {small: [], large: []}

        def round_of(n: int) -> float:
            rounds[n].append(children[n].ask(f"round {size}"))
            return float(rounds[n][-1]["spawn"]["user"])

        with LoadMeter() as load:
            children[small].ask(f"round {size}")  # a first round each, not counted: warm both
            children[large].ask(f"round {size}")
            alternate(lambda: round_of(small), lambda: round_of(large), pairs)
            closes = {n: children[n].ask("close")["close"] for n in (small, large)}
    finally:
        for child in children.values():
            child.finish()
    return rounds, closes, ready, load


def _timing_figures(
    rounds: dict[int, list[dict[str, Any]]],
    closes: dict[int, dict[str, Any]],
    sizes: tuple[int, int],
    size: int,
    load: LoadMeter,
) -> list[Figure]:
    small, large = sizes

    def pairs_of(what: str, clock: str) -> Pairs:
        return Pairs([r[what][clock] for r in rounds[small]], [r[what][clock] for r in rounds[large]])

    a, b = _size(small), _size(large)
    note = (
        f"{size} sessions a round, each host in its own child process, rounds in alternating pairs; "
        f"the figure: time at {a} live over time at {b} live"
    )
    thread, thread_sys = pairs_of("thread", "wall"), pairs_of("thread", "sys")
    os_part = (
        f"a bare thread started and ended in the same processes ({2 * small:,} vs {2 * large:,} "
        f"threads) took {thread.baseline:,.0f} -> {thread.subject:,.0f} us wall (growth "
        f"{thread.ratio:.2f}x, range {thread.ratio_range[0]:.2f}-{thread.ratio_range[1]:.2f}x), "
        f"{thread_sys.baseline:,.0f} -> {thread_sys.subject:,.0f} us system CPU"
    )
    figures: list[Figure] = []
    for what, how in (
        ("spawn", "spawn by replay (Host.state), one at a time"),
        ("passivate", "by the idle timeout"),
    ):
        wall, kernel = pairs_of(what, "wall"), pairs_of(what, "sys")
        growth = Comparison(
            f"hosts.{what}_growth",
            f"live_{a}",
            f"live_{b}",
            f"user CPU per session, {how} (cairn's and Python's work), at {a} live over at {b} (us)",
            target=1 / GROWTH_TARGET,
            says=f"<= {GROWTH_TARGET}x growth (>= {1 / GROWTH_TARGET:.2f}x)",
            better="lower",
        )
        values = {
            f"live_{n}": [r[what]["user"] for r in rounds[size_of]] for n, size_of in ((a, small), (b, large))
        }
        beside = (
            f"{note}; wall time per session {wall.baseline:,.0f} -> {wall.subject:,.0f} us (growth "
            f"{wall.ratio:.2f}x), system CPU {kernel.baseline:,.0f} -> {kernel.subject:,.0f} us; {os_part}"
        )
        figures.append(growth.judge(values, load, beside))
    close = closes[large]["wall"] / closes[small]["wall"]
    figures.append(
        Figure(
            "hosts.close_growth",
            round(close, 2),
            "x",
            detail=f"host close, wall per session: {closes[small]['wall']:,.0f} us at {a}, "
            f"{closes[large]['wall']:,.0f} us at {b} (one close each)",
            explore=True,
        )
    )
    return figures


def _memory(sizes: tuple[int, int], ready: dict[int, dict[str, Any]]) -> list[Figure]:
    """Threads and anonymous RSS per live session (the timing children), and per passivated one."""
    figures: list[Figure] = []
    for n in sizes:
        idle, full, live = ready[n]["idle"], ready[n]["full"], ready[n]["live"]
        threads = _per_session(idle, full, n, "threads")
        figures.append(
            Figure(
                f"hosts.live_{_size(n)}.kib_per_session",
                round(_per_session(idle, full, n, "anon_kib"), 1),
                "KiB",
                detail=f"{live:,} live sessions (one turn each) over the idle host: {threads:.2f} threads a "
                f"session, anon RSS {idle['anon_kib'] / 1024:,.0f} -> {full['anon_kib'] / 1024:,.0f} MiB",
                explore=True,
            )
        )
    for n in sizes:
        child = _Child("passivated", str(n))
        try:
            data = child.read()
        finally:
            child.finish()
        at_cap, after = data["at_cap"], data["after"]
        threads = _per_session(at_cap, after, n, "threads")
        figures.append(
            Figure(
                f"hosts.passivated_{_size(n)}.kib_per_session",
                round(_per_session(at_cap, after, n, "anon_kib"), 2),
                "KiB",
                detail=f"{n:,} sessions touched (one turn each) past a full live cap of {PASSIVATED_CAP} "
                f"({data['passivated']:,} passivated): {threads:.3f} threads a session, anon RSS "
                f"{at_cap['anon_kib'] / 1024:,.1f} -> {after['anon_kib'] / 1024:,.1f} MiB",
                explore=True,
            )
        )
    return figures


def run(quick: bool) -> list[Figure]:
    small, large = (250, 2_500) if quick else (1_000, 10_000)
    timing, ready = _timing(small, large, pairs=9, size=QUICK_ROUND if quick else ROUND)
    return [*timing, *_memory((small, large), ready)]


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`.

    `--child live N` and `--child passivated N` are the measuring subprocesses; not for people.
    """
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"] and len(args) == 3:
        if args[1] == "live":
            _live_child(int(args[2]))
        else:
            _passivated_child(int(args[2]))
        return 0
    from cairn import bench

    return bench.main(args, suite="hosts")


if __name__ == "__main__":
    sys.exit(main())
