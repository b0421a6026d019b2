"""Compaction quality: which planted facts the effective context still carries after compaction (issue 14).

Usage: cairn bench --only quality [--quick] [--json] [--provider scripted|openai]
       python -m cairn.bench.quality [--quick] [--json] [--provider scripted|openai]

Three parts, seeded and offline by default:

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
   with compaction alone, plus a huge-output run in a 16,000-token window.
4. The spent-record probe set (`quality_corpus.spent_record_sessions`, 8
   sessions, offline): a next action kept as an exact continuation record,
   run, then replaced by a plain-text plan. The spent rule (beyond C8,
   `actors.compactor.ledger`) moves a record whose exact text ran as a
   successful tool call out of "Exact next action", marked as no longer
   pending, so the host's own parts (the blank summary and the fallback)
   must show it as current in none of them.

Offline the summarizer under test is the scripted provider: its figures are
the pipeline's floor (what the host keeps whatever the model writes, plus a
keyword-picking stand-in), never a model's quality. What only a real model
can show: the summarizer's score on summary-only facts (decisions with
their reasons, identifiers, numbers), whether it presents superseded facts
as current, and the judge's accuracy after over before.

`--provider openai` (or `CAIRN_BENCH_PROVIDER=openai`) makes the summarizer
under test a real model on an OpenAI-compatible endpoint, from the same
`CAIRN_*` settings as the host (`CAIRN_BASE_URL`, `CAIRN_API_KEY`,
`CAIRN_MODEL`, ...): one summary call per compaction point (80, or 20 with
--quick). The long runs stay on the scripted provider (they measure the
policies, not the summary). A missing setting is one failed figure,
`quality.provider`, naming it. With `CAIRN_BENCH_JUDGE=1` the same model
also judges (`quality_judge`): it answers every probe's question from the
full context and from the compacted one (two requests a session), and
`quality.judge.accuracy_after_over_before` is the ratio of right answers.

Targets: the blank summary keeps at least 50 points fewer summary-only
facts than the ceiling (the probes can tell a summary that carries nothing);
the fallback presents no superseded fact as current; neither the blank
summary nor the fallback presents a spent record as current; in the long runs (at
their default windows and in the 16,000-token stress window) no two
compactions on consecutive turns, no compaction that leaves the context
still due (never two compactions without a turn of progress), and every
committed compaction saves at least 10 % of its source. The quality target (`meets_quality_target`: at
least 20 % of the summary-only facts, none stale, at most half the
ceiling's tokens) is a target only for a real model; the blank summary, the
known-bad input, fails it (tests/scripts/test_quality.py).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping

from cairn.actors.provider.config import OpenAIConfig, ProviderConfigError
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.actors.tokens import TokenCounter
from cairn.bench._figure import Figure, shown
from cairn.bench.quality_builder import FACT_KINDS, Session
from cairn.bench.quality_corpus import KINDS, corpus, spent_record_sessions
from cairn.bench.quality_judge import JUDGE_ENV, JudgeScore, fits_window, judge_session, judge_set
from cairn.bench.quality_longrun import TURNS, longrun_figures
from cairn.bench.quality_probe import STRATEGIES, Probe, ProviderFactory, Run, Score, SessionHook, evaluate

#: a useful summarizer keeps at least this share of the summary-only facts (and no stale fact) ...
QUALITY_TARGET_SUMMARY_ONLY = 20.0
#: ... in at most this share of the ceiling's tokens (keeping the history is not summarizing it)
QUALITY_TARGET_COST = 0.5
#: the blank summary must be at least this many points below the ceiling on summary-only facts
BLANK_MARGIN = 50.0
FULL_PER_KIND = 8
QUICK_PER_KIND = 2
QUICK_TURNS = 200
#: sessions of the spent-record probe set (a recorded next action run, then replaced)
SPENT_RECORD_SESSIONS = 8
SCORED_KINDS = tuple(kind for kind in FACT_KINDS if kind != "superseded")
TARGET_TEXT = (
    f"summary-only >= {QUALITY_TARGET_SUMMARY_ONLY:.0f} %, none stale, "
    f"tokens <= {QUALITY_TARGET_COST:.0%} of the ceiling"
)
#: the summarizer under test: `scripted` (offline, the default) or `openai` (the `CAIRN_*` settings)
PROVIDER_ENV = "CAIRN_BENCH_PROVIDER"
PROVIDERS = ("scripted", "openai")

_LABELS = {
    "ceiling": "full uncompacted context",
    "blank": "blank summary (seven headings, no evidence)",
    "truncation": "plain truncation to the summarizer's tokens",
    "fallback": "deterministic fallback (F1-F5)",
    "fallback_at_budget": "deterministic fallback (F1-F5) built for the summarizer's tokens",
}
SCRIPTED_LABEL = "summarizer under test: scripted provider, the pipeline's floor, not model quality"


class Summarizer:
    """The summarizer under test: how to make its provider, what to call it, how to release it."""

    def __init__(
        self, name: str, factory: ProviderFactory, label: str, close: Callable[[], None], model: str = ""
    ) -> None:
        self.name = name
        self.factory = factory
        self.label = label
        self.close = close
        self.model = model

    @property
    def real(self) -> bool:
        """A real model answers: its figures are a model's quality, and the quality target applies."""
        return self.name != "scripted"


