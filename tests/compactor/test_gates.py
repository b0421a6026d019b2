"""The C10 target and effect gate, and when manual compaction is due (K4)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.actors.budget_rule import input_budget_of
from cairn.actors.compactor.gates import (
    effect_gate,
    effect_target,
    fallback_target,
    manual_compaction_due,
    reduction_gate,
    shrink_gate,
)


def test_C10_target_is_capped_floored_and_bounded_by_half_the_window() -> None:
    assert effect_target(10_000_000, 1_000_000) == 50_000
    assert effect_target(100_000, 1_000_000) == 50_000
    assert effect_target(40_000, 1_000_000) == 32_000
    assert effect_target(1_000, 1_000_000) == 5_000
    assert effect_target(100_000, 6_000) == 3_000
    assert effect_target(100_000, None) == 50_000


def test_C10_gate_refuses_over_target_and_under_ten_percent_saving() -> None:
    assert effect_gate(10_000, 8_000, 8_000).passed
    over = effect_gate(10_000, 8_001, 8_000)
    assert not over.passed and "over target" in over.detail
    assert effect_gate(10_000, 9_000, 9_500).passed
    small = effect_gate(10_000, 9_001, 9_500)
    assert not small.passed and "under 10 %" in small.detail


def test_K4_manual_compaction_does_nothing_below_half_the_window() -> None:
    assert not manual_compaction_due(49_999, 100_000)
    assert manual_compaction_due(50_000, 100_000)
    assert manual_compaction_due(90_000, 100_000)
    assert not manual_compaction_due(None, 100_000)
    assert not manual_compaction_due(60_000, None)
    assert not manual_compaction_due(60_000, 0)


def test_C10_no_replacement_passes_unless_it_is_smaller_than_its_source() -> None:
    assert shrink_gate(647, 646).passed
    grown = shrink_gate(647, 790)
    assert not grown.passed and "790 tokens is not smaller than its source (647 tokens)" in grown.detail
    assert not shrink_gate(647, 647).passed
    # C10's floor (5,000) is over a 647-token source: the target alone would let it grow
    assert effect_target(647, 128_000) == 5_000
    assert not effect_gate(647, 790, 5_000).passed
    assert "not smaller" in effect_gate(647, 790, 5_000).detail


def test_F2_the_fallback_is_built_for_at_most_90_percent_of_its_source() -> None:
    assert fallback_target(5_000, 647) == 582
    assert fallback_target(5_000, 3_081) == 2_772
    assert fallback_target(40_000, 50_000) == 40_000
    assert fallback_target(5_000, 1) == 0
    assert fallback_target(5_000, 0) == 0


def test_C10_the_reduction_gate_wants_at_least_10_percent_off() -> None:
    assert reduction_gate(3_081, 2_772).passed
    one_token = reduction_gate(3_081, 3_080)
    assert not one_token.passed and "under 10 %" in one_token.detail
    assert "not smaller" in reduction_gate(647, 790).detail


# --- beyond C10: the target is at most half the input budget ----------------------------------


def test_C10_a_16000_window_caps_the_target_at_half_its_input_budget() -> None:
    """C10 alone gives up to 8,000 here: over the compaction threshold (6,246) and the budget (7,808)."""
    assert input_budget_of(16_000, None) == 7_808  # reserve 8,192 (B1's floor)
    assert effect_target(20_000, 16_000) == 8_000  # C10 alone: half the window
    assert effect_target(20_000, 16_000, 7_808) == 3_904
    assert effect_target(7_000, 16_000, 7_808) == 3_904  # C10 alone: 5,600
    assert effect_target(4_000, 16_000, 7_808) == 3_904  # C10 alone: the 5,000 floor
    assert input_budget_of(32_000, None) == 23_808
    assert effect_target(40_000, 32_000) == 16_000
    assert effect_target(40_000, 32_000, 23_808) == 11_904
    assert input_budget_of(64_000, None) == 55_808
    assert effect_target(100_000, 64_000, 55_808) == 27_904  # C10 alone: 32,000


def test_C10_the_budget_cap_leaves_128k_and_200k_windows_exactly_as_c10_had_them() -> None:
    assert input_budget_of(128_000, None) == 115_200  # reserve 12,800
    assert input_budget_of(200_000, None) == 180_000  # reserve 20,000
    sources = (1_000, 6_000, 40_000, 62_500, 100_000, 10_000_000)
    c10 = (5_000, 5_000, 32_000, 50_000, 50_000, 50_000)
    assert tuple(effect_target(s, 128_000) for s in sources) == c10
    assert tuple(effect_target(s, 128_000, 115_200) for s in sources) == c10
    assert tuple(effect_target(s, 200_000, 180_000) for s in sources) == c10
    # the smallest default window the cap never touches: half of 111,111 - 11,111 is 50,000
    assert input_budget_of(111_111, None) == 100_000
    assert effect_target(100_000, 111_111, 100_000) == 50_000
    assert effect_target(100_000, 111_110, input_budget_of(111_110, None)) == 49_999


def test_C10_an_unknown_budget_leaves_the_c10_target_alone() -> None:
    assert input_budget_of(6_000, None) is None  # the reserve (8,192) fills the window
    assert effect_target(100_000, 6_000, None) == 3_000
    assert input_budget_of(None, None) is None
    assert input_budget_of(128_000, 128_000) is None
    assert input_budget_of(128_000, -1) is None
    assert input_budget_of(True, None) is None
    assert input_budget_of(128_000, True) is None
    assert effect_target(100_000, 128_000, 0) == 50_000
    # an explicit output cap (B1) makes the budget: 128,000 - 64,000
    assert input_budget_of(128_000, 64_000) == 64_000
    assert effect_target(100_000, 128_000, 64_000) == 32_000


def test_B2_the_compactor_computes_the_input_budget_as_the_session_does() -> None:
    """One budget rule (`actors.budget_rule`, a leaf): the session's B1-B2 are the same functions,
    and the compactor's budget agrees with them on every case."""
    from cairn.actors import budget_rule
    from cairn.actors.compactor import service
    from cairn.actors.session import budget
    from cairn.actors.session.budget import input_budget, output_reserve

    assert (budget.output_reserve, budget.input_budget, budget.thresholds) == (
        budget_rule.output_reserve,
        budget_rule.input_budget,
        budget_rule.thresholds,
    )
    assert service.input_budget_of is budget_rule.input_budget_of

    cases = [
        (16_000, None, 7_808),
        (32_000, None, 23_808),
        (100_000, None, 90_000),
        (1_000_000, None, 967_232),
        (110_000, 10_000, 100_000),
        (8_192, None, None),
        (9_000, 9_000, None),
        (0, None, None),
        (None, 4_096, None),
    ]
    for window, cap, expected in cases:
        assert input_budget_of(window, cap) == expected
        assert input_budget(window, output_reserve(window, cap)) == expected


