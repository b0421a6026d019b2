"""How the benches time a piece of work: alternating pairs, runs, peak traced memory, the machine's load."""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence


def samples(fn: Callable[[], object], repeat: int) -> list[float]:
    """The time of each of `repeat` runs, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def timed(fn: Callable[[], object], repeat: int) -> float:
    """The median time of `repeat` runs."""
    return statistics.median(samples(fn, repeat))


def peak_memory(fn: Callable[[], object]) -> int:
    """The peak of memory traced (tracemalloc) while `fn` runs, in bytes."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def proc_status_kib(*fields: str, pid: int | str = "self") -> tuple[int, ...]:
    """Memory fields of a process's /proc status (`RssAnon`, `VmRSS`, `VmHWM`, ...), in KiB, in the
    order asked, from one read (0 for a field the kernel does not report)."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in fields:
                found[name] = int(rest.split()[0])
    return tuple(found.get(field, 0) for field in fields)


# --- alternating pairs ---------------------------------------------------------------------


class Pairs:
    """Ratios measured in alternating pairs: baseline, subject, baseline, subject, ... in one run.

    A shared machine drifts (the fsync rate here moves 20x within minutes, a
    neighbour takes a CPU), and a drift moves both sides of a pair alike, so
    the ratio of each pair is what is compared; the figure is the median of
    the pairs' ratios, reported with their range and every pair.

    `ratio` is subject over baseline for rates (higher is better), and
    `higher_is_better=False` makes it baseline over subject for times, so a
    ratio above 1 always means the subject did better.
    """

    def __init__(
        self, baselines: list[float], subjects: list[float], *, higher_is_better: bool = True
    ) -> None:
        if not baselines or len(baselines) != len(subjects):
            raise ValueError("pairs need as many baselines as subjects, at least one")
        self.baselines = baselines
        self.subjects = subjects
        self.higher_is_better = higher_is_better

    @property
    def ratios(self) -> list[float]:
        if self.higher_is_better:
            return [s / b for b, s in zip(self.baselines, self.subjects, strict=True)]
        return [b / s for b, s in zip(self.baselines, self.subjects, strict=True)]

    @property
    def ratio(self) -> float:
        """The median of the pairs' ratios."""
        return statistics.median(self.ratios)

    @property
    def ratio_range(self) -> tuple[float, float]:
        ratios = self.ratios
        return min(ratios), max(ratios)

    @property
    def subject(self) -> float:
        """The median of the subject's values (for the absolute figure printed beside the ratio)."""
        return statistics.median(self.subjects)

    @property
    def baseline(self) -> float:
        return statistics.median(self.baselines)

    def describe(self, fmt: str = ",.0f", limit: int = 8) -> str:
        """`median 3.10x (range 2.80-3.40x) of 5 pairs: b->s, ...`: what a figure's detail says.

        At most `limit` pairs are listed (then `...`); `as_dict` carries them all.
        """
        low, high = self.ratio_range
        listed = list(zip(self.baselines, self.subjects, strict=True))
        pairs = ", ".join(f"{b:{fmt}}->{s:{fmt}}" for b, s in listed[:limit])
        more = f", ... ({len(listed) - limit} more)" if len(listed) > limit else ""
        return f"median {self.ratio:.2f}x (range {low:.2f}-{high:.2f}x) of {len(listed)} pairs: {pairs}{more}"

    def as_dict(self) -> dict[str, object]:
        low, high = self.ratio_range
        return {
            "ratio": self.ratio,
            "range": [low, high],
            "ratios": self.ratios,
            "baselines": self.baselines,
            "subjects": self.subjects,
            "higher_is_better": self.higher_is_better,
        }


