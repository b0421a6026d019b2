"""`ClusterHost`: one host process of a cairn cluster, serving turns that clients send over NATS.

    with ClusterHost.open("nats://a:4222,nats://b:4222", provider=my_adapter, tools=WorkspaceTools()) as ch:
        ch.wait_closed()    # `cairn serve` runs this until SIGTERM: `ch.close(grace_s=10)`

One `ClusterHost` opens (`opening`) a `JetStreamJournal` (the cluster's
log), a connection of its own for serving and leases (`LoopThread`), the
lease bucket and a keeper (`ownership`), and runs an unchanged `Host` over
the `LeasedJournal` gate. It subscribes:

- `<prefix>.turn.*` in the queue group `<prefix>-hosts`: clients' messages,
  each to one host of the group (NATS picks);
- `<prefix>.host.<host id>.turn`: messages other hosts forward to it.

A client's message is routed by `routing.route` on a worker thread (the
pool of `workers`): served here when this host holds the session; claimed
(`Ownership.claim`: lease, fence, then serve) when nobody does; forwarded
to the holder otherwise, keeping the client's inbox (`forwarding`), and
when the holder does not take it, claimed once its lease is gone (a dead
host's TTL runs out: that is the failover). Serving is `Host.send` and the
turn's frames to the client's inbox (`Outbox`). Every `release_idle_s`,
the leases of sessions with no live actor are given back (`idle`).

Closing (`close`, SIGTERM in `cairn serve`): stop taking clients'
messages, let in-flight turns finish for up to `grace_s`, close the Host
(turns still running end interrupted, recorded while the leases are still
held), release every lease (other hosts take the sessions at once), close
the connections.

Thread-safety: every public method may be called from any thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from cairn.actors.cluster.forwarding import Forwarder
from cairn.actors.cluster.frames import (
    ForwardAnswer,
    Forwarded,
    TurnRequest,
    decode_forwarded,
    decode_request,
    encode,
)
from cairn.actors.cluster.idle import SessionUse, release_idle
from cairn.actors.cluster.names import ClusterNames, checked_host_id, default_host_id
from cairn.actors.cluster.op_port import OpPort
from cairn.actors.cluster.opening import open_parts
from cairn.actors.cluster.outbox import BEAT_S, Outbox
from cairn.actors.cluster.ownership import Ownership
from cairn.actors.cluster.routing import (
    MAX_ROUTES,
    AwaitRelease,
    Done,
    after_forward,
)
from cairn.actors.cluster.watch import SessionWatch
from cairn.actors.errors import SessionUnavailable, TurnTimeout, describe_exception
from cairn.actors.host import Host, HostConfig
from cairn.actors.provider.base import Provider
from cairn.actors.session.settings import SessionSettings
from cairn.actors.tools import ToolExecutor
from cairn.events.errors import CairnError
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.lease_bucket import LeaseBucket
from cairn.store.jetstream.lease_policy import DEFAULT_TTL_S
from cairn.store.jetstream.loop import LoopThread

log = logging.getLogger("cairn.cluster")


class ClusterStats(msgspec.Struct, kw_only=True):
    """Counters of one cluster host (tests, the demo, the bench)."""

    served: int = 0
    forwarded: int = 0
    claimed: int = 0
    refused: int = 0


class ClusterHost:
    """One host of a cairn cluster (see the module doc). Open with `ClusterHost.open`."""

    def __init__(
        self,
        *,
        host: Host,
        ownership: Ownership,
        journal: JetStreamJournal,
        loop: LoopThread,
        nc: Client,
        bucket: LeaseBucket,
        names: ClusterNames,
        workers: int,
        beat_s: float,
        max_wait_s: float,
        release_idle_s: float | None,
    ) -> None:
        self.host = host
        self.host_id = ownership.host_id
        self.names = names
        self.ownership = ownership
        self.journal = journal
        self.stats = ClusterStats()
        self.loop = loop
        self.nc = nc
        self.bucket = bucket
        self._beat_s = beat_s
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="cairn-cluster")
        self._lock = threading.Lock()
        self._subs: dict[str, Subscription] = {}
        self.use = SessionUse()
        self.forwarder = Forwarder(
            loop, nc, bucket, names, self.host_id, max_wait_s=max_wait_s, stopping=lambda: self._closing
        )
        self._closing = False
        self._closed = threading.Event()
        #: operations on sessions wherever they are held (`op_port`): a front end's, other hosts'
        self.ops = OpPort(self)
        #: news of any host's appends to the sessions a front end streams
        self.watch = SessionWatch(loop, nc, names.layout)
        self._stop_sweep = threading.Event()
        self._sweeper: threading.Thread | None = None
        if release_idle_s is not None and release_idle_s > 0:
            self._sweeper = threading.Thread(
                target=self._sweep,
                args=(release_idle_s,),
                name=f"cairn-cluster-idle-{self.host_id}",
                daemon=True,
            )
            self._sweeper.start()

    @classmethod
    def open(
        cls,
        url: str | Sequence[str],
        *,
        host_id: str | None = None,
        names: ClusterNames | None = None,
        ttl_s: int = DEFAULT_TTL_S,
        config: HostConfig | None = None,
        settings: SessionSettings | None = None,
        provider: Provider | None = None,
        provider_factory: Callable[[str], Provider] | None = None,
        tools: ToolExecutor | None = None,
        workers: int = 64,
        beat_s: float = BEAT_S,
        max_wait_s: float = 60.0,
        release_idle_s: float | None = 30.0,
        start: bool = True,
    ) -> ClusterHost:
        """Connect to the cluster at `url`, open the journal, the leases and a `Host`, and serve.

        `host_id` must be unique per process (default `<hostname>-<pid>-<random>`);
        `ttl_s` is the lease TTL (15 s: above the 5-7 s stall of a dead
        stream leader; a failover takes about that long); `max_wait_s` how
        long a message waits for an unresponsive holder's lease to go;
        `release_idle_s` how often the leases of idle sessions (no live
        actor: see `HostConfig.idle_timeout_s`) are given back (None:
        never; `release_idle()` on demand). `start=False` opens without
        subscribing (`start()` later).
        """
        chosen = names if names is not None else ClusterNames()
        me = checked_host_id(host_id) if host_id is not None else default_host_id()
        servers = [u for u in url.split(",") if u] if isinstance(url, str) else list(url)
        parts = open_parts(
            servers,
            me,
            chosen,
            ttl_s,
            config=config,
            settings=settings,
            provider=provider,
            provider_factory=provider_factory,
            tools=tools,
        )
        made = cls(
            host=parts.host,
            ownership=parts.ownership,
            journal=parts.journal,
            loop=parts.loop,
            nc=parts.nc,
            bucket=LeaseBucket(parts.loop, parts.core),
            names=chosen,
            workers=workers,
            beat_s=beat_s,
            max_wait_s=max_wait_s,
            release_idle_s=release_idle_s,
        )
        if start:
            made.start()
        return made

    # -- subscriptions ------------------------------------------------------------------------

    def start(self) -> None:
        """Subscribe: clients' messages (queue group) and this host's forwarded ones."""
        self._subscribe("turn", self.names.turn_wildcard, self._on_turn, queue=self.names.queue)
        self._subscribe("host", self.names.host_subject(self.host_id), self._on_forward)
        self._subscribe("ops", self.names.ops_subject(self.host_id), self.ops.on_request)

    def _subscribe(self, key: str, subject: str, cb: Callable[[Msg], Any], queue: str = "") -> None:
        async def subscribe() -> Subscription:
            sub = await self.nc.subscribe(subject, queue=queue, cb=cb, pending_msgs_limit=-1)
            await self.nc.flush()
            return sub

        if key not in self._subs:
            self._subs[key] = self.loop.call(subscribe(), 30.0)

    def stop_accepting(self) -> None:
        """Take no more clients' messages (forwarded ones for sessions held here are still served)."""
        self._unsubscribe("turn")

    def _unsubscribe(self, key: str) -> None:
        sub = self._subs.pop(key, None)
        if sub is not None:
            try:
                self.loop.call(_unsubscribe(self.nc, sub), 10.0)
            except Exception as exc:
                log.warning("cairn: unsubscribing %s: %s", key, exc)

    async def _on_turn(self, msg: Msg) -> None:
        """A client's message (on the loop): routed on a worker thread."""
        if not msg.reply:
            return  # nowhere to answer: not a cairn client
        self.submit(self._serve_client, msg.data, msg.reply)

    async def _on_forward(self, msg: Msg) -> None:
        """Another host's forward (on the loop): answered here at once, served on a worker thread."""
        try:
            forwarded = decode_forwarded(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        sid = forwarded.request.sid
        taken = not self._closing and self.use.try_enter(sid)
        if taken and not self.ownership.holds(sid):
            self.use.leave(sid)
            taken = False
        if msg.reply:
            await self.nc.publish(msg.reply, encode(ForwardAnswer(taken=taken, host_id=self.host_id)))
        if taken and not self.submit(self._serve_forwarded, forwarded):
            self.use.leave(sid)

    def _serve_forwarded(self, forwarded: Forwarded) -> None:
        try:
            self._serve(forwarded.request, Outbox(self.loop, self.nc, forwarded.reply_to, self._beat_s))
        finally:
            self.use.leave(forwarded.request.sid)

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def max_payload(self) -> int:
        """The largest message the cluster's servers take."""
        return int(self.nc.max_payload)

    def submit(self, fn: Callable[..., None], *args: Any) -> bool:
        try:
            self._pool.submit(fn, *args)
        except RuntimeError:  # the pool is shut down: closing
            return False
        return True

    # -- routing ------------------------------------------------------------------------------------

    def _serve_client(self, data: bytes, reply_to: str) -> None:
        """Route one client's message (Rule 1 and 2 of `routing`); every failure answered with a frame."""
        outbox = Outbox(self.loop, self.nc, reply_to, self._beat_s)
        try:
            request = decode_request(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._refuse(outbox, "InputError", f"not a cairn turn request: {exc}")
            return
        try:
            with self.use.using(request.sid):
                self._route(request, outbox)
        except Exception as exc:
            log.warning("cairn: routing a message of %r failed: %s", request.sid, describe_exception(exc))
            self._refuse(outbox, type(exc).__name__, str(exc))

    def _route(self, request: TurnRequest, outbox: Outbox) -> None:
        sid = request.sid
        previous: str | None = None
        for _ in range(MAX_ROUTES):
            if self._closing:
                self._refuse(outbox, "HostClosed", f"host {self.host_id} is closing; send again")
                return
            try:
                forward = self.ops.place(sid, previous)  # None: served here (claimed if nobody held it)
            except SessionUnavailable:
                break
            if forward is None:
                self._serve(request, outbox)
                return
            outcome = self.forwarder.forward(forward, request, outbox.reply_to)
            match after_forward(outcome, forward):
                case Done():
                    self.count("forwarded")
                    return
                case AwaitRelease() as awaited:
                    self.forwarder.await_release(sid, awaited)
                    previous = awaited.holder
        self._refuse(
            outbox, "RoutingFailed", f"session {sid}: no host could take it after {MAX_ROUTES} tries"
        )

    # -- serving ------------------------------------------------------------------------------------

    def _serve(self, request: TurnRequest, outbox: Outbox) -> None:
        """`Host.send` the message and stream its turn to the client (a refusal when it does not start)."""
        try:
            turn = self.host.send(
                request.sid,
                request.content,
                workspace=request.workspace,
                settings=request.settings,
                idempotency_key=request.idempotency_key,
            )
        except CairnError as exc:
            self._refuse(outbox, type(exc).__name__, str(exc))
            return
        self.ops.track(turn)  # what `close` waits for, and where a cancel from any host finds it
        self.count("served")
        outbox.stream(turn, self.host_id, float(self.ownership.ttl_s))

    def _refuse(self, outbox: Outbox, error_class: str, message: str) -> None:
        self.count("refused")
        outbox.refuse(error_class, message)

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self.stats, what, getattr(self.stats, what) + 1)

    # -- idle sessions ---------------------------------------------------------------------------

    def release_idle(self) -> int:
        """Release the leases of sessions held here with no live actor and no message in flight (`idle`)."""
        if self._closing:
            return 0
        return release_idle(self.ownership, self.host.live_sessions, self.use)

    def _sweep(self, every_s: float) -> None:
        while not self._stop_sweep.wait(every_s):
            try:
                self.release_idle()
            except Exception as exc:  # the sweeper must outlive one bad round
                log.warning("cairn: releasing idle sessions: %s", describe_exception(exc))

    # -- closing ------------------------------------------------------------------------------------

    def close(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let in-flight turns end for up to `grace_s`, then close (see the module doc)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            running = self.ops.turns()
        self._stop_sweep.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=30)
        try:
            self.stop_accepting()
            deadline = time.monotonic() + grace_s
            for turn in running:
                with contextlib.suppress(TurnTimeout):  # else ended interrupted by the close below
                    turn.result(timeout=max(0.0, deadline - time.monotonic()))
            self.host.close()
            self._pool.shutdown(wait=True)
            self.ownership.close(release=True)
            self._unsubscribe("host")
            self._unsubscribe("ops")
            self.watch.close()
        finally:
            try:
                self.loop.call(self.nc.drain(), 30.0)
            except Exception as exc:
                log.warning("cairn: closing the serving connection: %s", exc)
            self.loop.close()
            self.journal.close()
            self._closed.set()

    def wait_closed(self, timeout: float | None = None) -> bool:
        return self._closed.wait(timeout)

    def __enter__(self) -> ClusterHost:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


async def _unsubscribe(nc: Client, sub: Subscription) -> None:
    """Unsubscribe and wait until the server has it: no message is routed to this host after that."""
    await sub.unsubscribe()
    await nc.flush()
