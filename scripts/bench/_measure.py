"""How the benches time a piece of work: median or best of several runs, and peak traced memory."""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable


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


def best(fn: Callable[[], object], repeat: int) -> float:
    """The shortest of `repeat` runs: for CPU-bound work, what the code costs when nothing else runs.

    Noise on a shared machine only ever adds time, so the minimum is the
    estimate of the code's own cost (as `timeit` reports it).
    """
    return min(samples(fn, repeat))


def peak_memory(fn: Callable[[], object]) -> int:
    """The peak of memory traced (tracemalloc) while `fn` runs, in bytes."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