def test_F2_the_fallback_target_follows_the_budget_capped_target() -> None:
    # 16,000 window: C10's 8,000 would let the fallback keep more than the input budget
    assert fallback_target(effect_target(20_000, 16_000, 7_808), 20_000) == 3_904
    assert fallback_target(effect_target(4_000, 16_000, 7_808), 4_000) == 3_600  # 90 % of the source
    # 128,000 and 200,000 windows: exactly as before the cap
    assert fallback_target(effect_target(100_000, 128_000, 115_200), 100_000) == 50_000
    assert fallback_target(effect_target(40_000, 200_000, 180_000), 40_000) == 32_000
    assert fallback_target(effect_target(3_081, 128_000, 115_200), 3_081) == 2_772


@settings(max_examples=300, deadline=None)
@given(
    source=st.integers(0, 2_000_000),
    window=st.integers(1, 2_000_000),
    cap=st.none() | st.integers(0, 200_000),
)
def test_C10_property_the_budget_cap_only_ever_lowers_the_target_to_half_the_budget(
    source: int, window: int, cap: int | None
) -> None:
    c10 = effect_target(source, window)
    budget = input_budget_of(window, cap)
    capped = effect_target(source, window, budget)
    if budget is None:
        assert capped == c10
    else:
        assert capped == min(c10, budget // 2)
        assert capped * 10 < budget * 7 or capped == 0  # under the hand-off threshold (B3)
    if cap is None and window >= 111_111:
        assert capped == c10  # the usual reserve: C10 untouched from 111,111 tokens up
