"""Size gates of compaction: the target (C10), the effect gate, and when manual compaction is due (K4).

| gate                  | rule                                                                  |
|-----------------------|-----------------------------------------------------------------------|
| target (C10)          | min(50,000, max(5,000, 80 % of source), 50 % of the window)           |
| effect gate (C10)     | replacement tokens over the target: `insufficient-reduction`          |
| shrink (beyond)       | not smaller than the source: `insufficient-reduction`, never committed |
| progress (beyond)     | saving under 10 % of the source tokens: `insufficient-reduction` too  |
| reduction gate        | shrink + progress: the LLM path (with C10) and the fallback           |
| fallback target (beyond F2) | min(C10 target, 90 % of source), then F2 raises it to the mandatory state |
| manual (K4)           | nothing below 50 % of the window; unknown window or tokens: nothing   |

Every strategy must shrink: the LLM replacement and the fallback by at least
10 % (the reduction gate), R3's snip-only replacement at all (the shrink
gate; R3 takes any snip that removed something).

C10's floor of 5,000 tokens is above a small source, and F2 lets the
mandatory state (notice, task) raise the target further, so a fallback built
for the C10 target alone could keep the whole source and add to it (a
647-token context "compacted" to 790). The fallback is therefore built for
at most 90 % of the source (it cuts its tail instead), and the reduction
gate refuses what still saves less: then the mandatory state alone is over
90 % of the source. A fallback allowed to save a single token would be
committed again at every request past the threshold (L4), each time
dropping the oldest messages for nothing (a chaos-server run showed
3,081 -> 3,080 -> 3,079).

All arithmetic is on integers, so a figure never depends on float rounding.
"""

from __future__ import annotations

import msgspec

TARGET_CAP = 50_000
TARGET_FLOOR = 5_000
MIN_SAVING_PERCENT = 10


class GateVerdict(msgspec.Struct, frozen=True):
    """Whether a replacement passes, and why not when it does not."""

    passed: bool
    detail: str = ""


def effect_target(source_tokens: int, context_window: int | None) -> int:
    """C10: the most tokens a replacement may have."""
    target = min(TARGET_CAP, max(TARGET_FLOOR, source_tokens * 8 // 10))
    if isinstance(context_window, int) and context_window > 0:
        target = min(target, context_window // 2)
    return target


def fallback_target(target: int, source_tokens: int) -> int:
    """The target the fallback is built for: the C10 `target`, but at most 90 % of the source, the
    most that passes the reduction gate (F2 may raise it to the mandatory state)."""
    return max(0, min(target, source_tokens * (100 - MIN_SAVING_PERCENT) // 100))


def shrink_gate(source_tokens: int, replacement_tokens: int) -> GateVerdict:
    """Every strategy: a replacement must be smaller than its source (`insufficient-reduction`)."""
    if replacement_tokens >= source_tokens:
        return GateVerdict(
            False,
            f"replacement {replacement_tokens} tokens is not smaller than its source "
            f"({source_tokens} tokens)",
        )
    return GateVerdict(True)


def effect_gate(source_tokens: int, replacement_tokens: int, target: int) -> GateVerdict:
    """C10 plus the reduction gate: each failure is `insufficient-reduction`."""
    if replacement_tokens > target:
        return GateVerdict(False, f"replacement {replacement_tokens} tokens, over target {target}")
    return reduction_gate(source_tokens, replacement_tokens)


def reduction_gate(source_tokens: int, replacement_tokens: int) -> GateVerdict:
    """Smaller than the source, by at least 10 % of it (the LLM path and the fallback)."""
    shrink = shrink_gate(source_tokens, replacement_tokens)
    if not shrink.passed:
        return shrink
    saved = source_tokens - replacement_tokens
    if saved * 100 < source_tokens * MIN_SAVING_PERCENT:
        return GateVerdict(
            False,
            f"replacement {replacement_tokens} tokens saves under {MIN_SAVING_PERCENT} % of {source_tokens}",
        )
    return GateVerdict(True)


def manual_compaction_due(projected_tokens: int | None, context_window: int | None) -> bool:
    """K4: `host.compact(session)` compacts only from 50 % of the window up."""
    if not isinstance(projected_tokens, int) or not isinstance(context_window, int):
        return False
    if context_window <= 0 or projected_tokens < 0:
        return False
    return projected_tokens * 2 >= context_window
