"""Journal conformance: appends, range reads, concurrency control, atomicity, threads."""

from __future__ import annotations

import random
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from cairn.events.codec import GENESIS, MAX_LINE_BYTES, chain_digest, decode_line
from cairn.events.errors import InvalidEvent, InvalidSessionId, LineTooLarge
from cairn.events.kinds import AssistantMessage, TurnStarted, UserMessage
from cairn.events.state import replay
from cairn.store import Journal, SeqConflict, StoreClosed, StoreLocked
from cairn.store.errors import ReadOnlyStore
from tests.store.helpers import checkpoint, fill, msg, segment_files, started, usage


def too_big() -> AssistantMessage:
    """An event over the line limit that no blob can shrink (assistant text stays inline)."""
    return AssistantMessage(message_id="a", request_id="r", text="x" * (MAX_LINE_BYTES + 10))


@pytest.fixture
def journal(tmp_path: Path):
    with Journal.open(tmp_path / "store", clock_ms=lambda: 1_000) as j:
        yield j


def test_append_returns_the_stored_records_with_envelope_and_chain(journal: Journal) -> None:
    first = journal.append("s1", [started()], expected_seq=0)
    second = journal.append("s1", [msg(2), msg(3)], expected_seq=1, ts_ms=5_000)
    assert [(r.seq, r.pos, r.ts) for r in first + second] == [(1, 0, 1_000), (2, 1, 5_000), (3, 2, 5_000)]
    assert first[0].prev == GENESIS
    stored = list(journal.read("s1"))
    assert stored == first + second
    lines = segment_files(journal.root)[0].read_bytes().splitlines(keepends=True)
    assert second[0].prev == chain_digest(lines[0])
    assert second[1].prev == chain_digest(lines[1])
    assert [decode_line(line) for line in lines] == stored


def test_full_and_bounded_range_reads(journal: Journal) -> None:
    fill(journal, "s1", 9)  # seqs 1..10
    assert [r.seq for r in journal.read("s1")] == list(range(1, 11))
    assert [r.seq for r in journal.read("s1", 3, 5)] == [3, 4, 5]
    assert [r.seq for r in journal.read("s1", 8)] == [8, 9, 10]
    assert [r.seq for r in journal.read("s1", 9, 1_000)] == [9, 10]
    assert list(journal.read("s1", 6, 5)) == []
    assert list(journal.read("s1", 11)) == []
    assert [r.seq for r in journal.read("s1", 0, 1)] == [1]
    assert list(journal.read("unknown")) == []


def test_reads_page_through_long_sessions(journal: Journal) -> None:
    journal.append("long", [started()], expected_seq=0)
    journal.append("long", [msg(i) for i in range(2, 702)], expected_seq=1)
    assert [r.seq for r in journal.read("long")] == list(range(1, 702))
    assert [r.seq for r in journal.read("long", 250, 530)] == list(range(250, 531))


def test_highest_seq_comes_from_the_index(journal: Journal) -> None:
    assert journal.last_seq("s1") == 0
    fill(journal, "s1", 4)
    assert journal.last_seq("s1") == 5
    summary = journal.session("s1")
    assert summary is not None
    assert (summary.last_seq, summary.events, summary.workspace, summary.model) == (5, 5, "/work/repo", "m-1")
    assert summary.counts == {"session-started": 1, "user-message": 4}
    assert journal.session("nobody") is None


def test_expected_seq_conflict_and_duplicate_seq_are_refused(journal: Journal) -> None:
    fill(journal, "s1", 2)  # last seq 3
    with pytest.raises(SeqConflict) as info:
        journal.append("s1", [msg(9)], expected_seq=1)  # seq 2 exists: a duplicate
    assert (info.value.expected, info.value.actual) == (1, 3)
    with pytest.raises(SeqConflict):
        journal.append("s1", [msg(9)], expected_seq=7)  # a gap
    with pytest.raises(SeqConflict):
        journal.append("fresh", [started()], expected_seq=1)
    assert journal.last_seq("s1") == 3
    assert [r.seq for r in journal.read("s1")] == [1, 2, 3]


