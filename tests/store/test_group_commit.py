"""The pipelined group commit: same bytes as before, acks only after fsync and index, failures for all."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from cairn.events.codec import GENESIS, Record, encode_line
from cairn.events.errors import InvalidEvent
from cairn.events.kinds import EventBase, TurnStarted, Usage
from cairn.store import Journal, SeqConflict
from cairn.store.errors import AppendTimeout, StorageFailed
from cairn.store.group_commit import GroupCommit
from tests.store.helpers import checkpoint, msg, segment_files, started, usage

CLOCK = 1_700_000_000_000


def _workload(journal: Journal) -> None:
    """Three sessions taking turns, one to three events a call, some with their own ts, over segment rolls."""
    seqs = {}
    for sid in ("a", "b", "c"):
        journal.append(sid, [started()], expected_seq=0)
        seqs[sid] = 1
    for n in range(30):
        sid = "abc"[n % 3]
        text = f"turn {n} " + "x" * (n * 37)
        call: list[EventBase] = [msg(n, text), usage(n), checkpoint(n + 1, seqs[sid])]
        records = journal.append(
            sid, call[: 1 + n % 3], expected_seq=seqs[sid], ts_ms=None if n % 4 else 1_600_000_000_000 + n
        )
        seqs[sid] += len(records)


def _log_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in segment_files(root):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _rebuilt(records: list[Record]) -> bytes:
    """The lines of `records`, framed one by one with `encode_line` (the unpipelined encoder)."""
    return b"".join(
        encode_line(pos=r.pos, sid=r.sid, seq=r.seq, ts=r.ts, prev=r.prev, event=r.event)[0] for r in records
    )


def test_the_bytes_on_disk_are_those_main_wrote_for_the_same_calls(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root, clock_ms=lambda: CLOCK, segment_bytes=4_000) as journal:
        _workload(journal)
        records = sorted(
            (r for sid in ("a", "b", "c") for r in journal.read(sid)), key=lambda record: record.pos
        )
    assert len(segment_files(root)) == 11
    # the same workload written by the store before the pipeline (main at e576731)
    assert _log_digest(root) == "b36ea20668f3bba1bfe90d0c64cac3ba235612d3e5d3484f78fa01d9624b0634"
    assert b"".join(path.read_bytes() for path in segment_files(root)) == _rebuilt(records)


class _Gate:
    """An fsync that blocks until released (or fails), counting its calls: the fault-injection seam."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.error: OSError | None = None
        self.calls = 0

    def hold(self) -> None:
        self.release.clear()
        self.entered.clear()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(30)
        if self.error is not None:
            raise self.error


class _Clock:
    """A fixed clock that tells when the preparer frames a batch (it reads the clock once a batch)."""

    def __init__(self) -> None:
        self.framed = threading.Semaphore(0)

    def __call__(self) -> int:
        self.framed.release()
        return CLOCK


def _through_the_syncer(journal: Journal) -> None:
    """Every batch goes to the syncer thread, even one with nothing queued behind it (which the
    preparer would otherwise sync itself): the overlap these tests hold needs both threads."""
    assert journal._writer is not None
    journal._writer.sync_inline_when_idle = False


def _drain(semaphore: threading.Semaphore) -> None:
    while semaphore.acquire(blocking=False):
        pass


