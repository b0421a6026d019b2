"""Compaction quality: which planted facts the effective context still carries after compaction (issue 14).

Usage: cairn bench --only quality [--quick] [--json]
       python -m cairn.bench.quality [--quick] [--json]

Three parts, all seeded and offline:

1. The corpus (`quality_corpus`): 64 sessions (16 with --quick) of eight
   agent shapes, real cairn events, with planted facts of nine kinds.
2. Probes and baselines (`quality_probe`): every session through five
   strategies (the full context as ceiling, a blank summary, plain
   truncation to the summarizer's tokens, the deterministic fallback, the
   summarizer under test); per strategy the share of probed facts kept (per
   kind, and of the summary-only ones), the share of superseded facts
   presented as current, and the token cost against the ceiling.
3. Long-run behaviour (`quality_longrun`): 1,000-turn sessions (200 with
   --quick) of each kind through the pure L1 policies, with snipping and
   with compaction alone.

The summarizer under test is the scripted provider: its figures are the
pipeline's floor (what the host keeps whatever the model writes, plus a
keyword-picking stand-in), never a model's quality. What only a real model
can show: the summarizer's score on summary-only facts, decisions with
their reasons, and whether it presents superseded facts as current.

Targets: the blank summary keeps at least 50 points fewer summary-only
facts than the ceiling (the probes can tell a summary that carries nothing);
the fallback presents no superseded fact as current; no two compactions on
consecutive turns (never two compactions without a turn of progress).
`QUALITY_TARGET` is what a summarizer must reach to count as useful; the
blank summary, the known-bad input, fails it (tests/scripts/test_quality.py).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from cairn.actors.tokens import TokenCounter
from cairn.bench import figure
from cairn.bench.quality_corpus import FACT_KINDS, KINDS, corpus
from cairn.bench.quality_longrun import TURNS, LongRun, simulate_all
from cairn.bench.quality_probe import STRATEGIES, Score, evaluate

#: a useful summarizer keeps at least this share of the summary-only facts (and no stale fact)
QUALITY_TARGET_SUMMARY_ONLY = 20.0
#: the blank summary must be at least this many points below the ceiling on summary-only facts
BLANK_MARGIN = 50.0
FULL_PER_KIND = 8
QUICK_PER_KIND = 2
QUICK_TURNS = 200
SCORED_KINDS = tuple(kind for kind in FACT_KINDS if kind != "superseded")

_LABELS = {
    "ceiling": "full uncompacted context",
    "blank": "blank summary (seven headings, no evidence)",
    "truncation": "plain truncation to the summarizer's tokens",
    "fallback": "deterministic fallback (F1-F5)",
    "summarizer": "summarizer under test: scripted provider, the pipeline's floor, not model quality",
}


def kept_pct(score: Score) -> float:
    """The share of probed facts kept, superseded ones aside (they are judged as stale or not)."""
    probed = sum(score.probed[k] for k in SCORED_KINDS)
    kept = sum(score.carried[k] for k in SCORED_KINDS)
    return 100.0 * kept / probed if probed else 100.0


def meets_quality_target(score: Score) -> bool:
    """QUALITY_TARGET: enough summary-only facts kept, and no superseded fact presented as current."""
    return score.summary_only_pct() >= QUALITY_TARGET_SUMMARY_ONLY and score.stale == 0


def _kinds_detail(score: Score) -> str:
    parts = []
    for kind in SCORED_KINDS:
        pct = score.kind(kind)
        parts.append(f"{kind} {pct:.0f}" if pct is not None else f"{kind} -")
    return ", ".join(parts)


def _strategy_figures(name: str, score: Score, ceiling: Score, sessions: int) -> list[dict[str, Any]]:
    prefix = f"quality.{name}"
    cost = score.tokens / score.ceiling_tokens if score.ceiling_tokens else 1.0
    detail = (
        f"{_LABELS[name]}; {sessions} sessions; tokens {score.tokens // max(sessions, 1):,} a session "
        f"({cost:.0%} of the ceiling); by kind %: {_kinds_detail(score)}; "
        f"{score.compactions} compactions, {score.fallbacks} fell back, {score.refused} refused"
    )
    figures = [figure(f"{prefix}.facts_kept", round(kept_pct(score), 1), "%", None, None, detail)]
    target: str | None = None
    met: bool | None = None
    if name == "blank":
        target = f"<= ceiling - {BLANK_MARGIN:.0f} points"
        met = score.summary_only_pct() <= ceiling.summary_only_pct() - BLANK_MARGIN
    detail = (
        f"{score.summary_only_carried}/{score.summary_only} facts no task or record carries; "
        f"ceiling {ceiling.summary_only_pct():.1f} %"
    )
    figures.append(
        figure(f"{prefix}.summary_only_kept", round(score.summary_only_pct(), 1), "%", target, met, detail)
    )
    target, met = ("0 %", score.stale == 0) if name == "fallback" else (None, None)
    detail = (
        f"{score.stale}/{score.superseded} superseded facts shown as current; "
        f"old value still visible in {score.carried['superseded']}"
    )
    figures.append(
        figure(f"{prefix}.superseded_as_current", round(score.stale_pct(), 1), "%", target, met, detail)
    )
    figures.append(
        figure(
            f"{prefix}.tokens_over_ceiling",
            round(cost, 3),
            "ratio",
            None,
            None,
            "effective context tokens after the last compaction over the uncompacted context's",
        )
    )
    return figures


def _kind_figures(scores: dict[str, Score]) -> list[dict[str, Any]]:
    figures = []
    for kind in SCORED_KINDS:
        summarizer = scores["summarizer"].kind(kind)
        parts = []
        for name in STRATEGIES:
            pct = scores[name].kind(kind)
            parts.append(f"{name} {pct:.1f}" if pct is not None else f"{name} -")
        detail = f"{scores['summarizer'].probed[kind]} probed; " + ", ".join(parts)
        value = round(summarizer, 1) if summarizer is not None else 0
        figures.append(figure(f"quality.kind.{kind}", value, "% (summarizer)", None, None, detail))
    return figures


def _longrun_figures(runs: list[LongRun], variant: str, turns: int) -> list[dict[str, Any]]:
    figures = []
    for r in runs:
        saved = f"{statistics.median(r.saved):,.0f}" if r.saved else "-"
        share = (
            f"{statistics.median(r.after_share):.2f} (max {max(r.after_share):.2f})" if r.after_share else "-"
        )
        detail = (
            f"{r.compactions} compactions in {turns} turns ({r.llm} by summary); "
            f"snips {r.per_100(r.snips):.1f}/100; median saved {saved} tokens; "
            f"budget share after: {share}; still due after {r.still_due}; back-to-back {r.back_to_back}; "
            f"longest compacting run {r.longest_compacting_run}; failed {r.failed}"
        )
        figures.append(
            figure(
                f"quality.{variant}.{r.kind}",
                round(r.per_100(r.compactions), 2),
                "compactions/100 turns",
                None,
                None,
                detail,
            )
        )
    return figures


def run(quick: bool) -> list[dict[str, Any]]:
    """The `quality` suite: corpus, probes against the five strategies, long-run behaviour."""
    started = time.perf_counter()
    sessions = corpus(QUICK_PER_KIND if quick else FULL_PER_KIND)
    counter = TokenCounter()
    scores, probes = evaluate(sessions, counter)
    planted = sum(len(s.facts) for s in sessions)
    carriers = {c: sum(1 for p in probes if p.carrier == c) for c in ("summary", "task", "record")}
    figures = [
        figure(
            "quality.corpus",
            len(sessions),
            "sessions",
            None,
            None,
            f"{len(KINDS)} kinds; {planted} facts planted, {len(probes)} probed (outside the retained tail): "
            f"{carriers['summary']} summary-only, {carriers['task']} in the active task, "
            f"{carriers['record']} in records",
        )
    ]
    ceiling = scores["ceiling"]
    for name in STRATEGIES:
        figures += _strategy_figures(name, scores[name], ceiling, len(sessions))
    figures += _kind_figures(scores)
    summarizer = scores["summarizer"]
    figures.append(
        figure(
            "quality.summarizer.meets_quality_target",
            "yes" if meets_quality_target(summarizer) else "no",
            "",
            None,
            None,
            f"summary-only >= {QUALITY_TARGET_SUMMARY_ONLY:.0f} % and none stale; offline this judges the "
            f"scripted provider (blank: {'yes' if meets_quality_target(scores['blank']) else 'no'})",
        )
    )
    turns = QUICK_TURNS if quick else TURNS
    with_snip = simulate_all(turns)
    without = simulate_all(turns, snip=False)
    figures += _longrun_figures(with_snip, "longrun", turns)
    figures += _longrun_figures(without, "longrun_nosnip", turns)
    runs = with_snip + without
    back = sum(r.back_to_back for r in runs)
    figures.append(
        figure(
            "quality.longrun.back_to_back_compactions",
            back,
            "compactions",
            "0",
            back == 0,
            f"compactions on the turn right after another, {len(runs)} sessions of {turns} turns "
            f"(with and without snip); longest compacting run {max(r.longest_compacting_run for r in runs)}",
        )
    )
    shares = [s for r in runs for s in r.after_share]
    figures.append(
        figure(
            "quality.longrun.budget_share_after_compaction",
            round(max(shares), 3) if shares else 0,
            "ratio (max)",
            None,
            None,
            f"projection right after each of {len(shares)} compactions over the input budget; "
            f"median {statistics.median(shares):.3f}"
            if shares
            else "no compaction",
        )
    )
    figures.append(
        figure("quality.seconds", round(time.perf_counter() - started, 1), "s", None, None, "the whole suite")
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`."""
    from cairn import bench

    return bench.main(argv, suite="quality")


if __name__ == "__main__":
    sys.exit(main())
