"""The bench's arithmetic and rules, on literal numbers: pairs and their ratio, the order runs
alternate in, what a figure carries, the exit code, a suite that raises, and the workloads' shapes.

Nothing here is timed: the measures are stand-ins that return fixed numbers.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import msgspec
import pytest

from cairn import bench
from cairn.actors.tokens import TokenCounter, load_encoding
from cairn.bench._measure import LoadMeter, Pairs, alternate, interleave, proc_status_kib, spread
from cairn.bench._workload import event_text
from cairn.bench.context import plain_recount
from cairn.bench.store import append_events
from cairn.bench.store_replay import Written, write_compacted_session
from cairn.events.kinds import CheckpointCommitted
from cairn.events.model import Message, MessageMeta, ToolCall
from cairn.events.protocol import HEADINGS
from cairn.store import Journal

# --- pairs -------------------------------------------------------------------------------


def test_the_ratio_is_the_median_of_the_pairs_ratios_with_their_range() -> None:
    pairs = Pairs([100, 100], [300, 500])
    assert pairs.ratios == [3.0, 5.0]
    assert pairs.ratio == 4.0
    assert pairs.ratio_range == (3.0, 5.0)
    assert pairs.baseline == 100 and pairs.subject == 400


def test_the_median_of_ratios_is_not_the_ratio_of_medians() -> None:
    """A drift that moves both sides alike leaves each pair's ratio alone: 2x in every pair."""
    pairs = Pairs([100, 1000, 10], [200, 2000, 20])
    assert pairs.ratio == 2.0
    assert pairs.ratio_range == (2.0, 2.0)


def test_for_times_a_ratio_above_one_still_means_the_subject_did_better() -> None:
    pairs = Pairs([10.0, 30.0, 8.0], [5.0, 10.0, 8.0], higher_is_better=False)
    assert pairs.ratios == [2.0, 3.0, 1.0]
    assert pairs.ratio == 2.0


