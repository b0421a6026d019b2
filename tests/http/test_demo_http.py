"""`cairn demo --http` (issue 25 point 8): client processes through the API, a server SIGKILL and restart."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_http_demo_survives_a_server_crash_and_every_command_it_prints_runs(tmp_path: Path) -> None:
    argv = ["demo", "--http", "--sessions", "3", "--turns", "4", "--store", str(tmp_path / "store"), "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "cairn.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    report = json.loads(done.stdout)
    assert report["ok"] and report["problems"] == []
    outcomes = report["outcomes"]
    assert outcomes["completed"] + outcomes["interrupted"] == 3 * 4 and outcomes["other"] == 0
    assert report["turns_done_at_kill"] >= 4 and report["reconnects"] >= 1
    assert report["server_exit_on_sigterm"] == 0
    assert all(f["stream_matches_log"] and f["replay_identical"] for f in report["facts"].values())
    for command in report["audit_commands"]:  # as printed (issue 27: no bare `cairn` off PATH)
        ran = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, (command, ran.stderr)


@pytest.mark.parametrize(
    "extra", [["--local-model"], ["--cluster"], ["--provider", "openai"], ["--turns", "0"]]
)
def test_the_http_demo_refuses_what_it_cannot_combine(extra: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "demo", "--http", *extra, "--store", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "error" in done.stderr
    assert not (tmp_path / "s").exists()
