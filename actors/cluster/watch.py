"""News of sessions' appends from the cluster's log, whoever wrote them: an ordered consumer per session.

A front end streaming a session's events (the HTTP API on a cluster) must
wake when ANY host appends to it. `SessionWatch.watch(sid, listener)` opens
(for the first listener of `sid`) a JetStream ordered push consumer on the
session's subject, delivering only what is stored from then on
(`DeliverPolicy.NEW`: a message reaches a consumer once the stream has it,
so a read of the log after the news finds the record), and tells each
listener the session seq of each message (its line's envelope). The last
listener's `remove()` deletes the consumer. Listeners run on the cluster
connection's event loop: they must only hand the news on.

Subscribe first, then read the log: no append falls between the two.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.client import JetStreamContext

from cairn.events.codec import decode_envelope
from cairn.events.errors import DecodeError
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.loop import LoopThread

log = logging.getLogger("cairn.cluster")

PushSubscription = JetStreamContext.PushSubscription

#: a session's news listener: the session id and the seq of a record just stored
Listener = Callable[[str, int], None]
#: how long opening a session's consumer may take
SUBSCRIBE_TIMEOUT_S = 30.0


class SessionWatch:
    """Appends of watched sessions, as the cluster stores them (see the module doc). Thread-safe."""

    def __init__(self, loop: LoopThread, nc: Client, layout: Layout) -> None:
        self._loop = loop
        self._js: JetStreamContext = nc.jetstream()
        self._layout = layout
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self._listeners: dict[str, list[Listener]] = {}
        self._subs: dict[str, PushSubscription] = {}

    def watch(self, sid: str, listener: Listener) -> Callable[[], None]:
        """Tell `listener` of every record of `sid` stored from now on; returns the call that stops it
        (it may block, as this does, until the session's consumer is open or deleted: call either
        off an event loop)."""
        with self._opening:  # opens and deletes one at a time; `on_message` never takes this lock
            with self._lock:
                self._listeners.setdefault(sid, []).append(listener)
                opened = sid in self._subs
            if not opened:
                try:
                    sub = self._loop.call(self._subscribe(sid), SUBSCRIBE_TIMEOUT_S)
                except BaseException:
                    self._drop(sid, listener)
                    raise
                with self._lock:
                    self._subs[sid] = sub

        def remove() -> None:
            with self._opening:
                sub = self._drop(sid, listener)
                if sub is not None:
                    with contextlib.suppress(Exception):
                        self._loop.call(_unsubscribe(sub), SUBSCRIBE_TIMEOUT_S)

        return remove

    def _drop(self, sid: str, listener: Listener) -> PushSubscription | None:
        """Forget `listener`; the session's consumer when it was the last one (to delete)."""
        with self._lock:
            found = self._listeners.get(sid, [])
            if listener in found:
                found.remove(listener)
            if found:
                return None
            self._listeners.pop(sid, None)
            return self._subs.pop(sid, None)

    @property
    def watched(self) -> int:
        """How many sessions have a consumer open."""
        with self._lock:
            return len(self._subs)

    async def _subscribe(self, sid: str) -> PushSubscription:
        async def on_message(msg: Msg) -> None:
            try:
                seq = decode_envelope(msg.data).seq
            except DecodeError as exc:
                log.warning("cairn: an unreadable line of session %r in the log: %s", sid, exc)
                return
            with self._lock:
                listeners = list(self._listeners.get(sid, ()))
            for told in listeners:
                try:
                    told(sid, seq)
                except Exception as exc:  # one broken listener must not silence the others
                    log.warning("cairn: a listener of session %r failed: %s", sid, exc)

        return await self._js.subscribe(
            self._layout.subject(sid),
            stream=self._layout.stream,
            cb=on_message,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )

    def close(self) -> None:
        """Delete every consumer (the connection's owner closes it after)."""
        with self._lock:
            subs = list(self._subs.values())
            self._subs.clear()
            self._listeners.clear()
        for sub in subs:
            with contextlib.suppress(Exception):
                self._loop.call(_unsubscribe(sub), 10.0)


async def _unsubscribe(sub: PushSubscription) -> None:
    with contextlib.suppress(Exception):  # the connection is closing: the consumer goes with it
        await sub.unsubscribe()
