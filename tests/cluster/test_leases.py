"""Session leases on the real 3-node cluster: take, refuse, expire, renew, release, keep.

Each test leases its own sessions in one bucket per module; two `LeaseBucket`s
on two connections stand for two hosts. TTLs are 1-3 s to keep the file fast;
the default (15 s) is the policy's business (test_lease_policy).
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from cairn.events.errors import InputError, InvalidSessionId
from cairn.store.jetstream.lease_bucket import LeaseBucket
from cairn.store.jetstream.lease_keeper import LeaseKeeper, LeaseLostNotice
from cairn.store.jetstream.lease_policy import InvalidLeaseTiming, Lease, Vacant, Vacated
from cairn.store.jetstream.leases import LeaseHeld, LeaseLost, Owner
from cairn.store.jetstream.local_cluster import LocalCluster


def _sid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bucket_name() -> str:
    return f"leases_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def host_a(cluster: LocalCluster, bucket_name: str) -> Iterator[LeaseBucket]:
    bucket = LeaseBucket.connect(cluster.url, bucket=bucket_name, name="host-a")
    yield bucket
    bucket.close()


@pytest.fixture
def host_b(cluster: LocalCluster, bucket_name: str) -> Iterator[LeaseBucket]:
    bucket = LeaseBucket.connect(cluster.url, bucket=bucket_name, name="host-b")
    yield bucket
    bucket.close()


def _take_when_free(
    bucket: LeaseBucket, sid: str, host: str, ttl_s: int, within_s: float
) -> tuple[Lease, float]:
    """Poll the cluster until `host` takes `sid`; the lease and the moment its take was confirmed."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            lease = bucket.acquire(sid, host, ttl_s)
            return lease, time.monotonic()
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)  # polling the server for a condition, with a deadline


def test_a_host_takes_an_unowned_session_and_another_host_is_refused_naming_the_holder(
    host_a: LeaseBucket, host_b: LeaseBucket
) -> None:
    sid = _sid("own")
    assert host_a.owner(sid) is None
    lease = host_a.acquire(sid, "host-a", ttl_s=3)
    assert (lease.sid, lease.holder, lease.ttl_s) == (sid, "host-a", 3)
    assert lease.revision > 0
    with pytest.raises(LeaseHeld) as refused:
        host_b.acquire(sid, "host-b", ttl_s=3)
    assert refused.value.holder == "host-a"
    assert refused.value.revision == lease.revision
    assert host_b.owner(sid) == Owner(sid, "host-a", lease.revision, 3)
    assert host_a.release(lease)