def alternate(
    baseline: Callable[[], float], subject: Callable[[], float], pairs: int, *, higher_is_better: bool = True
) -> Pairs:
    """Run `baseline()` then `subject()`, `pairs` times over, each returning its measure (a rate or a
    time); the pairs. The order within a pair flips every other pair, so neither side always runs
    first on a warm (or a tired) machine."""
    baselines: list[float] = []
    subjects: list[float] = []
    for n in range(pairs):
        if n % 2 == 0:
            baselines.append(baseline())
            subjects.append(subject())
        else:
            subjects.append(subject())
            baselines.append(baseline())
    return Pairs(baselines, subjects, higher_is_better=higher_is_better)


def interleave(measures: Sequence[tuple[str, Callable[[], float]]], rounds: int) -> dict[str, list[float]]:
    """Run every measure once per round, in the given order in even rounds and reversed in odd ones;
    each measure's values, by name.

    Measures listed next to each other run next to each other in every round,
    and which of them goes first flips from round to round, so any two
    neighbours make alternating pairs (`Pairs(values[a], values[b])`). A
    baseline that must sit next to several subjects is listed once beside
    each, under its own name.
    """
    names = [name for name, _ in measures]
    if len(set(names)) != len(names):
        raise ValueError(f"measure names repeat: {names}")
    values: dict[str, list[float]] = {name: [] for name in names}
    for n in range(rounds):
        order = measures if n % 2 == 0 else list(reversed(measures))
        for name, measure in order:
            values[name].append(measure())
    return values


def spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    """`median 1,234 (range 1,100-1,300) of 5 runs`: a figure measured several times on its own."""
    return (
        f"median {statistics.median(values):{fmt}} (range {min(values):{fmt}}-{max(values):{fmt}}) "
        f"of {len(values)} runs"
    )


# --- the machine's load ------------------------------------------------------------------


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class LoadMeter:
    """The machine's load while a bench ran: CPU busy share (all processes, all CPUs), this process's
    own share, and the 1-minute load average at the end. A context manager; `summary()` after it."""

    def __enter__(self) -> LoadMeter:
        self._cpu = _cpu_times()
        self._own = time.process_time()
        self._wall = time.perf_counter()
        self.busy: float | None = None
        self.own: float | None = None
        self.loadavg: float | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._wall
        now = _cpu_times()
        if self._cpu is not None and now is not None and now[1] > self._cpu[1]:
            self.busy = (now[0] - self._cpu[0]) / (now[1] - self._cpu[1])
        cpus = os.cpu_count() or 1
        if wall > 0:
            self.own = (time.process_time() - self._own) / (wall * cpus)
        try:
            self.loadavg = os.getloadavg()[0]
        except OSError:
            self.loadavg = None

    def summary(self) -> str:
        """`machine 63 % busy (this process 48 %), load 1.9 on 2 CPUs`."""

        def pct(v: float | None) -> str:
            return "?" if v is None else f"{v * 100:.0f} %"

        load = "?" if self.loadavg is None else f"{self.loadavg:.1f}"
        own = pct(self.own)
        return f"machine {pct(self.busy)} busy (this process {own}), load {load} on {os.cpu_count()} CPUs"

    def as_dict(self) -> dict[str, object]:
        """The same, for `--json`: shares in [0, 1] (None where unknown)."""
        return {"busy": self.busy, "own": self.own, "loadavg": self.loadavg, "cpus": os.cpu_count()}


def threads_rate(
    sessions: int,
    per_session: int,
    step: Callable[[int, int], None],
    setup: Callable[[int], None] | None = None,
) -> float:
    """`sessions` threads, thread n calling `setup(n)` (untimed) and then `step(n, i)` for i <
    per_session; calls per second from the moment every thread is set up (the barrier's release,
    stamped before any thread goes on) to the last return. A thread's error is raised here."""
    started: list[float] = []
    barrier = threading.Barrier(sessions + 1, action=lambda: started.append(time.perf_counter()))
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            if setup is not None:
                setup(n)
            barrier.wait()
            for i in range(per_session):
                step(n, i)
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(sessions)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a thread failed: raised below
        barrier.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sessions * per_session / (time.perf_counter() - started[0])
