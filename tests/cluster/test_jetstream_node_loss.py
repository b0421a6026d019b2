"""The stream leader SIGKILLed mid-append: acknowledged calls survive, the others are whole or absent."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cairn.events.state import user_text_message
from cairn.store.errors import AppendTimeout, SeqConflict, StorageError
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.verify import verify_cluster
from tests.store.helpers import started

WRITERS = 4
EVENTS_PER_CALL = 3
ACKS_BEFORE_KILL = 40
ACKS_AFTER_KILL = 40


class _Tally:
    """Acknowledged and doubtful calls of every writer; events fire at the ack counts the test waits for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[str, list[str]] = {}  # sid -> texts of acknowledged events
        self.doubtful: dict[str, list[list[str]]] = {}  # sid -> calls whose outcome is unknown
        self.count = 0
        self.killed_at: int | None = None
        self.before = threading.Event()
        self.after = threading.Event()
        self.stop = threading.Event()

    def ack(self, sid: str, texts: list[str]) -> None:
        with self.lock:
            self.acked.setdefault(sid, []).extend(texts)
            self.count += 1
            if self.count >= ACKS_BEFORE_KILL:
                self.before.set()
            if self.killed_at is not None and self.count >= self.killed_at + ACKS_AFTER_KILL:
                self.after.set()


def _writer(journal: JetStreamJournal, sid: str, tally: _Tally, events_per_call: int) -> None:
    seq = journal.append(sid, [started()], expected_seq=0)[-1].seq
    call = 0
    while not tally.stop.is_set():
        texts = [f"{sid} call {call} event {i}" for i in range(events_per_call)]
        events = [user_text_message(f"u{call}-{i}", text) for i, text in enumerate(texts)]
        try:
            seq = journal.append(sid, events, expected_seq=seq, timeout=30)[-1].seq
            tally.ack(sid, texts)
        except (AppendTimeout, SeqConflict, StorageError, TimeoutError):
            with tally.lock:
                tally.doubtful.setdefault(sid, []).append(texts)
            seq = journal.last_seq(sid)
        call += 1


@pytest.mark.parametrize(
    ("writers", "events_per_call"),
    [(WRITERS, EVENTS_PER_CALL), (48, 1)],  # (48, 1): one-event calls of many sessions share batches
)
def test_killing_the_stream_leader_mid_append_loses_no_acknowledged_event(
    tmp_path: Path, writers: int, events_per_call: int
) -> None:
    with LocalCluster(tmp_path / "nats") as cluster:
        journal = JetStreamJournal.open(cluster.url)
        tally = _Tally()
        threads = [
            threading.Thread(target=_writer, args=(journal, f"w{i}", tally, events_per_call))
            for i in range(writers)
        ]
        try:
            for thread in threads:
                thread.start()
            assert tally.before.wait(60)
            info = journal._call(journal._nc.jetstream().stream_info(journal.layout.stream))
            leader = info.cluster.leader if info.cluster else None
            index = next(i for i, node in enumerate(cluster.nodes) if node.name == leader)
            with tally.lock:
                tally.killed_at = tally.count
            cluster.kill(index)  # SIGKILL: writes stall until a new leader is elected (5-7 s)
            assert tally.after.wait(90), "appends did not resume after the leader was killed"
        finally:
            tally.stop.set()
            for thread in threads:
                thread.join(120)
        cluster.start_node(index)
        cluster.wait_ready()

        for i in range(writers):
            sid = f"w{i}"
            stored = [r.event.content[0].text for r in list(journal.read(sid))[1:]]  # type: ignore[union-attr]
            assert set(tally.acked.get(sid, [])) <= set(stored)  # every acknowledged event survived
            for texts in tally.doubtful.get(sid, []):
                present = [text in stored for text in texts]
                assert all(present) or not any(present)  # a doubtful call is whole or absent
            assert len(stored) == len(set(stored))  # nothing stored twice
        assert verify_cluster(journal).ok
        journal.close()
        doubtful = sum(len(calls) for calls in tally.doubtful.values())
        print(f"{tally.count} calls acked, {doubtful} doubtful, {leader} killed after {tally.killed_at}")
