"""The asyncloop bench: its own-stall arithmetic on known wake-ups, a small run's figures (not judged)."""

from __future__ import annotations

import pytest

from cairn.bench import SUITES, asyncloop
from cairn.bench.asyncloop import Monitor


def summary_of(
    spans: list[tuple[float, float]], reference: list[float], busy: list[float]
) -> dict[str, float]:
    monitor = Monitor()
    monitor.spans, monitor.reference, monitor.busy = spans, reference, busy
    return monitor.summary()


def test_a_stall_the_plain_thread_ran_through_is_the_loops_own() -> None:
    """The loop slept 1 ms but woke 300 ms later while the plain thread woke every 1 ms: 299 ms its own."""
    reference = [0.001 * n for n in range(1, 400)]
    got = summary_of([(0.0, 0.0011), (0.0011, 0.3011)], reference, [0.0001, 0.0002])
    assert got["own"] == pytest.approx(299.0, abs=0.01)  # 300 ms less the plain thread's longest gap, 1 ms
    assert got["max"] == pytest.approx(299.0, abs=0.01)  # 300 ms less the 1 ms slept
    assert got["busy"] == pytest.approx(0.2)
    assert got["ticks"] == 2


def test_a_stall_the_whole_process_shared_is_not_the_loops_own() -> None:
    """Neither the loop nor the plain thread ran for 300 ms (a machine too busy): late, but not its own."""
    reference = [0.001, 0.0012, 0.3005, 0.301]
    got = summary_of([(0.0011, 0.3011)], reference, [0.0])
    assert got["max"] == pytest.approx(299.0, abs=0.01)
    assert got["own"] == pytest.approx(0.7, abs=0.01)  # 300 ms less the 299.3 ms gap the thread had too


def test_a_monitor_that_never_woke_cannot_judge() -> None:
    with pytest.raises(RuntimeError, match="never woke"):
        summary_of([], [], [])


def test_a_small_run_reports_every_figure_with_its_runs_and_the_target_stated() -> None:
    assert SUITES["asyncloop"] == "cairn.bench.asyncloop"
    figures = {f["name"]: f for f in asyncloop.measure(sessions=4, turns=2, rounds=2)}
    assert set(figures) == {
        "asyncloop.own_stall_ms",
        "asyncloop.own_stall_vs_threaded",
        "asyncloop.loop_busy_ms",
        "asyncloop.late_p50_ms",
        "asyncloop.late_p99_ms",
        "asyncloop.late_max_ms",
        "asyncloop.items_per_wakeup",
        "asyncloop.ticks",
    }
    own = figures["asyncloop.own_stall_ms"]
    assert own["target"] == "<= 5 ms (median of the runs)"
    assert own["met"] is (own["value"] <= 5.0)
    assert {name: len(values) for name, values in own["runs"].items()} == {
        "idle": 2,
        "async": 2,
        "threaded": 2,
    }
    assert "load" in own and figures["asyncloop.late_p99_ms"]["pairs"]["baselines"]
    assert figures["asyncloop.ticks"]["value"] > 0
    versus = figures["asyncloop.own_stall_vs_threaded"]
    assert versus["target"].startswith(">= 0.8 ")
    assert versus["met"] is (versus["value"] >= 0.8)
    threaded, on_loop = own["runs"]["threaded"], own["runs"]["async"]
    assert versus["pairs"]["baselines"] == [max(v, 0.001) for v in threaded]
    assert versus["pairs"]["subjects"] == [max(v, 0.001) for v in on_loop]
    assert figures["asyncloop.items_per_wakeup"]["value"] >= 1.0  # every turn's items and end arrived


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
    assert even["value"] == 1.0  # ratios 2.0, 0.5, 1.0
    assert even["met"] is True
    assert blocked["value"] == 0.25
    assert blocked["met"] is False
