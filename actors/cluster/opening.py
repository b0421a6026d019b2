"""Opening a cluster host's parts: the journal, its own connection, the leases and the `Host`.

Each part is closed again, last opened first, when a later one fails to
open; `ClusterHost.open` owns them once `open_parts` returns.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import nats
from nats.aio.client import Client

from cairn.actors.cluster.names import ClusterNames
from cairn.actors.cluster.ownership import Ownership
from cairn.actors.host import Host, HostConfig
from cairn.actors.provider.base import Provider
from cairn.actors.session.settings import SessionSettings
from cairn.actors.tools import ToolExecutor
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import SETTLE_DEADLINE_S
from cairn.store.jetstream.lease_bucket import LeaseBucket
from cairn.store.jetstream.leases import AsyncLeaseBucket
from cairn.store.jetstream.loop import LoopThread

log = logging.getLogger("cairn.cluster")


@dataclass(frozen=True)
class Opened:
    """A cluster host's parts, all open."""

    journal: JetStreamJournal
    loop: LoopThread
    nc: Client
    core: AsyncLeaseBucket
    ownership: Ownership
    host: Host


def open_parts(
    servers: list[str],
    host_id: str,
    names: ClusterNames,
    ttl_s: int,
    *,
    config: HostConfig | None,
    settings: SessionSettings | None,
    provider: Provider | None,
    provider_factory: Callable[[str], Provider] | None,
    tools: ToolExecutor | None,
) -> Opened:
    """Open the journal, a connection on a loop thread of its own, the lease bucket and a `Host` on
    the leased journal; when one fails, close what was opened and raise."""
    journal = JetStreamJournal.open(servers, layout=names.layout)
    loop = LoopThread(name=f"cairn-cluster-{host_id}")
    opened: list[Callable[[], object]] = [journal.close, loop.close]
    try:
        nc = loop.call(_connect(servers, host_id), 30.0)
        opened.insert(1, lambda: loop.call(nc.close(), 10.0))
        core = loop.call(
            AsyncLeaseBucket.open(nc, names.lease_bucket, replicas=names.layout.replicas),
            SETTLE_DEADLINE_S + 5,
        )
        ownership = Ownership(host_id, ttl_s, journal, LeaseBucket(loop, core))
        host = Host.open(
            os.devnull,  # unused: the host writes through `journal=`, nothing local
            journal=ownership.gate,
            config=config,
            settings=settings,
            provider=provider,
            provider_factory=provider_factory,
            tools=tools,
        )
        ownership.bind(host.stop_session)
    except BaseException:
        for undo in opened:
            try:
                undo()
            except Exception as exc:
                log.warning("cairn: closing after a failed open: %s", exc)
        raise
    return Opened(journal, loop, nc, core, ownership, host)


async def _connect(servers: list[str], host_id: str) -> Client:
    return await nats.connect(
        servers=servers,
        name=f"cairn-host-{host_id}",
        connect_timeout=10,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,
        allow_reconnect=True,
        error_cb=_connection_trouble,
    )


async def _connection_trouble(error: Exception) -> None:
    """nats-py's report of a connection error: a node went away, the client reconnects to another."""
    log.info("cairn: NATS connection of a cluster host: %s: %s", type(error).__name__, error)
