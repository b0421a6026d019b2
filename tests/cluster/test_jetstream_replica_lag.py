"""Reading right after writing, through a follower: heads come from the leader, short pages are completed.

Direct gets are answered by any replica, and NATS hands a request to a
responder on the client's own server first. A follower applies a committed
append a moment after the leader acknowledged it, so a client connected to
a follower that reads right after its own append could see the session
without it (the cluster host once loaded an empty session right after its
takeover event). Every read here must see every acknowledged line.
"""

from __future__ import annotations

import asyncio
import uuid

import nats

from cairn.events.state import user_text_message
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.local_cluster import LocalCluster
from tests.store.helpers import started

APPENDS = 150


async def _stream_leader(url: str, stream: str) -> str:
    client = await nats.connect(url.split(","))
    try:
        info = await client.jetstream().stream_info(stream)
        assert info.cluster is not None and info.cluster.leader
        return info.cluster.leader
    finally:
        await client.close()


def test_a_writer_on_a_follower_reads_its_own_appends_at_once(cluster: LocalCluster) -> None:
    layout = Layout.named(f"lag{uuid.uuid4().hex[:8]}")
    JetStreamJournal.open(cluster.url, layout=layout).close()  # creates the stream
    leader = asyncio.run(_stream_leader(cluster.url, layout.stream))
    follower = next(node for node in cluster.nodes if node.name != leader)
    journal = JetStreamJournal.open([follower.url], layout=layout)
    try:
        seq = journal.append("lag-1", [started()], expected_seq=0)[-1].seq
        for n in range(APPENDS):
            seq = journal.append("lag-1", [user_text_message(f"u{n}", f"line {n}")], expected_seq=seq)[-1].seq
            assert journal.last_seq("lag-1") == seq
            assert [record.seq for record in journal.read("lag-1", seq)] == [seq]
        assert [record.seq for record in journal.read("lag-1")] == list(range(1, seq + 1))
        assert journal.load("lag-1") == journal.replay_full("lag-1")
    finally:
        journal.close()
