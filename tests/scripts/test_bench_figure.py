"""The bench's declarations: a figure is judged or explore, a comparison's ratio and target, the runner."""

from __future__ import annotations

import itertools

import pytest

from cairn import bench
from cairn.bench._figure import Comparison, Figure, compare


def test_a_figure_is_judged_against_a_target_or_marked_explore() -> None:
    with pytest.raises(ValueError, match=r"x\.rate: judged against a target, or marked explore"):
        Figure("x.rate", 1, "events/s")
    with pytest.raises(ValueError):
        Figure("x.rate", 1, "events/s", target=">= 2")  # a target, but never judged
    assert Figure("x.rate", 1, "events/s", ">= 2", False).met is False
    assert Figure("x.rate", 1, "events/s", explore=True).target is None


def test_a_comparison_of_times_reads_above_1_when_the_subject_is_faster() -> None:
    """Times: baseline over subject, judged on the median of the pairs; the figure carries every pair."""
    values = {"old": [0.010, 0.012, 0.008], "new": [0.005, 0.004, 0.008]}
    faster = Comparison("x.speedup", "old", "new", "old over new", target=1.5, better="lower", scale=1000)
    with bench._figure.LoadMeter() as load:
        figure = faster.judge(values, load, "three pairs")
    assert (figure.value, figure.target, figure.met, figure.explore) == (2.0, ">= 1.5x", True, False)
    assert figure.pairs is not None and figure.pairs["ratios"] == pytest.approx([2.0, 3.0, 1.0])
    assert figure.pairs["baselines"] == pytest.approx([10.0, 12.0, 8.0])  # scaled: ms
    assert "three pairs" in figure.detail and "old->new" in figure.detail and "busy" in figure.detail
    assert figure.load is not None and figure.load["cpus"] >= 1
    rates = Comparison("x.rate", "old", "new", "new over old", target=1.0)  # rates: subject over baseline
    assert rates.judge(values, load).met is False
    beside = Comparison("x.beside", "old", "new", "judged against nothing")
    assert beside.judge(values, load).explore


def test_compare_runs_every_measure_once_a_round_in_alternating_order() -> None:
    order: list[str] = []
    clock = itertools.count(1)

    def measure(name: str) -> float:
        order.append(name)
        return float(next(clock))

    done = compare(
        [("a", lambda: measure("a")), ("b", lambda: measure("b"))],
        [Comparison("x.b_over_a", "a", "b", "b over a", target=0.5)],
        4,
    )
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert done.values == {"a": [1.0, 4.0, 5.0, 8.0], "b": [2.0, 3.0, 6.0, 7.0]}
    assert [f.name for f in done.figures] == ["x.b_over_a"] and done.figures[0].met is True
    with pytest.raises(ValueError, match="names no measure"):
        compare([("a", lambda: 1.0)], [Comparison("x", "a", "c", "c over a", target=1.0)], 1)


def test_the_runner_leaves_explore_figures_out_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    suite = types.ModuleType("fake_suite")
    suite.run = lambda quick: [  # type: ignore[attr-defined]
        Figure("fake.judged", 1, "x", ">= 1", True),
        Figure("fake.beside", 2, "x", explore=True),
    ]
    suite.explore = lambda quick: [Figure("fake.extra", 3, "x", explore=True)]  # type: ignore[attr-defined]
    monkeypatch.setitem(bench.SUITES, "fake", "fake_suite")
    monkeypatch.setitem(__import__("sys").modules, "fake_suite", suite)
    plain = bench.run_suites(["fake"], quick=True)
    assert [f["name"] for f in plain["figures"]] == ["fake.judged"]
    assert (plain["targets"], plain["targets_met"], plain["all_met"]) == (1, 1, True)
    every = bench.run_suites(["fake"], quick=True, explore=True)
    assert [f["name"] for f in every["figures"]] == ["fake.judged", "fake.beside", "fake.extra"]
    shape = {"name", "value", "unit", "target", "met", "detail", "pairs", "load", "suite", "explore", "runs"}
    assert set(every["figures"][0]) == shape and every["figures"][0]["suite"] == "fake"


def test_the_long_suites_run_only_when_named_or_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(bench.DEFAULT).isdisjoint(bench.LONG) and set(bench.SUITES) == {*bench.DEFAULT, *bench.LONG}
    assert {"cluster", "model", "hosts", "audit"} == set(bench.LONG)
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--long" in shown and "hosts, audit, cluster, model" in shown
