"""The compaction quality bench (issue 14): its corpus, its probes, its baselines and its long-run figures.

The blank summary is the known-bad input: the probes must tell it from the
ceiling and it must fail the quality target. Numbers are those of the
seeded quick corpus (two sessions of each kind).
"""

from __future__ import annotations

import re

import msgspec
import pytest

from cairn.actors.provider.base import ProviderRequest
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.actors.tokens import TokenCounter
from cairn.bench import quality
from cairn.bench.quality_builder import FACT_KINDS, Fact
from cairn.bench.quality_corpus import KINDS, corpus, spent_record_sessions
from cairn.bench.quality_longrun import simulate
from cairn.bench.quality_probe import BLANK_SUMMARY, Lines, Score, evaluate, last_line, presented_as_current
from cairn.events.model import Message, text_of
from cairn.events.protocol import HEADINGS


@pytest.fixture(scope="module")
def scored() -> tuple[dict[str, Score], int]:
    sessions = corpus(2)
    scores, probes = evaluate(sessions, TokenCounter())
    return scores, len(probes)


def test_the_corpus_is_seeded_and_has_every_kind_and_fact_kind() -> None:
    first, again = corpus(2), corpus(2)
    assert msgspec.json.encode(first) == msgspec.json.encode(again)
    assert len(corpus(8)) == 64
    assert [s.kind for s in first[:8]] == list(KINDS)
    assert {f.kind for s in first for f in s.facts} == set(FACT_KINDS)
    assert sum(len(s.facts) for s in first) == 191
    assert all(
        any(f.kind == "superseded" and f.replaced_by for f in s.facts) for s in first if s.kind != "images"
    )
    multi = [s for s in first if s.kind == "multi-compaction"]
    assert all(len(s.compact_after) == 3 for s in multi)


def test_the_ceiling_keeps_every_probed_fact_and_the_blank_summary_none_of_the_summary_only(
    scored: tuple[dict[str, Score], int],
) -> None:
    scores, probed = scored
    assert probed == 186
    ceiling, blank = scores["ceiling"], scores["blank"]
    assert quality.kept_pct(ceiling) == 100.0
    assert (blank.summary_only, blank.summary_only_carried) == (121, 0)
    assert ceiling.summary_only_carried == 121
    # what the blank summary keeps, the host kept: the active task (C11) and exact records (C8)
    assert blank.carried["task"] == blank.probed["task"] == 16
    assert blank.carried["decision"] == 0


def test_the_blank_summary_fails_the_quality_target(scored: tuple[dict[str, Score], int]) -> None:
    scores, _ = scored
    assert not quality.meets_quality_target(scores["blank"])
    assert quality.meets_quality_target(scores["summarizer"])  # the scripted floor, just
    assert not quality.meets_quality_target(scores["ceiling"])  # keeps it all, at full cost
    assert not quality.meets_quality_target(scores["fallback"])  # 77 % of the ceiling's tokens
    assert scores["blank"].summary_only_pct() <= scores["ceiling"].summary_only_pct() - quality.BLANK_MARGIN


def test_the_fallback_presents_no_superseded_fact_as_current(scored: tuple[dict[str, Score], int]) -> None:
    scores, _ = scored
    assert scores["fallback"].superseded == 14
    assert scores["fallback"].stale == 0


def _stale_summary(request: ProviderRequest) -> Reply:
    """A careless summarizer: the first value it saw of each limit, stated as current."""
    transcript = "\n".join(text_of(m) for m in request.messages)
    first: dict[str, str] = {}
    for name, value in re.findall(r"\b([A-Z]+_LIMIT_[0-9A-F]{4}) = (\d+)", transcript):
        first.setdefault(name, f"{name} = {value}")
    lines = "\n".join(f"- {line}" for line in first.values()) or "- No evidence observed."
    body = "\n\n".join(
        f"## {h}\n{lines if n == 1 else '- No evidence observed.'}" for n, h in enumerate(HEADINGS)
    )
    return Reply(text=f"<summary>\n{body}\n</summary>")


def test_a_summarizer_that_states_replaced_values_as_current_is_caught() -> None:
    sessions = [s for s in corpus(2) if s.kind in ("coding", "research")]
    scores, _ = evaluate(
        sessions, TokenCounter(), summarizer=lambda: ScriptedProvider(responder=_stale_summary)
    )
    summarizer = scores["summarizer"]
    # the fourth session's new value sits in the retained tail, after the summary: the newest wins
    assert (summarizer.stale, summarizer.superseded) == (3, 4)
    assert not quality.meets_quality_target(summarizer)


