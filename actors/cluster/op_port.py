"""A cluster host's operations on sessions wherever they are held: placing a session, asking its holder,
and answering other hosts' asks (the frames and the table are in `actors.host.ops`).

`place(sid)` says where an operation on `sid` runs: here (None) when this
host holds the session or has just claimed it (routing Rule 1, as for a
client's message), else the holder's id. `ask(holder, sid, op)` sends the
op to the holder and returns its value; a holder that no longer holds the
session makes the asker place it again, and one that does not answer makes
it wait until that holder's lease is gone (a dead host's TTL), then claim
it: the same failover as a forwarded message's. `run(sid, op)` does all of
it for a caller that needs no local handle (`SessionUnavailable` when the
session found no home within `MAX_ROUTES` placements).

The holder's side (`on_request`, on the loop) runs the op on a worker
thread with the host's `Host` while it holds the session, and answers once.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

import msgspec
import nats.errors
from nats.aio.msg import Msg

from cairn.actors.cluster.routing import MAX_ROUTES, AwaitRelease, Claim, Forward, Serve, route
from cairn.actors.errors import HostClosed, SessionUnavailable, describe_exception
from cairn.actors.host.ops import (
    Op,
    OpAnswer,
    OpRequest,
    decode_answer,
    decode_request,
    encode,
    run_op,
    value_of,
)
from cairn.actors.session.stream import Turn
from cairn.events.errors import CairnError, InputError
from cairn.store.jetstream.lease_policy import Vacant
from cairn.store.jetstream.leases import LeaseHeld

if TYPE_CHECKING:
    from cairn.actors.cluster.cluster_host import ClusterHost

log = logging.getLogger("cairn.cluster")

#: how long an asker waits for the holder's answer to a quick op
ASK_TIMEOUT_S = 30.0
#: ... and to one that waits for a turn's end or a compaction (`wait`, cancel, compact)
LONG_ASK_TIMEOUT_S = 900.0
#: room an op's frame leaves below the connection's largest message for the frame around it
FRAME_ROOM = 1_024


class OpPort:
    """Operations on sessions for one `ClusterHost` (see the module doc). Thread-safe."""

    def __init__(self, cluster: ClusterHost) -> None:
        self._cluster = cluster
        self._lock = threading.Lock()
        self._turns: list[Turn] = []

    # -- the turns running here -------------------------------------------------------------------

    def track(self, turn: Turn) -> None:
        """`turn` runs on this host: a cancel of its session (from any host) reaches it."""
        with self._lock:
            self._turns = [t for t in self._turns if not t.done()]
            self._turns.append(turn)

    def turns(self) -> list[Turn]:
        """The turns running on this host that an op started or a client's message did."""
        with self._lock:
            self._turns = [t for t in self._turns if not t.done()]
            return list(self._turns)

    def running(self, sid: str) -> Turn | None:
        """The earliest turn of `sid` running on this host (None: none)."""
        with self._lock:
            self._turns = [t for t in self._turns if not t.done()]
            return next((t for t in self._turns if t.session == sid), None)

    # -- the asker's side ---------------------------------------------------------------------------

    def place(self, sid: str, previous: str | None = None) -> str | None:
        """None when this host holds `sid` (claimed now if nobody did), else its holder's id."""
        cluster = self._cluster
        for _ in range(MAX_ROUTES):
            if cluster.closing:
                raise HostClosed(f"host {cluster.host_id} is closing")
            holds = cluster.ownership.holds(sid)
            decision = route(holds, Vacant() if holds else cluster.bucket.observe(sid), cluster.host_id)
            match decision:
                case Serve():
                    return None
                case Claim():
                    try:
                        if cluster.ownership.claim(sid, previous) is not None:
                            cluster.count("claimed")
                    except LeaseHeld:
                        continue  # another host took it first: look again
                    return None
                case Forward(holder):
                    return holder
        raise SessionUnavailable(f"session {sid}: no host could take it after {MAX_ROUTES} tries")

    def ask(self, holder: str, sid: str, op: Op, timeout_s: float) -> OpAnswer | None:
        """`holder`'s answer to `op` on `sid`, or None when it did not answer within `timeout_s`."""
        cluster = self._cluster
        data = encode(OpRequest(sid=sid, op=op))
        largest = cluster.max_payload - FRAME_ROOM
        if len(data) > largest:
            raise InputError(
                f"session {sid} is held by another host, and what is sent to it is {len(data)} bytes: "
                f"the cluster carries at most {largest} (send large images to the host that holds it)"
            )
        subject = cluster.names.ops_subject(holder)
        try:
            reply = cluster.loop.call(cluster.nc.request(subject, data, timeout=timeout_s), timeout_s + 5)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError):
            return None
        try:
            return decode_answer(reply.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("cairn: host %s answered an op on %r with %r", holder, sid, reply.data[:200])
            return None

    def run_remote(self, holder: str, sid: str, op: Op, timeout_s: float) -> tuple[bool, Any]:
        """Ask `holder`; (True, value) when it ran the op, (False, None) when `sid` must be placed
        again (after waiting for the lease of a holder that did not answer to go)."""
        answer = self.ask(holder, sid, op, timeout_s)
        if answer is not None and answer.taken:
            return True, value_of(op, answer)
        if answer is None:
            revision = self._revision(sid, holder)
            if revision is not None:
                self._cluster.forwarder.await_release(sid, AwaitRelease(holder, revision))
        return False, None

    def _revision(self, sid: str, holder: str) -> int | None:
        observed = self._cluster.bucket.observe(sid)
        return getattr(observed, "revision", None) if getattr(observed, "holder", None) == holder else None

    def run(self, sid: str, op: Op, timeout_s: float = ASK_TIMEOUT_S) -> Any:
        """Run `op` on `sid` where it is held (here, or its holder); its value or a cairn error."""
        cluster = self._cluster
        previous: str | None = None
        for _ in range(MAX_ROUTES):
            with cluster.use.using(sid):
                holder = self.place(sid, previous)
                if holder is None:
                    return run_op(cluster.host, sid, op, self.running, self.track)
            done, value = self.run_remote(holder, sid, op, timeout_s)
            if done:
                return value
            previous = holder
        raise SessionUnavailable(f"session {sid}: no host answered for it after {MAX_ROUTES} tries")

    # -- the holder's side --------------------------------------------------------------------------

    async def on_request(self, msg: Msg) -> None:
        """Another host's op (on the loop): run on a worker thread, answered from there."""
        if not msg.reply:
            return
        try:
            request = decode_request(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            answer = OpAnswer(taken=True, error_class="InputError", error=f"not a cairn op: {exc}")
            await self._cluster.nc.publish(msg.reply, encode(answer))
            return
        if not self._cluster.submit(self._answer, request, msg.reply):
            await self._cluster.nc.publish(msg.reply, encode(OpAnswer(taken=False)))

    def _answer(self, request: OpRequest, reply_to: str) -> None:
        answer = self._served(request)
        data = encode(answer)
        cluster = self._cluster
        try:
            cluster.loop.call(cluster.nc.publish(reply_to, data), 30.0)
        except Exception as exc:  # the asker is gone: it places the session again
            log.warning("cairn: answering an op on %r: %s", request.sid, describe_exception(exc))

    def _served(self, request: OpRequest) -> OpAnswer:
        cluster = self._cluster
        sid = request.sid
        if cluster.closing or not cluster.use.try_enter(sid):
            return OpAnswer(taken=False)
        try:
            if not cluster.ownership.holds(sid):
                return OpAnswer(taken=False)
            value = run_op(cluster.host, sid, request.op, self.running, self.track)
            return OpAnswer(taken=True, value=msgspec.Raw(msgspec.json.encode(value)))
        except CairnError as exc:
            return OpAnswer(taken=True, error_class=type(exc).__name__, error=str(exc))
        except Exception as exc:
            log.warning("cairn: an op on %r failed: %s", sid, describe_exception(exc))
            return OpAnswer(taken=True, error_class=type(exc).__name__, error=str(exc))
        finally:
            cluster.use.leave(sid)
