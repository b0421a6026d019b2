"""Handing appends from the caller threads to the connection's event loop: one queue, few wake-ups.

`asyncio.run_coroutine_threadsafe` per append costs a wake-up of the loop
(a write to its self-pipe), a task and a chained future each time; with a
few hundred sessions appending at once it capped the handoff alone at
about 7k calls/s on 2 cores, under what the cluster acknowledges. Here a
caller puts its `Pending` call on one deque and wakes the loop only when no
wake-up is already on its way (`Submissions.submit`); the loop takes every
queued call at once (`_drain`).

Calls of one session run one after another in the order they were queued
(each is framed on the head the one before left): the session's next call
begins when the one before is `finished`. Calls of different sessions are
in flight at once, so the publishes of hundreds of sessions are pipelined
on the one connection (`appender` writes them).

A blocking caller waits on a lock of its own (`Pending.lock`, released by
the loop), not a future: the cheapest wake-up a thread has; `append_async`
callers get a `concurrent.futures.Future`. `abandon` resolves whatever is
left when the loop stops, so no caller waits past `close`: a call never
sent as closed, one whose outcome is unknown as such.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cairn.events.codec import Record
from cairn.events.kinds import EventBase


@dataclass(eq=False)
class Pending:
    """One append call on its way: what to write, and how its caller is told (a future or a lock)."""

    sid: str
    events: list[tuple[EventBase, bytes, str]]
    expected: int
    ts: int
    timeout_s: float
    future: concurrent.futures.Future[list[Record]] | None = None
    lock: threading.Lock | None = field(default=None)
    result: list[Record] | None = None
    error: BaseException | None = None
    done: bool = False
    #: handed to the writer: from then on it may be stored whatever its caller hears
    started: bool = False

    @classmethod
    def blocking(
        cls, sid: str, events: list[tuple[EventBase, bytes, str]], expected: int, ts: int, timeout_s: float
    ) -> Pending:
        """A call whose caller waits on `lock` (taken here, released when the call is resolved)."""
        lock = threading.Lock()
        lock.acquire()
        return cls(sid, events, expected, ts, timeout_s, lock=lock)

    def resolve(self, result: list[Record] | None, error: BaseException | None) -> None:
        """Tell the caller (once): the records as stored, or the error."""
        if self.done:
            return
        self.done = True
        if self.lock is not None:
            self.result, self.error = result, error
            self.lock.release()
        elif self.future is not None:
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result if result is not None else [])


#: starts a call (its session has none other under way); raises what failed before it was sent
Begin = Callable[[Pending], Awaitable[None]]


class Submissions:
    """The queue from the caller threads to the loop, and the per-session order on the loop.

    `begin` starts a call and returns once it is under way; whoever ends it
    calls `finished`, which resolves it and begins the session's next call.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, begin: Begin) -> None:
        self._loop = loop
        self._begin = begin
        self._queue: collections.deque[Pending] = collections.deque()
        self._wake_due = False
        #: per session with a call under way: that call first, then those queued behind it
        self._active: dict[str, collections.deque[Pending]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._abandoned: BaseException | None = None
        self._mutex = threading.Lock()

    def submit(self, pending: Pending) -> None:
        """Queue a call (any thread but the loop's); the loop is woken unless a wake-up is due already.

        The loop clears `_wake_due` before it takes the queue, and a caller
        appends before it looks at the flag: a call that finds it set is
        taken by the drain already on its way. A call that comes after
        `abandon` is resolved with its error at once.
        """
        self._queue.append(pending)
        if self._abandoned is not None:
            self.abandon(self._abandoned)
            return
        if not self._wake_due:
            self._wake_due = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError as exc:  # the loop is closed: nothing will take the queue
                self.abandon(exc)

    def _drain(self) -> None:
        self._wake_due = False
        queue, active = self._queue, self._active
        first: list[Pending] = []
        while queue:
            pending = queue.popleft()
            calls = active.get(pending.sid)
            if calls is not None:
                calls.append(pending)
                continue
            active[pending.sid] = collections.deque((pending,))
            first.append(pending)
        if first:
            task = self._loop.create_task(self._begin_all(first))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _begin_all(self, first: list[Pending]) -> None:
        for pending in first:
            await self._start(pending.sid)

    async def _start(self, sid: str) -> None:
        """Begin the first of a session's calls; one that fails at once is resolved, and the next begun."""
        calls = self._active[sid]
        while calls:
            pending = calls[0]
            pending.started = True
            try:
                await self._begin(pending)
                return
            except Exception as exc:
                pending.resolve(None, exc)
                calls.popleft()
        del self._active[sid]

    async def finished(
        self, pending: Pending, result: list[Record] | None, error: BaseException | None
    ) -> None:
        """Resolve the session's call under way (`pending`) and begin its next one."""
        pending.resolve(result, error)
        calls = self._active.get(pending.sid)
        if not calls or calls[0] is not pending:
            return  # abandoned meanwhile (closing)
        calls.popleft()
        if calls:
            await self._start(pending.sid)
        else:
            del self._active[pending.sid]

    async def cancel(self) -> None:
        """Cancel the tasks beginning calls (on the loop, before it stops): their calls go to `abandon`."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def abandon(self, error: BaseException, doubtful: BaseException | None = None) -> None:
        """Resolve every call not yet resolved, and every later one (the loop has stopped).

        A call never started gets `error`; one that was being written gets
        `doubtful` (it may be stored: the caller reads the session to know).
        """
        with self._mutex:
            self._abandoned = error
            while self._queue:
                self._queue.popleft().resolve(None, error)
            for calls in list(self._active.values()):
                for pending in calls:
                    pending.resolve(None, doubtful if pending.started and doubtful is not None else error)
                calls.clear()
