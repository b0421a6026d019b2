"""CPU placement under load: OS placement, batch scheduling and one CPU, with and without a competitor.

Usage: python -m cairn.bench.placement [--quick] [--json]

The matrix: placement {os, batch, one_cpu} x sessions {1, 16, 256, 1,024}
x work {appends, turns} x competitor {none, same CPU, other CPU}.

- appends: `append_rate` (the store suite's): each session a thread that
  appends the store bench's events one call at a time to a local journal,
  waiting for each durable acknowledgement.
- turns: sessions taking turns through one host on the scripted provider
  (zero latency), one client thread per session; every session takes a
  first turn (spawn) before the clock starts.
- placements (`actors.placement`): `os` leaves the process alone; `batch`
  batch-schedules every thread on every CPU; `one_cpu` puts every thread on
  CPU X, batch-scheduled (what `CAIRN_CPU=auto` did).
- competitor: a CPU-bound process (a busy loop) pinned to CPU X, the one the
  one_cpu placement uses ("same"), or to another CPU ("other").

Each placement runs in its own child process (placing changes the whole
process; the bench process stays as it was), started once and kept for the
whole run, so its imports and warm-up are paid once. Every ratio is a
placement's rate over the OS placement's, in alternating pairs
(`_measure.alternate`), reported as the median with its range. `worst`
figures name the cell where each placement does worst against the OS, and
`default_worst` how far the default (`actors.placement.DEFAULT`) falls
behind the best placement of any cell.

`--quick` runs 1 and 256 sessions, no competitor and a same-CPU one, one
pair per cell (about a minute).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from cairn import Host, HostConfig, SessionSettings
from cairn.actors import placement
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.bench import Figure, figure
from cairn.bench._measure import LoadMeter, Pairs, alternate
from cairn.bench.store import append_events, append_rate
from cairn.store import Journal

PLACEMENTS = ("os", "batch", "one_cpu")
SESSIONS = (1, 16, 256, 1024)
WORKS = ("appends", "turns")
COMPETITORS = ("none", "same", "other")
#: per session, so every cell runs long enough to measure and short enough to repeat
APPENDS = {1: 400, 16: 100, 256: 16, 1024: 6}
TURNS = {1: 40, 16: 8, 256: 2, 1024: 1}
SETTINGS = SessionSettings(model="bench", context_window=128_000, system_prompt="You are terse.")
COLLAPSE = 0.5  # a placement below half the best one of a cell has collapsed there


# --- the child: one placement, work on command ---------------------------------------------


def _turn_rate(host: Host, workspace: Path, prefix: str, sessions: int, per_session: int) -> float:
    """`sessions` client threads, each its own session: a first turn, then `per_session` timed ones."""
    barrier = threading.Barrier(sessions + 1)
    errors: list[str] = []

    def client(n: int) -> None:
        sid = f"{prefix}-{n}"
        try:
            first = host.send(sid, "hello", workspace=workspace).result(timeout=600)
            barrier.wait()
            results = [first] + [host.send(sid, "again").result(timeout=600) for _ in range(per_session)]
            errors.extend(f"{r.status} {r.phase} {r.error_class}" for r in results if not r.ok)
        except BaseException as exc:  # reported below, never swallowed
            errors.append(repr(exc))
            barrier.abort()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(sessions)]
    for thread in threads:
        thread.start()
    with suppress(threading.BrokenBarrierError):
        barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} turns failed, first: {errors[0]}")
    return sessions * per_session / elapsed


def _child(where: str, cpu: int) -> None:
    """Place this process as `where` says, then answer `appends N` / `turns N` with a rate, per line."""
    if where == "batch":
        placement.batch_process()
    elif where == "one_cpu":
        placement.pin_process(cpu)
    root = Path(tempfile.mkdtemp(prefix=f"cairn-bench-placement-{where}-"))
    events = append_events()
    journal = Journal.open(root / "appends")
    host = Host.open(
        root / "turns",
        provider=ScriptedProvider(default=Reply(text="ok"), keep_requests=False),
        settings=SETTINGS,
        config=HostConfig(sweep=False, max_live_sessions=max(SESSIONS) + 64),
    )
    try:
        print(json.dumps({"ready": where}), flush=True)
        for count, line in enumerate(sys.stdin):
            work, sessions = line.split()
            n = int(sessions)
            if work == "appends":
                rate = append_rate(journal, n, APPENDS[n], events, prefix=f"r{count}")
            else:
                rate = _turn_rate(host, root / "ws", f"r{count}", n, TURNS[n])
                host.passivate_idle(now_ms=1 << 62)  # every run starts from no live session
            print(json.dumps({"rate": rate}), flush=True)
    finally:
        host.close()
        journal.close()
        shutil.rmtree(root, ignore_errors=True)


# --- the parent ------------------------------------------------------------------------------


class _Placed:
    """A child process running one placement."""

    def __init__(self, where: str, cpu: int) -> None:
        self.where = where
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "cairn.bench.placement", "--child", where, str(cpu)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "CAIRN_CPU": "off", "PYTHONHASHSEED": "0"},
        )
        self._read()

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait(timeout=60)
            err = self._proc.stderr.read() if self._proc.stderr is not None else ""
            raise RuntimeError(f"placement child {self.where} failed: {err[-2000:]}")
        return json.loads(line)  # type: ignore[no-any-return]

    def rate(self, work: str, sessions: int) -> float:
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"{work} {sessions}\n")
        self._proc.stdin.flush()
        return float(self._read()["rate"])

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=60)


@contextmanager
def _competitor(kind: str, same: int, other: int | None) -> Iterator[None]:
    """A CPU-bound process pinned to CPU `same` or `other` for the block (none for `none`)."""
    if kind == "none":
        yield
        return
    cpu = same if kind == "same" else other
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    proc = subprocess.Popen([sys.executable, "-c", spin])
    try:
        yield
    finally:
        proc.kill()
        proc.wait(timeout=60)


def _pairs(os_child: _Placed, placed: _Placed, work: str, sessions: int, pairs: int) -> Pairs:
    """`placed`'s rate over the OS placement's, in alternating pairs."""
    return alternate(lambda: os_child.rate(work, sessions), lambda: placed.rate(work, sessions), pairs)


def _cell_name(work: str, sessions: int, competitor: str) -> str:
    return f"{work}.{sessions}.{'alone' if competitor == 'none' else 'competitor_' + competitor}"


def run(quick: bool) -> list[Figure]:
    if not placement.supported():
        return [figure("placement.unavailable", 0, "", detail="needs os.sched_setaffinity and SCHED_BATCH")]
    allowed = sorted(os.sched_getaffinity(0))
    same = allowed[-1]
    other = allowed[0] if len(allowed) > 1 else None
    sessions = (1, 256) if quick else SESSIONS
    competitors: tuple[str, ...] = ("none", "same") if quick else COMPETITORS
    if other is None:
        competitors = tuple(c for c in competitors if c != "other")
    pairs = 1 if quick else 3
    children = {where: _Placed(where, same) for where in PLACEMENTS}
    cells: dict[str, dict[str, Pairs]] = {}
    loads: dict[str, str] = {}
    try:
        for competitor in competitors:
            with _competitor(competitor, same, other):
                for work in WORKS:
                    for n in sessions:
                        name = _cell_name(work, n, competitor)
                        with LoadMeter() as load:
                            cells[name] = {
                                where: _pairs(children["os"], children[where], work, n, pairs)
                                for where in ("batch", "one_cpu")
                            }
                        loads[name] = load.summary()
    finally:
        for child in children.values():
            child.close()
    return _figures(cells, loads, same, other)


def _figures(
    cells: dict[str, dict[str, Pairs]], loads: dict[str, str], same: int, other: int | None
) -> list[Figure]:
    unit = {"appends": "events/s", "turns": "turns/s"}
    figures: list[Figure] = []
    worst: dict[str, tuple[float, str]] = {}
    default_worst = (float("inf"), "")
    for name, by in cells.items():
        work = name.split(".")[0]
        os_rate = statistics.median(by["batch"].baselines + by["one_cpu"].baselines)
        ratios = {"os": 1.0, "batch": by["batch"].ratio, "one_cpu": by["one_cpu"].ratio}
        for where in ("batch", "one_cpu"):
            p = by[where]
            figures.append(
                figure(
                    f"placement.{name}.{where}",
                    round(p.ratio, 2),
                    "x os",
                    detail=(
                        f"{where} over the OS placement ({os_rate:,.0f} {unit[work]}), "
                        f"{p.describe(',.0f')}; {loads[name]}"
                    ),
                )
            )
            if p.ratio < worst.get(where, (float("inf"), ""))[0]:
                worst[where] = (p.ratio, name)
        best = max(ratios.values())
        mine = ratios[_default_key()] / best
        if mine < default_worst[0]:
            default_worst = (mine, f"{name} (best there: {max(ratios, key=lambda k: ratios[k])})")
    where_cpu = f"one_cpu and the 'same' competitor on CPU {same}" + (
        f", the 'other' competitor on CPU {other}" if other is not None else ""
    )
    for where, (ratio, name) in sorted(worst.items()):
        figures.append(
            figure(
                f"placement.{where}.worst",
                round(ratio, 2),
                "x os",
                detail=f"its worst cell against the OS placement: {name}; {where_cpu}",
            )
        )
    figures.append(
        figure(
            "placement.default_worst",
            round(default_worst[0], 2),
            "x best",
            target=f">= {COLLAPSE}",
            met=default_worst[0] >= COLLAPSE,
            detail=(
                f"the default ({placement.DEFAULT}) over the best placement of its worst cell: "
                f"{default_worst[1]}; never below {COLLAPSE} of the best is 'never collapses'"
            ),
        )
    )
    return figures


def _default_key() -> str:
    """The default placement (`actors.placement.DEFAULT`) as this bench names it."""
    return {"off": "os", "batch": "batch", "auto": "one_cpu"}[placement.DEFAULT]


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`.

    `--child PLACEMENT CPU` is the measuring subprocess; not for people.
    """
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"] and len(args) == 3:
        _child(args[1], int(args[2]))
        return 0
    from cairn import bench

    return bench.main(args, suite="placement")


if __name__ == "__main__":
    sys.exit(main())
