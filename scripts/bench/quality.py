"""Compaction quality: which planted facts the effective context still carries after compaction (issue 14).

Usage: cairn bench --only quality [--quick] [--json] [--provider scripted|openai]
       python -m cairn.bench.quality [--quick] [--json] [--provider scripted|openai]

The corpus (`quality_corpus`: 64 seeded sessions, 16 with --quick) goes through every strategy of
`quality_probe` (the full context as ceiling, a blank summary, truncation and the fallback at the
summarizer's tokens, the fallback, the summarizer under test); then the spent-record probe set, and
the long runs (`quality_longrun`: 1,000 turns, 200 with --quick, scripted).

Targets: the blank summary keeps at least 50 points fewer summary-only facts than the ceiling (the
probes can tell a summary that carries nothing); the fallback presents no superseded fact as current;
neither the blank summary nor the fallback presents a spent record as current; the long runs'
bounds (`quality_longrun`). For a real model only: the quality target (`meets_quality_target`) and
more summary-only facts than the fallback at the same tokens.

Offline the summarizer is the scripted provider: the pipeline's floor, never a model's quality.
`--provider openai` (or `CAIRN_BENCH_PROVIDER=openai`) makes it a real model from the host's
`CAIRN_*` settings (a missing one is one failed figure, `quality.provider`, naming it); with
`CAIRN_BENCH_JUDGE=1` the same model also judges (`quality_judge`).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from cairn.actors.provider.base import Provider
from cairn.actors.provider.config import OpenAIConfig, ProviderConfigError
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.actors.tokens import TokenCounter
from cairn.bench._figure import Figure, shown
from cairn.bench.quality_builder import FACT_KINDS
from cairn.bench.quality_corpus import corpus, spent_record_sessions
from cairn.bench.quality_judge import JUDGE_ENV, Judge, judge_set
from cairn.bench.quality_longrun import TURNS, longrun_figures
from cairn.bench.quality_probe import STRATEGIES, Score, evaluate

#: a useful summarizer keeps at least this share of the summary-only facts (and no stale fact) ...
QUALITY_TARGET_SUMMARY_ONLY = 20.0
#: ... in at most this share of the ceiling's tokens (keeping the history is not summarizing it)
QUALITY_TARGET_COST = 0.5
#: the blank summary must be at least this many points below the ceiling on summary-only facts
BLANK_MARGIN = 50.0
SCORED_KINDS = tuple(kind for kind in FACT_KINDS if kind != "superseded")
TARGET_TEXT = (
    f"summary-only >= {QUALITY_TARGET_SUMMARY_ONLY:.0f} %, none stale, "
    f"tokens <= {QUALITY_TARGET_COST:.0%} of the ceiling"
)
_LABELS = {
    "ceiling": "full uncompacted context",
    "blank": "blank summary (seven headings, no evidence)",
    "truncation": "plain truncation to the summarizer's tokens",
    "fallback": "deterministic fallback (F1-F5)",
    "fallback_at_budget": "deterministic fallback (F1-F5) built for the summarizer's tokens",
}


@dataclass(frozen=True)
class Summarizer:
    """The summarizer under test: a real model (`provider`, the judge's too) or, without one, the
    scripted provider (the pipeline's floor, not a model's quality); `label` says which."""

    label: str = "summarizer under test: scripted provider, the pipeline's floor, not model quality"
    provider: OpenAIProvider | None = None
    model: str = ""

    @property
    def real(self) -> bool:
        """A real model answers: its figures are a model's quality, and the quality target applies."""
        return self.provider is not None

    def factory(self) -> Provider:
        return ScriptedProvider() if self.provider is None else self.provider


def summarizer_for(name: str, environ: Mapping[str, str]) -> Summarizer:
    """`scripted`, or `openai` from the `CAIRN_*` settings in `environ` (`ProviderConfigError` names a
    missing or malformed setting, never the key)."""
    if name == "scripted":
        return Summarizer()
    if name != "openai":
        raise ValueError(f"unknown provider {name!r}; known: scripted, openai")
    config = OpenAIConfig.from_env(environ)
    label = f"summarizer under test: model {config.model} at {config.endpoint}: a model's quality"
    return Summarizer(label, OpenAIProvider(config), config.model)


def _cost(score: Score) -> float:
    return score.tokens / score.ceiling_tokens if score.ceiling_tokens else 1.0


def kept_pct(score: Score) -> float:
    """The share of probed facts kept, superseded ones aside (they are judged as stale or not)."""
    probed = sum(score.probed[k] for k in SCORED_KINDS)
    return 100.0 * sum(score.carried[k] for k in SCORED_KINDS) / probed if probed else 100.0


def meets_quality_target(score: Score) -> bool:
    """Enough summary-only facts kept, none superseded presented as current, at most half the
    ceiling's tokens."""
    return (
        score.summary_only_pct() >= QUALITY_TARGET_SUMMARY_ONLY
        and score.stale == 0
        and _cost(score) <= QUALITY_TARGET_COST
    )


def run(quick: bool) -> list[Figure]:
    """The `quality` suite, its summarizer named by `CAIRN_BENCH_PROVIDER` (`cairn bench --provider`)."""
    return run_with(quick, os.environ.get("CAIRN_BENCH_PROVIDER") or "scripted", os.environ)


def run_with(quick: bool, provider: str, environ: Mapping[str, str], *, longrun: bool = True) -> list[Figure]:
    """`run` with the summarizer `provider` and its settings in `environ`; `longrun=False` leaves out
    the long runs (they never call the summarizer under test)."""
    try:
        summarizer = summarizer_for(provider, environ)
    except (ProviderConfigError, ValueError) as exc:
        return [shown("quality.provider", provider, "", "usable", False, str(exc))]
    try:
        figures = _run(2 if quick else 8, summarizer, summarizer.real and environ.get(JUDGE_ENV) == "1")
    finally:
        if summarizer.provider is not None:
            summarizer.provider.close()
    return figures + (longrun_figures(200 if quick else TURNS) if longrun else [])


def _run(per_kind: int, summarizer: Summarizer, judging: bool) -> list[Figure]:
    sessions = corpus(per_kind)
    counter = TokenCounter()
    judge = Judge(summarizer.factory(), summarizer.model, counter) if judging else None
    on_corpus = judge is not None and all(judge.fits(s) for s in sessions)
    hook = judge if on_corpus else None
    scores, _ = evaluate(sessions, counter, summarizer=summarizer.factory, on_session=hook)
    figures = _score_figures(scores, summarizer)
    if judge is not None:
        where = "the corpus" if on_corpus else _judge_own_set(per_kind, judge, summarizer, counter)
        figures.append(_judge_figure(judge, where))
    return [*figures, _spent_record_figure(counter)]


def _judge_own_set(per_kind: int, judge: Judge, summarizer: Summarizer, counter: TokenCounter) -> str:
    """Judge the judge's own set (`quality_judge.judge_set`: the corpus's shapes with the filler scaled
    to fit the endpoint's window), and say what it was."""
    chosen = judge_set(per_kind, judge.fits)
    own, _ = evaluate([s for s, _ in chosen], counter, summarizer=summarizer.factory, on_session=judge)
    scales = Counter(scale for _, scale in chosen)
    by_scale = ", ".join(f"{n} at {scale:g}" for scale, n in sorted(scales.items(), reverse=True))
    used = own["summarizer"]
    return (
        f"the judge's own set (the corpus does not fit the endpoint's window): {len(chosen)} sessions of"
        f" the same shapes, filler scaled to fit ({by_scale}); the summarizer's summaries taken there:"
        f" {used.taken} of {used.compactions}"
    )


def _score_figures(scores: dict[str, Score], summarizer: Summarizer) -> list[Figure]:
    """Each strategy's facts kept, summary-only facts kept and superseded facts shown as current (the
    blank summary's and the fallback's judged), each fact kind's, then the summarizer's own."""
    figures: list[Figure] = []
    ceiling = scores["ceiling"]
    labels = {**_LABELS, "summarizer": summarizer.label}
    for name in STRATEGIES:
        score = scores[name]
        detail = (
            f"{labels[name]}; tokens {_cost(score):.0%} of the ceiling; {score.compactions} compactions, "
            f"{score.fallbacks} fell back, {score.refused} refused"
        )
        figures.append(
            shown(f"quality.{name}.facts_kept", round(kept_pct(score), 1), "%", None, None, detail)
        )
        blank = name == "blank"
        target = f"<= ceiling - {BLANK_MARGIN:.0f} points" if blank else None
        met = score.summary_only_pct() <= ceiling.summary_only_pct() - BLANK_MARGIN if blank else None
        detail = (
            f"{score.summary_only_carried}/{score.summary_only} facts no task or record carries; "
            f"ceiling {ceiling.summary_only_pct():.1f} %"
        )
        value = round(score.summary_only_pct(), 1)
        figures.append(shown(f"quality.{name}.summary_only_kept", value, "%", target, met, detail))
        target, met = ("0 %", score.stale == 0) if name == "fallback" else (None, None)
        detail = (
            f"{score.stale}/{score.superseded} superseded facts shown as current; "
            f"old value still visible in {score.carried['superseded']}"
        )
        value = round(score.stale_pct(), 1)
        figures.append(shown(f"quality.{name}.superseded_as_current", value, "%", target, met, detail))
    for kind in SCORED_KINDS:
        by_strategy = ", ".join(f"{name} {_pct(scores[name].kind(kind))}" for name in STRATEGIES)
        detail = f"{scores['summarizer'].probed[kind]} probed; {by_strategy}"
        value = round(scores["summarizer"].kind(kind) or 0, 1)
        figures.append(shown(f"quality.kind.{kind}", value, "% (summarizer)", None, None, detail))
    return figures + _summarizer_figures(scores, summarizer.real)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _summarizer_figures(scores: dict[str, Score], real: bool) -> list[Figure]:
    """Its quality target and its gain over the fallback at its tokens (judged only for a real model),
    and how many of its summaries were taken as the checkpoint (strategy `llm`)."""
    summarizer, at_budget, fallback = scores["summarizer"], scores["fallback_at_budget"], scores["fallback"]
    meets = "yes" if meets_quality_target(summarizer) else "no"
    judged = "a real model" if real else "the scripted provider (offline: no target)"
    blank = "yes" if meets_quality_target(scores["blank"]) else "no"
    target, met = (TARGET_TEXT, meets == "yes") if real else (None, None)
    detail = f"{TARGET_TEXT}; judges {judged} (blank: {blank})"
    figures = [shown("quality.summarizer.meets_quality_target", meets, "", target, met, detail)]
    share = 100.0 * summarizer.taken / summarizer.compactions if summarizer.compactions else 100.0
    why = "; ".join(f"{count} x {reason}" for reason, count in summarizer.failures.most_common(4))
    detail = (
        f"{summarizer.taken} of {summarizer.compactions} summaries taken as the checkpoint, "
        f"{summarizer.fallbacks} fell back, {summarizer.refused} refused" + (f"; why: {why}" if why else "")
    )
    figures.append(
        shown("quality.summarizer.accepted", round(share, 1), "% of summaries", None, None, detail)
    )
    gap = summarizer.summary_only_pct() - at_budget.summary_only_pct()
    detail = (
        f"summary-only facts kept: summarizer {summarizer.summary_only_pct():.1f} %, the fallback at the "
        f"summarizer's tokens {at_budget.summary_only_pct():.1f} % "
        f"({at_budget.tokens:,} vs {summarizer.tokens:,} tokens after the last compaction, all sessions), "
        f"the fallback at its own target {fallback.summary_only_pct():.1f} % ({fallback.tokens:,} tokens)"
    )
    target, met = ("> 0", gap > 0) if real else (None, None)
    figures.append(
        shown("quality.summarizer.over_fallback_at_budget", round(gap, 1), "points", target, met, detail)
    )
    return figures


def _spent_record_figure(counter: TokenCounter) -> Figure:
    """The spent-record probe set, offline: what the host's own parts (the blank summary and the
    fallback) present as current once a recorded next action was run and replaced."""
    scores, _ = evaluate(spent_record_sessions(8), counter)
    by_strategy = ", ".join(f"{name} {scores[name].stale}/{scores[name].superseded}" for name in STRATEGIES)
    detail = (
        f"a next action recorded (C8), run as a successful tool call, then replaced by a plain-text "
        f"plan; shown as current: {by_strategy} (summarizer: the scripted provider). The spent rule "
        "(beyond C8) moves the record under Verification evidence as no longer pending; the value is "
        "the larger share of the blank summary (the host's parts alone) and the fallback"
    )
    host = (scores["blank"], scores["fallback"])
    value = round(max(score.stale_pct() for score in host), 1)
    met = all(score.stale == 0 for score in host)
    return shown(
        "quality.spent_record.superseded_as_current", value, "%", "0 % (blank and fallback)", met, detail
    )


def _judge_figure(v: Judge, where: str) -> Figure:
    ratio = v.ratio()
    kinds = ", ".join(f"{k} {c[1]}->{c[2]}/{c[0]}" for k, c in sorted(v.by_kind.items()))
    skipped = "; ".join(f"{count} x {why}" for why, count in v.skipped.items())
    detail = (
        f"{v.judged} sessions judged, of {where}" + (f"; not judged: {skipped}" if skipped else "") + "; "
        f"the model answering from the compacted context over from the full one: right {v.after} vs "
        f"{v.before} of {v.asked}; superseded answered stale {v.stale_after} vs {v.stale_before} of "
        f"{v.superseded}; by kind (before->after/asked): {kinds}"
    )
    if ratio is None:
        detail = f"no ratio: no answer right from the full context; {detail}"
    value = None if ratio is None else round(ratio, 3)
    return shown("quality.judge.accuracy_after_over_before", value, "ratio", None, None, detail)


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`."""
    from cairn import bench

    return bench.main(argv, suite="quality")


if __name__ == "__main__":
    sys.exit(main())
