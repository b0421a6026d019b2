"""The log is the fence: racing writers never interleave, and a resent batch is stored once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from cairn.events.body_check import checked_body
from cairn.events.codec import decode_line
from cairn.events.kinds import kind_name
from cairn.store.errors import SeqConflict
from cairn.store.jetstream.batch import publish_batch
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.names import session_token
from cairn.store.jetstream.writer import frame_call, head_of, publish_call
from tests.cluster.js_helpers import fresh_layout, open_journal
from tests.store.helpers import msg, started

ROUNDS = 25


@pytest.fixture
def two(cluster: LocalCluster) -> Iterator[tuple[JetStreamJournal, JetStreamJournal]]:
    layout = fresh_layout()
    one, other = open_journal(cluster, layout), open_journal(cluster, layout)
    yield one, other
    one.close()
    other.close()


def test_two_writers_racing_on_one_session_one_wins_each_seq_the_other_is_fenced(
    two: tuple[JetStreamJournal, JetStreamJournal],
) -> None:
    one, other = two
    one.append("race", [started()], expected_seq=0)
    barrier = threading.Barrier(2)
    outcomes: dict[str, list[str]] = {"one": [], "other": []}

    def writer(name: str, journal: JetStreamJournal) -> None:
        for round_ in range(ROUNDS):
            barrier.wait(30)
            try:
                journal.append("race", [msg(round_, f"{name} round {round_}")], expected_seq=1 + round_)
                outcomes[name].append("won")
            except SeqConflict as conflict:
                assert conflict.expected == 1 + round_ and conflict.actual == 2 + round_
                outcomes[name].append("fenced")

    threads = [
        threading.Thread(target=writer, args=(name, j)) for name, j in (("one", one), ("other", other))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for round_ in range(ROUNDS):
        assert sorted([outcomes["one"][round_], outcomes["other"][round_]]) == ["fenced", "won"]
    records = list(one.read("race"))  # checks seq order and the hash chain
    assert [r.seq for r in records] == list(range(1, ROUNDS + 2))
    for round_, record in enumerate(records[1:]):
        winner = "one" if outcomes["one"][round_] == "won" else "other"
        assert record.event.content[0].text == f"{winner} round {round_}"  # type: ignore[union-attr]


def test_a_batch_whose_ack_was_lost_is_resent_and_stored_once(
    two: tuple[JetStreamJournal, JetStreamJournal],
) -> None:
    journal, _ = two
    journal.append("lost", [started()], expected_seq=0)
    subject = journal.layout.subject("lost")
    head = head_of(journal._call(journal._reader.last(subject)))
    events = [(e, b, kind_name(e)) for e, b in (checked_body(msg(i)) for i in range(3))]
    framed = frame_call("lost", session_token("lost"), head, events, 1_000, 1 << 20)
    nc = journal._nc
    journal._call(
        publish_batch(nc, subject, framed.lines, framed.msg_ids, head.stream_seq, 10)
    )  # ack dropped

    # resent with the same ids: the server's duplicate check answers, and the subject shows ours
    stored = journal._call(
        publish_call(nc, journal._reader, "lost", subject, head, framed, timeout_s=20, request_timeout_s=10)
    )
    assert stored == head.stream_seq + 3
    assert [r.seq for r in journal.read("lost")] == [1, 2, 3, 4]


def test_a_resend_past_the_duplicate_window_is_recognised_by_reading_the_subject(
    two: tuple[JetStreamJournal, JetStreamJournal],
) -> None:
    journal, _ = two
    journal.append("late", [started()], expected_seq=0)
    subject = journal.layout.subject("late")
    head = head_of(journal._call(journal._reader.last(subject)))
    events = [(e, b, kind_name(e)) for e, b in (checked_body(msg(i)) for i in range(2))]
    framed = frame_call("late", session_token("late"), head, events, 2_000, 1 << 20)
    forgotten_ids = [f"{i}.forgotten" for i in framed.msg_ids]  # as if the window had expired
    journal._call(publish_batch(journal._nc, subject, framed.lines, forgotten_ids, head.stream_seq, 10))

    stored = journal._call(
        publish_call(
            journal._nc, journal._reader, "late", subject, head, framed, timeout_s=20, request_timeout_s=10
        )
    )
    assert stored == head.stream_seq + 2  # "wrong last sequence", then our own lines found after the head
    assert [decode_line(m.data).seq for m in journal._call(journal._reader.page(subject, 1, 10))] == [1, 2, 3]


def test_an_appender_on_a_stale_head_is_fenced_by_the_server_not_only_by_its_cache(
    two: tuple[JetStreamJournal, JetStreamJournal],
) -> None:
    one, other = two
    one.append("stale", [started()], expected_seq=0)
    other.append("stale", [msg(1)], expected_seq=1)  # other's cache now at 2; one's still at 1
    with pytest.raises(SeqConflict):
        one.append("stale", [msg(2)], expected_seq=1)
    assert one.append("stale", [msg(2)], expected_seq=2)[0].seq == 3
    with pytest.raises(SeqConflict):
        other.append("stale", [msg(3)], expected_seq=2)  # its cache says 2: the guard refuses it
    assert [r.seq for r in other.read("stale")] == [1, 2, 3]
