"""The LMDB index: map growth, rebuild equality, summaries and checkpoints."""

from __future__ import annotations

import threading
from pathlib import Path

from cairn.store import Journal, index_dump, reindex
from cairn.store.index_builder import _Head
from cairn.store.index_records import SessionSummary
from cairn.store.index_records import encoder as _encoder
from tests.store.helpers import checkpoint, fill, msg, started, usage


def test_map_full_grows_the_map_instead_of_failing_appends(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root, map_size=64 * 1024) as journal:
        stop = threading.Event()
        reads: list[int] = []

        def reader() -> None:  # read transactions run while the writer grows the map
            while not stop.is_set():
                reads.append(journal.last_seq("s0"))

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            for n in range(40):
                journal.append(f"s{n}", [started()] + [msg(i) for i in range(2, 40)], expected_seq=0)
        finally:
            stop.set()
            thread.join()
        assert journal.index.grown > 0
        assert all(journal.last_seq(f"s{n}") == 39 for n in range(40))
        assert reads
    with Journal.open(root, map_size=64 * 1024) as journal:
        assert journal.last_seq("s39") == 39


def test_reindex_produces_an_identical_index(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root, segment_bytes=3_000) as journal:
        for n in range(5):
            fill(journal, f"s{n}", 20)
        journal.append("s0", [usage(22), checkpoint(1, 22)], expected_seq=21)
    before = index_dump(root)
    progress: list[tuple[int, int]] = []
    result = reindex(root, progress=lambda done, total: progress.append((done, total)))
    assert result.lines_indexed == 5 * 21 + 2
    assert index_dump(root) == before
    assert progress and progress[-1][0] == progress[-1][1]


def test_summary_tracks_kinds_usage_and_checkpoints(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "store", clock_ms=lambda: 42) as journal:
        journal.append("s", [started(workspace="/w", model="gpt")], expected_seq=0, ts_ms=10)
        journal.append("s", [msg(2), usage(3)], expected_seq=1, ts_ms=20)
        journal.append("s", [checkpoint(1, 3)], expected_seq=3)
        summary = journal.session("s")
        assert summary is not None
        assert (summary.created_ts, summary.updated_ts, summary.last_usage_total_tokens) == (10, 42, 108)
        assert summary.counts == {
            "checkpoint-committed": 1,
            "session-started": 1,
            "usage": 1,
            "user-message": 1,
        }
        assert (summary.checkpoint_seq, summary.checkpoint_epoch, summary.checkpoint_pos) == (4, 1, 3)
        assert [(c.epoch, c.seq, c.pos) for c in journal.checkpoints("s")] == [(1, 4, 3)]
        assert journal.checkpoints("other") == []


def test_writer_head_cache_is_bounded_and_evicted_sessions_continue(tmp_path):
    """A host touching many sessions keeps bounded memory; an evicted head reloads from the index."""
    from cairn.events.kinds import SessionStarted, Usage

    root = tmp_path / "store"
    with Journal.open(root) as journal:
        journal._writer._builder._max_cached = 3  # tiny cap so eviction happens in this test
        sids = [f"s{n}" for n in range(10)]
        for sid in sids:
            journal.append(sid, [SessionStarted(workspace="/w", model="m")], expected_seq=0)
        assert len(journal._writer._builder._heads) <= 4  # the cap plus the batch in hand
        for round_ in range(2):
            for sid in sids:
                journal.append(
                    sid, [Usage(request_id=f"r{round_}", total_tokens=round_)], expected_seq=1 + round_
                )
        assert [journal.last_seq(sid) for sid in sids] == [3] * 10
        assert all(journal.load(sid) == journal.replay_full(sid) for sid in sids)
        live = journal.index_dump()
    reindex(root)
    assert index_dump(root) == live


def test_a_running_head_encodes_to_the_bytes_of_its_summary() -> None:
    summary = SessionSummary(
        sid="s-1",
        last_seq=9,
        head="ab" * 16,
        last_pos=40,
        workspace="/w",
        model="m",
        created_ts=1,
        updated_ts=2,
        events=9,
        counts={"usage": 2, "request": 3},
        info_seq=1,
        checkpoint_seq=7,
        checkpoint_pos=38,
        checkpoint_epoch=2,
        last_usage_total_tokens=None,
        broken_seq=0,
    )
    head = _Head.of(summary)
    head.counts["usage"] += 1  # the head's counts are its own
    assert summary.counts["usage"] == 2
    head.counts["usage"] -= 1
    assert _encoder.encode(head) == _encoder.encode(summary)
    assert head.key == b"s-1\x00"
