"""Acknowledged data is never lost silently: missing lines refuse writers until an operator accepts the loss.

The store used here holds three segments of 1,500 bytes (fixed clock, so
the layout is fixed):

    00000000000000000000.jsonl  pos 0-5    a seqs 1-6
    00000000000000000006.jsonl  pos 6-11   a seq 7, b seqs 1-5
    00000000000000000012.jsonl  pos 12-15  b seqs 6-7, a seqs 8-9   (226 bytes per line)
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from cairn.events.codec import GENESIS, encode_line
from cairn.store import CorruptionError, Journal, StorageError, StoreLocked, reindex, verify_store
from tests.store.helpers import fill, msg

# The names this issue adds are imported where they are used, so that every test here runs (and fails for
# what it checks) against a store that lacks them.
ACK_MARK, OPERATOR_LOG = "ACKED", "operator.jsonl"

CLOCK = 1_700_000_000_000
FIRST, MIDDLE, LAST = "00000000000000000000.jsonl", "00000000000000000006.jsonl", "00000000000000000012.jsonl"


def _store(root: Path) -> Path:
    with Journal.open(root, segment_bytes=1_500, clock_ms=lambda: CLOCK) as journal:
        fill(journal, "a", 6)
        fill(journal, "b", 6)
        fill(journal, "a", 2)
    assert sorted(p.name for p in (root / "log").iterdir()) == [FIRST, MIDDLE, LAST]
    return root


def _files(root: Path) -> dict[str, bytes]:
    """Every file of the store with its bytes (LMDB's reader table and the lock's pid left out)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            name = str(path.relative_to(root))
            found[name] = b"" if name in ("index/lock.mdb", "LOCK") else path.read_bytes()
    return found


def _unchanged(root: Path, before: dict[str, bytes]) -> bool:
    after = _files(root)
    if not any(name.startswith("index/") for name in before):
        after = {name: data for name, data in after.items() if not name.startswith("index/")}
    return after == before


def _cut_lines(root: Path, name: str, keep: int) -> None:
    path = root / "log" / name
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:keep]))


def _truncate_two_lines(root: Path) -> None:
    _cut_lines(root, LAST, 2)


def _truncate_mid_line(root: Path) -> None:
    os.truncate(root / "log" / LAST, 3 * 226 + 100)  # a seq 9 is cut in its middle


def _empty_last(root: Path) -> None:
    os.truncate(root / "log" / LAST, 0)


def _delete_last(root: Path) -> None:
    (root / "log" / LAST).unlink()


def _delete_middle(root: Path) -> None:
    (root / "log" / MIDDLE).unlink()


def _delete_first(root: Path) -> None:
    (root / "log" / FIRST).unlink()


def _truncate_and_delete_index(root: Path) -> None:
    _truncate_two_lines(root)
    shutil.rmtree(root / "index")


def _zero_acknowledged_tail(root: Path) -> None:
    path = root / "log" / LAST
    data = bytearray(path.read_bytes())
    data[2 * 226 + 10 :] = bytes(len(data) - 2 * 226 - 10)  # zeros where a seqs 8-9 were
    path.write_bytes(bytes(data))


