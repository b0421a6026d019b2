"""`cairn demo --cluster` through the installed `cairn` script: the whole run, a store that is a file,
and an interruption; in every case no host or NATS node of the demo is left running."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn.demo.cluster_render import render_cluster

CAIRN = str(Path(sys.executable).parent / "cairn")
#: the demo's lease TTL and the issue's failover target: under the TTL plus 2 s
TTL_S = 15
FAILOVER_TARGET_S = TTL_S + 2


def alive(pid: int) -> bool:
    """Whether `pid` is a running (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def children_named(name: str) -> set[int]:
    """Pids of running processes whose command line mentions `name` (a nats-server's config path)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if name in cmdline and alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def test_demo_cluster_runs_12_sessions_through_a_host_kill_and_a_node_stop_and_every_printed_command_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    done = subprocess.run(
        [CAIRN, "demo", "--cluster", "--sessions", "12", "--turns", "3", "--store", str(store), "--json"],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] and report["problems"] == []
    assert report["sessions"] == 12 and len(report["replayed"]) == 12 and all(report["replayed"].values())
    assert report["lease_ttl_s"] == TTL_S
    killed = [hid for hid, row in report["hosts"].items() if row["killed"]]
    assert killed == [report["killed_host"]]
    assert report["node_stopped"]["name"] and report["node_stopped"]["stall_s"] is not None
    moved = report["moved"]
    assert moved and all(m["to"] != report["killed_host"] for m in moved.values())
    assert sorted(moved) == sorted(
        s for s, h in report["owners_before"].items() if h == report["killed_host"]
    )
    assert all(m["failover_s"] < FAILOVER_TARGET_S for m in moved.values()), moved
    turns = report["client_turns"]
    assert turns["sent"] == 36 and turns["not_completed"] == 0
    assert report["log_turns"]["open"] == 0 and report["log_turns"]["failed"] == 0
    assert report["verify_nats"]["exit"] == 0 and report["verify_nats"]["command"].startswith(
        "cairn verify --nats"
    )
    assert report["verify_export"]["exit"] == 0
    for row in report["hosts"].values():
        assert not alive(row["pid"])
    assert children_named(str(store)) == set()  # no nats-server (its config is under the store) nor host
    for command in report["commands"]:  # as printed (issue 27: no bare `cairn` off PATH)
        ran = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, (command, ran.stdout[-2000:], ran.stderr[-2000:])

    render_cluster(report)  # the text report says the same
    text = capsys.readouterr().out
    assert "OK: every turn completed or was marked interrupted" in text
    assert f"SIGKILL {report['killed_host']}" in text and "failover" in text
    assert all(command in text for command in report["commands"])


def test_demo_cluster_needs_3_turns_for_its_two_faults(tmp_path: Path) -> None:
    done = subprocess.run(
        [CAIRN, "demo", "--cluster", "--store", str(tmp_path / "s"), "--turns", "2"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "at least 3" in done.stderr and not (tmp_path / "s").exists()


def test_demo_cluster_on_a_store_that_is_a_file_exits_2_in_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    store = tmp_path / "a-file"
    store.write_text("not a directory")
    done = subprocess.run(
        [CAIRN, "demo", "--cluster", "--store", str(store)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"cairn demo: --store {store} is not a directory"]
    assert children_named(str(store)) == set()


def test_demo_cluster_interrupted_by_sigterm_exits_1_and_leaves_no_host_or_nats_node(tmp_path: Path) -> None:
    store = tmp_path / "store"
    demo = subprocess.Popen(
        [CAIRN, "demo", "--cluster", "--store", str(store), "--sessions", "12", "--turns", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stderr is not None
        pids: set[int] = set()
        said: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = demo.stderr.readline()
            said.append(line)
            assert line, f"the demo ended before its hosts served: {''.join(said)[-3000:]}"
            if "serving" in line:  # `hosts: h1 (pid N), h2 (pid N), h3 (pid N) serving`
                pids = {int(p) for p in re.findall(r"pid (\d+)", line)} | (
                    children_named(str(store)) - {demo.pid}
                )
                break
        assert len(pids) == 6  # 3 hosts and 3 nats-server nodes (their configs are under the store)
        demo.send_signal(signal.SIGTERM)
        _, err = demo.communicate(timeout=60)
        assert demo.returncode == 1 and "interrupted by SIGTERM" in err
        assert not [pid for pid in pids if alive(pid)]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate(timeout=30)
