"""The asyncloop bench: its own-stall arithmetic on known wake-ups, a small run's figures (not judged)."""

from __future__ import annotations

import pytest
from msgspec.structs import asdict

from cairn.bench import SUITES, asyncloop
from cairn.bench.asyncloop import Monitor


def summary_of(spans: list[tuple[float, float]], reference: list[float]) -> dict[str, float]:
    monitor = Monitor()
    monitor.spans, monitor.reference = spans, reference
    return monitor.summary()


def test_a_stall_the_plain_thread_ran_through_is_the_loops_own() -> None:
    """The loop slept 1 ms but woke 300 ms later while the plain thread woke every 1 ms: 299 ms its own."""
    reference = [0.001 * n for n in range(1, 400)]
    got = summary_of([(0.0, 0.0011), (0.0011, 0.3011)], reference)
    assert got["own"] == pytest.approx(299.0, abs=0.01)  # 300 ms less the plain thread's longest gap, 1 ms
    assert got["max"] == pytest.approx(299.0, abs=0.01)  # 300 ms less the 1 ms slept
    assert got["ticks"] == 2


def test_a_stall_the_whole_process_shared_is_not_the_loops_own() -> None:
    """Neither the loop nor the plain thread ran for 300 ms (a machine too busy): late, but not its own."""
    reference = [0.001, 0.0012, 0.3005, 0.301]
    got = summary_of([(0.0011, 0.3011)], reference)
    assert got["max"] == pytest.approx(299.0, abs=0.01)
    assert got["own"] == pytest.approx(0.7, abs=0.01)  # 300 ms less the 299.3 ms gap the thread had too


def test_a_monitor_that_never_woke_cannot_judge() -> None:
    with pytest.raises(RuntimeError, match="never woke"):
        summary_of([], [])


def test_a_small_run_reports_every_figure_with_its_runs_and_the_target_stated() -> None:
    assert SUITES["asyncloop"] == "cairn.bench.asyncloop"
    figures = {f.name: asdict(f) for f in asyncloop.measure(sessions=4, turns=2, rounds=2)}
    assert set(figures) == {"asyncloop.own_stall_ms", "asyncloop.own_stall_vs_threaded"}
    own = figures["asyncloop.own_stall_ms"]
    versus = figures["asyncloop.own_stall_vs_threaded"]
    assert own["target"] == "<= 5 ms (median of the runs), or own_stall_vs_threaded >= 0.8"
    assert own["met"] is (own["value"] <= 5.0 or versus["value"] >= 0.8)
    assert {name: len(values) for name, values in own["runs"].items()} == {
        "idle": 2,
        "async": 2,
        "threaded": 2,
    }
    assert own["load"] and versus["pairs"]["baselines"]
    assert versus["target"] is None and versus["explore"]  # judged as part of own_stall_ms
    threaded, on_loop = own["runs"]["threaded"], own["runs"]["async"]
    assert versus["pairs"]["baselines"] == [max(v, 0.001) for v in threaded]
    assert versus["pairs"]["subjects"] == [max(v, 0.001) for v in on_loop]


def test_the_loop_is_judged_against_an_idle_loop_beside_the_same_work_on_threads() -> None:
    """Round by round, the threaded run's own stall over the async run's; a loop stalling 4x as long fails."""
    from cairn.bench._measure import LoadMeter

    def runs(threaded: list[float], on_loop: list[float]) -> dict[str, list[dict[str, float]]]:
        return {
            "idle": [{"own": 0.5} for _ in threaded],
            "threaded": [{"own": v} for v in threaded],
            "async": [{"own": v} for v in on_loop],
        }

    with LoadMeter() as load:
        even = asyncloop._vs_threaded(runs([8.0, 4.0, 6.0], [4.0, 8.0, 6.0]), "work", load)
        blocked = asyncloop._vs_threaded(runs([5.0, 5.0, 5.0], [20.0, 20.0, 25.0]), "work", load)
    assert even.value == 1.0 and even.pairs is not None and even.pairs["ratio"] == 1.0  # 2.0, 0.5, 1.0
    assert (
        blocked.value == 0.25 and blocked.pairs is not None and blocked.pairs["ratios"] == [0.25, 0.25, 0.2]
    )


def test_the_judged_stall_is_within_5_ms_or_no_worse_than_beside_plain_threads() -> None:
    assert asyncloop.own_stall_met(4.9, 0.1)  # within 5 ms: the ratio of two small stalls says nothing
    assert asyncloop.own_stall_met(5.0, 0.1)
    assert asyncloop.own_stall_met(9.0, 0.8)  # over 5 ms, but an idle loop beside threads stalls as long
    assert not asyncloop.own_stall_met(9.0, 0.79)
    assert not asyncloop.own_stall_met(150.0, 0.25)  # a loop blocked on a turn
