"""Appends of many sessions in flight at once on the journal's one connection (`submit.Submissions`).

Every call is acknowledged, each session's calls apply in the order they
were queued, a call that fails does not hold back the ones queued behind
it, and closing the journal leaves no caller waiting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator

import pytest

from cairn.events.codec import Record
from cairn.store.errors import AppendTimeout, SeqConflict, StoreClosed
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import SessionFenced
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.loop import LoopThread
from cairn.store.jetstream.submit import Pending, Submissions
from tests.cluster.js_helpers import fresh_layout, open_journal
from tests.store.helpers import msg, started


@pytest.fixture
def journal(cluster: LocalCluster) -> Iterator[JetStreamJournal]:
    opened = open_journal(cluster)
    yield opened
    opened.close()


def test_256_sessions_with_5_calls_each_queued_at_once_are_all_acknowledged_in_order(
    journal: JetStreamJournal,
) -> None:
    sessions = [f"pipe-{n}" for n in range(256)]
    futures = {
        sid: [journal.append_async(sid, [started()], expected_seq=0)]
        + [journal.append_async(sid, [msg(i)], expected_seq=i) for i in range(1, 5)]
        for sid in sessions
    }
    for sid, calls in futures.items():
        acked = [call.result(60) for call in calls]
        assert [records[0].seq for records in acked] == [1, 2, 3, 4, 5]
        assert all(records[0].sid == sid for records in acked)
    for sid in sessions[::51]:
        read = list(journal.read(sid))  # checked: checksums and the hash chain
        assert [r.seq for r in read] == [1, 2, 3, 4, 5]
        assert [r.event for r in read[1:]] == [msg(i) for i in range(1, 5)]
    assert journal.last_seq(sessions[-1]) == 5
    assert journal.fast_appends == 256 * 4  # every one-event call on a known head: no task, no timer


def test_64_threads_appending_one_event_at_a_time_each_get_every_ack_in_order(
    journal: JetStreamJournal,
) -> None:
    errors: list[BaseException] = []
    acked: dict[str, list[int]] = {}

    def work(n: int) -> None:
        sid = f"thread-{n}"
        try:
            seqs = [journal.append(sid, [started()], expected_seq=0)[0].seq]
            seqs += [journal.append(sid, [msg(i)], expected_seq=i)[0].seq for i in range(1, 10)]
            acked[sid] = seqs
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(acked) == 64 and all(seqs == list(range(1, 11)) for seqs in acked.values())
    assert [r.seq for r in journal.read("thread-63")] == list(range(1, 11))


def test_a_conflicting_call_fails_alone_and_the_calls_queued_behind_it_still_apply(
    journal: JetStreamJournal,
) -> None:
    first = journal.append_async("q", [started()], expected_seq=0)
    stale = journal.append_async("q", [msg(1)], expected_seq=5)
    after = journal.append_async("q", [msg(2)], expected_seq=1)
    assert first.result(30)[0].seq == 1
    with pytest.raises(SeqConflict):
        stale.result(30)
    assert after.result(30)[0].seq == 2
    assert [r.event for r in journal.read("q")][1:] == [msg(2)]


def test_a_fast_append_whose_reply_is_lost_is_settled_by_reading_and_stored_once(
    cluster: LocalCluster,
) -> None:
    journal = open_journal(cluster)
    try:
        journal.append("lost", [started()], expected_seq=0)  # session-started: the full path
        journal.append("lost", [msg(1)], expected_seq=1)  # the fast path, which opens the inbox
        assert journal.fast_appends == 1
        appender = journal._appender
        inbox = appender._inbox
        assert inbox._sub is not None
        journal._call(inbox._sub.unsubscribe())  # every later reply to the inbox is dropped by the server
        appender._request_timeout_s = 1.0  # the reply's deadline
        records = journal.append("lost", [msg(2)], expected_seq=2)
        assert records[0].seq == 3 and journal.fast_appends == 1  # settled on the full path
        assert [r.event for r in journal.read("lost")] == [started(), msg(1), msg(2)]  # stored once
    finally:
        journal.close()


def test_a_fast_append_on_a_head_another_writer_moved_is_fenced_and_stores_nothing(
    cluster: LocalCluster,
) -> None:
    layout = fresh_layout()
    first, second = open_journal(cluster, layout), open_journal(cluster, layout)
    try:
        first.append("f", [started()], expected_seq=0)
        first.append("f", [msg(1)], expected_seq=1)  # first knows the head: seq 2
        second.append("f", [msg(2)], expected_seq=2)  # second reads the head and appends seq 3
        with pytest.raises(SessionFenced):
            first.append("f", [msg(9)], expected_seq=2)  # first's known head is stale
        assert [r.event for r in second.read("f")] == [started(), msg(1), msg(2)]
        assert first.append("f", [msg(3)], expected_seq=3)[0].seq == 4  # the head is read again
    finally:
        first.close()
        second.close()


def test_one_stale_call_in_a_shared_batch_is_fenced_alone_and_the_others_are_stored(
    cluster: LocalCluster,
) -> None:
    """Calls of many sessions begun together share one atomic batch; one stale guard refuses the batch,
    and then every call is sent on its own: the stale one is fenced, the others stored once."""
    layout = fresh_layout()
    first, second = open_journal(cluster, layout), open_journal(cluster, layout)
    try:
        sessions = [f"g-{n}" for n in range(40)]
        for sid in sessions:
            first.append(sid, [started()], expected_seq=0)
        second.append("g-7", [msg(99)], expected_seq=1)  # first's known head of g-7 is now stale
        before = first.fast_appends
        futures = {sid: first.append_async(sid, [msg(1)], expected_seq=1) for sid in sessions}
        for sid, future in futures.items():
            if sid == "g-7":
                with pytest.raises(SessionFenced):
                    future.result(30)
            else:
                assert future.result(30)[0].seq == 2
        for sid in sessions:
            events = [r.event for r in second.read(sid)]
            assert events == [started(), msg(99) if sid == "g-7" else msg(1)]  # each stored once
        assert first.fast_appends - before < len(sessions)  # the refused batch's calls went on their own
    finally:
        first.close()
        second.close()


def test_closing_the_journal_resolves_every_call_queued_and_refuses_later_ones(cluster: LocalCluster) -> None:
    layout = fresh_layout()
    journal = open_journal(cluster, layout)
    futures = [journal.append_async(f"c-{n}", [started()], expected_seq=0) for n in range(200)]
    journal.close()
    outcomes: list[list[Record] | BaseException] = []
    for future in futures:
        try:
            outcomes.append(future.result(timeout=0))  # resolved by close: no wait at all
        except (StoreClosed, AppendTimeout) as exc:  # never sent / in flight: maybe stored
            outcomes.append(exc)
    with pytest.raises(StoreClosed):
        journal.append("c-0", [msg(1)], expected_seq=1)
    reopened = open_journal(cluster, layout)
    try:
        for n, outcome in enumerate(outcomes):
            stored = reopened.last_seq(f"c-{n}")
            if isinstance(outcome, list):
                assert stored == 1  # an acknowledged call is stored
            elif isinstance(outcome, StoreClosed):
                assert stored == 0  # a call never sent is not
    finally:
        reopened.close()


def test_submissions_keep_one_sessions_order_while_other_sessions_overtake_it() -> None:
    """The queue alone, on a loop: a session whose call waits holds back only its own later calls."""
    loop = LoopThread(name="test-submit")
    gate = asyncio.Event()
    order: list[tuple[str, int]] = []
    tasks: set[asyncio.Task[None]] = set()

    async def begin(call: Pending) -> None:  # under way at once; finished when its work is done
        async def work() -> None:
            if call.sid == "slow" and call.expected == 0:
                await gate.wait()
            order.append((call.sid, call.expected))
            await submissions.finished(call, [], None)

        tasks.add(asyncio.get_running_loop().create_task(work()))

    try:
        submissions = Submissions(loop.loop, begin)
        calls = [
            Pending("slow", [], 0, 0, 1.0, future=concurrent.futures.Future()),
            Pending("slow", [], 1, 0, 1.0, future=concurrent.futures.Future()),
            Pending("fast", [], 0, 0, 1.0, future=concurrent.futures.Future()),
            Pending("fast", [], 1, 0, 1.0, future=concurrent.futures.Future()),
        ]
        for call in calls:
            submissions.submit(call)
        for call in calls[2:]:
            assert call.future is not None and call.future.result(10) == []
        assert order == [("fast", 0), ("fast", 1)]
        loop.loop.call_soon_threadsafe(gate.set)
        for call in calls[:2]:
            assert call.future is not None and call.future.result(10) == []
        assert order == [("fast", 0), ("fast", 1), ("slow", 0), ("slow", 1)]
    finally:
        loop.close()