def summarizer_for(name: str, environ: Mapping[str, str]) -> Summarizer:
    """`scripted`, or `openai` from the `CAIRN_*` settings in `environ` (`ProviderConfigError` when
    one is missing or malformed; it names the setting, never the key)."""
    if name == "scripted":
        return Summarizer(name, ScriptedProvider, SCRIPTED_LABEL, lambda: None)
    if name != "openai":
        raise ValueError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}")
    config = OpenAIConfig.from_env(environ)
    provider = OpenAIProvider(config)
    label = f"summarizer under test: model {config.model} at {config.endpoint}: a model's quality"
    return Summarizer(name, lambda: provider, label, provider.close, config.model)


def kept_pct(score: Score) -> float:
    """The share of probed facts kept, superseded ones aside (they are judged as stale or not)."""
    probed = sum(score.probed[k] for k in SCORED_KINDS)
    kept = sum(score.carried[k] for k in SCORED_KINDS)
    return 100.0 * kept / probed if probed else 100.0


def meets_quality_target(score: Score) -> bool:
    """The quality target: enough summary-only facts kept, no superseded fact presented as current,
    at no more than half the ceiling's tokens."""
    cost = score.tokens / score.ceiling_tokens if score.ceiling_tokens else 1.0
    return (
        score.summary_only_pct() >= QUALITY_TARGET_SUMMARY_ONLY
        and score.stale == 0
        and cost <= QUALITY_TARGET_COST
    )


def _kinds_detail(score: Score) -> str:
    parts = []
    for kind in SCORED_KINDS:
        pct = score.kind(kind)
        parts.append(f"{kind} {pct:.0f}" if pct is not None else f"{kind} -")
    return ", ".join(parts)


def _strategy_figures(name: str, score: Score, ceiling: Score, sessions: int, label: str) -> list[Figure]:
    prefix = f"quality.{name}"
    cost = score.tokens / score.ceiling_tokens if score.ceiling_tokens else 1.0
    detail = (
        f"{label}; {sessions} sessions; tokens {score.tokens // max(sessions, 1):,} a session "
        f"({cost:.0%} of the ceiling); by kind %: {_kinds_detail(score)}; "
        f"{score.compactions} compactions, {score.fallbacks} fell back, {score.refused} refused"
    )
    figures = [shown(f"{prefix}.facts_kept", round(kept_pct(score), 1), "%", None, None, detail)]
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
        shown(f"{prefix}.summary_only_kept", round(score.summary_only_pct(), 1), "%", target, met, detail)
    )
    target, met = ("0 %", score.stale == 0) if name == "fallback" else (None, None)
    detail = (
        f"{score.stale}/{score.superseded} superseded facts shown as current; "
        f"old value still visible in {score.carried['superseded']}"
    )
    figures.append(
        shown(f"{prefix}.superseded_as_current", round(score.stale_pct(), 1), "%", target, met, detail)
    )
    figures.append(
        shown(
            f"{prefix}.tokens_over_ceiling",
            round(cost, 3),
            "ratio",
            None,
            None,
            "effective context tokens after the last compaction over the uncompacted context's",
        )
    )
    return figures


def _kind_figures(scores: dict[str, Score]) -> list[Figure]:
    figures = []
    for kind in SCORED_KINDS:
        summarizer = scores["summarizer"].kind(kind)
        parts = []
        for name in STRATEGIES:
            pct = scores[name].kind(kind)
            parts.append(f"{name} {pct:.1f}" if pct is not None else f"{name} -")
        detail = f"{scores['summarizer'].probed[kind]} probed; " + ", ".join(parts)
        value = round(summarizer, 1) if summarizer is not None else 0
        figures.append(shown(f"quality.kind.{kind}", value, "% (summarizer)", None, None, detail))
    return figures


