"""The lease policy as pure decisions: no NATS, every time passed in (lease_policy Rules 1-3)."""

from __future__ import annotations

import pytest

from cairn.store.jetstream.lease_policy import (
    DEFAULT_TTL_S,
    RETRY_BACKOFF_S,
    Confirmed,
    Held,
    InvalidLeaseTiming,
    Kept,
    Lease,
    LeaseTiming,
    Lose,
    Reclaim,
    Refuse,
    Refused,
    Renew,
    Retry,
    Take,
    Unanswered,
    Vacant,
    Vacated,
    Wait,
    after_renewal,
    lost_at,
    may_take,
    next_step,
    renew_due,
)

LEASE = Lease(sid="s1", holder="host-a", revision=7, ttl_s=15, acquired_at=100.0, renewed_at=100.0)
TIMING = LeaseTiming.for_ttl(15)


# Rule 1: who may take a session


def test_an_unowned_session_is_taken_expecting_revision_0() -> None:
    assert may_take(Vacant(), "host-a") == Take(expected_revision=0)


def test_a_released_or_expired_session_is_taken_expecting_the_markers_revision() -> None:
    assert may_take(Vacated(revision=42), "host-b") == Take(expected_revision=42)


def test_a_session_held_by_another_host_is_refused_naming_the_holder() -> None:
    assert may_take(Held(holder="host-a", revision=9), "host-b") == Refuse(holder="host-a", revision=9)


def test_a_session_held_by_the_same_host_is_reclaimed_at_its_revision() -> None:
    assert may_take(Held(holder="host-a", revision=9), "host-a") == Reclaim(revision=9)


# the timing


def test_the_default_ttl_is_15_s_renewed_every_5_s_and_lost_at_13_s() -> None:
    assert DEFAULT_TTL_S == 15
    timing = LeaseTiming.for_ttl()
    assert (timing.ttl_s, timing.renew_after_s, timing.lost_after_s) == (15, 5.0, 13.0)


def test_the_default_ttl_survives_a_write_stall_longer_than_the_measured_7_s() -> None:
    assert LeaseTiming.for_ttl().survivable_stall_s == 8.0
    assert LeaseTiming.for_ttl().survivable_stall_s > 7.0


def test_short_ttls_keep_a_fifth_of_the_ttl_as_margin() -> None:
    timing = LeaseTiming.for_ttl(1)
    assert timing.renew_after_s == pytest.approx(1 / 3)
    assert timing.lost_after_s == pytest.approx(0.8)
    assert LeaseTiming.for_ttl(3).lost_after_s == pytest.approx(2.4)


@pytest.mark.parametrize("ttl", [0, -1, 1.5, True, "15"])
def test_a_ttl_that_is_not_a_whole_number_of_seconds_of_at_least_1_is_refused(ttl: object) -> None:
    with pytest.raises(InvalidLeaseTiming):
        LeaseTiming.for_ttl(ttl)  # type: ignore[arg-type]


def test_renew_and_lost_out_of_order_is_refused() -> None:
    with pytest.raises(InvalidLeaseTiming):
        LeaseTiming(ttl_s=10, renew_after_s=9, lost_after_s=8)
    with pytest.raises(InvalidLeaseTiming):
        LeaseTiming(ttl_s=10, renew_after_s=3, lost_after_s=11)


# Rule 2: keeping a lease


def test_a_fresh_lease_waits_until_a_third_of_its_ttl() -> None:
    assert next_step(LEASE, TIMING, now=100.0) == Wait(until=105.0)
    assert next_step(LEASE, TIMING, now=104.99) == Wait(until=105.0)
    assert renew_due(LEASE, TIMING) == 105.0


def test_a_due_lease_is_renewed_with_its_lost_time_as_deadline() -> None:
    assert next_step(LEASE, TIMING, now=105.0) == Renew(deadline=113.0)
    assert next_step(LEASE, TIMING, now=112.99) == Renew(deadline=113.0)


def test_a_lease_not_confirmed_by_ttl_minus_margin_is_lost_before_the_server_can_expire_it() -> None:
    assert lost_at(LEASE, TIMING) == 113.0
    assert lost_at(LEASE, TIMING) < LEASE.renewed_at + LEASE.ttl_s
    assert next_step(LEASE, TIMING, now=113.0) == Lose("unconfirmed")


# Rule 3: after a renewal attempt


def test_a_confirmed_renewal_moves_the_lease_to_its_new_revision_from_its_send_time() -> None:
    decision = after_renewal(LEASE, Confirmed(revision=20), TIMING, sent_at=105.0, now=105.4)
    assert decision == Kept(LEASE.renewed(20, 105.0))
    assert isinstance(decision, Kept)
    assert decision.lease.renewed_at == 105.0  # the send time, not the answer's
    assert decision.lease.acquired_at == 100.0


def test_a_refused_renewal_is_lost_at_once_even_with_time_left() -> None:
    assert after_renewal(LEASE, Refused(actual_revision=30), TIMING, sent_at=105.0, now=105.1) == Lose(
        "refused"
    )


def test_an_unanswered_renewal_retries_until_its_lost_time() -> None:
    assert after_renewal(LEASE, Unanswered("timeout"), TIMING, sent_at=105.0, now=107.0) == Retry(
        at=107.0 + RETRY_BACKOFF_S
    )
    assert after_renewal(LEASE, Unanswered(), TIMING, sent_at=105.0, now=112.9) == Retry(at=113.0)


def test_an_unanswered_renewal_at_its_lost_time_is_lost() -> None:
    assert after_renewal(LEASE, Unanswered(), TIMING, sent_at=105.0, now=113.0) == Lose("unconfirmed")
