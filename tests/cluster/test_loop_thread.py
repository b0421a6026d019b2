"""LoopThread: blocking callers run coroutines on one loop thread, with deadlines that cancel."""

from __future__ import annotations

import asyncio
import threading

import pytest

from cairn.store.jetstream.loop import LoopThread


def test_a_call_returns_the_result_and_runs_on_the_loop_thread() -> None:
    runner = LoopThread()
    try:

        async def where() -> str:
            return threading.current_thread().name

        assert runner.call(where(), timeout_s=5) == "cairn-nats"
    finally:
        runner.close()


def test_an_exception_reaches_the_caller() -> None:
    runner = LoopThread()
    try:

        async def fails() -> None:
            raise KeyError("inside")

        with pytest.raises(KeyError, match="inside"):
            runner.call(fails(), timeout_s=5)
    finally:
        runner.close()


def test_a_coroutines_own_timeout_error_reaches_the_caller_as_itself_not_as_the_deadline() -> None:
    runner = LoopThread()
    try:

        async def times_out() -> None:
            raise TimeoutError("the server did not answer")

        with pytest.raises(TimeoutError, match="the server did not answer"):
            runner.call(times_out(), timeout_s=30)
    finally:
        runner.close()


def test_a_deadline_cancels_the_coroutine_on_the_loop() -> None:
    runner = LoopThread()
    cancelled = threading.Event()
    try:

        async def forever() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        with pytest.raises(TimeoutError):
            runner.call(forever(), timeout_s=0.05)
        assert cancelled.wait(5)
    finally:
        runner.close()


def test_a_call_from_the_loop_thread_is_refused_not_deadlocked() -> None:
    runner = LoopThread()
    try:

        async def reenter() -> str:
            async def inner() -> str:
                return "never"

            try:
                return runner.call(inner(), timeout_s=1)
            except RuntimeError as error:
                return str(error)

        assert "own thread" in runner.call(reenter(), timeout_s=5)
    finally:
        runner.close()


def test_after_close_calls_are_refused() -> None:
    runner = LoopThread()
    runner.close()

    async def anything() -> int:
        return 1

    with pytest.raises(RuntimeError, match="closed"):
        runner.call(anything(), timeout_s=1)
