"""Runtime benchmark: cairn's own time per turn, and memory with many sessions, through a real host.

Usage: python -m cairn.bench.turns [--quick] [--json]

1. Turn overhead. 1,000 sessions x 5 turns through one host on a
   zero-latency scripted provider (a one-line reply, no tools), driven by 16
   client threads (16 turns in flight), every session live. Each turn's time
   is measured from `send` to its result, minus the time spent inside the
   provider adapter (`TurnResult.provider_seconds`): what is left is cairn's
   own time (routing, the pre-request checks, three fsynced appends, the
   actor hops, streaming). Reported at p50 and p99, plus throughput; also at
   one turn in flight (the per-turn cost without queueing), and with a live
   cap of 256 visited round-robin, where every turn respawns its session by
   replay (the worst case of passivation). Judged against nothing: only
   measured with `--explore`.
2. Memory. 10,000 sessions touched (one turn each) through a host with a
   live-actor cap of 256. Anonymous resident memory (heap and stacks, not the
   page cache of the mmapped index) is read at checkpoints, in a fresh process
   so no earlier benchmark has grown the heap. The target is that it is
   bounded by the cap, not by the number of sessions: a session touched past
   2,500 (passivated again) adds less than 5 % of what a live session costs.
   The growth from 2,500 to 10,000 sessions touched is reported beside it.

`--quick` shrinks both (seconds).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn import Host, HostConfig, SessionSettings
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.bench._figure import Figure

SETTINGS = SessionSettings(model="bench", context_window=128_000, system_prompt="You are terse.")
CLIENTS = 16
MEMORY_CAP = 256
MEMORY_TARGET = 0.05


def _provider() -> ScriptedProvider:
    return ScriptedProvider(default=Reply(text="ok"), keep_requests=False)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _drive(
    host: Host, workspace: Path, jobs: list[str], clients: int, after: Callable[[int], None] | None = None
) -> tuple[list[float], float]:
    """Send one turn per job (a session id) from `clients` threads; cairn's time of each, and wall time."""
    own: list[float] = []
    lock = threading.Lock()
    cursor = iter(range(len(jobs)))
    errors: list[str] = []

    def client() -> None:
        while True:
            with lock:
                index = next(cursor, None)
            if index is None:
                return
            started = time.perf_counter()
            result = host.send(jobs[index], "hello", workspace=workspace).result(timeout=120)
            spent = time.perf_counter() - started - result.provider_seconds
            with lock:
                if not result.ok:
                    errors.append(f"{result.status} {result.phase} {result.error_class}")
                own.append(spent)
            if after is not None:
                after(index)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} turns failed, first: {errors[0]}")
    return own, time.perf_counter() - started


def _overhead_run(sessions: int, turns: int, cap: int, serial: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-turns-"))
    try:
        host = Host.open(
            root / "store",
            provider=_provider(),
            settings=SETTINGS,
            config=HostConfig(sweep=False, max_live_sessions=cap),
        )
        try:
            workspace = root / "ws"
            jobs = [f"s{n:05d}" for _ in range(turns) for n in range(sessions)]
            own, wall = _drive(host, workspace, jobs, CLIENTS)
            alone: list[float] = []
            if serial:
                alone, _ = _drive(host, workspace, [f"s{n:05d}" for n in range(serial)], 1)
            spawned = host.stats.spawned
        finally:
            host.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"own": own, "wall": wall, "serial": alone, "spawned": spawned}


def turn_overhead(quick: bool) -> list[Figure]:
    sessions, turns = (200, 3) if quick else (1_000, 5)
    live = _overhead_run(sessions, turns, cap=sessions + 24, serial=200)
    churn_cap = 64 if quick else 256
    churn = _overhead_run(sessions, 2, cap=churn_cap, serial=0)
    own, serial = live["own"], live["serial"]
    label = f"{sessions:,} sessions x {turns} turns, {CLIENTS} in flight, all live"
    churned = (
        f"{sessions:,} sessions x 2 turns round-robin, {CLIENTS} in flight, live cap {churn_cap}: "
        f"{churn['spawned']:,} spawns by replay"
    )

    def ms(name: str, values: list[float], detail: str) -> Figure:
        p50, p99 = (round(_percentile(values, q) * 1000, 2) for q in (0.50, 0.99))
        return Figure(name, p50, "ms", detail=f"p50; p99 {p99} ms; {detail}", explore=True)

    return [
        ms("turns.overhead_ms", own, f"{label}; {len(own) / live['wall']:,.0f} turns/s"),
        ms("turns.serial_ms", serial, f"one turn in flight, {len(serial)} turns"),
        ms(
            "turns.lru_churn_ms", churn["own"], f"{churned}; {len(churn['own']) / churn['wall']:,.0f} turns/s"
        ),
    ]


