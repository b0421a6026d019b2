"""Runtime benchmark: memory with many sessions through a real host, bounded by the live-actor cap.

Usage: python -m cairn.bench.turns [--quick] [--json]

10,000 sessions touched (one turn each, a zero-latency scripted provider)
through a host with a live-actor cap of 256. Anonymous resident memory
(heap and stacks, not the page cache of the mmapped index) is read at
checkpoints, in a fresh process so no earlier benchmark has grown the heap.
The target is that it is bounded by the cap, not by the number of sessions:
a session touched past 2,500 (passivated again) adds less than 5 % of what
a live session costs. The growth from 2,500 to 10,000 sessions touched is
reported beside it. `--quick`: 2,000 sessions.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from cairn import Host, HostConfig, SessionSettings
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.bench._figure import Figure
from cairn.bench._measure import proc_status_kib

SETTINGS = SessionSettings(model="bench", context_window=128_000, system_prompt="You are terse.")
MEMORY_CAP = 256
MEMORY_TARGET = 0.05


def _memory_child(touched: int) -> dict[str, Any]:
    """Runs in a fresh process: touch `touched` sessions from 32 threads, reading /proc at the marks."""
    marks = sorted({MEMORY_CAP, touched // 4, touched // 2, touched})
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-memory-"))
    readings: dict[int, tuple[int, ...]] = {}
    cursor, finished = iter(range(touched)), itertools.count(1)
    lock = threading.Lock()
    errors: list[str] = []

    def send(sid: str) -> None:
        result = host.send(sid, "hello", workspace=root / "ws").result(timeout=120)
        if not result.ok:
            errors.append(f"{result.status} {result.phase} {result.error_class}")

    def client() -> None:
        while True:
            with lock:
                n = next(cursor, None)
            if n is None:
                return
            send(f"m{n:06d}")
            count = next(finished)
            if count in marks:
                readings[count] = proc_status_kib("RssAnon", "VmRSS")

    try:
        provider = ScriptedProvider(default=Reply(text="ok"), keep_requests=False)
        config = HostConfig(sweep=False, max_live_sessions=MEMORY_CAP)
        host = Host.open(root / "store", provider=provider, settings=SETTINGS, config=config)
        try:
            send("warm-up")
            host.passivate_idle(now_ms=1 << 62)
            readings[0] = proc_status_kib("RssAnon", "VmRSS")
            threads = [threading.Thread(target=client) for _ in range(32)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            peak = host.stats.peak_live
        finally:
            host.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if errors:
        raise RuntimeError(f"{len(errors)} turns failed, first: {errors[0]}")
    return {"marks": marks[1:], "readings": {str(k): v for k, v in readings.items()}, "peak": peak}


def run(quick: bool) -> list[Figure]:
    touched = 2_000 if quick else 10_000
    done = subprocess.run(
        [sys.executable, "-m", "cairn.bench.turns", "--memory-child", str(touched)],
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


if __name__ == "__main__":
    if sys.argv[1:2] == ["--memory-child"]:  # the measuring subprocess `run` starts
        print(json.dumps(_memory_child(int(sys.argv[2]))))
    else:
        from cairn import bench

        sys.exit(bench.main(suite="turns"))
