"""Read-only opens: an index that lags the log is caught up privately, and the store is never changed."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.events.codec import decode_line
from cairn.store import CorruptionError, Journal
from tests.store.helpers import checkpoint, fill, msg, segment_files, started

SEGMENT_BYTES = 1_500


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temporary directory private indexes go to, so that tests can see them come and go."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    yield where


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the store by relative path, with its bytes.

    `index/lock.mdb` is named but its bytes are left out: it is LMDB's reader
    table, which every LMDB reader writes (a reader takes a slot in it so a
    writer never reuses the pages it reads); it holds no data of the store.
    """
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            name = str(path.relative_to(root))
            found[name] = b"" if name == os.path.join("index", "lock.mdb") else path.read_bytes()
    return found


def _view(journal: Journal) -> dict[str, Any]:
    """What an audit reader sees of every session."""
    sessions = list(journal.sessions())
    return {
        "sessions": sessions,
        "read": {s.sid: list(journal.read(s.sid)) for s in sessions},
        "load": {s.sid: journal.load(s.sid) for s in sessions},
        "last_seq": {s.sid: journal.last_seq(s.sid) for s in sessions},
        "checkpoints": {s.sid: journal.checkpoints(s.sid) for s in sessions},
        "dump": journal.index_dump(),
    }


def _lagging_store(root: Path) -> tuple[dict[str, Any], int, tuple[str, int]]:
    """A store whose index lags its log as after a crash.

    Returns what a caught-up reader must see, the number of lines past the
    index, and the index's recovery point (segment file name, byte offset).

    The crash is simulated honestly: a copy of `index/` taken while the store
    was closed is put back after a writer appended (and acknowledged) more,
    so the log holds fsynced lines past the index's recovery point, some in
    segments the index does not name.
    """
    with Journal.open(root, segment_bytes=SEGMENT_BYTES) as journal:
        fill(journal, "a", 4)
        fill(journal, "b", 3)
    stale = root.parent / "stale-index"
    shutil.copytree(root / "index", stale)
    segments_before = len(segment_files(root))
    active = segment_files(root)[-1]
    point = (active.name, active.stat().st_size)
    with Journal.open(root, segment_bytes=SEGMENT_BYTES) as journal:
        fill(journal, "a", 6)
        journal.append("b", [checkpoint(1, 4), msg(6)], expected_seq=4)
        fill(journal, "c", 3)
        lagging = 6 + 2 + 4
    with Journal.open(root, readonly=True) as current:
        expected = _view(current)
    assert len(segment_files(root)) > segments_before  # the lag spans segments the index does not name
    shutil.rmtree(root / "index")
    shutil.copytree(stale, root / "index")
    return expected, lagging, point


