"""Ownership on the cluster: the new owner's `owner-changed` fences the old one; a lost lease stops a session.

Two cluster hosts in this process, 2-3 s leases, on the shared cluster (a
namespace of their own, one node for hosts and client: see
test_cluster_serve). Waiting for a lease to go is polling the bucket, with
a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import HostConfig
from cairn.actors.cluster import ClusterClient, ClusterHost, LeaseNotHeld
from cairn.actors.cluster.names import ClusterNames
from cairn.actors.provider.base import TextDelta
from cairn.events.kinds import OwnerChanged, TurnFailed, TurnStarted
from cairn.events.state import user_text_message
from cairn.store.errors import SeqConflict
from cairn.store.jetstream.lease_bucket import LeaseBucket
from cairn.store.jetstream.lease_policy import Held, Vacant, Vacated
from cairn.store.jetstream.local_cluster import LocalCluster
from tests.cluster.serve_helpers import Holding, fresh_names, settled, wait_for

WAIT = 30.0
TTL_S = 2


@pytest.fixture
def names() -> ClusterNames:
    return fresh_names()


@pytest.fixture
def provider() -> Iterator[Holding]:
    made = Holding()
    yield made
    made.release.set()


@pytest.fixture
def hosts(
    cluster: LocalCluster, names: ClusterNames, provider: Holding
) -> Iterator[tuple[ClusterHost, ClusterHost]]:
    """host-a serves clients' messages; host-b is open but does not (yet) take them."""
    config = HostConfig(sweep=False)
    a = ClusterHost.open(
        cluster.urls[0],
        host_id="host-a",
        names=names,
        ttl_s=TTL_S,
        provider=provider,
        config=config,
        release_idle_s=None,
    )
    b = ClusterHost.open(
        cluster.urls[0],
        host_id="host-b",
        names=names,
        ttl_s=TTL_S,
        provider=provider,
        config=config,
        release_idle_s=None,
        start=False,
    )
    yield a, b
    provider.release.set()
    for host in (a, b):
        host.close(grace_s=1.0)


@pytest.fixture
def client(cluster: LocalCluster, names: ClusterNames) -> Iterator[ClusterClient]:
    with ClusterClient(cluster.urls[0], names=names, accept_timeout_s=WAIT) as made:
        yield made


@pytest.fixture
def bucket(cluster: LocalCluster, names: ClusterNames) -> Iterator[LeaseBucket]:
    made = LeaseBucket.connect(cluster.urls[0], bucket=names.lease_bucket)
    yield made
    made.close()


def test_an_old_owner_appends_until_the_new_owner_fences_the_session_and_is_refused_after(
    hosts: tuple[ClusterHost, ClusterHost], client: ClusterClient, bucket: LeaseBucket, tmp_path: Path
) -> None:
    a, b = hosts
    first = client.send("fenced", "hello", workspace=tmp_path).result(WAIT)
    assert first.ok
    stale = first.last_seq
    a.ownership.keeper.abandon("fenced")  # a stalls: no more renewals (as a SIGSTOPped host)
    wait_for(lambda: isinstance(bucket.observe("fenced"), Vacant | Vacated), TTL_S + 5, "the lease expired")

    # b holds the lease but has not written: the expected-seq guard alone lets the old owner through
    b.ownership.keeper.acquire("fenced", "host-b", TTL_S)
    slipped = a.journal.append("fenced", [user_text_message("u-late", "late")], expected_seq=stale)
    assert slipped[0].seq == stale + 1

    fence = b.ownership.claim("fenced", previous="host-a")  # the new owner writes first
    assert fence == OwnerChanged(
        host_id="host-b", lease_revision=fence.lease_revision, previous_host="host-a"
    )
    with pytest.raises(SeqConflict):  # the old owner's next append: a typed conflict, nothing stored
        a.journal.append("fenced", [user_text_message("u-later", "later")], expected_seq=stale + 1)
    with pytest.raises(LeaseNotHeld):  # and its host never even sends one: its gate is shut
        a.ownership.gate.append("fenced", [user_text_message("u-x", "x")], expected_seq=stale + 2)

    records = settled(b.journal, "fenced", stale + 2)
    assert [r.seq for r in records] == list(range(1, stale + 3))  # no gap, nothing interleaved
    assert records[stale].event == user_text_message("u-late", "late")  # seq stale + 1: slipped in
    assert records[stale + 1].event == fence  # seq stale + 2: the fence, the last event

    a.stop_accepting()
    b.start()  # the session goes on at the new owner, after its fence
    after = client.send("fenced", "after the takeover")
    assert after.result(WAIT).ok and after.host_id == "host-b"
    assert isinstance(bucket.observe("fenced"), Held)


def test_a_host_that_loses_a_lease_stops_the_session_at_once_and_the_next_owner_marks_the_turn_interrupted(
    hosts: tuple[ClusterHost, ClusterHost],
    client: ClusterClient,
    bucket: LeaseBucket,
    provider: Holding,
    tmp_path: Path,
) -> None:
    a, b = hosts
    held = client.send("lost", "HOLD this turn", workspace=tmp_path)
    stream = held.events(timeout=WAIT)
    assert next(item for item in stream if isinstance(item, TextDelta)) == TextDelta("working. ")
    before = a.ownership.gate.last_seq("lost")  # what a wrote: the held turn's request is durable

    def take_it_away() -> bool:  # the lease moves on under a (as another host's take would)
        lease = a.ownership.keeper.held().get("lost")
        return lease is None or bucket.release(lease)

    wait_for(take_it_away, WAIT, "the lease was released under host-a")
    result = held.result(WAIT)  # a's keeper reported the loss: a stopped the session
    assert (result.status, result.phase) == ("failed", "interrupted")
    assert settled(a.journal, "lost", before)[-1].seq == before  # no further append, not even its own record
    assert a.ownership.lost[-1].reason == "refused"
    provider.release.set()

    a.stop_accepting()
    b.start()
    nxt = client.send("lost", "again")
    assert nxt.result(WAIT).ok and nxt.host_id == "host-b"
    records = settled(b.journal, "lost", nxt.result(WAIT).last_seq)
    tail = [r.event for r in records[before:]]
    assert isinstance(tail[0], OwnerChanged) and tail[0].host_id == "host-b"
    held_turn = next(r.event for r in records if isinstance(r.event, TurnStarted))
    assert isinstance(tail[1], TurnFailed) and (tail[1].turn_id, tail[1].phase) == (
        held_turn.turn_id,
        "interrupted",
    )
    assert result.turn_id == held_turn.turn_id


def test_an_idle_session_s_lease_is_given_back_and_its_next_message_claims_it_again(
    hosts: tuple[ClusterHost, ClusterHost], client: ClusterClient, bucket: LeaseBucket, tmp_path: Path
) -> None:
    a, _ = hosts
    assert client.send("idle", "hello", workspace=tmp_path).result(WAIT).ok
    assert a.release_idle() == 0  # its actor is live
    assert a.host.passivate_idle(now_ms=time.time_ns() // 1_000_000 + 10**9) == 1
    assert a.release_idle() == 1
    assert isinstance(bucket.observe("idle"), Vacated) and not a.ownership.holds("idle")
    again = client.send("idle", "again")
    assert again.result(WAIT).ok and again.host_id == "host-a"
    records = settled(a.journal, "idle", again.result(WAIT).last_seq)
    fences = [r.event for r in records if isinstance(r.event, OwnerChanged)]
    assert [f.host_id for f in fences] == ["host-a", "host-a"]  # claimed again: fenced again
