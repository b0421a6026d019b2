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


def test_the_fall_to_1024_sessions_is_judged_beside_the_ceilings_own_fall() -> None:
    """Issue 24 point 5: cairn may fall from 256 to 1,024 sessions as much as the thread-wake ceiling
    does, plus 0.05; the median of the rounds decides, so a known-bad run (a fall of 0.3 where the
    ceiling falls 0.1) fails and a run that falls with the ceiling passes."""
    from cairn.bench._measure import LoadMeter
    from cairn.bench.store import fall_beside_ceiling

    with LoadMeter() as load:
        pass
    ceiling = {"wake256": [100.0, 100.0, 100.0], "wake1024": [90.0, 92.0, 88.0]}
    with_it = fall_beside_ceiling({**ceiling, "j300/256": [50.0] * 3, "j300/1024": [44.0, 45.0, 46.0]}, load)
    assert with_it.target == ">= -0.05" and with_it.met is True and with_it.value == -0.02
    bad = fall_beside_ceiling({**ceiling, "j300/256": [50.0] * 3, "j300/1024": [35.0, 35.0, 36.0]}, load)
    assert bad.met is False and bad.value == -0.2