def _rss_kib() -> tuple[int, int]:
    """(anonymous RSS, total RSS) of this process in KiB, from /proc."""
    anon = total = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                total = int(line.split()[1])
    return anon, total


def _memory_child(touched: int) -> dict[str, Any]:
    """Runs in a fresh process, so no earlier benchmark has grown the heap: touch, read /proc."""
    marks = sorted({MEMORY_CAP, touched // 4, touched // 2, touched})
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-memory-"))
    readings: dict[int, tuple[int, int]] = {}
    try:
        host = Host.open(
            root / "store",
            provider=_provider(),
            settings=SETTINGS,
            config=HostConfig(sweep=False, max_live_sessions=MEMORY_CAP),
        )
        try:
            _drive(host, root / "ws", ["warm-up"], 1)
            host.passivate_idle(now_ms=1 << 62)
            readings[0] = _rss_kib()
            done = 0
            lock = threading.Lock()

            def after(index: int) -> None:
                nonlocal done
                with lock:
                    done += 1
                    count = done
                if count in marks:
                    readings[count] = _rss_kib()

            _drive(host, root / "ws", [f"m{n:06d}" for n in range(touched)], 32, after)
            peak = host.stats.peak_live
        finally:
            host.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"marks": marks[1:], "readings": {str(k): v for k, v in readings.items()}, "peak": peak}


def memory(quick: bool) -> list[Figure]:
    touched = 2_000 if quick else 10_000
    done = subprocess.run(
        [sys.executable, "-m", "cairn.bench.turns", "--memory-child", str(touched)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts in every run
    )
    data = json.loads(done.stdout)
    marks: list[int] = data["marks"]
    readings = {int(k): v for k, v in data["readings"].items()}
    first, last = marks[0], marks[-1]
    growth = (readings[last][0] - readings[first][0]) / max(1, readings[first][0])
    per_session = (readings[last][0] - readings[first][0]) * 1024 / max(1, last - first)
    per_live = (readings[MEMORY_CAP][0] - readings[0][0]) * 1024 / MEMORY_CAP
    ratio = per_session / max(1.0, per_live)
    detail = ", ".join(
        f"{n:,}: {readings[n][0] / 1024:.0f} MiB anon / {readings[n][1] / 1024:.0f} MiB total"
        for n in [MEMORY_CAP, *marks]
    )
    return [
        Figure(
            "memory.extra_over_live",
            round(ratio, 3),
            "ratio",
            f"< {MEMORY_TARGET}",
            ratio < MEMORY_TARGET,
            f"a session touched past {first:,} (passivated) costs {per_session:,.0f} B, this fraction of "
            f"a live one ({per_live / 1024:,.1f} KiB, the first {MEMORY_CAP} over an idle host): memory "
            f"follows the cap; {touched:,} sessions touched, live cap {MEMORY_CAP} (peak {data['peak']}); "
            f"anon RSS grew {growth:.3f}x from {first:,} to {last:,}; {detail}",
        ),
    ]


def run(quick: bool) -> list[Figure]:
    """Memory with many sessions (judged)."""
    return memory(quick)


def explore(quick: bool) -> list[Figure]:
    """The turn overhead, judged against nothing: measured only with `--explore`."""
    return turn_overhead(quick)


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`.

    `--memory-child N` is the measuring subprocess `memory` starts; not for people.
    """
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--memory-child"] and len(args) == 2:
        print(json.dumps(_memory_child(int(args[1]))))
        return 0
    from cairn import bench

    return bench.main(args, suite="turns")


if __name__ == "__main__":
    sys.exit(main())
