"""The `respawn` bench runs to the end; its figures are there and the counts it measures are right.

Speed is never judged here (that is `cairn bench`'s job): only that the
suite finishes, reports its target, and that the rebuilt view's counts equal
a fresh count, which does not depend on the machine.
"""

from __future__ import annotations

import subprocess
import sys

from msgspec.structs import asdict

from cairn.bench import SUITES
from cairn.bench import respawn as bench_respawn


def test_the_respawn_bench_runs_and_its_counts_are_those_of_a_fresh_count() -> None:
    assert SUITES["respawn"] == "cairn.bench.respawn"
    figures = {f.name: asdict(f) for f in bench_respawn.run(quick=True)}
    for window in ("below_handoff", "handoff_band"):
        prefix = f"respawn.{window}"
        assert figures[f"{prefix}.counts_equal"]["met"] is True
        ratio = figures[f"{prefix}.first_vs_warm"]
        assert ratio["target"] == ">= 0.5x (first within 2x warm)" and ratio["value"] > 0
        assert ratio["met"] is (ratio["pairs"]["ratio"] >= 0.5)  # warm/first, judged on the unrounded median
        assert "pairs" in ratio["detail"] and "busy" in ratio["detail"]
        assert len(ratio["pairs"]["baselines"]) == 5
        assert "1,999 with a stored count" in ratio["detail"]
        assert figures[f"{prefix}.respawn_ms"]["explore"] and figures[f"{prefix}.respawn_ms"]["value"] > 0
        assert "5 runs" in figures[f"{prefix}.respawn_ms"]["detail"]


def test_the_respawn_bench_run_alone_answers_help_without_running() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cairn.bench.respawn", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m cairn.bench.respawn [-h] [--quick] [--json]")
