"""The client stream of a turn: a handle that yields client-visible events live, then a result.

`Turn` is what `host.send` returns. The session actor publishes into it from
its own thread; any number of readers on other threads may iterate
`events()` (each sees every item from the start) and wait for `result()`.

What is published, in order:

- every durable event of the turn that is not hidden (H6: never the
  hand-off), as the stored `Record`, only after the journal acknowledged it;
- text and reasoning deltas as they stream (`TextDelta`, `ReasoningDelta`),
  which are not persisted themselves: the `assistant-message` record that
  follows them holds the whole text.

A handle is always resolved: by the turn's end, by its failure, by the
session being stopped, or by the host being closed. Thread-safe. Waits are
bounded by default (`WAIT_S`); `watch` hands each item and the result to a
callback instead, for `AsyncHost`, which bridges them to an event loop.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple

import msgspec

from cairn.actors.errors import TurnTimeout
from cairn.actors.provider.base import ReasoningDelta, TextDelta
from cairn.events.codec import Record
from cairn.events.errors import InputError
from cairn.events.kinds import FailedPhase

#: how long `Turn.result` and `Turn.events` wait by default (seconds): bounded, never forever
WAIT_S = 3_600.0

StreamItem = Record | TextDelta | ReasoningDelta
TurnStatus = Literal["completed", "failed", "rejected", "cancelled"]

StreamPosition = str
"""Where a stream item is, for a reader to continue after it: `"42"` for the record of seq 42,
`"42.3"` for the third delta after it. Records keep their position across a restart (a resend
with the same idempotency key is answered from the log, records only); deltas are not in the
log, so continuing after a delta's position gives the records that followed it."""


def parse_position(position: StreamPosition) -> tuple[int, int]:
    """`"42"` -> (42, 0), `"42.3"` -> (42, 3); `InputError` for anything else."""
    seq, dot, delta = position.partition(".") if isinstance(position, str) else ("", "", "")
    if seq.isdigit() and seq.isascii() and (not dot or (delta.isdigit() and delta.isascii())):
        return int(seq), int(delta) if dot else 0
    raise InputError(f"a stream position is a seq, or seq.delta (42, 42.3), not {position!r}")


def format_position(at: tuple[int, int]) -> StreamPosition:
    seq, delta = at
    return f"{seq}.{delta}" if delta else str(seq)


def next_position(previous: tuple[int, int], item: StreamItem) -> tuple[int, int]:
    """The position of `item`, published after an item at `previous` ((0, 0) before the first)."""
    if isinstance(item, Record):
        return item.seq, 0
    return previous[0], previous[1] + 1


def checked_timeout(timeout: object) -> float | None:
    """A wait's bound as given to `result` and `events`: None (no bound) or a finite number of
    seconds >= 0, else `InputError` (a str would fail mid-wait; NaN would wait without bound)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout):
        raise InputError(f"timeout must be None or a number of seconds, got {timeout!r}")
    if timeout < 0:
        raise InputError(f"timeout must be 0 or more seconds, got {timeout!r}")
    return float(timeout)


class Positioned(NamedTuple):
    """A stream item and its position (`Turn.stream`)."""

    position: StreamPosition
    item: StreamItem


class TurnResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a turn ended.

    `completed`: the model stopped calling tools. `failed`: the turn ended in
    `phase` (provider, compaction, checkpoint, tool, interrupted), recorded
    as `turn-failed` when the store allowed it. `rejected`: the message was
    never recorded (bad workspace, store failure), so no turn began.
    `cancelled`: the host cancelled it (`Turn.cancel`), recorded as
    `turn-cancelled` (with `error` the reason given), or withdrawn before it
    was recorded. Not a failure: nothing went wrong.
    `provider_seconds` is the time spent inside the provider adapter.
    """

    session: str
    status: TurnStatus
    turn_id: str = ""
    phase: FailedPhase | None = None
    error_class: str = ""
    error: str = ""
    requests: int = 0
    text: str = ""
    last_seq: int = 0
    provider_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "completed"


#: told each new item of a turn, then its result (`Turn.watch`)
Watcher = Callable[[StreamItem | TurnResult], None]