def test_a_reader_sees_every_acknowledged_line_past_a_lagging_index(
    tmp_path: Path, scratch: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    expected, lagging, point = _lagging_store(root)
    before = _files(root)
    with caplog.at_level(logging.WARNING, logger="cairn.store"), Journal.open(root, readonly=True) as reader:
        recovery = reader.recovery
        assert recovery.lines_indexed == lagging
        assert recovery.scanned_from == point
        assert recovery.tail_at is None and not recovery.truncated and not recovery.corruptions
        assert _view(reader) == expected
        for sid in ("a", "b", "c"):
            assert reader.load(sid) == reader.replay_full(sid)
        assert [(s.sid, s.events) for s in reader.sessions()] == [("a", 11), ("b", 6), ("c", 4)]
        assert reader.last_seq("a") == 11 and reader.last_seq("c") == 4
        assert reader.index.path.parent == scratch  # a private index...
        assert reader.index.path.is_dir()
    assert not any(scratch.iterdir())  # ...removed on close
    assert _files(root) == before  # index/ and log/ untouched, nothing added
    [line] = [r.getMessage() for r in caplog.records if "lagged" in r.getMessage()]
    assert f"{lagging} lines" in line
    assert any(f"{lagging} lines" in note for note in recovery.notes)


def test_a_torn_tail_after_lagging_lines_is_reported_not_cut(tmp_path: Path, scratch: Path) -> None:
    root = tmp_path / "store"
    expected, lagging, _ = _lagging_store(root)
    active = segment_files(root)[-1]
    acked_size = active.stat().st_size
    partial = b'{"v":1,"pos":99,"sid":"a","seq":12,"ts":1,"prev":"'
    with open(active, "ab") as handle:  # a write that was never acknowledged, torn by the crash
        handle.write(partial)
    before = _files(root)
    with Journal.open(root, readonly=True) as reader:
        recovery = reader.recovery
        assert recovery.lines_indexed == lagging
        assert recovery.tail_at == (active.name, acked_size)
        assert recovery.tail_bytes == len(partial)
        assert not recovery.truncated and recovery.bytes_dropped == 0
        assert _view(reader) == expected
    assert _files(root) == before
    assert active.stat().st_size == acked_size + len(partial)
    assert not any(scratch.iterdir())


def test_a_current_index_is_read_as_it_is_without_a_copy_or_a_scan(tmp_path: Path, scratch: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root, segment_bytes=SEGMENT_BYTES) as journal:
        fill(journal, "a", 20)
        fill(journal, "b", 3)
    before = _files(root)
    with Journal.open(root, readonly=True) as reader:
        assert reader.recovery.lines_indexed == 0
        assert reader.recovery.scanned_from == ("", 0)  # nothing past the index's point was read
        assert reader.recovery.tail_at is None
        assert reader.index.path == root / "index"  # the store's own index, no private copy
        assert not any(scratch.iterdir())
        assert reader.last_seq("a") == 21
        assert reader.load("a") == reader.replay_full("a")
    assert _files(root) == before


def test_a_torn_tail_alone_is_reported_without_a_private_index(tmp_path: Path, scratch: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        fill(journal, "a", 3)
    active = segment_files(root)[-1]
    size = active.stat().st_size
    with open(active, "ab") as handle:
        handle.write(b"\x00garbage\nmore garbage without an end")
    before = _files(root)
    with Journal.open(root, readonly=True) as reader:
        recovery = reader.recovery
        assert recovery.lines_indexed == 0
        assert recovery.scanned_from == (active.name, size)
        assert recovery.tail_at == (active.name, size)
        assert recovery.tail_bytes == active.stat().st_size - size
        assert reader.index.path == root / "index"
        assert not any(scratch.iterdir())
        assert reader.last_seq("a") == 4
    assert _files(root) == before


def test_a_corrupt_line_in_the_lagging_tail_fails_its_session_closed(tmp_path: Path, scratch: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        fill(journal, "a", 2)
        fill(journal, "b", 2)
    stale = root.parent / "stale-index"
    shutil.copytree(root / "index", stale)
    with Journal.open(root) as journal:
        for i in range(4):  # interleaved, so b's bad line has valid lines after it
            journal.append("a", [msg(4 + i)], expected_seq=3 + i)
            journal.append("b", [msg(4 + i)], expected_seq=3 + i)
    shutil.rmtree(root / "index")
    shutil.copytree(stale, root / "index")
    active = segment_files(root)[-1]
    lines = active.read_bytes().splitlines(keepends=True)
    victim = 6 + 3  # b's seq 5: past the index (6 lines), with valid lines after it
    assert (decode_line(lines[victim]).sid, decode_line(lines[victim]).seq) == ("b", 5)
    offset = sum(len(line) for line in lines[:victim])
    bad = bytearray(lines[victim])
    bad[len(bad) // 2] ^= 0x20
    lines[victim] = bytes(bad)
    active.write_bytes(b"".join(lines))
    before = _files(root)
    with Journal.open(root, readonly=True) as reader:
        [entry] = reader.recovery.corruptions
        assert (entry.sid, entry.seq, entry.offset) == ("b", 5, offset)
        assert reader.recovery.lines_indexed == 7
        assert [r.seq for r in reader.read("b", 1, 4)] == [1, 2, 3, 4]
        with pytest.raises(CorruptionError) as info:
            list(reader.read("b"))
        assert (info.value.sid, info.value.segment, info.value.offset) == ("b", active.name, offset)
        with pytest.raises(CorruptionError):
            reader.load("b")
        assert [r.seq for r in reader.read("a")] == list(range(1, 8))
        assert reader.load("a") == reader.replay_full("a")
    assert _files(root) == before
    assert not any(scratch.iterdir())


class HeldSync:
    """An fsync that, once armed, syncs and then holds the writer until released.

    Holding the writer between the log's fsync and the index's commit opens
    the window in which the log is ahead of the index, deterministically.
    """

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


def test_a_reader_opened_while_a_writer_appends_sees_what_was_acknowledged(
    tmp_path: Path, scratch: Path
) -> None:
    root = tmp_path / "store"
    disk = HeldSync()
    with Journal.open(root, fsync=disk) as writer:
        fill(writer, "a", 5)
        writer.append("b", [started()], expected_seq=0)
        with Journal.open(root, readonly=True) as reader:  # the index is current: the store's own, live
            assert reader.index.path == root / "index"
            assert [r.seq for r in reader.read("a")] == list(range(1, 7))
            writer.append("a", [msg(7)], expected_seq=6)
            assert reader.last_seq("a") == 7
        acked = {sid: list(writer.read(sid)) for sid in ("a", "b")}
        disk.armed = True
        pending = writer.append_async("a", [msg(8), msg(9)], expected_seq=7)
        assert disk.synced.wait(10)  # on disk, not yet indexed nor acknowledged
        try:
            reader = Journal.open(root, readonly=True)
        finally:
            disk.release.set()
        with reader:
            assert reader.recovery.lines_indexed == 2  # the synced batch, caught up privately
            assert reader.index.path.parent == scratch
            for sid, records in acked.items():
                assert list(reader.read(sid))[: len(records)] == records
            assert reader.last_seq("a") == 9
            assert reader.load("a") == reader.replay_full("a")
            assert [r.seq for r in pending.result(10)] == [8, 9]
            writer.append("b", [msg(2)], expected_seq=1)
            assert reader.last_seq("b") == 1  # a private index is a snapshot of the open
        assert not any(scratch.iterdir())
        assert writer.last_seq("b") == 2


def test_an_index_ahead_of_the_log_is_not_trusted_by_a_reader(tmp_path: Path, scratch: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        fill(journal, "s", 4)
    active = segment_files(root)[-1]
    lines = active.read_bytes().splitlines(keepends=True)
    active.write_bytes(b"".join(lines[:-2]))  # as if the last two lines were never on disk
    before = _files(root)
    with Journal.open(root, readonly=True) as reader:
        assert "ahead" in reader.recovery.index_rebuilt
        assert reader.recovery.lines_indexed == 3
        assert reader.index.path.parent == scratch
        assert [r.seq for r in reader.read("s")] == [1, 2, 3]
    assert _files(root) == before
    assert not any(scratch.iterdir())


def test_a_writer_rolling_a_segment_while_a_reader_opens_is_no_reason_to_distrust_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import cairn.store.readonly as recovery_module

    root = tmp_path / "store"
    writer = Journal.open(root, segment_bytes=1_500)
    try:
        fill(writer, "a", 3)
        listing = recovery_module.list_segments
        appended: list[int] = []

        def list_then_append(log_dir: Path) -> list[int]:
            found = listing(log_dir)
            if not appended:  # the writer rolls and commits right after the reader's listing
                last = writer.last_seq("a")
                for i in range(8):
                    writer.append("a", [msg(last + i + 1)], expected_seq=last + i)
                appended.append(writer.last_seq("a"))
            return found

        monkeypatch.setattr(recovery_module, "list_segments", list_then_append)
        caplog.set_level(logging.WARNING, logger="cairn.store")
        with Journal.open(root, readonly=True) as reader:
            assert reader.recovery.index_rebuilt == ""
            assert reader.last_seq("a") >= 4  # everything acknowledged before it opened
            assert reader.load("a") == reader.replay_full("a")
        assert len(segment_files(root)) > 1 and appended
        assert not [r for r in caplog.records if "cannot be trusted" in r.getMessage()]
    finally:
        writer.close()