def test_no_call_is_acknowledged_before_its_fsync_while_the_next_batch_is_prepared(tmp_path: Path) -> None:
    gate, clock = _Gate(), _Clock()
    with Journal.open(tmp_path / "store", fsync=gate, clock_ms=clock) as journal:
        _through_the_syncer(journal)
        journal.append("a", [started()], expected_seq=0)
        journal.append("b", [started()], expected_seq=0)
        size = segment_files(journal.root)[0].stat().st_size
        gate.hold()
        _drain(clock.framed)
        first = journal.append_async("a", [msg(2)], expected_seq=1)
        assert gate.entered.wait(30)  # batch 1 is in its fsync
        second = journal.append_async("b", [msg(2), usage(3)], expected_seq=1)
        third = journal.append_async("a", [msg(3)], expected_seq=2)  # chained on batch 1's head
        assert clock.framed.acquire(timeout=30)  # batch 2 is being prepared meanwhile
        assert clock.framed.acquire(timeout=30)
        assert not first.done() and not second.done() and not third.done()
        # batch 2 is framed, not written: the in-flight batch alone reached the file
        assert segment_files(journal.root)[0].stat().st_size > size
        gate.release.set()
        records = [first.result(30), second.result(30), third.result(30)]
        assert [[r.seq for r in call] for call in records] == [[2], [2, 3], [3]]
        assert [r.pos for call in records for r in call] == [2, 3, 4, 5]
        assert list(journal.read("a", 2)) == records[0] + records[2]
        assert list(journal.read("b", 2)) == records[1]
        assert journal.session("a").last_seq == 3  # indexed before the ack


def test_acks_follow_the_index_commit(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "store", clock_ms=lambda: CLOCK) as journal:
        journal.append("s", [started()], expected_seq=0)
        seen: list[int] = []
        called = threading.Event()

        def on_done(_: object) -> None:
            seen.append(journal.last_seq("s"))
            called.set()

        future = journal.append_async("s", [msg(2), msg(3)], expected_seq=1)
        future.add_done_callback(on_done)
        assert [r.seq for r in future.result(30)] == [2, 3]
        # the future wakes result() before it runs its callbacks: wait for the callback itself
        assert called.wait(30)
        assert seen == [3]


def test_an_fsync_failure_fails_the_batch_in_flight_the_one_prepared_and_every_later_call(
    tmp_path: Path,
) -> None:
    gate, clock = _Gate(), _Clock()
    journal = Journal.open(tmp_path / "store", fsync=gate, clock_ms=clock)
    _through_the_syncer(journal)
    try:
        journal.append("a", [started()], expected_seq=0)
        gate.hold()
        gate.error = OSError(5, "Input/output error")
        _drain(clock.framed)
        in_flight = journal.append_async("a", [msg(2)], expected_seq=1)
        assert gate.entered.wait(30)
        prepared: list[Future] = [journal.append_async("a", [msg(3)], expected_seq=2)]
        prepared.append(journal.append_async("b", [started()], expected_seq=0))
        assert clock.framed.acquire(timeout=30) and clock.framed.acquire(timeout=30)
        waiting: list[BaseException] = []
        blocked = threading.Thread(target=_append_catching, args=(journal, waiting))
        blocked.start()
        gate.release.set()
        blocked.join(30)
        assert isinstance(in_flight.exception(30), StorageFailed)
        assert all(isinstance(f.exception(30), StorageFailed) for f in prepared)
        assert len(waiting) == 1 and isinstance(waiting[0], StorageFailed)
        assert journal.failed is not None
        with pytest.raises(StorageFailed):
            journal.append("c", [started()], expected_seq=0)
        with pytest.raises(StorageFailed):
            journal.append_async("c", [started()], expected_seq=0)
    finally:
        journal.close()
    with Journal.open(tmp_path / "store") as reopened:
        assert reopened.last_seq("a") in (1, 2)  # the failed batch's outcome is unknown, never beyond it
        assert reopened.last_seq("b") == 0


def _append_catching(journal: Journal, errors: list[BaseException]) -> None:
    try:
        journal.append("c", [started()], expected_seq=0)
    except BaseException as exc:
        errors.append(exc)


