"""A turn for asyncio code (`AsyncTurn`), and the inbox that brings a session's news to the loop.

`AsyncHost` (async_host.py) makes them: see its module doc for how a turn's
items and result reach the loop without a thread waiting on the turn.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any

from cairn.actors.errors import TurnTimeout
from cairn.actors.session.stream import (
    WAIT_S,
    Positioned,
    StreamItem,
    StreamPosition,
    Turn,
    TurnResult,
    checked_timeout,
    format_position,
    next_position,
    parse_position,
)


class LoopInbox:
    """Calls handed from any thread to one event loop, run there in the order posted, in batches.

    `post` from a session's thread appends to a queue and wakes the loop
    (`call_soon_threadsafe`) only when no wake-up is pending; the loop runs
    everything queued by then in one callback. So a burst of a hundred
    sessions' deltas costs the loop a few wake-ups, not a hundred: fewer
    times the loop thread has to win the GIL back from the session threads.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._pending = False
        self._closed = False
        #: wake-ups asked of the loop, and calls run (for the tests and the bench)
        self.wakeups = 0
        self.delivered = 0

    def post(self, call: Callable[..., None], *args: Any) -> None:
        """Any thread: run `call(*args)` on the loop, after everything posted before it.

        Once the loop is closed (its program ended without closing the host),
        news is dropped: nobody is left to read it, and a turn still running
        must neither fail on it nor pile it up.
        """
        if self._closed or self.loop.is_closed():  # closed with a drain queued that never ran, too
            self._close()
            return
        self._queue.append((call, args))
        if not self._pending:
            # A drain clears the flag before it takes: a post that saw it set was queued before
            # that, so the drain takes it; one that sees it clear asks for a drain of its own.
            self._pending = True
            self.wakeups += 1
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop closed meanwhile
                self._close()

    def _close(self) -> None:
        """Drop what is queued and every later post: the loop is gone."""
        self._closed = True
        self._queue.clear()

    def _drain(self) -> None:
        self._pending = False
        queue = self._queue
        while queue:
            call, args = queue.popleft()
            self.delivered += 1
            call(*args)


