"""`Outbox`: a turn's frames published to one client's inbox, in order, with beats while it runs.

The frames (`frames` has the protocol) are published by the one worker
thread that serves the turn, each waited for on the connection's loop, so
they leave in the order they were made; NATS keeps the order of one
connection's messages to one subscriber. Beats are published from the
loop every `beat_s` while the turn runs; they carry no number.

A publish that fails (the connection is closing) is logged once and the
rest are dropped: the turn itself goes on and ends in the log as always.

Thread-safety: one Outbox per turn, used by the thread that serves it.
"""

from __future__ import annotations

import asyncio
import logging

from nats.aio.client import Client

from cairn.actors.cluster.frames import Accepted, Beat, ErrorFrame, Frame, ResultFrame, encode, item_frame
from cairn.actors.session.stream import Turn, TurnResult
from cairn.store.jetstream.loop import LoopThread

log = logging.getLogger("cairn.cluster")

#: seconds between two beats of a running turn
BEAT_S = 1.0
_PUBLISH_TIMEOUT_S = 10.0
_BEAT = encode(Beat())


class Outbox:
    """Frames for the client inbox `reply_to` (see the module doc)."""

    def __init__(self, loop: LoopThread, nc: Client, reply_to: str, beat_s: float = BEAT_S) -> None:
        self._loop = loop
        self._nc = nc
        self.reply_to = reply_to
        self._beat_s = beat_s
        self._broken = False

    def send(self, frame: Frame) -> bool:
        """Publish one frame and wait until the connection took it; False once publishing failed."""
        if self._broken:
            return False
        try:
            self._loop.call(self._nc.publish(self.reply_to, encode(frame)), _PUBLISH_TIMEOUT_S)
        except Exception as exc:
            self._broken = True
            log.warning(
                "cairn: a turn's frames to %s are lost: %s: %s", self.reply_to, type(exc).__name__, exc
            )
            return False
        return True

    def refuse(self, error_class: str, message: str) -> None:
        """Tell the client no turn began here (instead of `Accepted`)."""
        self.send(ErrorFrame(n=0, error_class=error_class, message=message[:2_000]))

    def stream(self, turn: Turn, host_id: str, lease_ttl_s: float = 0.0) -> TurnResult:
        """`Accepted`, every item of `turn` as it comes, then its result; beats meanwhile."""
        beats = asyncio.run_coroutine_threadsafe(self._beat(), self._loop.loop)
        try:
            self.send(Accepted(host_id=host_id, lease_ttl_s=lease_ttl_s))
            n = 1
            for item in turn.events():
                self.send(item_frame(n, item))
                n += 1
            result = turn.result()
            self.send(ResultFrame(n=n, result=result))
            return result
        finally:
            beats.cancel()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self._beat_s)
            if self._broken:
                return
            try:
                await self._nc.publish(self.reply_to, _BEAT)
            except Exception:
                return
