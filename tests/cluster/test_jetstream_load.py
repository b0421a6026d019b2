"""O(tail) loading on the cluster: the checkpoint pointer, and a missing or stale one rebuilt."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.names import session_token
from cairn.store.jetstream.pointer import Pointer, get_pointer, put_pointer
from tests.cluster.js_helpers import fresh_layout, open_journal
from tests.store.helpers import checkpoint, msg, started

BEFORE = 2_000  # events before the latest checkpoint
AFTER = 10  # events after it


@pytest.fixture
def layout() -> Layout:
    return fresh_layout()


@pytest.fixture
def writer(cluster: LocalCluster, layout: Layout) -> Iterator[JetStreamJournal]:
    journal = open_journal(cluster, layout)
    seq = journal.append("s", [started(), *[msg(i) for i in range(2, 1_000)]], expected_seq=0)[-1].seq
    seq = journal.append("s", [checkpoint(1, seq)], expected_seq=seq)[-1].seq  # an older checkpoint
    seq = journal.append("s", [msg(i) for i in range(seq + 1, BEFORE + 1)], expected_seq=seq)[-1].seq
    seq = journal.append("s", [checkpoint(2, seq)], expected_seq=seq)[-1].seq
    journal.append("s", [msg(i) for i in range(seq + 1, seq + 1 + AFTER)], expected_seq=seq)
    yield journal
    journal.close()


def _load_counting(cluster: LocalCluster, layout: Layout) -> tuple[int, bool]:
    """Messages a fresh journal reads to load "s", and whether the state equals a full replay."""
    journal = open_journal(cluster, layout)
    try:
        state = journal.load("s")
        read = journal.messages_read
        return read, state == journal.replay_full("s")
    finally:
        journal.close()


def test_load_reads_only_from_the_latest_checkpoint_on(
    cluster: LocalCluster, layout: Layout, writer: JetStreamJournal
) -> None:
    read, same = _load_counting(cluster, layout)
    assert same
    # the head, the checkpoint and session-started checked by the pointer, then the checkpoint and its tail
    assert read <= 3 + 1 + AFTER + 1


def test_a_missing_pointer_costs_one_full_replay_and_is_rebuilt(
    cluster: LocalCluster, layout: Layout, writer: JetStreamJournal
) -> None:
    token = session_token("s")
    writer._call(writer._handles.pointers.delete(token))
    read, same = _load_counting(cluster, layout)
    assert same and read > BEFORE
    rebuilt = writer._call(get_pointer(writer._handles.pointers, token))
    assert rebuilt is not None and rebuilt.epoch == 2 and rebuilt.checkpoint_seq == BEFORE + 1
    assert _load_counting(cluster, layout)[0] <= 3 + 1 + AFTER + 1


def test_a_stale_or_wrong_pointer_still_loads_the_right_state_and_is_corrected(
    cluster: LocalCluster, layout: Layout, writer: JetStreamJournal
) -> None:
    token = session_token("s")
    latest = writer._call(get_pointer(writer._handles.pointers, token))
    assert latest is not None
    older = next(c for c in writer.checkpoints("s") if c.epoch == 1)
    stale = Pointer(
        checkpoint_seq=older.seq,
        checkpoint_stream=latest.checkpoint_stream - (BEFORE + 1 - older.seq),
        epoch=1,
        info_seq=1,
        info_stream=latest.info_stream,
    )
    writer._call(put_pointer(writer._handles.pointers, token, stale))
    read, same = _load_counting(cluster, layout)
    assert same and AFTER < read < BEFORE + AFTER  # from the older checkpoint on
    assert writer._call(get_pointer(writer._handles.pointers, token)) == latest

    wrong = Pointer(checkpoint_seq=BEFORE - 5, checkpoint_stream=latest.checkpoint_stream - 6, epoch=2)
    writer._call(
        put_pointer(writer._handles.pointers, token, wrong)
    )  # names a user message, not a checkpoint
    read, same = _load_counting(cluster, layout)
    assert same and read > BEFORE
    assert writer._call(get_pointer(writer._handles.pointers, token)) == latest
