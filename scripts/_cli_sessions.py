"""The `cairn sessions` command: every session of a store with its size, usage and prompt cache."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import msgspec

from cairn._cli_base import EXIT_OK, open_store
from cairn._cli_output import iso, print_json, print_table

if TYPE_CHECKING:
    from cairn.store.backend import JournalBackend
    from cairn.store.index_records import SessionSummary


def usage_of(summary: SessionSummary) -> dict[str, Any]:
    """A session's provider-reported usage: cumulative figures, None where unknown.

    `prompt_tokens` / `completion_tokens` sum the usage events that reported
    each; None (unknown, not 0) when the session got responses and none of
    them reported the figure. `usage_complete` says whether every response
    (`responses`) reported both; `responses_without_usage` how many did not,
    so a figure with some missing is a lower bound.
    `last_usage_total_tokens` is the last reported request's total.
    """
    responses = summary.counts.get("assistant-message", 0)
    reported = min(summary.prompt_reports, summary.completion_reports)
    return {
        "prompt_tokens": summary.prompt_tokens if summary.prompt_reports or not responses else None,
        "completion_tokens": (
            summary.completion_tokens if summary.completion_reports or not responses else None
        ),
        "usage_complete": reported >= responses,
        "responses": responses,
        "responses_without_usage": max(0, responses - reported),
        "last_usage_total_tokens": summary.last_usage_total_tokens,
    }


def _tokens_cell(value: int | None, complete: bool) -> str:
    """A usage figure: `unknown`, a lower bound (`≥`) when some responses lacked usage, or exact."""
    if value is None:
        return "unknown"
    return f"{value:,}" if complete else f"≥{value:,}"


def cache_of(summary: SessionSummary) -> dict[str, Any]:
    """A session's prompt-cache figures, None where unknown (`SessionSummary` says how they are kept).

    `cache_hit_ratio`: cache reads over the whole prompts of the requests
    that reported them, None when the provider reported none;
    `cache_breaks`: the slimming and checkpoint decisions that broke a
    prefix a provider had cached (the cost a user pays for them).
    """
    reported = summary.cache_reports > 0
    prompt = summary.cache_prompt_tokens
    ratio = (summary.cache_read_tokens / prompt if prompt else 0.0) if reported else None
    return {
        "cache_read_tokens": summary.cache_read_tokens if reported else None,
        "cache_write_tokens": summary.cache_write_tokens if reported else None,
        "cache_hit_ratio": ratio,
        "cache_breaks": summary.cache_breaks_by_slimming + summary.cache_breaks_by_checkpoint,
        "cache_breaks_by_slimming": summary.cache_breaks_by_slimming,
        "cache_breaks_by_checkpoint": summary.cache_breaks_by_checkpoint,
    }


def _ratio_cell(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.1%}"


#: summary fields listed through `usage_of` and `cache_of`, or kept only for the index's own fold
_UNLISTED = (
    "prompt_reports",
    "completion_reports",
    "cache_reports",
    "cache_prompt_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_breaks_by_slimming",
    "cache_breaks_by_checkpoint",
    "cache_request_id",
    "cache_answered",
)


def cmd_sessions(args: argparse.Namespace) -> int:
    """Every session with its size, model, checkpoint, provider-reported usage and prompt cache."""
    with open_store(args) as journal:
        summaries = full_summaries(journal)
    caches = [cache_of(s) for s in summaries]
    if args.json:
        listed = [
            {**{k: v for k, v in msgspec.to_builtins(s).items() if k not in _UNLISTED}, **usage_of(s), **c}
            for s, c in zip(summaries, caches, strict=True)
        ]
        print_json(listed)
        return EXIT_OK
    rows = []
    for s, cache in zip(summaries, caches, strict=True):
        usage = usage_of(s)
        complete = usage["usage_complete"]
        rows.append(
            [
                f"{s.sid} !" if s.broken_seq else s.sid,
                s.events,
                s.model,
                iso(s.updated_ts) if s.updated_ts else "",
                s.checkpoint_seq or "",
                _tokens_cell(usage["prompt_tokens"], complete),
                _tokens_cell(usage["completion_tokens"], complete),
                _ratio_cell(cache["cache_hit_ratio"]),
                cache["cache_breaks"],
                s.workspace,
            ]
        )
    print_table(
        "sessions",
        [
            "session",
            "events",
            "model",
            "updated",
            "checkpoint",
            "prompt tokens",
            "completion tokens",
            "cache hit",
            "cache breaks",
            "workspace",
        ],
        rows,
    )
    for s in summaries:
        if s.broken_seq:
            print(f"{s.sid} !: unreadable from seq {s.broken_seq} (a corrupt line: `cairn verify` names it)")
    if any(not usage_of(s)["usage_complete"] for s in summaries):
        print("unknown: the provider reported no usage; ≥: some responses came without usage")
    if any(cache["cache_hit_ratio"] is None for cache in caches):
        print("cache hit -: the provider reported no prompt-cache figures")
    return EXIT_OK


def full_summaries(journal: JournalBackend) -> list[SessionSummary]:
    """Every session's full summary (model, counts, usage, checkpoint), in the backend's order.

    The local index holds them; a cluster's cheap `sessions()` holds only
    the head of each, so there each session is folded by `session(sid)`: a
    read of every event of the store (what `cairn sessions --nats` costs).
    """
    ids = getattr(journal, "session_ids", None)
    if ids is None:
        return list(journal.sessions())
    return [summary for sid in ids() if (summary := journal.session(sid)) is not None]
