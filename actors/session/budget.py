"""The input budget of a session and the phase a projection puts it in (CONTEXT-RULES B1-B4).

B1-B3 (reserve, budget, thresholds) are the shared leaf `actors.budget_rule`,
which the compactor uses too; here they are put together for one session:

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

from cairn.actors.budget_rule import (
    MAX_RESERVE,
    MIN_RESERVE,
    as_count,
    input_budget,
    output_reserve,
    thresholds,
)

Phase = Literal["unknown", "below_handoff", "handoff_band", "compaction_due"]

__all__ = [
    "MAX_RESERVE",
    "MIN_RESERVE",
    "Budget",
    "BudgetSnapshot",
    "Phase",
    "budget_for",
    "input_budget",
    "output_reserve",
    "phase_of",
    "snapshot",
    "thresholds",
]


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
        context_window=as_count(context_window),
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
