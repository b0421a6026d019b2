"""Passing a client's message on to the session's holder, and waiting out a holder that does not answer.

`Forwarder.forward` sends the holder a `Forwarded` request (the client's
inbox inside) on `<prefix>.host.<holder>.turn` and reports the holder's
answer (`routing.ForwardOutcome`): taken, not taken, or unanswered (no
responder: its process is gone; no answer within `FORWARD_TIMEOUT_S`: it
is paused or overloaded). `await_release` then polls the lease bucket
until the holder's lease at that revision is gone (`routing.released`),
which is how a dead host's session reaches another: its TTL runs out.

Thread-safety: called from worker threads, never from the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
import nats.errors
from nats.aio.client import Client

from cairn.actors.cluster.frames import Forwarded, TurnRequest, decode_answer, encode
from cairn.actors.cluster.names import ClusterNames
from cairn.actors.cluster.routing import AwaitRelease, Forward, ForwardOutcome, released
from cairn.store.jetstream.lease_bucket import LeaseBucket
from cairn.store.jetstream.loop import LoopThread

#: how long a forwarded message waits for the holder's answer
FORWARD_TIMEOUT_S = 2.0
#: how often a host looks at the bucket while it waits for a holder's lease to go
RELEASE_POLL_S = 0.1


class Forwarder:
    """Forwards for host `host_id` over `nc` (see the module doc)."""

    def __init__(
        self,
        loop: LoopThread,
        nc: Client,
        bucket: LeaseBucket,
        names: ClusterNames,
        host_id: str,
        *,
        max_wait_s: float,
        stopping: Callable[[], bool],
    ) -> None:
        self._loop = loop
        self._nc = nc
        self._bucket = bucket
        self._names = names
        self._host_id = host_id
        self._max_wait_s = max_wait_s
        self._stopping = stopping

    def forward(self, forward: Forward, request: TurnRequest, reply_to: str) -> ForwardOutcome:
        """Ask the holder to serve the message, streaming to the client's inbox itself."""
        data = encode(Forwarded(request=request, reply_to=reply_to, via=self._host_id))
        subject = self._names.host_subject(forward.holder)
        try:
            answer = self._loop.call(
                self._nc.request(subject, data, timeout=FORWARD_TIMEOUT_S), FORWARD_TIMEOUT_S + 5
            )
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError):
            return "unanswered"
        try:
            return "taken" if decode_answer(answer.data).taken else "not-taken"
        except (msgspec.DecodeError, msgspec.ValidationError):
            return "unanswered"

    def await_release(self, sid: str, awaited: AwaitRelease) -> None:
        """Poll the bucket until `awaited`'s lease is gone (or `max_wait_s`, or the host stops)."""
        give_up = time.monotonic() + self._max_wait_s
        while not self._stopping() and time.monotonic() < give_up:
            if released(self._bucket.observe(sid), awaited):
                return
            time.sleep(RELEASE_POLL_S)  # polling the cluster for a condition, with a deadline
