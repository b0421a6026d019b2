"""A cluster host's operations on sessions wherever they are held: placing a session, asking its holder,
and answering other hosts' asks (the frames and the table are in `actors.host.ops`).

`place(sid)` says where an operation on `sid` runs: here (None) when this
host holds the session or has just claimed it (routing Rule 1, as for a
client's message), else the holder and its lease revision (`Forward`).

`run_remote(forward, sid, op)` asks the holder: an `OpRequest` on
`<prefix>.host.<holder>.ops`, answered at once with an `OpAck` (taken, or
not: it does not hold the session now), then with the `OpAnswer` on the
asker's inbox when the op is done. While it waits, the asker looks at the
lease every `LEASE_CHECK_S`: a holder that lost it (it died, or hung past
its TTL) will not answer, so the session is placed again. A holder that
does not ack within `ACK_TIMEOUT_S` is waited for until its lease is gone
(`Forwarder.await_release`: a dead host's TTL), then the session is placed
again and claimed: the same failover as a forwarded message's. So an op is
run twice only when its holder died while running it (a send then carries
an idempotency key, so its second run answers from the log).

The holder's side (`on_request`, on the loop) acks at once and runs the op
on a worker thread with the host's `Host` while it holds the session.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from cairn.actors.cluster.errors import LeaseNotHeld
from cairn.actors.cluster.routing import MAX_ROUTES, AwaitRelease, Claim, Forward, Serve, route
from cairn.actors.errors import HostClosed, HostTimeout, SessionUnavailable, describe_exception
from cairn.actors.host.ops import (
    Op,
    OpAck,
    OpAnswer,
    OpRequest,
    SendOp,
    decode_ack,
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

#: how long an asker waits for the holder's ack
ACK_TIMEOUT_S = 5.0
#: how often an asker waiting for an answer looks whether the holder still holds the lease
LEASE_CHECK_S = 1.0
#: how long an asker waits for the answer to a quick op
ASK_TIMEOUT_S = 60.0
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
        return next((t for t in self.turns() if t.session == sid), None)

    # -- the asker's side ---------------------------------------------------------------------------

    def place(self, sid: str, previous: str | None = None) -> Forward | None:
        """None when this host holds `sid` (claimed now if nobody did), else where it is held."""
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
                case Forward():
                    return decision
        raise SessionUnavailable(f"session {sid}: no host could take it after {MAX_ROUTES} tries")

    def run_remote(self, forward: Forward, sid: str, op: Op, timeout_s: float) -> tuple[bool, Any]:
        """Ask the holder; (True, value) when it ran the op (a refusal raised as its cairn error),
        (False, None) when `sid` must be placed again (see the module doc)."""
        if isinstance(op, SendOp) and op.idempotency_key is None:  # run twice, it answers from the log
            op = msgspec.structs.replace(op, idempotency_key=f"cairn-op-{uuid.uuid4().hex}")
        outcome = self._exchange(forward, sid, op, timeout_s)
        if outcome == "unanswered":
            self._cluster.forwarder.await_release(sid, AwaitRelease(forward.holder, forward.revision))
            return False, None
        if outcome == "timeout":
            raise HostTimeout(f"session {sid}: host {forward.holder} did not answer within {timeout_s} s")
        if isinstance(outcome, OpAnswer) and outcome.taken:
            return True, value_of(op, outcome)
        return False, None  # not its session (now), or it lost it while running the op: place again

    def _exchange(self, forward: Forward, sid: str, op: Op, timeout_s: float) -> OpAnswer | str:
        """The holder's answer, or "unanswered" (no ack), "not-taken" (not its session), "gone" (it
        lost the lease while running the op), "timeout"."""
        cluster = self._cluster
        inbox = cluster.nc.new_inbox()
        data = encode(OpRequest(sid=sid, op=op, reply_to=inbox))
        largest = cluster.max_payload - FRAME_ROOM
        if len(data) > largest:
            raise InputError(
                f"session {sid} is held by another host, and what is sent to it is {len(data)} bytes: "
                f"the cluster carries at most {largest} (send large images to the host that holds it)"
            )
        sub: Subscription = cluster.loop.call(cluster.nc.subscribe(inbox, max_msgs=1), 30.0)
        try:
            try:
                subject = cluster.names.ops_subject(forward.holder)
                ack = cluster.loop.call(
                    cluster.nc.request(subject, data, timeout=ACK_TIMEOUT_S), ACK_TIMEOUT_S + 5
                )
                if not decode_ack(ack.data).taken:
                    return "not-taken"
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError):
                return "unanswered"
            except (msgspec.DecodeError, msgspec.ValidationError):
                return "unanswered"
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    reply = cluster.loop.call(sub.next_msg(timeout=LEASE_CHECK_S), LEASE_CHECK_S + 5)
                except (nats.errors.TimeoutError, TimeoutError):
                    if getattr(cluster.bucket.observe(sid), "holder", None) != forward.holder:
                        return "gone"
                    if time.monotonic() > deadline:
                        return "timeout"
                    continue
                try:
                    return decode_answer(reply.data)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    log.warning(
                        "cairn: host %s answered an op on %r with %r", forward.holder, sid, reply.data[:200]
                    )
                    return "gone"
        finally:
            cluster.loop.call(_unsubscribe(sub), 30.0)

    # -- the holder's side --------------------------------------------------------------------------

    async def on_request(self, msg: Msg) -> None:
        """Another host's op (on the loop): acked at once, run on a worker thread, answered from there."""
        if not msg.reply:
            return
        cluster = self._cluster
        try:
            request = decode_request(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("cairn: an op that is not one: %r", msg.data[:200])
            return  # no ack: the asker gives up on this host (a cairn asker never sends one)
        sid = request.sid
        taken = not cluster.closing and cluster.use.try_enter(sid)
        if taken and not cluster.ownership.holds(sid):
            cluster.use.leave(sid)
            taken = False
        if taken and not cluster.submit(self._answer, request):
            cluster.use.leave(sid)
            taken = False
        await cluster.nc.publish(msg.reply, encode(OpAck(taken=taken)))

    def _answer(self, request: OpRequest) -> None:
        """Run the op (the session entered by `on_request`) and send its answer."""
        cluster = self._cluster
        try:
            answer = self._served(request)
        finally:
            cluster.use.leave(request.sid)
        try:
            cluster.loop.call(cluster.nc.publish(request.reply_to, encode(answer)), 30.0)
        except Exception as exc:  # the asker is gone: it places the session again
            log.warning("cairn: answering an op on %r: %s", request.sid, describe_exception(exc))

    def _served(self, request: OpRequest) -> OpAnswer:
        try:
            value = run_op(self._cluster.host, request.sid, request.op, self.running, self.track)
            return OpAnswer(taken=True, value=msgspec.Raw(msgspec.json.encode(value)))
        except LeaseNotHeld:  # lost meanwhile: the asker places the session again
            return OpAnswer(taken=False)
        except CairnError as exc:
            return OpAnswer(taken=True, error_class=type(exc).__name__, error=str(exc))
        except Exception as exc:
            log.warning("cairn: an op on %r failed: %s", request.sid, describe_exception(exc))
            return OpAnswer(taken=True, error_class=type(exc).__name__, error=str(exc))


async def _unsubscribe(sub: Subscription) -> None:
    with contextlib.suppress(nats.errors.BadSubscriptionError):  # max_msgs reached: already gone
        await sub.unsubscribe()
