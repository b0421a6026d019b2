"""The blocking facade of the lease bucket (`leases.AsyncLeaseBucket`): each call waits on its loop."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import nats
from nats.aio.client import Client

from cairn.store.jetstream.layout import SETTLE_DEADLINE_S
from cairn.store.jetstream.lease_policy import Lease, Observed
from cairn.store.jetstream.leases import DEFAULT_BUCKET, WRITE_DEADLINE_S, AsyncLeaseBucket, Owner
from cairn.store.jetstream.loop import LoopThread

T = TypeVar("T")


class LeaseBucket:
    """The blocking facade of `AsyncLeaseBucket`: each call runs on `loop` and waits for it.

    `LeaseBucket.connect(url)` makes its own loop thread and connection (and
    `close()` ends both); `LeaseBucket(loop, core)` shares a host's.
    """

    def __init__(self, loop: LoopThread, core: AsyncLeaseBucket, own: Client | None = None) -> None:
        self.loop = loop
        self.core = core
        self._own = own

    @classmethod
    def connect(
        cls,
        url: str,
        bucket: str = DEFAULT_BUCKET,
        replicas: int = 3,
        name: str = "cairn-leases",
        marker_ttl_s: int | None = None,
    ) -> LeaseBucket:
        loop = LoopThread(name)
        try:
            nc = loop.call(_connect(url), timeout_s=30)
            core = loop.call(
                AsyncLeaseBucket.open(nc, bucket, replicas, marker_ttl_s=marker_ttl_s),
                timeout_s=SETTLE_DEADLINE_S + 5,
            )
        except BaseException:
            loop.close()
            raise
        return cls(loop, core, own=nc)

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = WRITE_DEADLINE_S + 5) -> T:
        return self.loop.call(coroutine, timeout_s)

    def acquire(self, sid: str, host_id: str, ttl_s: int) -> Lease:
        return self._call(self.core.acquire(sid, host_id, ttl_s))

    def renew(self, lease: Lease) -> Lease:
        return self._call(self.core.renew(lease))

    def release(self, lease: Lease) -> bool:
        return self._call(self.core.release(lease))

    def owner(self, sid: str) -> Owner | None:
        return self._call(self.core.owner(sid))

    def held_by(self, host_id: str) -> list[Owner]:
        return self._call(self.core.held_by(host_id))

    def observe(self, sid: str) -> Observed:
        return self._call(self.core.observe(sid))

    def leader(self) -> str | None:
        return self._call(self.core.leader())

    def close(self) -> None:
        """Close the connection and loop this facade made (a shared one is its owner's to close)."""
        if self._own is not None:
            own, self._own = self._own, None
            try:
                self.loop.call(_close(own), timeout_s=10)
            finally:
                self.loop.close()


async def _connect(url: str) -> Client:
    return await nats.connect(url.split(","), reconnect_time_wait=0.25, max_reconnect_attempts=-1)


async def _close(nc: Client) -> None:
    await nc.close()
