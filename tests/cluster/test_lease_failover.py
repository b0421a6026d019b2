"""Leases while the lease bucket's stream leader is killed (own cluster): never two believing holders."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from cairn.store.jetstream.lease_bucket import LeaseBucket
from cairn.store.jetstream.lease_keeper import LeaseKeeper, LeaseLostNotice
from cairn.store.jetstream.lease_policy import Lease, LeaseTiming
from cairn.store.jetstream.leases import LeaseHeld, LeaseUnavailable
from cairn.store.jetstream.local_cluster import LocalCluster


class _Contender(threading.Thread):
    """Host B: tries to take each session until it has them all or is told to stop."""

    def __init__(self, bucket: LeaseBucket, sids: list[str]) -> None:
        super().__init__(name="host-b")
        self.bucket = bucket
        self.pending = list(sids)
        self.taken_at: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while self.pending and not self.stop.is_set():
            for sid in list(self.pending):
                try:
                    self.bucket.acquire(sid, "host-b", ttl_s=15)
                except (LeaseHeld, LeaseUnavailable):
                    continue
                self.taken_at[sid] = time.monotonic()  # the moment host B's take was confirmed
                self.pending.remove(sid)
            self.stop.wait(0.05)  # polling the servers, paced


def test_a_leader_kill_keeps_a_15_s_lease_and_a_lost_2_s_lease_is_reported_before_anyone_takes_it(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "c") as cluster:
        a = LeaseBucket.connect(cluster.url, bucket="failover", name="host-a")
        b = LeaseBucket.connect(cluster.url, bucket="failover", name="host-b")
        lost: dict[str, LeaseLostNotice] = {}
        renewed_after_kill = threading.Event()
        short_renewed = threading.Event()
        kill_at = [float("inf")]

        def on_lost(notice: LeaseLostNotice) -> None:
            lost[notice.lease.sid] = notice

        def on_renewed(lease: Lease) -> None:
            if lease.sid == "short":
                short_renewed.set()
            if lease.sid == "long" and lease.renewed_at > kill_at[0]:
                renewed_after_kill.set()

        keeper = LeaseKeeper(a, on_lost=on_lost, on_renewed=on_renewed)
        contender = _Contender(b, ["short", "long"])
        try:
            keeper.acquire("long", "host-a", ttl_s=15)
            keeper.acquire("short", "host-a", ttl_s=2)
            leader = a.leader()
            assert leader is not None
            assert short_renewed.wait(timeout=5)  # kill right after a renewal, mid-schedule
            contender.start()
            kill_at[0] = time.monotonic()
            cluster.kill([node.name for node in cluster.nodes].index(leader))
            # the 15 s lease rides out the stall: a renewal sent after the kill is confirmed
            assert renewed_after_kill.wait(timeout=LeaseTiming.for_ttl(15).lost_after_s)
            assert "long" not in lost
            assert "long" not in contender.taken_at
            # the 2 s lease (below the stall) may be lost; if host B took it, host A knew first
            if "short" in contender.taken_at or "short" not in keeper.held():
                deadline = time.monotonic() + 15
                while "short" not in contender.taken_at and time.monotonic() < deadline:
                    time.sleep(0.05)  # waiting for host B's poll of the servers
                assert "short" in lost, "host B took the session while host A still believed it held it"
                assert "short" in contender.taken_at
                assert lost["short"].at < contender.taken_at["short"]
                assert lost["short"].at <= lost["short"].lease.renewed_at + 2 - 0.4 + 0.1
        finally:
            contender.stop.set()
            if contender.is_alive():
                contender.join()
            keeper.close(release=False)
            a.close()
            b.close()
