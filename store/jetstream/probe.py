"""`open_existing`: a cluster store opened for reading, refused quickly when it is not there.

`JetStreamJournal.open` is made for hosts: it reconnects forever and creates
the layout when it is missing. A reader (the `cairn` audit commands) wants
neither: a cluster that cannot be reached should be reported within a few
seconds, and a cluster without a cairn store should be reported, not given
an empty one. So a probe comes first: one connection that tries each server
once (a refused connection on every server ends it at once, else the
deadline does), one stream-info request for the layout's events stream, and
only then the journal itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import nats
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from cairn.store.errors import StorageError
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import Layout

#: seconds the probe waits for a connection and the stream's info
PROBE_TIMEOUT_S = 5.0


class ClusterUnreachable(StorageError):
    """No server of the URL answered within the probe's time (or each refused the connection)."""


class NoClusterStore(StorageError):
    """The cluster answered but holds no cairn store of this layout (its events stream is missing)."""


def servers_of(url: str | Sequence[str]) -> list[str]:
    """The server URLs of a comma-separated string or a list (empty parts dropped)."""
    return [u for u in url.split(",") if u] if isinstance(url, str) else [u for u in url if u]


async def probe(servers: Sequence[str], layout: Layout, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Return when the cluster answers and holds `layout`'s stream; raise the typed error otherwise."""
    refused: list[Exception] = []
    all_refused = asyncio.Event()

    async def on_error(error: Exception) -> None:
        refused.append(error)
        if len(refused) >= len(servers):
            all_refused.set()

    connecting = asyncio.ensure_future(
        nats.connect(
            servers=list(servers),
            connect_timeout=timeout_s,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            error_cb=on_error,
        )
    )
    waiting = asyncio.ensure_future(all_refused.wait())
    done, _ = await asyncio.wait({connecting, waiting}, timeout=timeout_s, return_when="FIRST_COMPLETED")
    waiting.cancel()
    if connecting not in done:
        connecting.cancel()
        why = f": {type(refused[-1]).__name__}: {refused[-1]}" if refused else ""
        if all_refused.is_set():
            raise ClusterUnreachable(f"every server at {','.join(servers)} refused the connection{why}")
        raise ClusterUnreachable(
            f"no NATS server at {','.join(servers)} answered within {timeout_s:g} s{why}"
        )
    try:
        nc = connecting.result()
    except (NatsError, OSError) as exc:
        raise ClusterUnreachable(
            f"cannot connect to {','.join(servers)}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        await nc.jetstream(timeout=timeout_s).stream_info(layout.stream)
    except NotFoundError:
        raise NoClusterStore(
            f"the cluster at {','.join(servers)} holds no cairn store (no stream {layout.stream})"
        ) from None
    except (NatsError, OSError) as exc:
        raise ClusterUnreachable(
            f"the cluster at {','.join(servers)} did not answer for JetStream: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        await nc.close()


def open_existing(
    url: str | Sequence[str], layout: Layout | None = None, *, timeout_s: float = PROBE_TIMEOUT_S
) -> JetStreamJournal:
    """The journal of the existing store at `url` (`ClusterUnreachable`, `NoClusterStore` otherwise)."""
    chosen = layout if layout is not None else Layout()
    servers = servers_of(url)
    if not servers:
        raise ClusterUnreachable("no NATS server URL given")
    asyncio.run(probe(servers, chosen, timeout_s))
    return JetStreamJournal.open(servers, layout=chosen, connect_timeout_s=timeout_s)