def test_two_hosts_racing_for_ten_sessions_each_session_has_exactly_one_winner(
    host_a: LeaseBucket, host_b: LeaseBucket
) -> None:
    sids = [_sid(f"race{i}") for i in range(10)]
    wins: dict[str, list[str]] = {sid: [] for sid in sids}
    start = threading.Barrier(2)

    refusals: list[tuple[str, str]] = []
    failures: list[BaseException] = []

    def race(bucket: LeaseBucket, host: str) -> None:
        start.wait()
        for sid in sids:
            try:
                bucket.acquire(sid, host, ttl_s=3)
                wins[sid].append(host)
            except LeaseHeld as held:
                refusals.append((host, held.holder))
            except BaseException as error:  # reported in the test's thread below
                failures.append(error)

    hosts = ((host_a, "host-a"), (host_b, "host-b"))
    threads = [threading.Thread(target=race, args=host) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert all(len(winners) == 1 for winners in wins.values()), wins
    assert len(refusals) == 10 and all(loser != holder for loser, holder in refusals)
    for sid, (winner,) in wins.items():
        owner = host_a.owner(sid)
        assert owner is not None and owner.holder == winner


def test_a_lease_not_renewed_expires_after_its_1_s_ttl_and_then_another_host_takes_it(
    cluster: LocalCluster, bucket_name: str, host_b: LeaseBucket
) -> None:
    sid = _sid("expire")
    crashed = LeaseBucket.connect(cluster.url, bucket=bucket_name, name="host-a")
    lease = crashed.acquire(sid, "host-a", ttl_s=1)
    crashed.close()  # the host dies: no renewal, no release
    taken, confirmed_at = _take_when_free(host_b, sid, "host-b", ttl_s=1, within_s=5)
    assert taken.holder == "host-b"
    # never before the dead host's TTL ran out, counted from when it SENT its take
    assert confirmed_at >= lease.renewed_at + 1.0
    assert confirmed_at - lease.renewed_at < 1.0 + 1.5


def test_renewal_keeps_a_lease_past_three_ttls_and_other_hosts_stay_refused(
    host_a: LeaseBucket, host_b: LeaseBucket
) -> None:
    sid = _sid("renew")
    renewals: list[Lease] = []
    past_three_ttls = threading.Event()
    lost: queue.SimpleQueue[LeaseLostNotice] = queue.SimpleQueue()

    def renewed(lease: Lease) -> None:
        renewals.append(lease)
        if lease.renewed_at >= lease.acquired_at + 3 * lease.ttl_s:
            past_three_ttls.set()

    keeper = LeaseKeeper(host_a, on_lost=lost.put, on_renewed=renewed)
    try:
        first = keeper.acquire(sid, "host-a", ttl_s=1)
        assert past_three_ttls.wait(timeout=10)
        with pytest.raises(LeaseHeld):
            host_b.acquire(sid, "host-b", ttl_s=1)
        assert lost.empty()
        revisions = [first.revision, *(lease.revision for lease in renewals)]
        assert revisions == sorted(set(revisions))  # every renewal a new, higher revision
        assert len(renewals) >= 3 * 3 - 1  # renewed about every third of the 1 s TTL
        assert keeper.held()[sid].revision == renewals[-1].revision
    finally:
        keeper.close()
    assert host_b.owner(sid) is None  # closing the keeper released it


def test_a_renewal_with_a_stale_revision_is_refused_and_the_keeper_reports_the_lease_lost(
    host_a: LeaseBucket,
) -> None:
    sid = _sid("stale")
    lost: queue.SimpleQueue[LeaseLostNotice] = queue.SimpleQueue()
    keeper = LeaseKeeper(host_a, on_lost=lost.put)
    try:
        kept = keeper.acquire(sid, "host-a", ttl_s=3)
        moved = host_a.renew(kept)  # behind the keeper's back: its revision is now stale
        assert moved.revision > kept.revision
        with pytest.raises(LeaseLost) as refused:
            host_a.renew(kept)
        assert refused.value.actual == moved.revision
        notice = lost.get(timeout=5)  # the keeper's next renewal (after 1 s) is refused
        assert notice.reason == "refused"
        assert notice.lease.sid == sid and notice.lease.revision == kept.revision
        assert sid not in keeper.held()
    finally:
        keeper.close()
    assert host_a.release(moved)


def test_release_makes_the_session_takeable_at_once_and_a_stale_release_does_nothing(
    host_a: LeaseBucket, host_b: LeaseBucket
) -> None:
    sid = _sid("release")
    lease = host_a.acquire(sid, "host-a", ttl_s=3)
    assert host_a.release(lease)
    assert host_a.owner(sid) is None
    assert isinstance(host_a.observe(sid), Vacated)
    started = time.monotonic()
    taken = host_b.acquire(sid, "host-b", ttl_s=3)  # no waiting for the 3 s TTL
    assert time.monotonic() - started < 1.0
    assert not host_a.release(lease)  # no longer ours: host-b's lease stays
    assert host_b.owner(sid) == Owner(sid, "host-b", taken.revision, 3)
    assert host_b.release(taken)


def test_closing_a_keeper_releases_every_lease_it_holds(host_a: LeaseBucket, host_b: LeaseBucket) -> None:
    sids = [_sid(f"close{i}") for i in range(5)]
    keeper = LeaseKeeper(host_a, on_lost=lambda notice: None)
    for sid in sids:
        keeper.acquire(sid, "host-a", ttl_s=3)
    assert {owner.sid for owner in host_b.held_by("host-a")} >= set(sids)
    keeper.close()
    assert keeper.held() == {}
    for sid in sids:
        assert host_b.acquire(sid, "host-b", ttl_s=3).holder == "host-b"


def test_closing_a_keeper_releases_a_lease_whose_last_renewal_landed_unseen(
    host_a: LeaseBucket, host_b: LeaseBucket
) -> None:
    """A renewal cancelled by the close after the server applied it leaves the key at a revision
    the keeper never learnt (seen under load in the test above); the close still frees it."""
    sid = _sid("unseen")
    # a clock far behind the leases' own: the keeper never renews by itself in this test
    keeper = LeaseKeeper(host_a, on_lost=lambda notice: None, clock=lambda: 0.0)
    kept = keeper.acquire(sid, "host-a", ttl_s=3)
    landed = host_a.renew(kept)  # the renewal that landed unseen
    assert landed.revision > kept.revision and keeper.held()[sid].revision == kept.revision
    keeper.close()
    assert keeper.held() == {}
    assert host_b.acquire(sid, "host-b", ttl_s=3).holder == "host-b"  # no waiting for the TTL


def test_a_host_retaking_its_own_session_renews_it_at_a_new_revision(host_a: LeaseBucket) -> None:
    sid = _sid("mine")
    lease = host_a.acquire(sid, "host-a", ttl_s=3)
    again = host_a.acquire(sid, "host-a", ttl_s=3)
    assert again.revision > lease.revision
    assert not host_a.release(lease)
    assert host_a.release(again)


@pytest.mark.parametrize("bad", ["", "a b", "*", ">", "a.*", "../etc", "x" * 129, "tab\there"])
def test_bad_session_ids_are_refused_before_anything_is_written(host_a: LeaseBucket, bad: str) -> None:
    before = host_a.core
    with pytest.raises(InvalidSessionId):
        host_a.acquire(bad, "host-a", ttl_s=3)
    with pytest.raises(InvalidSessionId):
        host_a.owner(bad)
    assert before is host_a.core
    assert all(owner.sid != bad for owner in host_a.held_by("host-a"))


def test_a_ttl_below_1_s_or_not_whole_and_an_empty_host_id_are_refused_before_anything_is_written(
    host_a: LeaseBucket,
) -> None:
    sid = _sid("badinput")
    for ttl in (0, 2.5):
        with pytest.raises(InvalidLeaseTiming):
            host_a.acquire(sid, "host-a", ttl_s=ttl)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        host_a.acquire(sid, "", ttl_s=3)
    assert host_a.owner(sid) is None
    assert isinstance(host_a.observe(sid), Vacant)


def test_ids_with_dots_and_colons_are_encoded_and_read_back_exactly(host_a: LeaseBucket) -> None:
    sid = f"user:1.chat@x+{uuid.uuid4().hex[:6]}"
    lease = host_a.acquire(sid, "host-a", ttl_s=3)
    assert host_a.owner(sid) == Owner(sid, "host-a", lease.revision, 3)
    assert sid in {owner.sid for owner in host_a.held_by("host-a")}
    assert host_a.release(lease)


def test_on_a_bucket_with_expiry_markers_an_expired_lease_is_taken_over_its_marker(
    cluster: LocalCluster,
) -> None:
    name = f"marked_{uuid.uuid4().hex[:8]}"
    a = LeaseBucket.connect(cluster.url, bucket=name, marker_ttl_s=5)
    b = LeaseBucket.connect(cluster.url, bucket=name, marker_ttl_s=5)
    try:
        sid = _sid("marker")
        a.acquire(sid, "host-a", ttl_s=1)
        deadline = time.monotonic() + 5
        while not isinstance(a.observe(sid), Vacated):  # the server's expiry marker, for 5 s
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert a.owner(sid) is None
        taken = b.acquire(sid, "host-b", ttl_s=1)  # kv.create would fail here until the marker expires
        assert b.owner(sid) == Owner(sid, "host-b", taken.revision, 1)
    finally:
        a.close()
        b.close()


def test_owners_reads_past_an_end_marker_that_came_before_the_entries(
    host_a: LeaseBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-py's watcher puts its end-of-snapshot marker (None) first when the server pushed every
    entry before the watcher asked for the consumer's pending count (seen under load: `held_by` read
    an empty bucket that held a lease). Here the marker is put in front of the real entries."""
    sid = _sid("early-marker")
    lease = host_a.acquire(sid, "host-a", ttl_s=3)
    kv = host_a.core._kv
    real_watchall = kv.watchall

    async def marker_first(**kwargs: object) -> object:
        watcher = await real_watchall(**kwargs)
        queued = []
        while not watcher._updates.empty():
            queued.append(watcher._updates.get_nowait())
        if None not in queued:  # the entries' own end marker, if already queued, goes too
            await watcher._updates.put(None)
        for item in queued:
            if item is not None:
                await watcher._updates.put(item)
        return watcher

    monkeypatch.setattr(kv, "watchall", marker_first)
    assert sid in {owner.sid for owner in host_a.held_by("host-a")}
    assert host_a.release(lease)


def test_owners_of_an_empty_bucket_is_empty_without_waiting(cluster: LocalCluster) -> None:
    bucket = LeaseBucket.connect(cluster.url, bucket=f"empty_{uuid.uuid4().hex[:8]}")
    try:
        started = time.monotonic()
        assert bucket.held_by("host-a") == []
        assert time.monotonic() - started < 5.0  # no pass waiting for a last entry that never comes
    finally:
        bucket.close()