def test_a_bad_event_or_a_conflict_refuses_its_call_alone_in_a_pipelined_batch(tmp_path: Path) -> None:
    gate = _Gate()
    with Journal.open(tmp_path / "store", fsync=gate, clock_ms=lambda: CLOCK) as journal:
        _through_the_syncer(journal)
        journal.append("a", [started()], expected_seq=0)
        gate.hold()
        blocker = journal.append_async("a", [msg(2)], expected_seq=1)
        assert gate.entered.wait(30)
        bad = journal.append_async("a", [Usage(request_id="r", prompt_tokens=1.5)], expected_seq=2)  # type: ignore[arg-type]
        conflict = journal.append_async("a", [msg(3)], expected_seq=1)
        good = journal.append_async("a", [TurnStarted(turn_id="t")], expected_seq=2)
        gate.release.set()
        assert [r.seq for r in blocker.result(30)] == [2]
        error = bad.exception(30)
        assert isinstance(error, InvalidEvent) and error.path == "$.prompt_tokens"
        assert isinstance(conflict.exception(30), SeqConflict)
        assert [r.seq for r in good.result(30)] == [3]
        assert [r.kind for r in journal.read("a")] == ["session-started", "user-message", "turn-started"]
        assert journal.failed is None


def test_records_of_many_threads_equal_what_a_read_gives_back_and_chain_from_genesis(tmp_path: Path) -> None:
    results: dict[str, list[Record]] = {}

    def work(n: int) -> None:
        sid = f"t{n}"
        got = journal.append(sid, [started()], expected_seq=0)
        for i in range(2, 12):
            got += journal.append(sid, [msg(i) if i % 2 else usage(i)], expected_seq=i - 1)
        results[sid] = got

    with Journal.open(tmp_path / "store", clock_ms=lambda: CLOCK) as journal:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(24)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(results) == 24
        for sid, got in results.items():
            assert list(journal.read(sid)) == got
            assert got[0].prev == GENESIS and [r.seq for r in got] == list(range(1, 12))
        positions = sorted(r.pos for got in results.values() for r in got)
        assert positions == list(range(24 * 11))


