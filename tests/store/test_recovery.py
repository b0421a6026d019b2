"""Recovery: torn tails are cut, corruption fails closed, the index is rebuilt, fsync errors are fatal."""

from __future__ import annotations

import logging
import os
import random
import shutil
from pathlib import Path

import pytest

from cairn.events.codec import GENESIS, decode_line, encode_line
from cairn.store import CorruptionError, Journal, StorageFailed, index_dump, reindex, verify_store
from cairn.store.errors import AcknowledgedDataMissing
from tests.store.helpers import fill, msg, segment_files, started


def _acked_store(root: Path, sessions: int = 3, per_session: int = 12) -> dict[str, list]:
    with Journal.open(root, segment_bytes=4_096) as journal:
        for n in range(sessions):
            fill(journal, f"s{n}", per_session)
        return {f"s{n}": list(journal.read(f"s{n}")) for n in range(sessions)}


@pytest.mark.parametrize("seed", range(6))
def test_garbage_after_the_last_acknowledged_event_is_cut_and_reported(
    tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(seed)
    root = tmp_path / "store"
    acked = _acked_store(root)
    active = segment_files(root)[-1]
    acked_size = active.stat().st_size
    # an append in flight: written by the writer thread, never fsynced nor acknowledged...
    in_flight, _ = encode_line(
        pos=3 * 13, sid="s0", seq=14, ts=1, prev=GENESIS, event=msg(99, "unacked " * rng.randint(1, 50))
    )
    with open(active, "ab") as handle:
        handle.write(in_flight)
    assert active.stat().st_size > acked_size
    cut = rng.randint(acked_size, active.stat().st_size - 1)  # ...torn from a random byte to the end
    garbage = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3_000)))
    with open(active, "r+b") as handle:
        handle.seek(cut)
        handle.write(garbage)
        handle.truncate(cut + len(garbage))
    damaged_size = active.stat().st_size
    with caplog.at_level(logging.WARNING, logger="cairn.store"), Journal.open(root) as journal:
        result = journal.recovery
        assert result.truncated
        assert result.tail_at is not None and result.tail_at[0] == active.name
        assert acked_size <= result.tail_at[1] <= cut
        assert result.bytes_dropped == damaged_size - result.tail_at[1]
        assert active.stat().st_size == result.tail_at[1]
        assert not result.corruptions
        for sid, records in acked.items():
            assert list(journal.read(sid))[: len(records)] == records
        assert "torn tail" in caplog.text
        last = journal.last_seq("s0")
        journal.append("s0", [msg(last + 1)], expected_seq=last)  # appends go on
    report = verify_store(root)
    assert report.ok, report.problems
    assert active.stat().st_size >= acked_size


