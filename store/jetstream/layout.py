"""The JetStream layout of a cairn store: one events stream, a blobs object store, a pointer bucket.

- Stream `CAIRN_EVENTS` holds every session's events, one subject per
  session (`names.events_subject`: `cairn.events.<token>`), one message per
  event whose payload is exactly one line of the local log format
  (`events.codec`: envelope, body, CRC-32C, hash chain). File storage,
  replicas 3, append-only (`deny_delete`, `deny_purge`, no limits, so no
  message ever leaves), direct get on (the reads), atomic batch publish on
  (a call's events all or nothing), a 2-minute duplicate window (a resent
  publish with the same message ids is stored once).
- Object store `CAIRN_BLOBS`: a large message part (the local journal's
  blob threshold, 256 KiB), named by its SHA-256, as `BlobPart`s name it.
- Key-value bucket `CAIRN_CHECKPOINTS`: per session token, where its latest
  checkpoint and `session-started` are in the stream (derived and
  rebuildable: see `pointer`).

`ensure_layout` creates what is missing and checks what exists; a stream
that exists with another shape (not append-only, no atomic batch) is
refused, not changed. Each of its calls goes through `settled`, which
repeats it while the cluster leaves it unanswered: a stream that another
host created a moment ago has no leader yet, and its info comes from the
leader (seen here: three hosts opening a fresh cluster at once, one of them
had `stream_info` time out in 4 of 15 runs). Creating with the same config
is a no-op, so repeating is safe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import nats.errors
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, ObjectStoreConfig, StorageType, StreamConfig, StreamInfo
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, BucketNotFoundError, NoStreamResponseError, NotFoundError
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from cairn.events.errors import InputError
from cairn.store.errors import SeqConflict, StorageError
from cairn.store.jetstream.names import EVENTS_SUBJECT_PREFIX, session_token

#: messages one atomic batch may hold (the server's default `batch.max_msgs`)
MAX_BATCH_MSGS = 1_000
#: seconds within which a resent message id is recognised as already stored
DUPLICATE_WINDOW_S = 120.0
#: room left for the headers in a message next to its line
HEADER_ROOM = 4_096
#: how long `ensure_layout` waits in all for the cluster to answer its calls
SETTLE_DEADLINE_S = 60.0
#: one create or check attempt's timeout inside that deadline (a new R3 stream answers within ~1 s)
SETTLE_ATTEMPT_S = 4.0
#: replies that mean "not now": no responder, no answer, JetStream or the stream leader not ready (503)
_UNANSWERED = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    NoStreamResponseError,
)

T = TypeVar("T")


class ClusterError(StorageError):
    """The cluster refused or could not take a request (the layout, a limit, an unexpected reply)."""


class CallTooLarge(InputError):
    """A call holds more events than one atomic batch allows: split it (nothing was written)."""


class SessionFenced(SeqConflict):
    """Another writer appended to the session first: this call's expected seq is stale, nothing stored.

    A `SeqConflict` (the local journal's error for the same case) that also
    says it came from the cluster's expected-last-subject-sequence guard.
    """


@dataclass(frozen=True)
class Layout:
    """Names and shape of a cairn store on a JetStream cluster."""

    stream: str = "CAIRN_EVENTS"
    blobs: str = "CAIRN_BLOBS"
    pointers: str = "CAIRN_CHECKPOINTS"
    replicas: int = 3
    #: the subjects' prefix: `cairn.events` (`names.events_subject`); tests isolate themselves with another
    prefix: str = EVENTS_SUBJECT_PREFIX

    @classmethod
    def named(cls, name: str) -> Layout:
        """A layout of its own beside the default one (tests, benches): every name suffixed by `name`."""
        return cls(
            stream=f"CAIRN_EVENTS_{name}",
            blobs=f"CAIRN_BLOBS_{name}",
            pointers=f"CAIRN_CHECKPOINTS_{name}",
            prefix=f"cairn-{name}.events",
        )

    @property
    def subjects(self) -> str:
        return f"{self.prefix}.>"

    def subject(self, sid: str) -> str:
        """The subject of session `sid`'s events (InvalidSessionId for a bad id)."""
        return f"{self.prefix}.{session_token(sid)}"

    def stream_config(self) -> StreamConfig:
        return StreamConfig(
            name=self.stream,
            description="cairn: every session's events, one subject per session, one log line per message",
            subjects=[self.subjects],
            storage=StorageType.FILE,
            num_replicas=self.replicas,
            deny_delete=True,
            deny_purge=True,
            allow_direct=True,
            allow_atomic=True,
            duplicate_window=DUPLICATE_WINDOW_S,
        )


@dataclass(frozen=True)
class Handles:
    """The opened pieces of the layout."""

    blobs: ObjectStore
    pointers: KeyValue


async def settled(
    nc: Client,
    step: Callable[[JetStreamContext], Awaitable[T]],
    *,
    what: str,
    until: float,
    attempt_s: float = SETTLE_ATTEMPT_S,
) -> T:
    """`step` run on a JetStream context whose requests time out after `attempt_s`, again and again
    while the cluster leaves it unanswered (or says 503), until it answers or the monotonic clock
    passes `until` (then `ClusterError`). `step` must be idempotent; any other error is raised at once.
    """
    last: BaseException | None = None
    while True:
        left = until - time.monotonic()
        if left <= 0:
            raise ClusterError(f"{what}: the cluster did not answer in time (last: {last!r})")
        try:
            return await step(nc.jetstream(timeout=min(attempt_s, left)))
        except APIError as error:
            if error.code != 503:
                raise
            last = error
        except _UNANSWERED as error:
            last = error
        await asyncio.sleep(min(0.1, max(0.0, until - time.monotonic())))


def _check_stream(config: StreamConfig, layout: Layout) -> None:
    """Refuse a stream that lacks what cairn relies on (it is never changed)."""
    wrong = [
        name
        for name, ok in (
            ("deny_delete", config.deny_delete),
            ("deny_purge", config.deny_purge),
            ("allow_direct", config.allow_direct),
            ("allow_atomic", config.allow_atomic),
            ("subjects", layout.subjects in (config.subjects or [])),
        )
        if not ok
    ]
    if wrong:
        raise ClusterError(f"stream {layout.stream} exists without what cairn needs: {', '.join(wrong)}")


async def _events_stream(js: JetStreamContext, layout: Layout) -> StreamInfo:
    try:
        return await js.stream_info(layout.stream)
    except NotFoundError:
        return await js.add_stream(layout.stream_config())


async def _blob_store(js: JetStreamContext, layout: Layout) -> ObjectStore:
    try:
        return await js.object_store(layout.blobs)
    except (BucketNotFoundError, NotFoundError):
        return await js.create_object_store(
            layout.blobs, config=ObjectStoreConfig(storage=StorageType.FILE, replicas=layout.replicas)
        )


async def _pointer_bucket(js: JetStreamContext, layout: Layout) -> KeyValue:
    try:
        return await js.key_value(layout.pointers)
    except (BucketNotFoundError, NotFoundError):
        return await js.create_key_value(
            KeyValueConfig(
                bucket=layout.pointers, history=1, storage=StorageType.FILE, replicas=layout.replicas
            )
        )


async def ensure_layout(
    nc: Client, layout: Layout, *, request_timeout_s: float, deadline_s: float = SETTLE_DEADLINE_S
) -> Handles:
    """Create the stream, the blob store and the pointer bucket when missing; refuse a misshapen stream.

    Every call is repeated while unanswered (`settled`) within `deadline_s`
    in all; the returned handles make their own requests with
    `request_timeout_s`.
    """
    until = time.monotonic() + deadline_s
    info = await settled(
        nc, lambda js: _events_stream(js, layout), what=f"stream {layout.stream}", until=until
    )
    _check_stream(info.config, layout)
    await settled(nc, lambda js: _blob_store(js, layout), what=f"object store {layout.blobs}", until=until)
    await settled(nc, lambda js: _pointer_bucket(js, layout), what=f"bucket {layout.pointers}", until=until)
    # bound again on a context with the journal's own request timeout; a server that has not yet
    # applied the creation can still say "not found", so this binds through the same create-if-missing
    blobs = await settled(
        nc,
        lambda js: _blob_store(js, layout),
        what=f"object store {layout.blobs}",
        until=until,
        attempt_s=request_timeout_s,
    )
    pointers = await settled(
        nc,
        lambda js: _pointer_bucket(js, layout),
        what=f"bucket {layout.pointers}",
        until=until,
        attempt_s=request_timeout_s,
    )
    return Handles(blobs=blobs, pointers=pointers)
