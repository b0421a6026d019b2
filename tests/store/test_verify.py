"""verify: an index that lags the log is information; one that disagrees with what it covers is named.

`verify` may run beside a writer, or after a crash before any writer
reopened the store: lines past the index's recovery point are lag (exit 0,
with how far), never `index-differs`. Within what the index covers, any
difference is a problem, told in sessions, seqs and positions.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from cairn.store import Journal, verify_store
from tests.store.helpers import fill, msg

CLOCK = 1_700_000_000_000


def _store(root: Path) -> Path:
    """a seqs 1-6 (pos 0-5), a 7 and b 1-5 (6-11), b 6-7 and a 8-9 (12-15), in three segments."""
    with Journal.open(root, segment_bytes=1_500, clock_ms=lambda: CLOCK) as journal:
        fill(journal, "a", 6)
        fill(journal, "b", 6)
        fill(journal, "a", 2)
    return root


def test_verify_while_a_writer_appends_is_clean_and_reports_lag_as_information(tmp_path: Path) -> None:
    root = tmp_path / "store"
    journal = Journal.open(root, segment_bytes=4_000)
    stop = threading.Event()
    failures: list[BaseException] = []

    def append_until_stopped() -> None:
        try:
            seq = fill(journal, "w", 1)
            while not stop.is_set():
                journal.append("w", [msg(seq + 1, "x" * (seq % 300))], expected_seq=seq)
                seq += 1
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    writer = threading.Thread(target=append_until_stopped)
    writer.start()
    try:
        for _ in range(8):
            report = verify_store(root)
            assert report.ok, [str(p) for p in report.problems]
            assert not [w for w in report.warnings if w.code != "torn-tail"]
    finally:
        stop.set()
        writer.join()
        journal.close()
    assert not failures
    assert verify_store(root).ok


class HeldSync:
    """An fsync that, once armed, syncs and then holds the writer until released (log synced, index not)."""

    def __init__(self) -> None:
        self.armed = False
        self.synced = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        os.fsync(fd)
        if self.armed:
            self.armed = False
            self.synced.set()
            assert self.release.wait(10)


def test_verify_between_the_logs_fsync_and_the_index_commit_is_clean(tmp_path: Path) -> None:
    root = tmp_path / "store"
    disk = HeldSync()
    with Journal.open(root, fsync=disk) as journal:
        fill(journal, "a", 3)
        disk.armed = True
        pending = journal.append_async("a", [msg(5), msg(6)], expected_seq=4)
        assert disk.synced.wait(10)
        try:
            report = verify_store(root)
        finally:
            disk.release.set()
        assert [r.seq for r in pending.result(10)] == [5, 6]
    assert report.ok, [str(p) for p in report.problems]
    [lag] = report.info
    assert lag.code == "index-lag" and "2 lines" in lag.message and "positions 4-5" in lag.message
    assert (report.index_lag_lines, report.index_checked) == (2, True)


def test_verify_after_a_crash_that_left_the_index_behind_reports_lag_not_a_problem(tmp_path: Path) -> None:
    root = _store(tmp_path / "store")
    stale = tmp_path / "stale-index"
    shutil.copytree(root / "index", stale)
    with Journal.open(root, segment_bytes=1_500, clock_ms=lambda: CLOCK) as journal:
        fill(journal, "b", 3)
        fill(journal, "c", 2)
    shutil.rmtree(root / "index")
    shutil.copytree(stale, root / "index")  # the index's last commits never reached the disk
    report = verify_store(root)
    assert report.ok, [str(p) for p in report.problems]
    assert report.index_checked
    assert (report.index_lag_lines, [i.code for i in report.info]) == (6, ["index-lag"])
    assert "positions 16-21" in report.info[0].message


def test_an_index_that_disagrees_with_the_lines_it_covers_is_named_by_session_and_seq(tmp_path: Path) -> None:
    import lmdb

    root = _store(tmp_path / "store")
    env = lmdb.open(str(root / "index"), max_dbs=8)
    with env.begin(write=True) as txn:
        events = env.open_db(b"events", txn=txn)
        assert txn.delete(b"b\x00" + (3).to_bytes(8, "big"), db=events)
    env.close()
    report = verify_store(root)
    assert not report.ok
    [problem] = report.problems
    assert (problem.code, problem.sid, problem.seq) == ("index-differs", "b", 3)
    assert "seq 3 at pos 9" in problem.message and "\\x00" not in str(problem) and "b'" not in str(problem)
