"""One contract, both journal back ends: `store.backend.JournalBackend`'s shared semantics (issue 24).

Every test here runs against the local log (JSONL segments + LMDB, in a fresh directory) and
the JetStream journal (the real 3-node cluster of `tests/cluster/conftest.py`, a fresh layout):
the same calls, the same answers. What one back end alone promises stays in its own tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.events.errors import CairnError
from cairn.events.kinds import UserMessage
from cairn.events.model import BlobPart, TextPart
from cairn.events.state import SessionState, user_text_message
from cairn.store.backend import JournalBackend
from cairn.store.errors import SeqConflict
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.journal import Journal
from tests.cluster.js_helpers import open_journal
from tests.store.helpers import checkpoint, msg, started, usage

BACKENDS = ("local", "jetstream")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JournalBackend]:
    if request.param == "local":
        opened: JournalBackend = Journal.open(tmp_path / "store")
    else:
        cluster: LocalCluster = request.getfixturevalue("cluster")
        opened = open_journal(cluster)
    try:
        yield opened
    finally:
        opened.close()  # type: ignore[attr-defined]


def test_contract_a_call_is_stored_whole_numbered_from_one_and_read_back_in_order(
    backend: JournalBackend,
) -> None:
    first = backend.append("s", [started(), msg(1), msg(2)], expected_seq=0)
    more = backend.append("s", [usage(3)], expected_seq=3)
    assert [r.seq for r in first + more] == [1, 2, 3, 4]
    assert [r.event for r in first + more] == [started(), msg(1), msg(2), usage(3)]
    assert list(backend.read("s")) == first + more
    assert list(backend.read("s", 2, 3)) == first[1:]
    assert backend.last_seq("s") == 4
    summary = backend.session("s")
    assert summary is not None and summary.last_seq == 4
    assert [s.sid for s in backend.sessions()] == ["s"]


def test_contract_an_unknown_session_is_empty(backend: JournalBackend) -> None:
    assert backend.last_seq("nobody") == 0 and backend.session("nobody") is None
    assert list(backend.read("nobody")) == []
    assert backend.load("nobody") == SessionState(sid="nobody")


def test_contract_a_wrong_expected_seq_is_refused_and_writes_nothing(backend: JournalBackend) -> None:
    backend.append("s", [started()], expected_seq=0)
    with pytest.raises(SeqConflict):
        backend.append("s", [msg(2)], expected_seq=0)
    with pytest.raises(SeqConflict):
        backend.append("s", [msg(2)], expected_seq=5)
    assert backend.last_seq("s") == 1 and len(list(backend.read("s"))) == 1


def test_contract_a_call_with_one_bad_event_writes_none_of_it(backend: JournalBackend) -> None:
    backend.append("s", [started()], expected_seq=0)
    bad = UserMessage(message_id=7, content=(TextPart("a field of the wrong type"),))  # type: ignore[arg-type]
    with pytest.raises(CairnError):
        backend.append("s", [msg(2), bad], expected_seq=1)
    assert backend.last_seq("s") == 1
    assert backend.append("s", [msg(2)], expected_seq=1)[0].seq == 2  # the session goes on


def test_contract_load_from_the_latest_checkpoint_equals_a_full_replay(backend: JournalBackend) -> None:
    backend.append("s", [started(), msg(1), msg(2)], expected_seq=0)
    backend.append("s", [checkpoint(1, 3), msg(5)], expected_seq=3)
    assert [c.epoch for c in backend.checkpoints("s")] == [1]
    loaded = backend.load("s")
    assert loaded == backend.replay_full("s")
    assert loaded.epoch == 1 and loaded.last_seq == 5


def test_contract_queued_calls_of_one_session_apply_in_order(backend: JournalBackend) -> None:
    futures = [backend.append_async("s", [started()], expected_seq=0)]
    futures += [backend.append_async("s", [msg(n)], expected_seq=n - 1) for n in range(2, 6)]
    seqs = [f.result(timeout=30)[0].seq for f in futures]
    assert seqs == [1, 2, 3, 4, 5]
    assert [r.event for r in backend.read("s")][1:] == [msg(n) for n in range(2, 6)]


def test_contract_a_large_part_is_a_blob_that_reads_back(backend: JournalBackend) -> None:
    text = "large " * 100_000  # 600 KB: over the 256 KiB blob threshold of both
    records = backend.append("b", [started(), user_text_message("u1", text)], expected_seq=0)
    event = records[1].event
    assert isinstance(event, UserMessage)
    part = event.content[0]
    assert isinstance(part, BlobPart) and part.size == len(text)
    assert backend.read_blob(part.sha256).decode() == text
    assert list(backend.read("b"))[1].event == records[1].event
