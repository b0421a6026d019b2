"""The demo's checkpoint cell: a size change is printed with one sign, whichever way it went."""

from __future__ import annotations

from cairn.demo.terminal import _checkpoint_cell


def _cell(source: int, replacement: int) -> str:
    return _checkpoint_cell(
        [
            {
                "trigger": "reactive",
                "strategy": "fallback",
                "source_tokens": source,
                "replacement_tokens": replacement,
                "reduction": 1 - replacement / source,
            }
        ]
    )


def test_a_shrink_prints_a_minus_and_a_growth_never_prints_a_double_sign() -> None:
    assert _cell(1_000, 780) == "reactive/fallback 1,000->780 (-22%)"
    assert _cell(647, 790) == "reactive/fallback 647->790 (+22%)"  # cannot happen any more; sane if it did
    assert "--" not in _cell(647, 790)