def run(quick: bool) -> list[Figure]:
    """The `quality` suite: corpus, probes against the five strategies, long-run behaviour.

    The summarizer under test is named by `CAIRN_BENCH_PROVIDER` (`cairn bench --provider`).
    """
    return run_with(quick, os.environ.get(PROVIDER_ENV) or "scripted", os.environ)


def run_with(quick: bool, provider: str, environ: Mapping[str, str], *, longrun: bool = True) -> list[Figure]:
    """`run` with the summarizer `provider` (`scripted`, `openai`) and its settings in `environ`;
    `longrun=False` leaves out the long runs (they never call the summarizer under test)."""
    try:
        summarizer = summarizer_for(provider, environ)
    except (ProviderConfigError, ValueError) as exc:
        return [shown("quality.provider", provider, "", "usable", False, str(exc))]
    try:
        judge = summarizer.real and environ.get(JUDGE_ENV) == "1"
        return _run(quick, summarizer, longrun, judge)
    finally:
        summarizer.close()


def _run(quick: bool, summarizer_under_test: Summarizer, longrun: bool, judge: bool) -> list[Figure]:
    per_kind = QUICK_PER_KIND if quick else FULL_PER_KIND
    sessions = corpus(per_kind)
    counter = TokenCounter()
    verdicts = JudgeScore()
    hook: SessionHook | None = None
    judge_on_corpus = False
    if judge:
        provider = summarizer_under_test.factory()

        def hook(session: Session, probes: list[Probe], runs: dict[str, Run]) -> None:
            judge_session(verdicts, provider, summarizer_under_test.model, session, probes, runs)

        judge_on_corpus = all(fits_window(provider, s, counter) for s in sessions)
    scores, probes = evaluate(
        sessions,
        counter,
        summarizer=summarizer_under_test.factory,
        on_session=hook if judge_on_corpus else None,
    )
    figures = [_corpus_figure(sessions, probes)]
    figures += _score_figures(scores, len(sessions), summarizer_under_test)
    if judge:
        where = "the corpus"
        if not judge_on_corpus:
            chosen = judge_set(per_kind, lambda s: fits_window(provider, s, counter))
            own, _ = evaluate(
                [s for s, _ in chosen], counter, summarizer=summarizer_under_test.factory, on_session=hook
            )
            where = _judge_set_text(chosen, own["summarizer"])
        figures.append(_judge_figure(verdicts, where))
    figures.append(_spent_record_figure(counter))
    if longrun:
        figures += longrun_figures(QUICK_TURNS if quick else TURNS)
    return figures


def _corpus_figure(sessions: list[Session], probes: list[Probe]) -> Figure:
    """The corpus: its sessions, the facts planted in them and where the probed ones are carried."""
    planted = sum(len(s.facts) for s in sessions)
    carriers = {c: sum(1 for p in probes if p.carrier == c) for c in ("summary", "task", "record")}
    return shown(
        "quality.corpus",
        len(sessions),
        "sessions",
        None,
        None,
        f"{len(KINDS)} kinds; {planted} facts planted, {len(probes)} probed (outside the retained tail): "
        f"{carriers['summary']} summary-only, {carriers['task']} in the active task, "
        f"{carriers['record']} in records",
    )


def _score_figures(
    scores: dict[str, Score], sessions: int, summarizer_under_test: Summarizer
) -> list[Figure]:
    """Each strategy's and each kind's figures, then the summarizer's: its quality target (judged
    only for a real model), the summaries taken, and its gain over the fallback."""
    figures: list[Figure] = []
    ceiling = scores["ceiling"]
    labels = {**_LABELS, "summarizer": summarizer_under_test.label}
    for name in STRATEGIES:
        figures += _strategy_figures(name, scores[name], ceiling, sessions, labels[name])
    figures += _kind_figures(scores)
    summarizer = scores["summarizer"]
    meets = meets_quality_target(summarizer)
    real = summarizer_under_test.real
    judged = "a real model" if real else "the scripted provider (offline: no target)"
    blank = "yes" if meets_quality_target(scores["blank"]) else "no"
    figures.append(
        shown(
            "quality.summarizer.meets_quality_target",
            "yes" if meets else "no",
            "",
            TARGET_TEXT if real else None,
            meets if real else None,
            f"{TARGET_TEXT}; judges {judged} (blank: {blank})",
        )
    )
    figures.append(_accepted_figure(summarizer))
    figures.append(_over_fallback_figure(summarizer, scores["fallback_at_budget"], scores["fallback"], real))
    return figures