def test_multi_event_append_is_atomic(journal: Journal) -> None:
    journal.append("s1", [started()], expected_seq=0)
    size_before = segment_files(journal.root)[0].stat().st_size
    huge = too_big()
    with pytest.raises(LineTooLarge):
        journal.append("s1", [msg(2), huge, msg(4)], expected_seq=1)
    with pytest.raises(InvalidEvent):
        journal.append("s1", [msg(2), "not an event"], expected_seq=1)  # type: ignore[list-item]

    class Lookalike(UserMessage, frozen=True):  # not one of the event kinds: it would encode another tag
        pass

    with pytest.raises(InvalidEvent, match="Lookalike"):
        journal.append("s1", [msg(2), Lookalike(message_id="m", content=())], expected_seq=1)
    assert segment_files(journal.root)[0].stat().st_size == size_before
    assert journal.last_seq("s1") == 1
    records = journal.append("s1", [msg(2), usage(3), msg(4)], expected_seq=1)
    assert [r.seq for r in records] == [2, 3, 4]
    assert list(journal.read("s1", 2)) == records


def test_a_rejected_call_does_not_fail_the_others_of_its_batch(tmp_path: Path) -> None:
    gate = threading.Event()
    release = threading.Event()
    release.set()

    def slow_fsync(fd: int) -> None:
        gate.set()
        release.wait(10)

    with Journal.open(tmp_path / "store", fsync=slow_fsync) as journal:
        journal.append("a", [started()], expected_seq=0)
        journal.append("b", [started()], expected_seq=0)
        release.clear()
        gate.clear()
        blocker = journal.append_async("a", [msg(2)], expected_seq=1)
        assert gate.wait(10)  # the writer is inside fsync: the next calls queue into one batch
        bad = journal.append_async("b", [too_big()], expected_seq=1)
        good = journal.append_async("b", [msg(2)], expected_seq=1)
        conflict = journal.append_async("a", [msg(3)], expected_seq=0)
        release.set()
        assert [r.seq for r in blocker.result(10)] == [2]
        assert isinstance(bad.exception(10), LineTooLarge)
        assert [r.seq for r in good.result(10)] == [2]
        assert isinstance(conflict.exception(10), SeqConflict)
        assert [r.kind for r in journal.read("b")] == ["session-started", "user-message"]


def test_pipelined_async_appends_of_one_session_apply_in_order(journal: Journal) -> None:
    journal.append("p", [started()], expected_seq=0)
    futures: list[Future] = [journal.append_async("p", [msg(i)], expected_seq=i - 1) for i in range(2, 50)]
    assert [f.result(10)[0].seq for f in futures] == list(range(2, 50))


def test_bad_session_ids_are_refused_before_anything_is_written(journal: Journal) -> None:
    for sid in ["a/b", "..", "a..b", "nul\x00l", "x" * 129, "", "/abs", ".hidden", "sp ace"]:
        with pytest.raises(InvalidSessionId):
            journal.append(sid, [started()], expected_seq=0)
        with pytest.raises(InvalidSessionId):
            list(journal.read(sid))
    assert segment_files(journal.root)[0].stat().st_size == 0
    journal.append("x" * 128, [started()], expected_seq=0)


def test_concurrent_appends_from_many_threads_give_gap_free_seqs(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "store", segment_bytes=16 * 1024) as journal:
        sessions = [f"t{n}" for n in range(24)]
        per_thread = 40
        errors: list[BaseException] = []

        def work(n: int) -> None:
            rng = random.Random(n)
            try:
                for i in range(per_thread):
                    sid = sessions[(n + i) % 3 + 3 * (n % 8)]
                    while True:  # optimistic concurrency: retry on conflict
                        last = journal.last_seq(sid)
                        events = [started()] if last == 0 else [msg(last + 1, "z" * rng.randint(1, 400))]
                        try:
                            journal.append(sid, events, expected_seq=last)
                            break
                        except SeqConflict:
                            continue
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        total = 0
        for sid in sessions:
            records = list(journal.read(sid))
            assert [r.seq for r in records] == list(range(1, len(records) + 1))
            total += len(records)
        assert total == 16 * per_thread
        assert len(segment_files(journal.root)) > 1  # rolled
        positions = sorted(r.pos for sid in sessions for r in journal.read(sid))
        assert positions == list(range(total))


