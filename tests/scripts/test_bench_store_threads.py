"""The store bench's thread runs: the window in which every thread runs, a thread's error, and the
thread-wake ceiling acking every call.

Nothing here is timed: the tests check what is counted and that every thread gets its answer.
"""

from __future__ import annotations

import threading

import pytest

from cairn.bench._measure import ThreadsRun, threads_run
from cairn.bench.store import _wake_floor_rate


def _in_time(fn: object, timeout: float = 60.0) -> ThreadsRun:
    """Run `fn()` on a thread; a hang (a thread never woken) fails instead of blocking the suite."""
    result: list[ThreadsRun] = []
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


def test_every_step_runs_once_and_the_window_opens_when_all_threads_are_out() -> None:
    sessions, per_session = 4, 5
    calls: list[tuple[int, int]] = []
    all_in = threading.Barrier(sessions)  # no call returns before every thread is out of the start

    def step(n: int, i: int) -> None:
        if i == 0:
            all_in.wait()
        calls.append((n, i))

    run = _in_time(lambda: threads_run(sessions, per_session, step))
    assert sorted(calls) == [(n, i) for n in range(4) for i in range(5)]
    assert run.whole > 0 and run.start >= 0
    assert run.all_running is not None and run.all_running > 0


def test_setup_runs_once_per_thread_before_the_clock() -> None:
    seen: list[int] = []
    _in_time(lambda: threads_run(3, 2, lambda n, i: None, seen.append))
    assert sorted(seen) == [0, 1, 2]


def test_a_threads_error_is_raised_by_the_run() -> None:
    def step(n: int, i: int) -> None:
        if n == 2 and i == 1:
            raise ValueError("step 1 of thread 2")

    with pytest.raises(ValueError, match="step 1 of thread 2"):
        _in_time(lambda: threads_run(4, 3, step))


def test_the_wake_ceiling_acks_every_call() -> None:
    assert _in_time(lambda: _wake_floor_rate(32, 40)) > 0
