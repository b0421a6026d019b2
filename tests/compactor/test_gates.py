"""The C10 target and effect gate, and when manual compaction is due (K4)."""

from __future__ import annotations

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