class Turn:
    """A handle on one sent message's turn: `events()` live, then `result()`."""

    def __init__(
        self,
        session: str,
        *,
        on_done: Callable[[Turn], None] | None = None,
        on_cancel: Callable[[Turn, str], None] | None = None,
    ) -> None:
        self.session = session
        self._on_cancel = on_cancel
        self._cond = threading.Condition()
        self._items: list[StreamItem] = []
        self._positions: list[tuple[int, int]] = []  # beside `_items`, increasing
        self._result: TurnResult | None = None
        self._on_done = on_done
        self._watchers: list[Watcher] = []

    # -- reading (any thread) ------------------------------------------------------

    def events(
        self, timeout: float | None = WAIT_S, *, after: StreamPosition | None = None
    ) -> Iterator[StreamItem]:
        """Every client-visible item of the turn, live, from its first (or the first after the
        position `after`: a reader continuing where it lost the stream); ends with the turn.

        `timeout` bounds the wait for each next item (TurnTimeout; default
        `WAIT_S`, an hour); None waits as long as the turn runs.
        """
        for entry in self.stream(timeout, after=after):
            yield entry.item

    def stream(
        self, timeout: float | None = WAIT_S, *, after: StreamPosition | None = None
    ) -> Iterator[Positioned]:
        """`events`, each item with its position (`StreamPosition`), to continue from after a
        reconnect (`after=`). `InputError` for a malformed position, before anything is read."""
        timeout = checked_timeout(timeout)
        start = (0, 0) if after is None else parse_position(after)
        with self._cond:
            index = bisect.bisect_right(self._positions, start)
        while True:
            with self._cond:
                deadline = None if timeout is None else time.monotonic() + timeout
                while index >= len(self._items) and self._result is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TurnTimeout(f"session {self.session}: no event within {timeout} s")
                    self._cond.wait(remaining)
                batch = self._items[index:]
                places = self._positions[index : index + len(batch)]
                finished = self._result is not None
            for place, item in zip(places, batch, strict=True):
                yield Positioned(format_position(place), item)
            index += len(batch)
            if finished and index >= len(self._items):
                return

    def result(self, timeout: float | None = WAIT_S) -> TurnResult:
        """Wait for the turn's end; TurnTimeout when it does not come within `timeout` seconds.

        The default, `WAIT_S` (an hour), keeps a caller from waiting forever
        on a turn whose provider adapter never returns; the turn may still
        finish, and `result()` may be called again. None waits without bound.
        """
        timeout = checked_timeout(timeout)
        with self._cond:
            if not self._cond.wait_for(lambda: self._result is not None, timeout):
                raise TurnTimeout(f"session {self.session}: no result within {timeout} s")
            assert self._result is not None
            return self._result

    def done(self) -> bool:
        with self._cond:
            return self._result is not None

    def cancel(self, reason: str = "") -> None:
        """Stop this turn: it ends `cancelled`, recorded as `turn-cancelled` with `reason`.

        Returns at once; `result()` then says how it ended (a turn that ended
        first keeps its own result). A message not recorded yet (queued
        behind a running turn) is withdrawn instead, and nothing of it is
        written. The session goes on: the next message starts a new turn,
        with no replay. A running request is abandoned (the provider stops
        streaming), a compaction's answer and a running tool's outcome are
        dropped when they come (Python cannot stop a tool's thread: what the
        tool does meanwhile still happens; the model is told its outcome is
        unknown). Cancelling one handle of a turn cancels the turn for all.
        """
        if self._on_cancel is not None and not self.done():
            self._on_cancel(self, reason)

    def watch(self, watcher: Watcher) -> tuple[list[StreamItem], TurnResult | None]:
        """The items so far and the result if any; later items, then the result, go to `watcher`.

        Atomic: no item is both in the list and given to `watcher`, none is
        missed. `watcher` runs on the session's thread, under the handle's
        lock, so it must only hand the item on (`loop.call_soon_threadsafe`);
        one that raises is dropped. Not watched when the turn already ended.
        For `AsyncHost`, which bridges a turn to an event loop without a thread.
        """
        with self._cond:
            if self._result is None:
                self._watchers.append(watcher)
            return list(self._items), self._result

    def unwatch(self, watcher: Watcher) -> None:
        """Stop handing items to `watcher` (a no-op when it is not watching)."""
        with self._cond:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    # -- writing (the session actor's thread) -----------------------------------------

    def _join(self, other: Turn) -> None:
        """Start with every item `other` has had so far: a resend joining the turn of its first send.
        On the session's thread, where the items are published, so none comes in between."""
        with other._cond:
            items = list(other._items)
        for item in items:
            self._publish(item)

    def _publish(self, item: StreamItem) -> None:
        with self._cond:
            if self._result is None:
                self._positions.append(
                    next_position(self._positions[-1] if self._positions else (0, 0), item)
                )
                self._items.append(item)
                self._cond.notify_all()
                self._tell_watchers(item)

    def _finish(self, result: TurnResult) -> bool:
        """Resolve the handle once; later calls are ignored. Returns whether this call resolved it."""
        with self._cond:
            if self._result is not None:
                return False
            self._result = result
            self._cond.notify_all()
            self._tell_watchers(result)
            self._watchers = []
        if self._on_done is not None:
            self._on_done(self)
        return True

    def _tell_watchers(self, news: StreamItem | TurnResult) -> None:
        """Hand `news` to every watcher (under the lock); one that raises is dropped, the turn goes on."""
        for watcher in list(self._watchers):
            try:
                watcher(news)
            except Exception:
                self._watchers.remove(watcher)

    def __repr__(self) -> str:
        state = self._result.status if self._result is not None else "running"
        return f"<Turn of {self.session}: {state}>"