def test_C8_spent_a_recorded_next_action_that_was_run_is_current_in_no_host_ledger() -> None:
    """The spent rule (beyond C8): a next-action record whose exact text later ran as a successful
    tool call is moved under Verification evidence as no longer pending, so no ledger built by the
    host (the blank summary, the fallback, and the scripted summarizer's) shows it as current."""
    sessions = spent_record_sessions(8)
    assert msgspec.json.encode(sessions) == msgspec.json.encode(spent_record_sessions(8))
    scores, probes = evaluate(sessions, TokenCounter())
    assert sum(p.fact.kind == "superseded" for p in probes) == 8
    stale = {name: (score.stale, score.superseded) for name, score in scores.items()}
    assert stale == {
        "ceiling": (0, 8),
        "blank": (0, 8),
        "truncation": (0, 8),
        "fallback": (0, 8),
        "fallback_at_budget": (0, 8),
        "summarizer": (0, 8),
    }
    figure = quality._spent_record_figure(TokenCounter())
    assert (figure.value, figure.target, figure.met) == (0.0, "0 % (blank and fallback)", True)
    assert "blank 0/8" in figure.detail and "fallback 0/8" in figure.detail


def test_the_probe_rule_for_statements_and_superseded_values() -> None:
    decision = Fact("d", "decision", ("LedgerIndexAB12.lookup", "the lease can expire while replay runs"), 1)
    one_line = Lines(
        [
            Message(
                role="user",
                content="Decision: use ledgerindexab12.lookup because THE LEASE can expire while replay runs",
            )
        ]
    )
    split = Lines(
        [
            Message(
                role="user",
                content="use LedgerIndexAB12.lookup\nbecause the lease can expire while replay runs",
            )
        ]
    )
    assert last_line(decision, one_line) == 0
    assert last_line(decision, split) is None
    number = Fact("n", "number", ("LEDGER_LIMIT_AB12 = 7000",), 1)
    old = Fact("o", "superseded", ("LEDGER_LIMIT_AB12 = 300",), 1, replaced_by="n")
    assert (
        last_line(number, Lines([Message(role="user", content="ledger_limit_ab12 = 7000")])) is None
    )  # exact case
    newest_last = Lines(
        [Message(role="user", content="LEDGER_LIMIT_AB12 = 300\nnow LEDGER_LIMIT_AB12 = 7000")]
    )
    old_last = Lines([Message(role="user", content="LEDGER_LIMIT_AB12 = 7000\nLEDGER_LIMIT_AB12 = 300")])
    marked = Lines([Message(role="user", content="LEDGER_LIMIT_AB12 = 300 (superseded)")])
    assert not presented_as_current(old, number, newest_last)
    assert presented_as_current(old, number, old_last)
    assert not presented_as_current(old, number, marked)
    assert BLANK_SUMMARY.count("- No evidence observed.") == 7


def test_a_long_run_never_compacts_twice_without_progress() -> None:
    run = simulate("multi-compaction", 200, snip=False)
    assert (run.compactions, run.llm, run.back_to_back, run.failed, run.still_due) == (4, 4, 0, 0, 0)
    assert run.longest_compacting_run == 1
    assert all(share < 0.25 for share in run.after_share)
    with_snip = simulate("multi-compaction", 200)
    assert (with_snip.compactions, with_snip.back_to_back) == (0, 0)


def test_C10_a_small_window_long_run_leaves_room_for_progress_after_every_compaction() -> None:
    """The case the budget cap (beyond C10) fixes: in a 16,000-token window C10's target alone
    (8,000) is above the compaction threshold (6,246) and the input budget (7,808); 300 turns made
    24 compactions, 6 of them on the very next turn, still due and once over the budget. Capped at
    half the budget (3,904), no compaction leaves the context due."""
    run = simulate("huge-output", 300, window=16_000)
    assert (run.compactions, run.back_to_back, run.still_due, run.longest_compacting_run) == (24, 0, 0, 1)
    assert max(run.after_share) <= 0.5  # of the input budget, right after compacting
    assert min(run.saved_share) >= 0.10  # the reduction gate's minimum progress


def test_the_quality_bench_runs_quick_and_meets_its_targets() -> None:
    figures = {f.name: msgspec.structs.asdict(f) for f in quality.run(quick=True)}
    checked = [f for f in figures.values() if not f["explore"]]
    assert [f["name"] for f in checked] == [
        "quality.blank.summary_only_kept",
        "quality.fallback.superseded_as_current",
        "quality.spent_record.superseded_as_current",
        "quality.longrun.back_to_back_compactions",
        "quality.longrun.still_due_after_compaction",
        "quality.longrun.least_saving",
    ]
    assert all(f["met"] for f in checked)
    assert figures["quality.ceiling.facts_kept"]["value"] == 100.0
    assert figures["quality.summarizer.meets_quality_target"]["detail"].endswith("(blank: no)")


def test_the_quality_suite_is_registered_and_runs_alone() -> None:
    """`cairn bench --only quality` finds it; `python -m cairn.bench.quality --help` runs nothing."""
    import subprocess
    import sys

    from cairn import bench

    assert bench.SUITES["quality"] == "cairn.bench.quality"
    done = subprocess.run(
        [sys.executable, "-m", "cairn.bench.quality", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
