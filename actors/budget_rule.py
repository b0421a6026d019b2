"""The budget rule (CONTEXT-RULES B1-B3), once: a leaf the session and the compactor both import.

In exact integer arithmetic (no floats, so a window of 2**53 - 1 or more
still gives exact thresholds):

- B1 reserve: the explicit output cap when one is configured, else
  window // 10 clamped to 8,192..32,768; no usable window: unknown.
- B2 budget: window - reserve; unknown when the window is not a positive int,
  the reserve is not a non-negative int, or the reserve is not below the window.
- B3 thresholds: hand-off = budget * 7 // 10, compaction = budget * 8 // 10.

The session's budget snapshot and phases (B4) build on it
(`actors.session.budget`), and so do the compactor's C10 target and room
rule (`actors.compactor.gates`).
"""

from __future__ import annotations

MIN_RESERVE = 8_192
MAX_RESERVE = 32_768


def as_count(value: object) -> int | None:
    """`value` if it is an int and not a bool (True is an int to Python, never a count to us)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def output_reserve(context_window: object, max_output_tokens: object) -> int | None:
    """B1: the tokens kept free for the reply, or None when unknown.

    An explicit cap is returned as configured (B2 decides whether it is
    usable); without one, 10 % of a positive integer window, clamped.
    """
    if max_output_tokens is not None:
        return as_count(max_output_tokens)
    window = as_count(context_window)
    if window is None or window <= 0:
        return None
    return min(MAX_RESERVE, max(MIN_RESERVE, window // 10))


def input_budget(context_window: object, reserve: object) -> int | None:
    """B2: window - reserve, or None when either is unusable or the reserve fills the window."""
    window = as_count(context_window)
    kept = as_count(reserve)
    if window is None or kept is None or window <= 0 or kept < 0 or kept >= window:
        return None
    return window - kept


def input_budget_of(context_window: object, max_output_tokens: object) -> int | None:
    """B1 then B2: the input budget of a window and an output cap (None: no cap), or None."""
    return input_budget(context_window, output_reserve(context_window, max_output_tokens))


def thresholds(budget: int) -> tuple[int, int]:
    """B3: (hand-off, compaction) thresholds of a known budget."""
    return budget * 7 // 10, budget * 8 // 10
