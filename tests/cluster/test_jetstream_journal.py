"""The JetStream journal behind the JournalBackend Protocol: appends, reads, limits, bad ids, blobs."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import pytest

from cairn.events.codec import decode_line
from cairn.events.errors import InvalidSessionId, LineTooLarge
from cairn.events.kinds import AssistantMessage
from cairn.events.model import BlobPart, TextPart
from cairn.events.state import user_text_message
from cairn.store.backend import JournalBackend
from cairn.store.errors import SeqConflict
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import MAX_BATCH_MSGS, CallTooLarge
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.journal import Journal
from tests.cluster.js_helpers import open_journal
from tests.store.helpers import msg, started


@pytest.fixture
def journal(cluster: LocalCluster) -> Iterator[JetStreamJournal]:
    opened = open_journal(cluster)
    yield opened
    opened.close()


def test_both_backends_satisfy_the_journal_protocol(journal: JetStreamJournal, tmp_path: object) -> None:
    cluster_backend: JournalBackend = journal  # checked by mypy
    local = Journal.open(f"{tmp_path}/store")
    try:
        local_backend: JournalBackend = local  # checked by mypy
        assert isinstance(cluster_backend, JournalBackend) and isinstance(local_backend, JournalBackend)
    finally:
        local.close()


def test_a_call_is_stored_as_local_log_lines_and_read_back_checked(journal: JetStreamJournal) -> None:
    records = journal.append("s-1", [started(), msg(1), msg(2)], expected_seq=0)
    assert [r.seq for r in records] == [1, 2, 3] and [r.pos for r in records] == [0, 1, 2]
    more = journal.append("s-1", [msg(3)], expected_seq=3)
    read = list(journal.read("s-1"))
    assert read == records + more
    assert list(journal.read("s-1", 2, 3)) == records[1:]
    assert journal.last_seq("s-1") == 4 and journal.last_seq("nobody") == 0
    assert journal.load("s-1") == journal.replay_full("s-1")
    summary = journal.session("s-1")
    assert summary is not None and summary.last_seq == 4 and summary.model == "m-1"
    assert summary.counts == {"session-started": 1, "user-message": 3}
    assert [s.sid for s in journal.sessions()] == ["s-1"]


def test_a_stale_expected_seq_is_a_seq_conflict_and_stores_nothing(journal: JetStreamJournal) -> None:
    journal.append("s", [started()], expected_seq=0)
    with pytest.raises(SeqConflict) as caught:
        journal.append("s", [msg(1)], expected_seq=0)
    assert caught.value.actual == 1
    assert journal.last_seq("s") == 1


def test_a_call_over_1000_events_is_refused_whole(journal: JetStreamJournal) -> None:
    assert MAX_BATCH_MSGS == 1_000
    with pytest.raises(CallTooLarge):
        journal.append("big", [msg(i) for i in range(1_001)], expected_seq=0)
    assert journal.last_seq("big") == 0
    assert len(journal.append("big", [msg(i) for i in range(1_000)], expected_seq=0)) == 1_000


def test_a_session_of_2500_events_is_written_in_calls_and_read_back(journal: JetStreamJournal) -> None:
    calls = [[started()] + [msg(i) for i in range(2, 1_001)], [msg(i) for i in range(1_001, 2_001)]]
    calls.append([msg(i) for i in range(2_001, 2_501)])
    seq = 0
    for events in calls:
        seq = journal.append("long", events, expected_seq=seq)[-1].seq
    assert seq == 2_500
    records = list(journal.read("long"))
    assert [r.seq for r in records] == list(range(1, 2_501))
    assert [r.seq for r in journal.read("long", 999, 1_002)] == [999, 1_000, 1_001, 1_002]
    state = journal.load("long")
    assert state == journal.replay_full("long") and state.last_seq == 2_500


def test_appends_of_one_session_queued_in_order_apply_in_order(journal: JetStreamJournal) -> None:
    journal.append("p", [started()], expected_seq=0)
    futures = [journal.append_async("p", [msg(i)], expected_seq=i) for i in range(1, 21)]
    done = [f.result(30) for f in futures]
    assert [r[0].seq for r in done] == list(range(2, 22))


@pytest.mark.parametrize("bad", ["a*", "a>", "a b", "a..b", "", ".a", "a\n"])
def test_bad_session_ids_are_refused_before_anything_is_written(journal: JetStreamJournal, bad: str) -> None:
    with pytest.raises(InvalidSessionId):
        journal.append(bad, [started()], expected_seq=0)
    with pytest.raises(InvalidSessionId):
        journal.last_seq(bad)
    assert list(journal.sessions()) == []


def test_ids_with_nats_characters_are_encoded_and_listed_as_given(journal: JetStreamJournal) -> None:
    for sid in ("a.b", "user@host:1", "x+y=z"):
        journal.append(sid, [started()], expected_seq=0)
    assert [s.sid for s in journal.sessions()] == sorted(["a.b", "user@host:1", "x+y=z"])
    assert [r.sid for r in journal.read("a.b")] == ["a.b"]


def test_a_large_part_goes_to_the_object_store_and_reads_back(journal: JetStreamJournal) -> None:
    text = "large " * 100_000  # 600 KB: over the 256 KiB blob threshold
    records = journal.append("b", [started(), user_text_message("u1", text)], expected_seq=0)
    part = records[1].event.content[0]  # type: ignore[union-attr]
    assert isinstance(part, BlobPart) and part.size == len(text)
    assert journal.read_blob(part.sha256).decode() == text
    again = journal.append("b", [user_text_message("u2", text)], expected_seq=2)  # stored once, named again
    assert again[0].event.content[0] == part  # type: ignore[union-attr]
    assert list(journal.read("b"))[1].event == records[1].event


def test_an_event_over_the_message_limit_is_refused_and_nothing_stored(journal: JetStreamJournal) -> None:
    journal.append("l", [started()], expected_seq=0)
    huge = AssistantMessage(message_id="a1", request_id="r1", text="x" * 1_100_000)  # no part a blob can take
    with pytest.raises(LineTooLarge):
        journal.append("l", [msg(1), huge], expected_seq=1)
    assert journal.last_seq("l") == 1


def test_stored_payloads_are_exactly_local_log_lines(journal: JetStreamJournal) -> None:
    journal.append("f", [started(), msg(1)], expected_seq=0)
    reader = journal._reader
    page = journal._call(reader.page(journal.layout.subject("f"), 1, 10))
    assert [decode_line(m.data).seq for m in page] == [1, 2]
    assert all(m.data.endswith(b'"}\n') for m in page)


def test_append_async_fails_its_future_for_an_event_that_cannot_be_stored(journal: JetStreamJournal) -> None:
    bad = user_text_message("u", "x")
    bad = type(bad)(message_id="u", content=(TextPart(text=float("nan")),))  # type: ignore[arg-type]
    future = journal.append_async("n", [bad], expected_seq=0)
    with pytest.raises(Exception) as caught:
        future.result(10)
    assert not isinstance(caught.value, concurrent.futures.TimeoutError)
    assert journal.last_seq("n") == 0
