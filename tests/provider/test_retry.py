"""The retry decision and the server's hint (C5 beyond: `Retry-After`), as pure functions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.provider.retry import RetryPolicy, decide_retry, parse_retry_after
from cairn.events.errors import InputError

POLICY = RetryPolicy()
NOW_MS = 1_445_412_473_000  # Wed, 21 Oct 2015 07:27:53 GMT


def _decide(
    waits_done: int = 0,
    *,
    status: int | None = 429,
    hint_ms: int | None = None,
    draw: float = 0.0,
    transient: bool = True,
    retries_left: int = 2,
    policy: RetryPolicy = POLICY,
):  # type: ignore[no-untyped-def]
    return decide_retry(
        waits_done,
        transient=transient,
        retries_left=retries_left,
        status=status,
        hint_ms=hint_ms,
        draw=draw,
        policy=policy,
    )


# --- the decision -------------------------------------------------------------------------------


def test_C5_without_a_hint_the_waits_are_375_then_750_ms_with_no_jitter() -> None:
    assert [_decide(n, draw=0.99).wait_ms for n in (0, 1, 2)] == [375, 750, 750]
    assert _decide(0, status=None, hint_ms=None).wait_ms == 375


def test_C5_a_hint_on_429_and_503_is_waited_plus_jitter_of_up_to_20_percent() -> None:
    assert _decide(0, status=429, hint_ms=5_000).wait_ms == 5_000
    assert _decide(0, status=429, hint_ms=5_000, draw=0.5).wait_ms == 5_500
    assert _decide(1, status=503, hint_ms=2_000, draw=0.25).wait_ms == 2_100
    decision = _decide(0, status=503, hint_ms=5_000, draw=0.999_999)
    assert decision.retry and decision.hint_ms == 5_000 and 5_999 <= decision.wait_ms < 6_000


def test_C5_a_hint_on_529_anthropic_overloaded_is_honoured_like_503() -> None:
    assert _decide(0, status=529, hint_ms=4_000).wait_ms == 4_000
    assert _decide(0, status=529, hint_ms=4_000, draw=0.5).wait_ms == 4_400
    assert _decide(0, status=500, hint_ms=4_000).wait_ms == 375  # other 5xx keep the floor


def test_C5_a_hint_shorter_than_the_schedule_keeps_the_floor() -> None:
    assert _decide(0, status=429, hint_ms=100).wait_ms == 375
    assert _decide(1, status=429, hint_ms=0).wait_ms == 750


def test_C5_the_wait_is_capped_at_60_s_and_a_longer_hint_gives_up_with_a_note() -> None:
    assert _decide(0, hint_ms=60_000, draw=0.9).wait_ms == 60_000  # the jitter stops at the cap
    over = _decide(0, hint_ms=60_001)
    assert not over.retry and over.give_up == "over-cap" and over.hint_ms == 60_001
    assert "60.001 s" in over.note and "60 s cap" in over.note
    hour = _decide(0, status=503, hint_ms=3_600_000)
    assert not hour.retry and "3600 s" in hour.note


def test_C5_the_cap_is_a_setting() -> None:
    roomy = RetryPolicy(max_wait_ms=300_000)
    assert _decide(0, hint_ms=120_000, policy=roomy).wait_ms == 120_000
    assert not _decide(0, hint_ms=300_001, policy=roomy).retry


def test_C5_a_hint_on_other_statuses_is_ignored() -> None:
    for status in (408, 409, 500, 502, 504, None):
        decision = _decide(0, status=status, hint_ms=30_000, draw=0.5)
        assert (decision.retry, decision.wait_ms, decision.hint_ms) == (True, 375, None), status


def test_C5_not_transient_or_used_up_is_never_retried() -> None:
    assert _decide(transient=False, hint_ms=1_000).give_up == "not-transient"
    used = _decide(2, retries_left=0, hint_ms=1_000)
    assert not used.retry and used.give_up == "used-up" and used.note == ""


def test_C5_a_draw_outside_0_to_1_means_no_jitter() -> None:
    for draw in (-0.5, 1.0, 7.0, float("nan"), float("inf")):
        assert _decide(0, hint_ms=10_000, draw=draw).wait_ms == 10_000


@given(
    waits=st.integers(0, 5),
    status=st.sampled_from([None, 408, 409, 429, 500, 503, 529]),
    hint=st.one_of(st.none(), st.integers(0, 200_000)),
    draw=st.floats(0.0, 1.0, exclude_max=True),
    left=st.integers(0, 3),
)
def test_C5_a_retry_never_waits_less_than_the_floor_or_the_hint_nor_more_than_the_cap(
    waits: int, status: int | None, hint: int | None, draw: float, left: int
) -> None:
    decision = _decide(waits, status=status, hint_ms=hint, draw=draw, retries_left=left)
    floor = (375, 750)[min(waits, 1)]
    if left == 0:
        assert not decision.retry
        return
    if status in (429, 503, 529) and hint is not None and hint > 60_000:
        assert not decision.retry
        return
    assert decision.retry
    assert floor <= decision.wait_ms <= 60_000
    if status in (429, 503, 529) and hint is not None:
        assert decision.wait_ms >= hint
    else:
        assert decision.wait_ms == floor


def test_a_policy_that_makes_no_sense_is_refused() -> None:
    with pytest.raises(InputError):
        RetryPolicy(max_wait_ms=500)  # below the 750 ms of the schedule
    with pytest.raises(InputError):
        RetryPolicy(jitter_percent=150)
    with pytest.raises(InputError):
        RetryPolicy(delays_ms=())
    with pytest.raises(InputError):
        RetryPolicy(delays_ms=(375, -1))
    with pytest.raises(InputError):
        RetryPolicy(max_wait_ms=True)  # type: ignore[arg-type]


# --- the hint -----------------------------------------------------------------------------------


def test_retry_after_ms_is_milliseconds_rounded_up_and_wins_over_retry_after() -> None:
    assert parse_retry_after({"retry-after-ms": "1500"}, NOW_MS) == 1_500
    assert parse_retry_after({"retry-after-ms": "1500.2"}, NOW_MS) == 1_501
    assert parse_retry_after({"Retry-After-Ms": "20", "Retry-After": "9"}, NOW_MS) == 20
    assert parse_retry_after([("retry-after-ms", " 0.5 ")], NOW_MS) == 1


def test_retry_after_is_seconds_or_an_http_date_read_against_the_given_clock() -> None:
    assert parse_retry_after({"Retry-After": "5"}, NOW_MS) == 5_000
    assert parse_retry_after({"retry-after": "2.5"}, NOW_MS) == 2_500
    assert parse_retry_after({"RETRY-AFTER": "0"}, NOW_MS) == 0
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, NOW_MS) == 7_000
    assert parse_retry_after({"Retry-After": "Wednesday, 21-Oct-15 07:28:00 GMT"}, NOW_MS) == 7_000
    assert parse_retry_after({"Retry-After": "Wed Oct 21 07:28:00 2015"}, NOW_MS) == 7_000
    # the same header a minute later on the caller's clock: 53 s sooner, and a past date is "now"
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:29:00 GMT"}, NOW_MS + 7_000) == 60_000
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:00:00 GMT"}, NOW_MS) == 0


@pytest.mark.parametrize(
    "value",
    [
        "-5",
        "inf",
        "nan",
        "Infinity",
        "1e3",
        "+5",
        "5 s",
        "soon",
        "",
        "   ",
        ".",
        "1.2.3",
        "0x10",
        "5\x00",
        "\x1b[31m5",
        "٣",
        "9" * 101,
        "Wed, 32 Oct 2015 07:28:00 GMT",
        "Mon, 99 Foo 2015 xx",
    ],
)
def test_an_unparsable_or_negative_hint_is_ignored(value: str) -> None:
    assert parse_retry_after({"Retry-After": value}, NOW_MS) is None
    assert parse_retry_after({"retry-after-ms": value}, NOW_MS) is None


def test_a_bad_retry_after_ms_falls_back_to_retry_after() -> None:
    assert parse_retry_after({"retry-after-ms": "-1", "retry-after": "3"}, NOW_MS) == 3_000


def test_a_huge_hint_is_clamped_to_a_year() -> None:
    year = 365 * 24 * 3600 * 1000
    assert parse_retry_after({"Retry-After": "9" * 60}, NOW_MS) == year
    assert parse_retry_after({"retry-after-ms": "9" * 99}, NOW_MS) == year
    assert parse_retry_after({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, NOW_MS) == year


def test_no_header_no_hint() -> None:
    assert parse_retry_after({}, NOW_MS) is None
    assert parse_retry_after({"content-type": "application/json"}, NOW_MS) is None
