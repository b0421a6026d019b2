"""A client on a frozen NATS node (issue 23 point 3): a SIGSTOPped server keeps its TCP links open,
so only the client's pings tell it the server is gone. Before: an append stalled for the whole
freeze (35 s), then `AppendTimeout`. Now the journal pings its server every `PING_INTERVAL_S` and
moves to a healthy node after `MAX_OUTSTANDING_PINGS` unanswered ones (a reconnect that picks the
frozen node again gives up after `CONNECT_TIMEOUT_S`); the append lands within that bound plus the
stream's own failover. Measured here: 6.1 s in 7 of 9 runs, 15.8 and 28.4 s (before the 3 s
connect timeout) in the others."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from cairn.store.jetstream.journal import (
    CONNECT_TIMEOUT_S,
    MAX_OUTSTANDING_PINGS,
    PING_INTERVAL_S,
    JetStreamJournal,
)
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.verify import verify_cluster
from tests.cluster.serve_helpers import wait_for
from tests.store.helpers import msg, started

#: the bound: the pings that find the node frozen (6 s), a reconnect that may try the frozen node
#: once (3 s), and a stream leader election (5-7 s), with 3 s to spare
BOUND_S = PING_INTERVAL_S * (MAX_OUTSTANDING_PINGS + 1) + CONNECT_TIMEOUT_S + 10


def test_an_append_through_a_frozen_node_moves_to_a_healthy_one_within_the_bound(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "nats") as cluster:
        journal = JetStreamJournal.open(cluster.url)
        frozen = None
        try:
            journal.append("s", [started()], expected_seq=0)
            port = journal._nc.connected_url.port if journal._nc.connected_url else None
            frozen = next(i for i, node in enumerate(cluster.nodes) if node.client_port == port)
            process = cluster.nodes[frozen].process
            assert process is not None
            process.send_signal(signal.SIGSTOP)
            began = time.monotonic()
            [record] = journal.append("s", [msg(2)], expected_seq=1, timeout=BOUND_S + 20)
            took = time.monotonic() - began
            print(f"an append with node {frozen + 1} frozen took {took:.1f} s (bound {BOUND_S:.0f} s)")
            assert record.seq == 2 and took < BOUND_S
            assert journal._nc.connected_url is not None and journal._nc.connected_url.port != port
        finally:
            if frozen is not None and cluster.nodes[frozen].process is not None:
                cluster.nodes[frozen].process.send_signal(signal.SIGCONT)
        cluster.wait_ready()
        wait_for(lambda: _readable(journal), 30, "the session readable once the node thawed")
        assert journal.last_seq("s") == 2 and verify_cluster(journal).ok
        journal.close()


def _readable(journal: JetStreamJournal) -> bool:
    """Whether a read goes through: right after a node thaws and rejoins, JetStream answers some
    reads with 503 "temporarily unavailable" or not at all for a moment."""
    try:
        journal.last_seq("s")
    except Exception:
        return False
    return True
