"""The store bench's thread runs: every step counted, setup before the clock, a thread's error, and the
thread-wake ceiling acking every call.

Nothing here is timed: the tests check what is counted and that every thread gets its answer.
"""

from __future__ import annotations

import threading

import pytest

from cairn.bench._measure import threads_rate
from cairn.bench.store import _wake_floor_rate


def _in_time(fn: object, timeout: float = 60.0) -> float:
    """Run `fn()` on a thread; a hang (a thread never woken) fails instead of blocking the suite."""
    result: list[float] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "a thread was never woken"
    if errors:
        raise errors[0]
    return result[0]


def test_every_step_runs_once_and_the_rate_counts_them() -> None:
    calls: list[tuple[int, int]] = []
    rate = _in_time(lambda: threads_rate(4, 5, lambda n, i: calls.append((n, i))))
    assert sorted(calls) == [(n, i) for n in range(4) for i in range(5)]
    assert rate > 0


def test_setup_runs_once_per_thread_before_the_clock() -> None:
    seen: list[int] = []
    _in_time(lambda: threads_rate(3, 2, lambda n, i: None, seen.append))
    assert sorted(seen) == [0, 1, 2]


def test_a_threads_error_is_raised_by_the_run() -> None:
    def step(n: int, i: int) -> None:
        if n == 2 and i == 1:
            raise ValueError("step 1 of thread 2")

    with pytest.raises(ValueError, match="step 1 of thread 2"):
        _in_time(lambda: threads_rate(4, 3, step))


def test_the_wake_ceiling_acks_every_call() -> None:
    assert _in_time(lambda: _wake_floor_rate(32, 40)) > 0
