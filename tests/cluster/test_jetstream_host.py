"""The unchanged Host runs on a JetStreamJournal; a fresh journal and host reload the same state."""

from __future__ import annotations

from pathlib import Path

from cairn.events.kinds import CheckpointCommitted
from cairn.store.jetstream.local_cluster import LocalCluster
from tests.actors.helpers import WAIT, Seed, open_host, reopen_and_compare, scripted
from tests.cluster.js_helpers import fresh_layout, open_journal


def test_a_host_on_the_cluster_runs_turns_compacts_and_a_fresh_host_reloads_them(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    layout = fresh_layout()
    journal = open_journal(cluster, layout)
    fresh = open_journal(cluster, layout)
    try:
        host = open_host(tmp_path / "unused", scripted(), journal=journal)
        for sid in ("a", "b.c"):
            assert host.send(sid, f"hello {sid}: tools 2 x 30 #{sid}", workspace=tmp_path).result(WAIT).ok
            assert host.send(sid, "and again").result(WAIT).ok
        big = Seed(host.journal, "big", str(tmp_path))
        for _ in range(10):
            big.turn(tools=[1_000])  # over half of the 20,000-token window
        record = host.compact("big").record
        assert record is not None and isinstance(record.event, CheckpointCommitted)
        assert host.send("big", "after the checkpoint").result(WAIT).ok
        assert sorted(host.sessions()) == ["a", "b.c", "big"]

        again = reopen_and_compare(host, tmp_path / "unused", ["a", "b.c", "big"], journal=fresh)
        assert again.send("a", "one more").result(WAIT).ok  # the fresh host appends where the old one ended
        again.close()
        assert not (tmp_path / "unused").exists()  # nothing local: the cluster is the store
        assert fresh.load("big") == fresh.replay_full("big")
    finally:
        journal.close()
        fresh.close()
