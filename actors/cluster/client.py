"""`ClusterClient`: send user messages to a cairn cluster; get the same stream and result as `Host.send`.

    from cairn import ClusterClient

    with ClusterClient("nats://a:4222,nats://b:4222") as client:
        turn = client.send("session-1", "fix the failing test", workspace="/repo")
        for item in turn.events():          # the same Record, TextDelta, ReasoningDelta as Host.send
            ...
        result = turn.result(timeout=60)    # the same TurnResult
        turn.host_id                        # which host served it

`send` checks its arguments as `Host.send` does (the same `InputError`s,
before anything is sent), publishes one `TurnRequest` to the session's
subject with a fresh inbox as the reply subject, and returns once a host
accepted it. The handle is a `RemoteTurn`, a `Turn` fed by the frames the
serving host publishes to that inbox (`frames` has the protocol): records
decoded from their log lines (checksum included), deltas, then the result.

Every message carries an idempotency key (the caller's, else a fresh one:
`turn.idempotency_key`), so asking again never runs a turn twice (the
hosts answer a known key from the log, or join its running turn).

Errors of `send`: `NoHostAnswered` (no host subscribed), `AcceptTimeout`
(none accepted in `accept_timeout_s`: it may still be served; during a
failover this waits for the dead owner's lease to run out, so keep it
above the lease TTL), `RequestRefused` (a host refused it before a turn
began, naming its error class: only a host's own refusal), `OutcomeUnknown`
(the reply stream broke before a host said whether it took the message, on
each of `MAX_ASKS` asks under the same key). Once accepted, the handle
always resolves: with the turn's result; when the serving host goes silent
for `silence_s` (it beats every second), or for its lease TTL plus 1.5 s when
that is shorter (a host that cannot beat cannot renew either: its session
goes to another host), as `failed`, phase `interrupted`,
error class `HostUnreachable` (the next owner records that turn as
interrupted in the log too); when a frame is missing or garbled, the same
with error class `OutcomeUnknown` (the turn may still finish: send again
with the key to learn how).

Thread-safety: every method may be called from any thread; frames are
handled on the client's own event loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from cairn.actors.cluster.errors import AcceptTimeout, NoHostAnswered, OutcomeUnknown, RequestRefused
from cairn.actors.cluster.frames import (
    Accepted,
    Beat,
    DeltaFrame,
    ErrorFrame,
    RecordFrame,
    ResultFrame,
    TurnRequest,
    decode_frame,
    encode,
    frame_item,
)
from cairn.actors.cluster.names import ClusterNames
from cairn.actors.errors import HostClosed
from cairn.actors.host.inputs import checked_key, checked_settings, checked_workspace, user_content
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import Turn, TurnResult
from cairn.events.codec import validate_session_id
from cairn.events.errors import CairnError, InputError
from cairn.events.model import Part
from cairn.store.jetstream.loop import LoopThread

#: how long `send` waits for a host to accept: above the default lease TTL (15 s) plus a leader stall
ACCEPT_TIMEOUT_S = 45.0
#: how long an accepted turn may stay silent (no frame, no beat) before it counts as interrupted
SILENCE_S = 15.0
#: past its host's lease TTL by this much, a silent turn counts as interrupted (the lease has gone:
#: the host renews it no more often than it beats, and it beats every second)
LEASE_SLACK_S = 1.5
#: how often an accepted turn's silence is looked at
WATCH_S = 0.25
#: how often `send` asks in all (the same key each time): again when no host accepted within
#: `ask_again_s` (the one that got it may be hung), or when the reply stream broke before one did
MAX_ASKS = 8
#: how long `send` waits for an acceptance before it asks again (another host may take it)
ASK_AGAIN_S = 2.0


class RemoteTurn(Turn):
    """A `Turn` served by a cluster host: `events()` and `result()` as from `Host.send`, plus
    `host_id`, and `idempotency_key`: the key it was sent with (send again with it to learn its
    outcome when the stream broke)."""

    def __init__(self, session: str, idempotency_key: str = "") -> None:
        super().__init__(session)
        self.host_id = ""
        self.idempotency_key = idempotency_key

    def cancel(self, reason: str = "") -> None:
        """Not through a cluster yet: raises `NotImplementedError` rather than doing nothing."""
        raise NotImplementedError(
            f"session {self.session}: cancelling a turn through ClusterClient is not supported yet"
        )


class _Reception:
    """One turn's inbox: frames in (on the loop), the handle fed in order (see the module doc)."""

    def __init__(
        self, turn: RemoteTurn, key: str, silence_s: float, on_end: Callable[[_Reception], None]
    ) -> None:
        self.turn = turn
        self.key = key
        self._on_end = on_end
        self.accepted: concurrent.futures.Future[str] = concurrent.futures.Future()
        self.sub: Subscription | None = None
        self._silence_s = silence_s
        self._next = 0
        self._heard = time.monotonic()
        self._watch: asyncio.Task[None] | None = None
        self.done = False

    async def on_msg(self, msg: Msg) -> None:
        if self.done:
            return
        self._heard = time.monotonic()
        if msg.headers and msg.headers.get("Status") == "503":
            self._end(
                error=NoHostAnswered(f"no cairn host listens on {msg.headers.get('Nats-Subject', '?')}")
            )
            return
        try:
            frame = decode_frame(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._broken(f"a frame that does not decode: {exc}")
            return
        if isinstance(frame, Beat):
            return
        if frame.n != self._next:
            self._broken(f"frame {frame.n} came where frame {self._next} was due")
            return
        self._next += 1
        match frame:
            case Accepted():
                self.turn.host_id = frame.host_id
                if frame.lease_ttl_s > 0:  # silent past its lease, the host has lost the session
                    self._silence_s = min(self._silence_s, frame.lease_ttl_s + LEASE_SLACK_S)
                self.accepted.set_result(frame.host_id)
                self._watch = asyncio.get_running_loop().create_task(self._watchdog())
            case ErrorFrame():
                self._end(error=RequestRefused(frame.error_class, frame.message))
            case RecordFrame() | DeltaFrame():
                try:
                    self.turn._publish(frame_item(frame))
                except CairnError as exc:  # a record line that fails its checks
                    self._broken(f"{type(exc).__name__}: {exc}")
            case ResultFrame():
                self.turn._finish(frame.result)
                self._end()

    def _broken(self, why: str) -> None:
        """A frame lost or garbled: never a refusal. Before `Accepted`, `send` asks again under the
        same key; after it, the turn's outcome is unknown to this handle (it may still finish)."""
        if self.accepted.done():
            why = f"{why}; send again with idempotency_key={self.key!r} for its outcome"
            self.turn._finish(_interrupted(self.turn.session, "OutcomeUnknown", why))
            self._end()
        else:
            self._end(error=OutcomeUnknown(self.key, why))

    def _end(self, error: BaseException | None = None) -> None:
        """No more frames: resolve what is still open, stop the watchdog, unsubscribe."""
        self.done = True
        self._on_end(self)
        if not self.accepted.done():
            if error is not None:
                self.accepted.set_exception(error)
            else:
                self.accepted.set_result(self.turn.host_id)
        if self._watch is not None and self._watch is not asyncio.current_task():
            self._watch.cancel()
        if self.sub is not None:
            asyncio.get_running_loop().create_task(_unsubscribe(self.sub))

    async def _watchdog(self) -> None:
        while not self.done:
            await asyncio.sleep(min(WATCH_S, self._silence_s / 3))
            silent = time.monotonic() - self._heard
            if not self.done and silent > self._silence_s:
                why = f"host {self.turn.host_id} sent nothing for {silent:.1f} s (it beats every second)"
                self.turn._finish(_interrupted(self.turn.session, "HostUnreachable", why))
                self._end()


def _interrupted(session: str, error_class: str, error: str) -> TurnResult:
    return TurnResult(
        session=session, status="failed", phase="interrupted", error_class=error_class, error=error
    )


async def _unsubscribe(sub: Subscription) -> None:
    with contextlib.suppress(Exception):  # the connection is closing: nothing to stop
        await sub.unsubscribe()


class ClusterClient:
    """Sends user messages to the hosts of a cairn cluster (see the module doc)."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        names: ClusterNames | None = None,
        accept_timeout_s: float = ACCEPT_TIMEOUT_S,
        silence_s: float = SILENCE_S,
        connect_timeout_s: float = 10.0,
        ask_again_s: float = ASK_AGAIN_S,
        max_asks: int = MAX_ASKS,
    ) -> None:
        self.names = names if names is not None else ClusterNames()
        self._accept_timeout_s = accept_timeout_s
        self._silence_s = silence_s
        if not 0 < ask_again_s < math.inf:
            raise InputError(f"ask_again_s must be a finite positive number of seconds, got {ask_again_s}")
        self._ask_again_s = ask_again_s
        if type(max_asks) is not int or max_asks < 1:
            raise InputError(f"max_asks must be an int of at least 1, got {max_asks!r}")
        self._max_asks = max_asks
        servers = [u for u in url.split(",") if u] if isinstance(url, str) else list(url)
        self._loop = LoopThread(name="cairn-cluster-client")
        try:
            self._nc: Client = self._loop.call(
                nats.connect(
                    servers=servers,
                    name=f"cairn-client-{os.getpid()}",
                    connect_timeout=connect_timeout_s,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.25,
                    error_cb=_quiet,
                ),
                connect_timeout_s * 2,
            )
        except BaseException:
            self._loop.close()
            raise
        self._open: set[_Reception] = set()
        self._lock = threading.Lock()
        self._closed = False

    def send(
        self,
        session: str,
        text: str | Sequence[Part],
        *,
        workspace: str | os.PathLike[str] | None = None,
        settings: SessionSettings | None = None,
        accept_timeout_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> RemoteTurn:
        """Send a user message as `Host.send` does; returns once a host accepted it (see the module doc).

        Every message goes with an idempotency key: `idempotency_key`, else a
        fresh one (`turn.idempotency_key` tells it). When no host accepted
        within `ask_again_s` (the host NATS gave it to may be hung: a stopped
        process keeps its subscription) or the reply stream broke first,
        `send` asks again under the same key, keeping the earlier asks open:
        the first acceptance wins, and the key runs nothing twice (`max_asks`
        in all, within `accept_timeout_s`). `OutcomeUnknown` when every ask's
        stream broke.
        """
        if self._closed:
            raise HostClosed("the cluster client is closed")
        key, data = self._encode(session, text, workspace, settings, idempotency_key)
        wait = self._accept_timeout_s if accept_timeout_s is None else accept_timeout_s
        return self._until_accepted(session, key, data, wait)

    def _encode(
        self,
        session: str,
        text: str | Sequence[Part],
        workspace: str | os.PathLike[str] | None,
        settings: SessionSettings | None,
        idempotency_key: str | None,
    ) -> tuple[str, bytes]:
        """The message's key and the message as one NATS payload, every part checked here (too large for
        the cluster: refused)."""
        validate_session_id(session)
        content = user_content(text)
        key = checked_key(idempotency_key) if idempotency_key is not None else uuid.uuid4().hex
        request = TurnRequest(
            sid=session,
            content=content,  # type: ignore[arg-type]  # checked: text and image parts only
            workspace=checked_workspace(workspace) if workspace is not None else None,
            settings=checked_settings(settings) if settings is not None else None,
            idempotency_key=key,
        )
        data = encode(request)
        if len(data) > self._nc.max_payload:
            raise InputError(
                f"the message encodes to {len(data)} bytes, "
                f"over the cluster's {self._nc.max_payload}-byte message limit"
            )
        return key, data

    def _until_accepted(self, session: str, key: str, data: bytes, wait: float) -> RemoteTurn:
        """Ask, and ask again under the same key, until a host accepts within `wait` s (`send`)."""
        deadline = time.monotonic() + wait
        asking: list[_Reception] = []
        asks = 0
        last_ask = 0.0
        broken: OutcomeUnknown | None = None
        while True:
            now = time.monotonic()
            if not asking or (asks < self._max_asks and now >= last_ask + self._ask_again_s):
                if asks >= self._max_asks:
                    assert broken is not None
                    raise broken
                asking.append(self._ask(session, key, data))
                asks += 1
                last_ask = now
            if now >= deadline:
                for reception in asking:
                    self._loop.call(self._give_up(reception), 10.0)
                raise AcceptTimeout(f"session {session}: no cairn host accepted the message within {wait} s")
            until = min(deadline, last_ask + self._ask_again_s) if asks < self._max_asks else deadline
            done, _ = concurrent.futures.wait(
                [r.accepted for r in asking],
                timeout=max(0.0, until - time.monotonic()),
                return_when=concurrent.futures.FIRST_COMPLETED,
            )
            for reception in [r for r in asking if r.accepted in done]:
                asking.remove(reception)
                error = reception.accepted.exception()
                if error is None:
                    for other in asking:  # a later ask under the same key: not needed any more
                        self._loop.call(self._give_up(other), 10.0)
                    return reception.turn
                if not isinstance(error, OutcomeUnknown):
                    for other in asking:
                        self._loop.call(self._give_up(other), 10.0)
                    raise error
                broken = error  # ask again under the same key: a host that took it answers from its turn

    def _ask(self, session: str, key: str, data: bytes) -> _Reception:
        """One ask: a fresh inbox, subscribed before the request goes out under `key`."""
        reception = _Reception(RemoteTurn(session, key), key, self._silence_s, self._forget)
        with self._lock:
            self._open.add(reception)
        self._loop.call(self._begin(reception, self.names.turn_subject(session), data), 30.0)
        return reception

    def _forget(self, reception: _Reception) -> None:
        with self._lock:
            self._open.discard(reception)

    async def _begin(self, reception: _Reception, subject: str, data: bytes) -> None:
        inbox = self._nc.new_inbox()
        reception.sub = await self._nc.subscribe(inbox, cb=reception.on_msg, pending_msgs_limit=-1)
        await self._nc.flush()  # the server has the subscription before the message goes out
        await self._nc.publish(subject, data, reply=inbox)

    async def _give_up(self, reception: _Reception) -> None:
        reception.turn._finish(_interrupted(reception.turn.session, "AcceptTimeout", "no host accepted it"))
        reception._end()

    def close(self) -> None:
        """Stop listening; handles still open end `failed`/`interrupted` (`ClientClosed`). Idempotent."""
        if self._closed:
            return
        self._closed = True

        async def shut() -> None:
            with self._lock:
                still = list(self._open)
            for reception in still:
                if not reception.done:
                    reception.turn._finish(
                        _interrupted(reception.turn.session, "ClientClosed", "the client was closed")
                    )
                    reception._end()
            await self._nc.drain()

        try:
            self._loop.call(shut(), 30.0)
        finally:
            self._loop.close()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


async def _quiet(error: Exception) -> None:
    return None