DAMAGE: dict[str, tuple[Callable[[Path], None], tuple[int, int], list[tuple[str, int, int]] | None]] = {
    # what is done to the log: the positions then missing, and the sessions' seqs they held (None: unknown)
    "two lines cut from the end": (_truncate_two_lines, (14, 15), [("a", 8, 9)]),
    "the last line cut in its middle": (_truncate_mid_line, (15, 15), [("a", 9, 9)]),
    "the last segment emptied": (_empty_last, (12, 15), [("a", 8, 9), ("b", 6, 7)]),
    "the last segment deleted": (_delete_last, (12, 15), [("a", 8, 9), ("b", 6, 7)]),
    "a middle segment deleted": (_delete_middle, (6, 11), [("a", 7, 7), ("b", 1, 5)]),
    "the first segment deleted": (_delete_first, (0, 5), [("a", 1, 6)]),
    "the end cut and the index deleted": (_truncate_and_delete_index, (14, 15), None),
    "acknowledged lines zeroed at the end": (_zero_acknowledged_tail, (14, 15), [("a", 8, 9)]),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_missing_acknowledged_lines_refuse_a_writer_and_fail_verify(tmp_path: Path, case: str) -> None:
    damage, (first, last), sessions = DAMAGE[case]
    root = _store(tmp_path / "store")
    damage(root)
    before = _files(root)
    with pytest.raises(StorageError) as info:
        Journal.open(root)
    from cairn.store.errors import AcknowledgedDataMissing

    assert isinstance(info.value, AcknowledgedDataMissing)
    [loss] = info.value.losses
    assert (loss.first_pos, loss.last_pos) == (first, last)
    if sessions is None:
        assert not loss.sessions and not loss.sessions_known
        assert "unknown" in str(info.value)
    else:
        assert [(s.sid, s.first_seq, s.last_seq) for s in loss.sessions] == sessions
        for sid, low, _ in sessions:
            assert f"{sid} seq" in str(info.value) and str(low) in str(info.value)
    assert "cairn repair --accept-loss" in str(info.value)
    # refused before anything changed: nothing cut, the evidence kept (an index that was gone may have
    # been rebuilt from what is left: derived data, and no evidence of anything)
    assert _unchanged(root, before)

    report = verify_store(root)
    assert not report.ok
    missing = [p for p in report.problems if p.code == "acknowledged-missing"]
    span = f"pos {first}" if first == last else f"positions {first}-{last}"
    assert span in missing[0].message
    if sessions is not None:
        assert [(p.sid, p.seq) for p in missing[1:]] == [(sid, low) for sid, low, _ in sessions]
    assert [(x.first_pos, x.last_pos, x.accepted) for x in report.losses] == [(first, last, False)]
    assert not any(p.code in ("index-differs", "pos-gap") for p in report.problems)  # one cause, said once

    with Journal.open(root, readonly=True) as reader:  # audit sees what is left, and is told
        assert [(u.first_pos, u.last_pos) for u in reader.recovery.unaccepted_losses] == [(first, last)]
        assert any("acknowledged lines are missing" in note for note in reader.recovery.notes)
        assert {s.sid for s in reader.sessions()} <= {"a", "b"}
    assert _unchanged(root, before)
    with pytest.raises(StorageError):  # still refused: nothing was decided
        Journal.open(root)
    with pytest.raises(StorageError):  # and a reindex would forget which sessions lost what
        reindex(root)
    assert _unchanged(root, before)


def test_an_accepted_loss_is_recorded_and_appends_continue_past_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from cairn.store.ack_mark import read_ack_mark
    from cairn.store.repair import accept_loss

    root = _store(tmp_path / "store")
    _truncate_mid_line(root)
    remains = (root / "log" / LAST).read_bytes()[3 * 226 :]
    with caplog.at_level(logging.WARNING, logger="cairn.store"):
        record = accept_loss(root, reason="disk replaced", clock_ms=lambda: CLOCK + 5)
    assert "an operator accepted the loss" in caplog.text and "a seq 9" in caplog.text
    assert [(r.first_pos, r.last_pos) for r in record.ranges] == [(15, 15)]
    assert [(s.sid, s.first_seq, s.last_seq) for s in record.sessions] == [("a", 9, 9)]
    assert (record.reason, record.ts, record.pid) == ("disk replaced", CLOCK + 5, os.getpid())
    [kept] = record.quarantined
    assert (kept.segment, kept.offset, kept.length) == (LAST, 3 * 226, 100)
    assert (root / kept.file).read_bytes() == remains  # what was cut is kept
    assert (root / "log" / LAST).stat().st_size == 3 * 226
    logged = [msgspec.json.decode(line) for line in (root / OPERATOR_LOG).read_bytes().splitlines()]
    assert [entry["action"] for entry in logged] == ["accept-loss"]
    assert logged[0]["sessions"] == [{"sid": "a", "first_seq": 9, "last_seq": 9}]

    report = verify_store(root)
    assert report.ok, report.problems
    [warning] = [w for w in report.warnings if w.code == "accepted-loss"]
    assert "pos 15" in warning.message and "disk replaced" in warning.message

    with Journal.open(root) as journal:
        assert journal.recovery.next_pos == 16  # pos 15 is never used again
        assert journal.last_seq("a") == 8
        [record_9] = journal.append("a", [msg(9)], expected_seq=8)
        assert (record_9.pos, record_9.seq) == (16, 9)
        assert journal.load("a") == journal.replay_full("a")
    assert (root / "log" / "00000000000000000016.jsonl").is_file()  # a segment past the gap
    assert read_ack_mark(root)[0].next_pos == 17  # type: ignore[union-attr]
    report = verify_store(root)
    assert report.ok, report.problems
    assert [w.code for w in report.warnings] == ["accepted-loss"]
    with Journal.open(root) as journal:  # and it stays open-able
        journal.append("b", [msg(8)], expected_seq=7)
    assert verify_store(root).ok


def test_a_lost_middle_segment_accepted_leaves_broken_sessions_closed(tmp_path: Path) -> None:
    from cairn.store.repair import accept_loss

    root = _store(tmp_path / "store")
    _delete_middle(root)
    accept_loss(root)
    report = verify_store(root)
    assert report.ok, report.problems
    assert sorted((w.code, w.sid) for w in report.warnings) == [
        ("accepted-loss", ""),
        ("seq-gap", "a"),
        ("seq-gap", "b"),
    ]
    with Journal.open(root) as journal:
        assert [r.seq for r in journal.read("a", 1, 6)] == [1, 2, 3, 4, 5, 6]
        with pytest.raises(CorruptionError):  # a's history has a hole at seq 7: fail closed
            journal.load("a")
        with pytest.raises(CorruptionError):
            journal.append("a", [msg(10)], expected_seq=9)
        journal.append("c", [msg(1)], expected_seq=0)
        assert journal.index.location("c", 1).pos == 16  # type: ignore[union-attr]


def test_repair_refuses_when_nothing_is_missing_and_while_a_writer_runs(tmp_path: Path) -> None:
    from cairn.store.errors import NothingToRepair
    from cairn.store.repair import accept_loss

    root = _store(tmp_path / "store")
    before = _files(root)
    with pytest.raises(NothingToRepair):
        accept_loss(root)
    assert _files(root) == before and not (root / OPERATOR_LOG).exists()
    _truncate_two_lines(root)
    blocker = Journal.open(tmp_path / "other")  # a writer of another store: no interference
    blocker.close()
    with pytest.raises(StorageError):
        Journal.open(root)
    import fcntl

    fd = os.open(root / "LOCK", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a writer of this store would hold it
        with pytest.raises(StoreLocked):
            accept_loss(root)
    finally:
        os.close(fd)
    accept_loss(root)
    with pytest.raises(NothingToRepair):  # accepted already
        accept_loss(root)
    with Journal.open(root) as journal:
        fill(journal, "a", 2)
    _cut_lines(root, "00000000000000000016.jsonl", 1)  # a new loss, past the accepted one
    with pytest.raises(StorageError) as info:
        Journal.open(root)
    assert [(x.first_pos, x.last_pos) for x in info.value.losses] == [(17, 17)]  # type: ignore[attr-defined]
    accept_loss(root)
    assert len((root / OPERATOR_LOG).read_bytes().splitlines()) == 2


def test_a_flipped_bit_in_the_complete_last_line_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    root = _store(tmp_path / "store")
    path = root / "log" / LAST
    data = bytearray(path.read_bytes())
    data[3 * 226 + 120] ^= 0x01  # inside a seq 9, the last acknowledged line
    path.write_bytes(bytes(data))
    size = path.stat().st_size
    with Journal.open(root) as journal:
        assert not journal.recovery.truncated and journal.recovery.bytes_dropped == 0
        assert path.stat().st_size == size  # nothing cut
        [entry] = journal.recovery.corruptions
        assert (entry.sid, entry.seq, entry.offset) == ("a", 9, 3 * 226)
        assert journal.recovery.next_pos == 16  # the damaged line keeps its position
        with pytest.raises(CorruptionError):
            journal.load("a")
        [record] = journal.append("b", [msg(8)], expected_seq=7)
        assert record.pos == 16
    report = verify_store(root)
    assert [(p.code, p.sid, p.offset) for p in report.problems] == [("corrupt-line", "a", 3 * 226)]
    assert not [w for w in report.warnings if w.code == "torn-tail"]


def test_a_flipped_bit_in_an_unacknowledged_whole_last_line_is_corruption_too(tmp_path: Path) -> None:
    root = _store(tmp_path / "store")
    path = root / "log" / LAST
    line, _ = encode_line(pos=16, sid="b", seq=8, ts=CLOCK, prev=GENESIS, event=msg(8))
    damaged = bytearray(line)
    damaged[60] ^= 0x04
    with open(path, "ab") as handle:  # never acknowledged, yet whole: a crash cannot leave this
        handle.write(bytes(damaged))
    size = path.stat().st_size
    assert [p.code for p in verify_store(root).problems] == ["corrupt-line"]
    with Journal.open(root) as journal:
        assert not journal.recovery.truncated and path.stat().st_size == size
        assert [c.sid for c in journal.recovery.corruptions] == ["b"]
        assert journal.recovery.next_pos == 17


@pytest.mark.parametrize("shape", ["zeros", "partial line", "partial line then zeros"])
def test_what_a_crash_leaves_past_the_acknowledged_bytes_is_cut(tmp_path: Path, shape: str) -> None:
    root = _store(tmp_path / "store")
    path = root / "log" / LAST
    acked = path.stat().st_size
    line, _ = encode_line(pos=16, sid="b", seq=8, ts=CLOCK, prev=GENESIS, event=msg(8))
    junk = {
        "zeros": bytes(4096),
        "partial line": line[:150],
        "partial line then zeros": line[:90] + bytes(300) + line[200:],
    }[shape]
    with open(path, "ab") as handle:
        handle.write(junk)
    report = verify_store(root)
    assert report.ok and [w.code for w in report.warnings] == ["torn-tail"]
    with Journal.open(root) as journal:
        assert journal.recovery.truncated and journal.recovery.bytes_dropped == len(junk)
        assert journal.recovery.tail_at == (LAST, acked)
        assert not journal.recovery.corruptions
    assert path.stat().st_size == acked
    assert verify_store(root).ok


def test_the_acknowledgement_mark_follows_each_group_commit_without_an_fsync_of_its_own(
    tmp_path: Path,
) -> None:
    from cairn.store.ack_mark import read_ack_mark

    root = tmp_path / "store"
    fsyncs: list[int] = []

    def counting(fd: int) -> None:
        fsyncs.append(fd)
        os.fsync(fd)

    journal = Journal.open(root, fsync=counting)
    try:
        journal.append("s", [msg(1)], expected_seq=0)  # the first: makes the segment (fsyncs of its own)
        before = len(fsyncs)
        for seq in range(1, 11):
            journal.append("s", [msg(seq + 1)], expected_seq=seq)
            mark, trouble = read_ack_mark(root)
            assert trouble == "" and mark is not None
            assert mark.next_pos == seq + 1  # written before the append returned
        assert len(fsyncs) - before == 10  # one fsync per batch: the log's, none for the mark
    finally:
        journal.close()
    mark, _ = read_ack_mark(root)
    assert mark is not None and mark.next_pos == 11


def test_a_damaged_mark_is_no_evidence_and_is_said(tmp_path: Path) -> None:
    from cairn.store.ack_mark import read_ack_mark

    root = _store(tmp_path / "store")
    (root / ACK_MARK).write_bytes(b"cairn-acked-1 garbage\n")
    report = verify_store(root)
    assert report.ok
    assert [w.code for w in report.warnings] == ["evidence"]
    with Journal.open(root) as journal:  # the index is evidence enough; the mark is written anew
        assert journal.recovery.next_pos == 16
    assert read_ack_mark(root)[0] is not None
