"""Budget and phases (B1-B4)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.session.budget import (
    budget_for,
    input_budget,
    output_reserve,
    phase_of,
    snapshot,
    thresholds,
)

PHASE_ORDER = {"below_handoff": 0, "handoff_band": 1, "compaction_due": 2}


def test_B1_reserve_is_ten_percent_clamped_or_the_explicit_cap() -> None:
    assert output_reserve(100_000, None) == 10_000
    assert output_reserve(1_000, None) == 8_192
    assert output_reserve(1_000_000, None) == 32_768
    assert output_reserve(81_920, None) == 8_192
    assert output_reserve(327_680, None) == 32_768
    assert output_reserve(200_000, 4_000) == 4_000
    assert output_reserve(None, 4_000) == 4_000  # the cap is known even without a window


def test_B1_no_usable_window_means_unknown_reserve() -> None:
    for window in (None, 0, -5, 100_000.0, True, "100000"):
        assert output_reserve(window, None) is None
    assert output_reserve(100_000, 1.5) is None
    assert output_reserve(100_000, True) is None


def test_B2_budget_is_window_minus_reserve_or_unknown() -> None:
    assert input_budget(110_000, 10_000) == 100_000
    assert input_budget(100_000, 0) == 100_000
    assert input_budget(100_000, 100_000) is None  # reserve not smaller than window
    assert input_budget(100_000, 100_001) is None
    assert input_budget(100_000, -1) is None
    assert input_budget(0, 0) is None
    assert input_budget(None, 10) is None
    assert input_budget(100_000, None) is None
    assert input_budget(True, 0) is None
    assert budget_for(1_000, None).input_budget is None  # 8,192 reserve fills a 1,000 window
    assert budget_for(100_000, None).input_budget == 90_000


def test_B3_thresholds_are_exact_integer_fractions() -> None:
    assert thresholds(100_000) == (70_000, 80_000)
    assert thresholds(9) == (6, 7)
    big = 2**53 - 1
    handoff, compaction = thresholds(big)
    assert handoff == 6_305_039_478_318_693
    assert compaction == 7_205_759_403_792_792
    assert int(big * 0.8) != compaction  # what float arithmetic gets wrong
    huge = budget_for(2**53 - 1 + 32_768, None)
    assert huge.input_budget == big
    assert (huge.handoff_threshold, huge.compaction_threshold) == (handoff, compaction)


def test_B4_phases_of_the_rule_example() -> None:
    budget = budget_for(110_000, 10_000)
    assert budget.input_budget == 100_000
    assert snapshot(budget, 69_999).phase == "below_handoff"
    assert snapshot(budget, 70_000).phase == "handoff_band"
    assert snapshot(budget, 79_999).phase == "handoff_band"
    assert snapshot(budget, 80_000).phase == "compaction_due"
    assert snapshot(budget, None).phase == "unknown"
    assert snapshot(budget_for(None, None), 10).phase == "unknown"
    snap = snapshot(budget, 75_000, "provider")
    assert (snap.handoff_threshold, snap.compaction_threshold, snap.input_budget) == (70_000, 80_000, 100_000)


@given(
    budget=st.integers(min_value=1, max_value=2**64),
    a=st.integers(min_value=0, max_value=2**65),
    b=st.integers(min_value=0, max_value=2**65),
)
def test_B4_phase_is_monotonic_in_tokens(budget: int, a: int, b: int) -> None:
    low, high = sorted((a, b))
    handoff, compaction = thresholds(budget)
    assert PHASE_ORDER[phase_of(low, handoff, compaction)] <= PHASE_ORDER[phase_of(high, handoff, compaction)]