class AsyncTurn:
    """A turn for asyncio code: `async for item in turn.events()`, `await turn.result()`.

    Wraps the threaded `Turn` (`turn.handle`). Made off the loop, on the
    host's pool (`AsyncHost.send`): it watches the handle there, once, and
    from then on the session's thread hands it each item and the result
    through the host's `LoopInbox`, so the loop keeps its own copy of the turn
    and never takes the handle's lock (which the session's thread holds while
    it publishes, and may hold while it waits for the GIL). Any number of
    readers may iterate `events()`, each from the first item; cancelling one
    never touches the turn.
    """

    def __init__(
        self,
        handle: Turn,
        inbox: LoopInbox,
        on_ready: Callable[[AsyncTurn], None] | None = None,
    ) -> None:
        self.handle = handle
        self.session = handle.session
        self._inbox = inbox
        loop = inbox.loop
        self._items: list[StreamItem] = []
        self._positions: list[tuple[int, int]] = []  # beside `_items` (`Turn.stream`'s positions)
        self._ended: TurnResult | None = None
        self._result: asyncio.Future[TurnResult] = loop.create_future()
        self._readers: set[asyncio.Event] = set()
        #: news that reached the loop before `_ready` did (None once ready)
        self._early: list[StreamItem | TurnResult] | None = []
        backlog, ended = handle.watch(self._on_news)
        # after every item the watch handed on from here: `_ready` is queued behind them, so it
        # puts the backlog before them
        inbox.post(self._ready, backlog, ended, on_ready)

    def _on_news(self, news: StreamItem | TurnResult) -> None:
        """On the session's thread, under the handle's lock: hand the news to the loop, nothing more."""
        self._inbox.post(self._take, news)

    def _ready(
        self,
        backlog: list[StreamItem],
        ended: TurnResult | None,
        on_ready: Callable[[AsyncTurn], None] | None,
    ) -> None:
        """On the loop: the items before the watch, then those that came meanwhile; then it is shown."""
        early, self._early = self._early or [], None
        for news in [*backlog, *([ended] if ended is not None else []), *early]:
            self._take(news)
        if on_ready is not None:
            on_ready(self)

    def _take(self, news: StreamItem | TurnResult) -> None:
        """On the loop: one item (for every reader) or the result."""
        if self._early is not None:
            self._early.append(news)
            return
        if self._ended is not None:
            return
        if isinstance(news, TurnResult):
            self._ended = news
            self._result.set_result(news)
        else:
            self._positions.append(next_position(self._positions[-1] if self._positions else (0, 0), news))
            self._items.append(news)
        for wake in self._readers:
            wake.set()

    async def result(self, timeout: float | None = WAIT_S) -> TurnResult:
        """The turn's end; `TurnTimeout` after `timeout` seconds (None: no bound).

        Cancelling the awaiting task (or the timeout) leaves the turn
        running and its result retrievable by awaiting this again.
        """
        timeout = checked_timeout(timeout)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: see `events`
                return await asyncio.shield(self._result)
        except TimeoutError:
            raise TurnTimeout(f"session {self.session}: no result within {timeout} s") from None

    async def events(
        self, timeout: float | None = WAIT_S, *, after: StreamPosition | None = None
    ) -> AsyncIterator[StreamItem]:
        """Every client-visible item of the turn, live, from its first (or the first after the
        position `after`, as `Turn.events`); ends with the turn.

        `timeout` bounds the wait for each next item (`TurnTimeout`). The
        items are the loop's own copy (see the class doc); leaving the loop
        early (break, cancel) only forgets this reader.
        """
        async for entry in self.stream(timeout, after=after):
            yield entry.item

    async def stream(
        self, timeout: float | None = WAIT_S, *, after: StreamPosition | None = None
    ) -> AsyncGenerator[Positioned, None]:
        """`events`, each item with its position, as `Turn.stream`."""
        timeout = checked_timeout(timeout)
        start = (0, 0) if after is None else parse_position(after)
        wake = asyncio.Event()
        self._readers.add(wake)
        index = bisect.bisect_right(self._positions, start)
        try:
            while True:
                while index < len(self._items):
                    index += 1
                    yield Positioned(format_position(self._positions[index - 1]), self._items[index - 1])
                if self._ended is not None:
                    return
                wake.clear()
                try:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
                    # cancellation that arrives as the item does, and the reader's task would
                    # then go on as if never cancelled (seen in the cancellation test)
                    async with asyncio.timeout(timeout):
                        await wake.wait()
                except TimeoutError:
                    raise TurnTimeout(f"session {self.session}: no event within {timeout} s") from None
        finally:
            self._readers.discard(wake)

    def done(self) -> bool:
        """Whether the turn's end has reached the loop."""
        return self._ended is not None

    def taken_after(self, position: tuple[int, int]) -> list[tuple[tuple[int, int], StreamItem]]:
        """The items that reached the loop past `position` (as `parse_position` gives it), each with
        its position, at once and without waiting: for a reader that sends them on in one batch."""
        index = bisect.bisect_right(self._positions, position)
        return list(zip(self._positions[index:], self._items[index:], strict=True))

    def first_seq(self) -> int | None:
        """The seq of the turn's first record that reached the loop (None: none yet). The turn's items
        hold every record of the session from there on, while it runs."""
        return self._positions[0][0] if self._positions else None

    @contextlib.contextmanager
    def news(self) -> Iterator[asyncio.Event]:
        """An event the loop sets at each item or end of the turn that reaches it while the block
        runs: a reader clears it, sends what `taken_after` gives, and waits on it for more (one
        event for a whole stream, not a task per wait)."""
        wake = asyncio.Event()
        self._readers.add(wake)
        try:
            yield wake
        finally:
            self._readers.discard(wake)

    def cancel(self, reason: str = "") -> None:
        """`Turn.cancel`: stop the turn (it ends `cancelled`); returns at once, never blocks the loop.

        Not asyncio's cancellation: cancelling a task that awaits `result()`
        leaves the turn running; this ends it.
        """
        self.handle.cancel(reason)

    def __repr__(self) -> str:
        return f"<AsyncTurn of {self.session}: {'done' if self.done() else 'running'}>"
