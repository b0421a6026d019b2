"""The report's figures over many sessions: the store's totals and the sessions' costs, as text."""

from __future__ import annotations

from cairn.audit.report_fold import SessionFold


def tokens_text(value: int, reports: int, responses: int) -> str:
    """A usage sum: `unknown` when responses came without any report, `≥` when some lacked one."""
    if reports == 0 and responses > 0:
        return "unknown"
    return f"{value:,}" if reports >= responses else f"≥{value:,}"


def cost_text(fold: SessionFold) -> str:
    """A session's cost in the price table's currency ("" without one); `≥` when some answers were
    of a model the table does not price."""
    if not fold.priced:
        return ""
    return ("≥" if fold.unpriced else "") + f"{fold.cost_micros / 1e6:,.4f}"


def totals(folds: list[SessionFold], currency: str | None = None) -> list[tuple[str, str]]:
    """The store's totals over its readable sessions, as (figure, value) rows (the cost with a price
    table, in its `currency`)."""

    def total(name: str) -> int:
        return sum(int(getattr(f, name)) for f in folds)

    responses = total("responses")
    turns = total("turns")
    return [
        ("sessions", f"{len(folds):,}"),
        ("events", f"{total('events'):,}"),
        (
            "turns",
            f"{turns:,} started: {total('turns_completed'):,} completed, {total('turns_failed'):,} failed, "
            f"{total('turns_interrupted'):,} interrupted, {total('turns_cancelled'):,} cancelled",
        ),
        ("requests", f"{total('requests'):,} ({responses:,} answered)"),
        ("prompt tokens", tokens_text(total("prompt_tokens"), total("prompt_reports"), responses)),
        (
            "completion tokens",
            tokens_text(total("completion_tokens"), total("completion_reports"), responses),
        ),
        ("hand-offs", f"{total('handoffs'):,}"),
        (
            "checkpoints",
            f"{total('checkpoint_count'):,} ({total('checkpoints_llm'):,} by LLM summary, "
            f"{total('checkpoint_count') - total('checkpoints_llm'):,} by the fallback)",
        ),
        (
            "errors recovered",
            f"{total('errors_recovered'):,} (provider errors retried, compactions that failed)",
        ),
        *_cost_total(folds, currency),
    ]


def _cost_total(folds: list[SessionFold], currency: str | None) -> list[tuple[str, str]]:
    if currency is None:
        return []
    micros, unpriced = sum(f.cost_micros for f in folds), sum(f.unpriced for f in folds)
    left = f"; {unpriced:,} answers of models the price table does not name, not counted" if unpriced else ""
    return [("cost", f"{micros / 1e6:,.4f} {currency}{left}")]