class _HeldClock:
    """A fixed clock the test can hold: the preparer stops at the start of framing a batch."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.go.set()

    def __call__(self) -> int:
        self.entered.set()
        assert self.go.wait(30)
        return CLOCK


def _three_sessions_and_a_held_fsync(
    journal: Journal, gate: _Gate
) -> tuple[GroupCommit, Future[list[Record]]]:
    """Sessions a, b and c started, then a call of `a` inside its fsync, held there by `gate`: what is
    submitted next queues into one batch behind it."""
    writer = journal._writer
    assert writer is not None
    for sid in ("a", "b", "c"):
        journal.append(sid, [started()], expected_seq=0)
    gate.hold()
    blocker = journal.append_async("a", [msg(2)], expected_seq=1)
    assert gate.entered.wait(30)
    return writer, blocker


def test_a_caller_that_stopped_waiting_does_not_stall_the_wake_of_its_batch(tmp_path: Path) -> None:
    gate, clock = _Gate(), _HeldClock()
    with Journal.open(tmp_path / "store", fsync=gate, clock_ms=clock) as journal:
        _through_the_syncer(journal)
        writer, blocker = _three_sessions_and_a_held_fsync(journal, gate)  # batch 1 in its fsync
        clock.go.clear()
        clock.entered.clear()
        quitter = writer.submit("b", [msg(2)], 1, None, None)  # queued: the first of batch 2
        assert clock.entered.wait(30)  # the preparer took it and stands at framing it
        with pytest.raises(AppendTimeout):
            writer.wait(quitter, 0.05)  # its caller gives up before batch 2 is even framed
        patient = writer.submit("c", [msg(2)], 1, None, None)  # queued behind it
        clock.go.set()  # framed into the same batch: the syncer is still busy with batch 1
        outcome: list[list[Record]] = []
        waiting = threading.Thread(target=lambda: outcome.append(writer.wait(patient, None)))
        waiting.start()
        gate.release.set()
        waiting.join(30)
        assert not waiting.is_alive()
        assert [[r.seq for r in records] for records in outcome] == [[2]]
        assert [r.seq for r in blocker.result(30)] == [2]
        assert journal.last_seq("b") == 2  # the call that timed out may still become durable


def test_a_lone_batch_is_synced_by_the_preparer_and_a_busy_one_by_the_syncer(tmp_path: Path) -> None:
    syncing: list[str] = []

    def fsync(fd: int) -> None:
        syncing.append(threading.current_thread().name)

    with Journal.open(tmp_path / "store", fsync=fsync, clock_ms=lambda: CLOCK) as journal:
        syncing.clear()  # what opening the store synced
        journal.append("a", [started()], expected_seq=0)  # nothing queued behind it
        assert syncing == ["cairn-journal-writer"]
        _through_the_syncer(journal)
        journal.append("a", [msg(2)], expected_seq=1)
        assert syncing == ["cairn-journal-writer", "cairn-journal-syncer"]
        assert [r.seq for r in journal.read("a")] == [1, 2]


def test_appends_that_time_out_and_appends_that_are_answered_each_get_one_outcome(tmp_path: Path) -> None:
    """Callers that stop waiting and callers that wait share batches and relays: with the fsync
    held, 16 callers with short timeouts raise AppendTimeout, 16 without one get their records
    once it is let go, and none hangs or errs."""
    gate = _Gate()
    with Journal.open(tmp_path / "store", fsync=gate) as journal:
        for n in range(33):
            journal.append(f"s{n}", [started()], expected_seq=0)
        gate.hold()
        blocker = journal.append_async("s0", [msg(2)], expected_seq=1)
        assert gate.entered.wait(30)  # the writer is inside fsync: every call below waits
        outcomes: dict[int, object] = {}
        waited: dict[int, float] = {}

        def append(n: int) -> None:
            started_at = time.monotonic()
            try:
                outcomes[n] = journal.append(
                    f"s{n}", [msg(2)], expected_seq=1, timeout=0.1 if n % 2 else None
                )
            except Exception as exc:  # the outcome is what the test reads
                outcomes[n] = exc
            waited[n] = time.monotonic() - started_at

        threads = [threading.Thread(target=append, args=(n,)) for n in range(1, 33)]
        for thread in threads:
            thread.start()
        timed = [n for n in range(1, 33) if n % 2]
        for n in timed:
            threads[n - 1].join(30)
            assert isinstance(outcomes[n], AppendTimeout), outcomes[n]
            assert 0.1 <= waited[n] < 5.0  # a loaded machine's slack
        gate.release.set()
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive()
        assert [r.seq for r in blocker.result(30)] == [2]
        for n in range(2, 33, 2):
            assert [r.seq for r in outcomes[n]] == [2], outcomes[n]  # type: ignore[attr-defined]
        assert journal.last_seq("s31") == 2  # a call that timed out may still become durable
        assert journal.failed is None


def test_a_relay_that_stalls_holds_the_writer_back_no_longer_than_its_wait(tmp_path: Path) -> None:
    """The preparer that synced a batch waits for its relay to wake every caller (`GroupCommit._sync`);
    a caller that never hands the baton on (here: two calls nobody waits for) costs it
    `RELAY_WAIT_S`, not the store."""
    from cairn.store.group_commit import RELAY_WAIT_S

    gate = _Gate()
    with Journal.open(tmp_path / "store", fsync=gate, clock_ms=lambda: CLOCK) as journal:
        writer, blocker = _three_sessions_and_a_held_fsync(journal, gate)  # the preparer syncs it
        first = writer.submit("b", [msg(2)], 1, None, None)  # queued: one batch, a relay of two
        second = writer.submit("c", [msg(2)], 1, None, None)
        gate.release.set()
        assert [r.seq for r in blocker.result(30)] == [2]
        assert first.lock.acquire(timeout=30)  # woken first; it hands nothing on
        started_at = time.monotonic()
        assert [r.seq for r in journal.append("a", [msg(3)], expected_seq=2)] == [3]
        assert time.monotonic() - started_at < RELAY_WAIT_S + 10.0  # the writer went on
        assert not second.lock.acquire(blocking=False)  # the relay stopped where it stalled
        assert [r.seq for r in second.result] == [2] and journal.last_seq("c") == 2