def _accepted_figure(summarizer: Score) -> Figure:
    """How many of the summarizer's summaries were taken (strategy `llm`), and why the others failed."""
    failed = summarizer.fallbacks + summarizer.refused
    taken = summarizer.compactions - failed
    share = 100.0 * taken / summarizer.compactions if summarizer.compactions else 100.0
    why = "; ".join(f"{count} x {reason}" for reason, count in summarizer.failures.most_common(4))
    return shown(
        "quality.summarizer.accepted",
        round(share, 1),
        "% of summaries",
        None,
        None,
        f"{taken} of {summarizer.compactions} summaries taken as the checkpoint, {summarizer.fallbacks} fell "
        f"back, {summarizer.refused} refused" + (f"; why: {why}" if why else ""),
    )


def _over_fallback_figure(summarizer: Score, at_budget: Score, fallback: Score, real: bool) -> Figure:
    """Issue 33's goal: the summarizer's checkpoint keeps more summary-only facts than the host's
    parts alone (the fallback: records, active task, newest units) at the same tokens. Points
    above (+) or below (-) it; a target only for a real model."""
    gap = summarizer.summary_only_pct() - at_budget.summary_only_pct()
    detail = (
        f"summary-only facts kept: summarizer {summarizer.summary_only_pct():.1f} %, the fallback at the "
        f"summarizer's tokens {at_budget.summary_only_pct():.1f} % "
        f"({at_budget.tokens:,} vs {summarizer.tokens:,} tokens after the last compaction, all sessions), "
        f"the fallback at its own target {fallback.summary_only_pct():.1f} % ({fallback.tokens:,} tokens)"
    )
    return shown(
        "quality.summarizer.over_fallback_at_budget",
        round(gap, 1),
        "points",
        "> 0" if real else None,
        gap > 0 if real else None,
        detail,
    )


def _spent_record_figure(counter: TokenCounter) -> Figure:
    """The spent-record probe set (`quality_corpus.spent_record_sessions`), offline: what the host's
    own parts (the blank summary and the fallback) present as current once a recorded next action
    was run and replaced. The value is the larger of their two shares; the target is 0 for both."""
    scores, _ = evaluate(spent_record_sessions(SPENT_RECORD_SESSIONS), counter)
    by_strategy = ", ".join(f"{name} {scores[name].stale}/{scores[name].superseded}" for name in STRATEGIES)
    detail = (
        f"a next action recorded (C8), run as a successful tool call, then replaced by a plain-text "
        f"plan; shown as current: {by_strategy} (summarizer: the scripted provider). The spent rule "
        "(beyond C8) moves the record under Verification evidence as no longer pending; the value is "
        "the larger share of the blank summary (the host's parts alone) and the fallback"
    )
    host = (scores["blank"], scores["fallback"])
    value = max(score.stale_pct() for score in host)
    met = all(score.stale == 0 for score in host)
    return shown(
        "quality.spent_record.superseded_as_current",
        round(value, 1),
        "%",
        "0 % (blank and fallback)",
        met,
        detail,
    )


def _judge_set_text(chosen: list[tuple[Session, float]], summarizer: Score) -> str:
    """Which sessions the judge asked about when the corpus does not fit the endpoint's window."""
    scales = Counter(scale for _, scale in chosen)
    by_scale = ", ".join(f"{count} at {scale:g}" for scale, count in sorted(scales.items(), reverse=True))
    taken = summarizer.compactions - summarizer.fallbacks - summarizer.refused
    return (
        f"the judge's own set (the corpus does not fit the endpoint's window): {len(chosen)} sessions "
        f"of the same shapes, filler scaled to fit ({by_scale}); the summarizer's summaries taken there: "
        f"{taken} of {summarizer.compactions}"
    )


def _judge_figure(v: JudgeScore, where: str) -> Figure:
    ratio = v.ratio()
    kinds = ", ".join(f"{k} {c[1]}->{c[2]}/{c[0]}" for k, c in sorted(v.by_kind.items()))
    skipped = "; ".join(f"{count} x {why}" for why, count in v.skipped.items())
    detail = (
        f"{v.judged} sessions judged, of {where}" + (f"; not judged: {skipped}" if skipped else "") + "; "
        f"the model answering from the compacted context over from the full one: right {v.after} vs "
        f"{v.before} of {v.asked}; superseded answered stale {v.stale_after} vs {v.stale_before} of "
        f"{v.superseded}; by kind (before->after/asked): {kinds}"
    )
    return shown(
        "quality.judge.accuracy_after_over_before",
        None if ratio is None else round(ratio, 3),
        "ratio",
        None,
        None,
        detail if ratio is not None else f"no ratio: no answer right from the full context; {detail}",
    )


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`."""
    from cairn import bench

    return bench.main(argv, suite="quality")


if __name__ == "__main__":
    sys.exit(main())
