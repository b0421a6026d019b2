"""CPU placement (actors.placement): choosing, pinning threads and restoring them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from cairn.actors import placement
from cairn.actors.placement import PlacementError, choose_cpu, parse_setting

linux_only = pytest.mark.skipif(not placement.supported(), reason="needs os.sched_setaffinity")


def test_choose_cpu_spreads_processes_by_pid() -> None:
    allowed = {3, 1, 7}
    assert [choose_cpu(allowed, pid) for pid in range(4)] == [1, 3, 7, 1]
    with pytest.raises(PlacementError):
        choose_cpu(set(), 1)


def test_parse_setting_reads_auto_off_and_numbers() -> None:
    allowed = frozenset({0, 1})
    assert parse_setting(None, allowed, 5) is None  # unset: the OS's placement (DEFAULT)
    assert parse_setting("", allowed, 5) is None
    assert parse_setting(" Auto ", allowed, 4) == 0
    assert parse_setting("auto", allowed, 5) == 1
    assert parse_setting("off", allowed, 4) is None
    assert parse_setting("1", allowed, 4) == 1
    with pytest.raises(PlacementError, match="not one this process may use"):
        parse_setting("9", allowed, 4)
    assert parse_setting("batch", allowed, 4) == "batch"
    with pytest.raises(PlacementError, match="CAIRN_CPU"):
        parse_setting("fast", allowed, 4)


@linux_only
def test_on_one_cpu_places_the_threads_started_inside_and_restores_the_caller() -> None:
    before = placement.current()
    assert before is not None
    seen: list[placement.Placement | None] = []
    cpu = min(before.cpus)
    with placement.on_one_cpu(cpu) as chosen:
        assert chosen == cpu
        thread = threading.Thread(target=lambda: seen.append(placement.current()))
        thread.start()
        thread.join()
    assert seen == [placement.Placement(frozenset({cpu}), os.SCHED_BATCH)]
    assert placement.current() == before


@linux_only
def test_pin_process_places_every_thread_and_children_started_unpinned_get_it_back() -> None:
    # in a child interpreter: pinning a whole process is not something to do to the test runner
    code = """
import os, threading, subprocess, sys
from cairn.actors import placement
started, stop = threading.Event(), threading.Event()
def idle():
    started.set(); stop.wait()
other = threading.Thread(target=idle); other.start(); started.wait()
before = placement.current()
was = placement.pin_process()
pinned = placement.current(other.native_id)
probe = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))"]
inherited = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
with placement.unpinned():
    wide = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
placement.restore_process(was)
after = placement.current(other.native_id)
stop.set(); other.join()
print(len(pinned.cpus), pinned.policy == os.SCHED_BATCH, after == before)
print(inherited)
print(wide)
print(sorted(before.cpus), before.policy)
"""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "1 True True"
    assert lines[1] != lines[2]  # the pinned child ran on one CPU, the unpinned one as before
    assert lines[2] == lines[3]


@linux_only
def test_place_from_env_off_leaves_the_process_alone() -> None:
    before = placement.current()
    assert placement.place_from_env({"CAIRN_CPU": "off"}) == placement.Placed("os")
    assert placement.current() == before


@linux_only
def test_place_from_env_unset_leaves_the_process_to_the_os_by_default() -> None:
    assert placement.DEFAULT == "off"
    before = placement.current()
    assert placement.place_from_env({}) == placement.Placed("os")
    assert placement.current() == before


@linux_only
def test_batch_scheduled_keeps_every_cpu_and_restores_the_caller() -> None:
    before = placement.current()
    assert before is not None
    seen: list[placement.Placement | None] = []
    with placement.batch_scheduled():
        thread = threading.Thread(target=lambda: seen.append(placement.current()))
        thread.start()
        thread.join()
    assert seen == [placement.Placement(before.cpus, os.SCHED_BATCH)]
    assert placement.current() == before
