"""The replies of pipelined publishes: one subscription for all of them, one sweep for the lost ones.

`nc.request` per publish costs, on the loop, a unique inbox token (random
bytes), a future, a timer (`wait_for`) and a task to await them: about as
much as the rest of an append. An `AckInbox` sends a publish with a reply
subject of its own (`<prefix>.<counter>`) and hands each reply, when it
comes, to the callback the flight was sent with; a flight whose reply has
not come by its deadline is handed over as lost (`Outcome("unknown")`) by a
sweep that runs every quarter of a second while anything is in flight. A
reply that comes after its flight was swept is dropped: the caller
settles a lost reply by reading the subject, never by trusting it.

Everything here runs on the connection's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from cairn.store.jetstream.batch import LOST, Outcome, classify

#: how often the in-flight table is checked for replies that did not come
SWEEP_S = 0.25

Settle = Callable[[Outcome], Coroutine[Any, Any, None]]
#: one message to publish: subject, payload, headers
Message = tuple[str, bytes, dict[str, str]]


@dataclass(eq=False)
class _Flight:
    settle: Settle
    expires: float


class AckInbox:
    """Sends guarded publishes and routes each reply (or its absence) to the flight's callback."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = ""
        self._sub: Subscription | None = None
        self._counter = itertools.count(1)
        self._flights: dict[str, _Flight] = {}
        self._sweeping: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def _open(self) -> None:
        self._prefix = self._nc.new_inbox() + "."
        self._sub = await self._nc.subscribe(self._prefix + "*", cb=self._on_reply)

    async def send(self, messages: Sequence[Message], timeout_s: float, settle: Settle) -> None:
        """Publish `messages` in order, the last with a reply to this inbox; `settle` gets the outcome of
        that reply exactly once (one message, or an atomic batch whose last message commits it)."""
        if self._sub is None:
            await self._open()
        token = str(next(self._counter))
        loop = asyncio.get_running_loop()
        self._flights[token] = _Flight(settle, loop.time() + timeout_s)
        last = len(messages) - 1
        try:
            for index, (subject, payload, headers) in enumerate(messages):
                reply = self._prefix + token if index == last else ""
                await self._nc.publish(subject, payload, reply=reply, headers=headers)
        except LOST as exc:
            if self._flights.pop(token, None) is not None:
                await settle(Outcome("unknown", description=f"{type(exc).__name__}: {exc}"))
            return
        if self._sweeping is None:
            self._sweeping = loop.call_later(SWEEP_S, self._sweep)

    async def _on_reply(self, msg: Msg) -> None:
        flight = self._flights.pop(msg.subject[len(self._prefix) :], None)
        if flight is None:
            return  # swept already: the caller settles it by reading
        status = (msg.headers or {}).get("Status")
        if status == "503":
            outcome = Outcome("transient", code=503, description="no responders (no stream leader yet)")
        elif status:
            outcome = Outcome(
                "unknown", description=f"status {status} {(msg.headers or {}).get('Description', '')}"
            )
        else:
            outcome = classify(msg.data)
        await flight.settle(outcome)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        expired = [token for token, flight in self._flights.items() if flight.expires <= now]
        for token in expired:
            flight = self._flights.pop(token)
            task = loop.create_task(flight.settle(Outcome("unknown", description="no reply in time")))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._sweeping = loop.call_later(SWEEP_S, self._sweep) if self._flights else None

    @property
    def in_flight(self) -> int:
        return len(self._flights)
