"""`DirectReader.page` when no replica answers a direct get (status 503): the leader completes the page.

`cairn export` once failed with `direct get batch ...: status 503` on a stream made moments before,
under load. A stream with direct gets switched off answers every direct get so, deterministically:
the page must still hold every message, read from the leader, and say it did (`unanswered`).
"""

from __future__ import annotations

import asyncio
import uuid

import nats
from nats.js.api import StreamConfig

from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.reads import DirectReader


async def _page_without_direct_gets(url: str) -> tuple[list[bytes], int]:
    nc = await nats.connect(url.split(","))
    try:
        js = nc.jetstream()
        name = f"NODIRECT_{uuid.uuid4().hex[:8]}"
        await js.add_stream(
            StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3, allow_direct=False)
        )
        for n in range(3):
            await js.publish(f"{name}.s", f"m{n}".encode())
        reader = DirectReader(nc, name, timeout_s=5.0)
        page = await reader.page(f"{name}.s", 1)
        await js.delete_stream(name)
        return [stored.data for stored in page], reader.unanswered
    finally:
        await nc.close()


def test_a_page_no_replica_answers_is_read_from_the_leader(cluster: LocalCluster) -> None:
    data, unanswered = asyncio.run(_page_without_direct_gets(cluster.url))
    assert data == [b"m0", b"m1", b"m2"] and unanswered == 1