def test_segments_roll_at_the_size_limit_and_never_split_a_call(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "store", segment_bytes=1_000) as journal:
        journal.append("s", [started()], expected_seq=0)
        for i in range(2, 30, 3):
            journal.append("s", [msg(i, "a" * 150), msg(i + 1), msg(i + 2)], expected_seq=i - 1)
        files = segment_files(journal.root)
        assert len(files) > 3
        for path in files:
            lines = path.read_bytes().splitlines(keepends=True)
            first = decode_line(lines[0])
            assert path.name == f"{first.pos:020d}.jsonl"
            assert path.stat().st_size <= 1_000 or len(lines) <= 3
        assert [r.seq for r in journal.read("s")] == list(range(1, 32))
    with Journal.open(tmp_path / "store", segment_bytes=1_000) as journal:
        assert journal.recovery.lines_indexed == 0  # open does not scan an indexed log
        journal.append("s", [msg(32)], expected_seq=31)
        assert journal.last_seq("s") == 32


def test_second_writer_gets_store_locked_and_readers_need_no_lock(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        fill(journal, "s", 3)
        with pytest.raises(StoreLocked):
            Journal.open(root)
        with Journal.open(root, readonly=True) as reader:
            assert [r.seq for r in reader.read("s")] == [1, 2, 3, 4]
            with pytest.raises(ReadOnlyStore):
                reader.append("s", [msg(5)], expected_seq=4)
        journal.append("s", [msg(5)], expected_seq=4)
    with Journal.open(root) as again:
        assert again.last_seq("s") == 5


def test_readonly_open_without_an_index_builds_a_private_one(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        fill(journal, "s", 5)
    import shutil

    shutil.rmtree(root / "index")
    with Journal.open(root, readonly=True) as reader:
        assert reader.last_seq("s") == 6
        assert reader.load("s") == reader.replay_full("s")
    assert not (root / "index").exists()


def test_closed_journal_refuses_appends(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "store")
    journal.append("s", [started()], expected_seq=0)
    journal.close()
    journal.close()
    with pytest.raises(StoreClosed):
        journal.append("s", [msg(2)], expected_seq=1)


def test_sessions_lists_every_session_in_id_order(journal: Journal) -> None:
    for n in range(300):
        journal.append_async(f"s{n:03d}", [started()], expected_seq=0)
    journal.append("zz", [started()], expected_seq=0)
    ids = [s.sid for s in journal.sessions()]
    assert ids == sorted(ids) and len(ids) == 301


def test_load_equals_replay_full_with_checkpoints(journal: Journal) -> None:
    journal.append("c", [started()], expected_seq=0)
    seq = 1
    epoch = 0
    rng = random.Random(3)
    for i in range(400):
        if i % 50 == 49:
            epoch += 1
            batch = [checkpoint(epoch, seq)]
        else:
            batch = [rng.choice([msg(seq + 1), usage(seq + 1), TurnStarted(turn_id=f"t{seq}")])]
        journal.append("c", batch, expected_seq=seq)
        seq += 1
    assert journal.load("c") == journal.replay_full("c")
    refs = journal.checkpoints("c")
    assert [r.epoch for r in refs] == list(range(1, epoch + 1))
    summary = journal.session("c")
    assert summary is not None and summary.checkpoint_seq == refs[-1].seq
    assert journal.load("c") == replay(journal.read("c"))
    assert journal.load("nobody").last_seq == 0


def test_an_lmdb_disk_error_at_open_is_a_typed_storage_failure(tmp_path: Path, monkeypatch) -> None:
    """A full disk reaches the index as lmdb.DiskError (not an OSError): open fails typed, lock released."""
    import lmdb

    from cairn.store import StorageFailed
    from cairn.store.index import Index

    with Journal.open(tmp_path) as journal:
        journal.append("s", [started()], expected_seq=0)

    def full(self: Index, batch: object) -> None:
        raise lmdb.DiskError("mdb_txn_commit: No space left on device")

    monkeypatch.setattr(Index, "commit", full)
    with pytest.raises(StorageFailed, match="DiskError"):
        Journal.open(tmp_path)
    monkeypatch.undo()
    with Journal.open(tmp_path) as journal:  # the lock was released, nothing was lost
        assert journal.last_seq("s") == 1