def test_pairs_need_as_many_baselines_as_subjects() -> None:
    with pytest.raises(ValueError, match="as many baselines as subjects"):
        Pairs([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least one"):
        Pairs([], [])


def test_describe_lists_the_pairs_and_as_dict_carries_them_all() -> None:
    pairs = Pairs([100, 100], [300, 500])
    assert pairs.describe() == "median 4.00x (range 3.00-5.00x) of 2 pairs: 100->300, 100->500"
    long = Pairs([1.0] * 10, [2.0] * 10)
    assert long.describe(",.1f", limit=2) == (
        "median 2.00x (range 2.00-2.00x) of 10 pairs: 1.0->2.0, 1.0->2.0, ... (8 more)"
    )
    assert pairs.as_dict() == {
        "ratio": 4.0,
        "range": [3.0, 5.0],
        "ratios": [3.0, 5.0],
        "baselines": [100, 100],
        "subjects": [300, 500],
        "higher_is_better": True,
    }
    json.dumps(long.as_dict())  # --json can print it


def test_alternate_flips_the_order_within_every_other_pair() -> None:
    calls: list[str] = []

    def measure(name: str, value: float) -> float:
        calls.append(name)
        return value

    pairs = alternate(lambda: measure("b", 10.0), lambda: measure("s", 30.0), 3)
    assert calls == ["b", "s", "s", "b", "b", "s"]
    assert pairs.baselines == [10.0, 10.0, 10.0] and pairs.ratio == 3.0


def test_interleave_runs_the_list_then_the_list_reversed_so_neighbours_stay_neighbours() -> None:
    calls: list[str] = []

    def measure(name: str) -> float:
        calls.append(name)
        return float(len(calls))

    values = interleave([(n, lambda n=n: measure(n)) for n in ("a", "b", "c")], 3)  # type: ignore[misc]
    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert values == {"a": [1.0, 6.0, 7.0], "b": [2.0, 5.0, 8.0], "c": [3.0, 4.0, 9.0]}
    with pytest.raises(ValueError, match="repeat"):
        interleave([("a", lambda: 1.0), ("a", lambda: 2.0)], 1)


def test_spread_says_median_range_and_runs() -> None:
    assert spread([3.0, 1.0, 2.0]) == "median 2 (range 1-3) of 3 runs"
    assert spread([1.5, 2.25], ",.2f") == "median 1.88 (range 1.50-2.25) of 2 runs"


def test_the_load_meter_reads_the_machine_and_says_so() -> None:
    with LoadMeter() as load:
        sum(range(1000))
    assert load.summary().startswith("machine ")
    assert " CPUs" in load.summary()
    assert set(load.as_dict()) == {"busy", "own", "loadavg", "cpus"}


# --- figures, the exit code, a suite that raises --------------------------------------------


def test_a_figure_measured_under_a_load_carries_it_and_says_it() -> None:
    with LoadMeter() as load:
        pass
    made = bench.Figure.measured("x.ms", 4.0, "ms", "what it is", load, target="< 5 ms", met=True)
    assert made.detail == f"what it is; {load.summary()}"
    assert made.load == load.as_dict() and made.pairs is None


def _report(*mets: bool | None) -> dict[str, object]:
    return {"figures": [{"name": f"f{n}", "met": met} for n, met in enumerate(mets)]}


def test_the_run_fails_only_on_a_missed_target() -> None:
    assert bench.exit_code(_report()) == 0
    assert bench.exit_code(_report(None, None)) == 0  # figures without a target never fail
    assert bench.exit_code(_report(True, None, True)) == 0
    assert bench.exit_code(_report(True, False, None)) == 1


def _fake_suite(monkeypatch: pytest.MonkeyPatch, name: str, run: object) -> None:
    module = types.ModuleType(f"cairn_test_suite_{name}")
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(bench.SUITES, name, module.__name__)


def test_a_suite_that_raises_is_a_failed_figure_and_the_next_suite_still_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(quick: bool) -> list[bench.Figure]:
        raise RuntimeError("the disk is gone")

    _fake_suite(monkeypatch, "boom", boom)
    _fake_suite(monkeypatch, "fine", lambda quick: [bench.Figure("fine.count", 3, "items", "3", True)])
    assert bench.main(["--only", "boom,fine", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    error, fine = report["figures"]
    assert error["name"] == "boom.error" and error["suite"] == "boom"
    assert error["met"] is False and error["target"] == "the suite runs to the end"
    assert error["detail"].startswith("RuntimeError: the disk is gone at test_bench_measure.py:")
    assert fine["name"] == "fine.count" and fine["met"] is True
    assert (report["targets"], report["targets_met"], report["all_met"]) == (2, 1, False)


def test_a_run_of_explore_figures_passes_and_shows_them_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_suite(monkeypatch, "fine", lambda quick: [bench.Figure("fine.count", 3, "items", explore=True)])
    assert bench.main(["--only", "fine"]) == 0
    out = capsys.readouterr().out
    assert "0/0 targets met" in out and "fine.count" not in out
    assert bench.main(["--only", "fine", "--explore"]) == 0
    assert "fine.count" in capsys.readouterr().out


def test_a_missed_target_fails_the_run_and_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_suite(monkeypatch, "slow", lambda quick: [bench.Figure("slow.rate", 1, "/s", ">= 2", False)])
    assert bench.main(["--only", "slow"]) == 1
    assert "missed: slow.rate" in capsys.readouterr().out


def test_a_part_that_raises_leaves_its_error_figure() -> None:
    def part() -> list[bench.Figure]:
        raise ValueError("bad")

    (failed,) = bench.guarded("restore", part)
    assert failed.name == "restore.error" and failed.met is False and failed.suite == ""
    ok = [bench.Figure("ok.n", 1, "", explore=True)]
    assert bench.guarded("ok", lambda: ok) == ok


# --- the workloads ---------------------------------------------------------------------------


def test_the_append_mixes_carry_300_and_2000_tokens_an_event() -> None:
    encoding = load_encoding()
    for tokens, mean in ((300, 301), (2000, 2001)):
        events = append_events(tokens)
        counts = [len(encoding.encode_ordinary(event_text(e))) for e in events]
        assert len(events) == 600
        assert round(sum(counts) / len(counts)) == mean
    assert len(append_events()) == 600  # the mix before issue 13, for the benches that import it


def test_the_plain_recount_counts_what_cairns_counter_counts() -> None:
    encoding = load_encoding()
    messages = (
        Message(role="user", content="hello world", id="u1"),
        Message(
            role="assistant", content="", id="a1", tool_calls=(ToolCall("c1", "read", '{"path": "a.py"}'),)
        ),
    )
    assert plain_recount(encoding, messages) == 26
    assert TokenCounter(encoding).messages(messages) == 26


def test_the_long_session_has_checkpoints_as_the_compactor_writes_them(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "store") as journal:
        written = write_compacted_session(journal, "s", 4_000)
        assert journal.last_seq("s") == 5_001  # session-started, 2 x (1,999 + a checkpoint), 1,000
        assert journal.load("s") == journal.replay_full("s")
    assert (written.checkpoints, written.tail, written.summaries_ok) == (2, 1_000, 2)
    # 1,239 context messages compacted: the ledger summary + ceil(20 %) = 248 of them carried; then
    # 1,488 (the first replacement and the new messages): 298 carried
    assert written.shapes == [(1_239, 249, 248, 86_743), (1_488, 299, 298, 102_911)]
    assert written.problem() is None


def test_the_checkpoint_check_refuses_the_toy_checkpoints_the_bench_used_before() -> None:
    toy = CheckpointCommitted(
        version=1,
        epoch=1,
        through_seq=200,
        trigger="threshold",
        strategy="fallback",
        source_tokens=1000,
        replacement_tokens=80,
        replacement_messages=tuple(
            Message(role="user", content=f"summary line {k}", id=f"s{k}") for k in range(8)
        ),
    )
    written = Written()
    written.add(toy, 150)
    assert written.problem() == "1 of 1 summaries lack the ledger"
    assert Written().problem() == "no checkpoint written"
    text = "\n".join(f"## {h}\n- x" for h in HEADINGS)
    ledger = Message(role="user", content=text, id="s", meta=MessageMeta(origin="summary"))
    untailed = Written()
    untailed.add(msgspec.structs.replace(toy, replacement_messages=(ledger,)), 150)
    assert untailed.problem() == "a checkpoint carries 0 of 150 context messages, under 20 %"


def test_proc_status_kib_reads_the_fields_asked_in_their_order_from_one_read() -> None:
    anon, total, high = proc_status_kib("RssAnon", "VmRSS", "VmHWM")
    assert 0 < anon <= total <= high
    assert proc_status_kib("VmRSS", pid=os.getpid())[0] > 0
    assert proc_status_kib("NoSuchField") == (0,)
