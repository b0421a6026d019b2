"""`cairn demo`: the main job runs end to end, replays identically, and continues its sessions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors import placement
from scripts import cairn, demo
from store import verify_store


def test_demo_shows_every_behaviour_and_continues_on_the_same_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert demo.main(["--store", str(store), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["replayed_identically"] == first["sessions"] == 8
    assert all(first["seen"].values()) and first["continued_sessions"] == 0
    assert all(r["turns"] == 12 for r in first["reports"])

    assert demo.main(["--store", str(store), "--turns", "1", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["continued_sessions"] == 8
    assert all(r["turns"] == 13 and r["replayed"] for r in second["reports"])
    assert verify_store(store).ok


def test_cairn_demo_is_wired_into_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    code = cairn.main(["demo", "--store", str(store), "--sessions", "2", "--turns", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["replayed_identically"] == 2
    assert code == 1 and not report["seen"]["fallback checkpoint"]  # too small a run to show it all


@pytest.mark.skipif(not placement.supported(), reason="needs os.sched_setaffinity")
def test_cairn_demo_runs_its_host_on_one_cpu_unless_told_off(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "scripts.cairn", "demo", "--sessions", "1", "--turns", "1", "--json"]
    allowed = sorted(os.sched_getaffinity(0))
    cases = (("auto", "one-cpu", None), ("off", "os", None), (str(allowed[-1]), "one-cpu", allowed[-1]),
             ("batch", "batch", None))
    for setting, mode, cpu in cases:
        env = {**os.environ, "CAIRN_CPU": setting}
        done = subprocess.run([*command, "--store", str(tmp_path / setting)], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)
        report = json.loads(done.stdout)
        assert report["placement"] == mode
        if mode == "one-cpu":
            assert report["cpu"] in allowed and (cpu is None or report["cpu"] == cpu)
        else:
            assert report["cpu"] is None
    env = {**os.environ, "CAIRN_CPU": "many"}
    done = subprocess.run([*command, "--store", str(tmp_path / "bad")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "CAIRN_CPU" in done.stderr
