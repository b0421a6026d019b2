"""The input budget of a session and the phase a projection puts it in (CONTEXT-RULES B1-B4).

Rules, in exact integer arithmetic (no floats anywhere, so a window of
2**53 - 1 or more still gives exact thresholds):

- B1 reserve: the explicit output cap when one is configured, else
  window // 10 clamped to 8,192..32,768; no usable window: unknown.
- B2 budget: window - reserve; unknown when the window is not a positive int,
  the reserve is not a non-negative int, or the reserve is not below the window.
- B3 thresholds: hand-off = budget * 7 // 10, compaction = budget * 8 // 10.
- B4 phase of a projection p:

  | condition                           | phase            |
  |-------------------------------------|------------------|
  | budget unknown or p unknown         | `unknown`        |
  | p < hand-off threshold              | `below_handoff`  |
  | hand-off <= p < compaction          | `handoff_band`   |
  | p >= compaction threshold           | `compaction_due` |

Phases are monotonic in p. `BudgetSnapshot` holds all of it for one request;
the hand-off (H1) and the compaction decision (L1) read the same snapshot.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Phase = Literal["unknown", "below_handoff", "handoff_band", "compaction_due"]

MIN_RESERVE = 8_192
MAX_RESERVE = 32_768


def _as_int(value: object) -> int | None:
    """`value` if it is an int and not a bool (True is an int to Python, never a count to us)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def output_reserve(context_window: object, max_output_tokens: object) -> int | None:
    """B1: the tokens kept free for the reply, or None when unknown.

    An explicit cap is returned as configured (B2 decides whether it is
    usable); without one, 10 % of a positive integer window, clamped.
    """
    if max_output_tokens is not None:
        return _as_int(max_output_tokens)
    window = _as_int(context_window)
    if window is None or window <= 0:
        return None
    return min(MAX_RESERVE, max(MIN_RESERVE, window // 10))


def input_budget(context_window: object, reserve: object) -> int | None:
    """B2: window - reserve, or None when either is unusable or the reserve fills the window."""
    window = _as_int(context_window)
    kept = _as_int(reserve)
    if window is None or kept is None or window <= 0 or kept < 0 or kept >= window:
        return None
    return window - kept


def thresholds(budget: int) -> tuple[int, int]:
    """B3: (hand-off, compaction) thresholds of a known budget."""
    return budget * 7 // 10, budget * 8 // 10


def phase_of(projected: int | None, handoff: int | None, compaction: int | None) -> Phase:
    """B4: the phase of a projection against the thresholds."""
    if projected is None or handoff is None or compaction is None:
        return "unknown"
    if projected < handoff:
        return "below_handoff"
    if projected < compaction:
        return "handoff_band"
    return "compaction_due"


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """B1-B3 for one session's settings; every field None when unknown."""

    context_window: int | None
    reserve: int | None
    input_budget: int | None
    handoff_threshold: int | None
    compaction_threshold: int | None

    @property
    def known(self) -> bool:
        return self.input_budget is not None


def budget_for(context_window: object, max_output_tokens: object) -> Budget:
    """B1-B3 from a session's window and explicit output cap."""
    reserve = output_reserve(context_window, max_output_tokens)
    budget = input_budget(context_window, reserve)
    handoff, compaction = thresholds(budget) if budget is not None else (None, None)
    return Budget(
        context_window=_as_int(context_window),
        reserve=reserve,
        input_budget=budget,
        handoff_threshold=handoff,
        compaction_threshold=compaction,
    )


class BudgetSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One request's budget, projection and phase: what hand-off and compaction both read."""

    budget: Budget
    projected_tokens: int | None
    source: str
    phase: Phase

    @property
    def input_budget(self) -> int | None:
        return self.budget.input_budget

    @property
    def handoff_threshold(self) -> int | None:
        return self.budget.handoff_threshold

    @property
    def compaction_threshold(self) -> int | None:
        return self.budget.compaction_threshold


def snapshot(budget: Budget, projected_tokens: int | None, source: str = "") -> BudgetSnapshot:
    """B4 for one projection."""
    return BudgetSnapshot(
        budget=budget,
        projected_tokens=projected_tokens,
        source=source,
        phase=phase_of(projected_tokens, budget.handoff_threshold, budget.compaction_threshold),
    )