def test_a_torn_final_line_without_newline_is_cut(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acked = _acked_store(root, sessions=1, per_session=3)
    active = segment_files(root)[-1]
    size = active.stat().st_size
    partial = b'{"v":1,"pos":4,"sid":"s0","seq":5,"ts":1,"prev":"'
    with open(active, "ab") as handle:
        handle.write(partial)
    assert not verify_store(root).problems  # a torn tail is only a warning
    assert [w.code for w in verify_store(root).warnings] == ["torn-tail"]
    with Journal.open(root) as journal:
        assert journal.recovery.bytes_dropped == len(partial)
        assert active.stat().st_size == size
        assert list(journal.read("s0")) == acked["s0"]


def test_garbage_followed_by_valid_lines_is_corruption_not_a_tail(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        fill(journal, "a", 3)
        fill(journal, "b", 3)
    active = segment_files(root)[-1]
    lines = active.read_bytes().splitlines(keepends=True)
    shutil.rmtree(root / "index")  # so that recovery scans the whole log
    victim = 5  # b's seq 2 (a has lines 0-3, b 4-7)
    assert decode_line(lines[victim]).sid == "b"
    bad = bytearray(lines[victim])
    bad[len(bad) // 2] ^= 0x20
    lines[victim] = bytes(bad)
    active.write_bytes(b"".join(lines))
    size = active.stat().st_size
    with Journal.open(root) as journal:
        assert not journal.recovery.truncated
        assert active.stat().st_size == size  # nothing valid was cut
        [entry] = journal.recovery.corruptions
        assert (entry.sid, entry.seq, entry.offset) == ("b", 2, sum(len(x) for x in lines[:victim]))
        assert [r.seq for r in journal.read("a")] == [1, 2, 3, 4]
        assert [r.seq for r in journal.read("b", 1, 1)] == [1]
        with pytest.raises(CorruptionError) as info:
            list(journal.read("b"))
        assert info.value.sid == "b" and info.value.segment == active.name
        assert info.value.offset == entry.offset
        with pytest.raises(CorruptionError):
            journal.load("b")
        with pytest.raises(CorruptionError):
            journal.append("b", [msg(5)], expected_seq=4)
        assert journal.load("a") == journal.replay_full("a")
        journal.append("a", [msg(5)], expected_seq=4)
    report = verify_store(root)
    found = [(p.code, p.sid, p.offset) for p in report.problems]
    assert found[0] == ("corrupt-line", "b", entry.offset)
    assert [code for code, _, _ in found[1:]] == ["seq-gap"]  # b's seq 2 cannot be read


def test_a_flipped_byte_in_an_indexed_line_fails_that_session_closed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root, segment_bytes=2_000) as journal:
        fill(journal, "a", 20)
        fill(journal, "b", 20)
        location = journal.index.location("a", 7)
    assert location is not None
    path = root / "log" / f"{location.segment:020d}.jsonl"
    data = bytearray(path.read_bytes())
    data[location.offset + location.length // 2] ^= 0x01
    path.write_bytes(bytes(data))
    report = verify_store(root)
    assert not report.ok
    problem = report.problems[0]
    assert (problem.segment, problem.offset, problem.sid) == (path.name, location.offset, "a")
    with Journal.open(root) as journal:
        assert [r.seq for r in journal.read("a", 1, 6)] == [1, 2, 3, 4, 5, 6]
        with pytest.raises(CorruptionError) as info:
            journal.load("a")
        assert (info.value.segment, info.value.offset, info.value.sid) == (path.name, location.offset, "a")
        assert journal.load("b") == journal.replay_full("b")
        assert journal.load("b").last_seq == 21


def test_a_line_replaced_by_deeply_nested_json_fails_its_session_closed_by_name(tmp_path: Path) -> None:
    # JSON nested past msgspec's depth limit raises RecursionError, not a DecodeError: replay must
    # still name the line (it decodes a run before checking its CRCs)
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        fill(journal, "a", 12, start_text="x" * 3_000)
        location = journal.index.location("a", 5)
    assert location is not None
    path = root / "log" / f"{location.segment:020d}.jsonl"
    data = bytearray(path.read_bytes())
    depth = (location.length - 8) // 2
    deep = b'{"x":' + b"[" * depth + b"]" * depth  # an unknown field msgspec skips by recursing
    deep += b" " * (location.length - 2 - len(deep)) + b"}\n"
    assert len(deep) == location.length  # the next line stays where the index says
    data[location.offset : location.offset + len(deep)] = deep
    path.write_bytes(bytes(data))
    with Journal.open(root, readonly=True) as journal:
        for replay in (journal.load, journal.replay_full, lambda sid: list(journal.read(sid))):
            with pytest.raises(CorruptionError) as info:
                replay("a")
            where = (info.value.segment, info.value.offset, info.value.sid)
            assert where == (path.name, location.offset, "a")


def test_lost_index_is_rebuilt_equal(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _acked_store(root, sessions=4, per_session=30)
    before = index_dump(root)
    shutil.rmtree(root / "index")
    with Journal.open(root) as journal:
        assert journal.recovery.lines_indexed == 4 * 31
        assert journal.index_dump() == before
    assert index_dump(root) == before


def test_corrupted_index_file_is_rebuilt_equal(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _acked_store(root, sessions=2, per_session=10)
    before = index_dump(root)
    data_file = root / "index" / "data.mdb"
    data_file.write_bytes(b"\xde\xad" * 4096)
    with Journal.open(root) as journal:
        assert journal.recovery.index_rebuilt
        assert journal.index_dump() == before


def test_index_behind_the_log_catches_up_and_equals_a_rebuild(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _acked_store(root, sessions=2, per_session=5)
    stale = root.parent / "stale-index"
    shutil.copytree(root / "index", stale)
    with Journal.open(root) as journal:
        fill(journal, "s0", 7)
        fill(journal, "late", 4)
    shutil.rmtree(root / "index")
    shutil.copytree(stale, root / "index")
    with Journal.open(root) as journal:
        assert journal.recovery.lines_indexed == 7 + 5
        assert journal.last_seq("late") == 5
    current = index_dump(root)
    reindex(root)
    assert index_dump(root) == current


def test_an_index_ahead_of_the_log_is_evidence_of_loss_not_a_reason_to_rebuild(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _acked_store(root, sessions=1, per_session=5)
    active = segment_files(root)[-1]
    lines = active.read_bytes().splitlines(keepends=True)
    active.write_bytes(b"".join(lines[:-2]))  # the last two acknowledged lines are gone
    size = active.stat().st_size
    with pytest.raises(AcknowledgedDataMissing) as info:
        Journal.open(root)
    [loss] = info.value.losses
    assert (loss.first_pos, loss.last_pos) == (4, 5)
    assert [(s.sid, s.first_seq, s.last_seq) for s in loss.sessions] == [("s0", 5, 6)]
    assert "s0 seqs 5-6" in str(info.value) and "positions 4-5" in str(info.value)
    assert active.stat().st_size == size
    assert not verify_store(root).ok


class FailingDisk:
    """fsync that works until `fail()`, then raises EIO for every call."""

    def __init__(self) -> None:
        self.failing = False
        self.calls = 0

    def fail(self) -> None:
        self.failing = True

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.failing:
            raise OSError(5, "Input/output error")
        os.fsync(fd)


def test_fsync_failure_is_fatal_and_reopen_recovers(tmp_path: Path) -> None:
    root = tmp_path / "store"
    disk = FailingDisk()
    journal = Journal.open(root, fsync=disk)
    fill(journal, "s", 3)
    disk.fail()
    pending = [journal.append_async("s", [msg(5)], expected_seq=4)]
    with pytest.raises(StorageFailed):
        pending[0].result(10)
    with pytest.raises(StorageFailed):
        journal.append("s", [msg(5)], expected_seq=4)
    with pytest.raises(StorageFailed):
        journal.append("other", [started()], expected_seq=0)
    assert journal.failed is not None
    journal.close()
    with Journal.open(root) as again:
        last = again.last_seq("s")
        assert last in (4, 5)  # the failed append's outcome was unknown; the log decides
        assert [r.seq for r in again.read("s")] == list(range(1, last + 1))
        again.append("s", [msg(last + 1)], expected_seq=last)
    assert verify_store(root).ok


def test_every_caller_gets_its_own_storage_failure_whose_traceback_does_not_grow(tmp_path: Path) -> None:
    import traceback

    disk = FailingDisk()
    journal = Journal.open(tmp_path / "store", fsync=disk)
    fill(journal, "s", 3)
    disk.fail()
    futures = [journal.append_async(f"t{n}", [started()], expected_seq=0) for n in range(3)]
    errors = []
    for future in futures:
        with pytest.raises(StorageFailed) as caught:
            future.result(10)
        errors.append(caught.value)
    for _ in range(3):
        with pytest.raises(StorageFailed) as caught:
            journal.append("s", [msg(5)], expected_seq=4)
        errors.append(caught.value)
    assert len({id(error) for error in errors}) == len(errors)  # never one object raised everywhere
    depths = [len(traceback.extract_tb(error.__traceback__)) for error in errors[3:]]
    assert depths[0] == depths[-1]  # the third raise carries no frames of the first two
    assert all(error.__cause__ is not None for error in errors)  # the OS error that failed the store
    journal.close()


def test_fsync_failure_on_segment_roll_is_fatal(tmp_path: Path) -> None:
    root = tmp_path / "store"
    disk = FailingDisk()
    with Journal.open(root, fsync=disk, segment_bytes=600) as journal:
        journal.append("s", [started()], expected_seq=0)
        disk.fail()
        with pytest.raises(StorageFailed):
            journal.append("s", [msg(2, "q" * 700)], expected_seq=1)
    with Journal.open(root, segment_bytes=600) as journal:
        last = journal.last_seq("s")
        journal.append("s", [msg(last + 1)], expected_seq=last)
