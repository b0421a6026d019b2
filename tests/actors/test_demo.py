"""`cairn demo`: the main job runs end to end, replays identically, and continues its sessions.

Its exit status says whether the run was healthy (0), did not do what it
says (1: a turn that did not complete, a session that replayed otherwise, a
behaviour not seen), or could not run (2: one line on stderr, never a
traceback: a path that cannot be a store, another writer, a full disk).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cairn import cli, demo
from cairn.actors import placement
from cairn.store import verify_store


def test_demo_shows_every_behaviour_and_continues_on_the_same_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert demo.main(["--store", str(store), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["replayed_identically"] == first["sessions"] == 8
    assert all(first["seen"].values()) and first["continued_sessions"] == 0
    assert all(r["turns"] == 12 for r in first["reports"])
    assert store.stat().st_mode & 0o777 == 0o700  # the store root the demo makes is private too

    assert demo.main(["--store", str(store), "--turns", "1", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["continued_sessions"] == 8
    assert all(r["turns"] == 13 and r["replayed"] for r in second["reports"])
    assert second["turns_sent"] == second["turns_completed"] == 8 and second["ok"]
    assert verify_store(store).ok

    # a copy: its sessions work in the original's workspaces, so every turn is rejected
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    assert demo.main(["--store", str(copy), "--turns", "2"]) == 1
    shown = capsys.readouterr().out
    assert "rejected in None" not in shown
    assert "The run is NOT healthy: 16 of 16 turns did not complete." in shown
    for n in range(1, 9):
        assert (
            f"demo-{n} turns 14-15: rejected: WorkspaceMismatch: session demo-{n} works in "
            f"{store}/demo-workspaces/demo-{n}, not {copy}/demo-workspaces/demo-{n}"
        ) in shown
    assert demo.main(["--store", str(copy), "--turns", "1", "--json"]) == 1
    third = json.loads(capsys.readouterr().out)
    assert (third["turns_sent"], third["turns_completed"], third["ok"]) == (8, 0, False)
    assert all(r["problems"][0]["error_class"] == "WorkspaceMismatch" for r in third["reports"])


def test_cairn_demo_is_wired_into_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    code = cli.main(["demo", "--store", str(store), "--sessions", "2", "--turns", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["replayed_identically"] == 2
    assert code == 1 and not report["seen"]["fallback checkpoint"]  # too small a run to show it all


@pytest.mark.skipif(not placement.supported(), reason="needs os.sched_setaffinity")
def test_cairn_demo_leaves_its_host_to_the_os_unless_cairn_cpu_places_it(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "cairn.cli", "demo", "--sessions", "1", "--turns", "1", "--json"]
    allowed = sorted(os.sched_getaffinity(0))
    cases = (
        (None, "os", None),  # unset: the default
        ("auto", "one-cpu", None),
        ("off", "os", None),
        (str(allowed[-1]), "one-cpu", allowed[-1]),
        ("batch", "batch", None),
    )
    for setting, mode, cpu in cases:
        env = {key: value for key, value in os.environ.items() if key != "CAIRN_CPU"}
        if setting is not None:
            env["CAIRN_CPU"] = setting
        done = subprocess.run(
            [*command, "--store", str(tmp_path / (setting or "unset"))],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        report = json.loads(done.stdout)
        assert report["placement"] == mode
        if mode == "one-cpu":
            assert report["cpu"] in allowed and (cpu is None or report["cpu"] == cpu)
        else:
            assert report["cpu"] is None
    env = {**os.environ, "CAIRN_CPU": "many"}
    done = subprocess.run(
        [*command, "--store", str(tmp_path / "bad")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "CAIRN_CPU" in done.stderr


@pytest.mark.parametrize("make", ["file", "dev-null", "symlink-loop", "under-a-file"])
def test_a_store_path_that_cannot_be_a_store_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str
) -> None:
    (tmp_path / "file").write_text("not a store")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    path = {
        "file": tmp_path / "file",
        "dev-null": Path("/dev/null"),
        "symlink-loop": tmp_path / "loop",
        "under-a-file": tmp_path / "file" / "store",
    }[make]
    code = cli.main(["demo", "--store", str(path), "--sessions", "1", "--turns", "1"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith(f"cairn demo: --store {path}") and len(err.splitlines()) == 1, err


class FullDisk:
    """An fsync that says ENOSPC from its `after`-th call on (a disk that filled up mid-run)."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
            full = self.calls >= self.after
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.fsync(fd)


def test_a_disk_that_fills_up_mid_run_ends_the_demo_with_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    thread_crashes: list[str],
) -> None:
    disk = FullDisk(after=60)
    monkeypatch.setattr(demo, "run", functools.partial(demo.run, fsync=disk))
    code = demo.main(["--store", str(tmp_path / "store")])
    _, err = capsys.readouterr()
    assert code == 2 and thread_crashes == []
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("cairn demo: the store at ") and "No space left on device" in err
    assert " turns completed before it" in err
    # the log is sound up to what was acknowledged; a run with room again continues it
    monkeypatch.undo()
    assert demo.main(["--store", str(tmp_path / "store"), "--sessions", "2", "--turns", "1", "--json"]) != 2
    report = json.loads(capsys.readouterr().out)
    assert report["turns_completed"] == 2 and report["replayed_identically"] == 2


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.mark.skipif(shutil.which("mount") is None, reason="needs mount")
def test_a_real_full_disk_ends_the_demo_with_one_line_and_exit_2(tmp_path: Path) -> None:
    """ENOSPC from a 2 MiB tmpfs, where one is allowed (root in a container that may mount)."""
    small = tmp_path / "small"
    if not _tmpfs(small, "2m"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        root = Path(__file__).resolve().parents[2]
        command = [sys.executable, "-m", "cairn.cli", "demo", "--store", str(small / "store")]
        env = {**os.environ, "CAIRN_CPU": "off"}
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
        # the log's write says ENOSPC; LMDB's commit on a full tmpfs may say EIO instead
        assert done.stderr.startswith("cairn demo: the store at ") and " failed while " in done.stderr
        # again on the full disk: the recovery's own writes fail now, in one line too
        again = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 2 and len(again.stderr.splitlines()) == 1, again.stderr
        assert "Traceback" not in again.stderr
        listed = subprocess.run(
            [sys.executable, "-m", "cairn.cli", "sessions", "--store", str(small / "store")],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr  # readers read
    finally:
        subprocess.run(["umount", str(small)], check=True)
