"""One asyncio event loop on a thread of its own, so that blocking callers can use nats-py.

nats-py is asyncio-only, and cairn's host, actors and store are threads. A
`LoopThread` runs one event loop for one connection; `call(coroutine, ...)`
runs a coroutine on it from any other thread and returns its result (or
raises its exception) in the caller. A call that outlives its deadline is
cancelled on the loop, and the caller gets `TimeoutError`. Calling from the
loop's own thread would deadlock, so it is refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread until `close()`."""

    def __init__(self, name: str = "cairn-nats") -> None:
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._started.set)
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coroutine` on the loop and wait; after `timeout_s`, cancel it and raise TimeoutError."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("LoopThread.call from the loop's own thread would wait for itself")
        if self._loop.is_closed() or not self._thread.is_alive():
            coroutine.close()
            raise RuntimeError("the event loop is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine's own TimeoutError (the same class since 3.11)
                raise
            future.cancel()
            raise TimeoutError(f"no answer in {timeout_s} s") from None

    def close(self) -> None:
        """Stop the loop once the callbacks already scheduled have run; wait for its thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
