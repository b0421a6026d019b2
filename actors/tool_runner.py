"""Runs the host's tool calls on a bounded set of threads, each within its timeout.

A tool is the host's code and may hang (a network call without a timeout, a
lock never released). Python cannot stop a thread, so the runner bounds what
a hung tool can cost instead:

- each call runs on one of at most `threads` worker threads of the host
  (daemon threads: a tool still hung at exit does not hold the process);
- the caller waits at most `timeout_s`; then it gets `TimedOut` and the
  call's result, whenever it comes, is dropped. A call still queued at its
  timeout never starts: a tool the model was told had failed does not run
  later;
- a hung call keeps its thread, and no thread is added for it: with every
  thread hung, calls wait in the queue and time out there, so hung tools
  cost at most `threads` threads, never one per call. A thread whose tool
  returns, however late, takes the next call.

Workers start when needed and stop at `close()` (a hung one when its tool
returns).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

T = TypeVar("T")

_JobState = Literal["queued", "running", "done", "cancelled", "abandoned"]


@dataclass(frozen=True)
class TimedOut:
    """A call that did not finish within its timeout.

    `started`: it was running (and may still be: its result is dropped);
    else it waited for a thread the whole time and never ran. `hung`: the
    calls still running past their timeout when this one gave up.
    """

    timeout_s: float
    started: bool
    hung: int


class _Job(Generic[T]):
    __slots__ = ("done", "error", "fn", "result", "state")

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.state: _JobState = "queued"
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None


class ToolRunner:
    """At most `threads` threads running tool calls; `run` waits at most `timeout_s` for one."""

    def __init__(self, threads: int = 32, timeout_s: float = 300.0, *, name: str = "cairn-tool") -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        if not 0 < timeout_s < float("inf"):
            raise ValueError(f"timeout_s must be a finite positive number, got {timeout_s}")
        self.threads = threads
        self.timeout_s = timeout_s
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: collections.deque[_Job[object]] = collections.deque()
        self._workers = 0
        self._idle = 0
        self._abandoned = 0
        self._closed = False
        self._started = 0

    @property
    def live_threads(self) -> int:
        """Worker threads alive now (idle, busy or hung)."""
        with self._lock:
            return self._workers

    @property
    def hung(self) -> int:
        """Calls still running past their timeout."""
        with self._lock:
            return self._abandoned

    def run(self, fn: Callable[[], T], timeout_s: float | None = None) -> T | TimedOut:
        """`fn()` on a worker thread: its value (its exception raised here), or `TimedOut`."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        job: _Job[T] = _Job(fn)
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool runner is closed")
            self._queue.append(job)  # type: ignore[arg-type]
            if len(self._queue) > self._idle and self._workers < self.threads:
                self._spawn()  # every idle worker has a queued call to take already
            else:
                self._wake.notify()
        if not job.done.wait(limit):
            with self._lock:
                if job.state == "queued":
                    job.state = "cancelled"
                    self._queue.remove(job)  # type: ignore[arg-type]
                    return TimedOut(limit, started=False, hung=self._abandoned)
                if job.state == "running":
                    job.state = "abandoned"
                    self._abandoned += 1
                    return TimedOut(limit, started=True, hung=self._abandoned)
            # it finished between the wait's end and the lock: take its result
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the workers: idle ones now, busy or hung ones when their call returns."""
        with self._lock:
            self._closed = True
            for job in self._queue:
                job.state = "cancelled"
                job.error = RuntimeError("the tool runner closed before the call started")
                job.done.set()
            self._queue.clear()
            self._wake.notify_all()

    def _spawn(self) -> None:
        self._workers += 1
        self._started += 1
        thread = threading.Thread(target=self._work, name=f"{self._name}-{self._started}", daemon=True)
        thread.start()

    def _work(self) -> None:
        lock = self._lock
        while True:
            with lock:
                self._idle += 1
                while not self._queue and not self._closed:
                    self._wake.wait()
                self._idle -= 1
                if not self._queue:  # closed
                    self._workers -= 1
                    return
                job = self._queue.popleft()
                job.state = "running"
            self._execute(job)

    def _execute(self, job: _Job[object]) -> None:
        """Run one call; hand its outcome to its caller, or drop it when the caller gave up."""
        try:
            job.result = job.fn()
        except BaseException as exc:  # the caller's to see, on its own thread
            job.error = exc
        with self._lock:
            if job.state == "abandoned":
                self._abandoned -= 1
                job.result = job.error = None  # nobody waits for it any more
            else:
                job.state = "done"
                job.done.set()
