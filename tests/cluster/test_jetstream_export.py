"""The cluster's log verifies, exports to a local store the local verify accepts, and the states agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.events.state import user_text_message
from cairn.store import CorruptionError, Journal, verify_store
from cairn.store.jetstream.export import export_to_local
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.verify import verify_cluster
from tests.cluster.js_helpers import open_journal
from tests.store.helpers import checkpoint, msg, started


def test_a_cluster_store_verifies_and_exports_to_a_local_store_that_verifies_clean(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    journal = open_journal(cluster)
    try:
        big = "blob " * 80_000  # 400 KB: a blob part
        journal.append("a", [started(), msg(1)], expected_seq=0, ts_ms=1_000)
        journal.append("b.x", [started(), user_text_message("u1", big)], expected_seq=0, ts_ms=1_001)
        journal.append("a", [msg(2), msg(3)], expected_seq=2, ts_ms=1_002)
        journal.append("a", [checkpoint(1, 4)], expected_seq=4, ts_ms=1_003)
        journal.append("b.x", [msg(4)], expected_seq=2, ts_ms=1_003)
        journal.append("a", [msg(5)], expected_seq=5, ts_ms=1_003)

        report = verify_cluster(journal)
        assert report.ok, report.problems
        assert (report.sessions, report.lines, report.blobs) == (2, 9, 1)

        exported = export_to_local(journal, tmp_path / "export")
        assert (exported.sessions, exported.lines, exported.blobs) == (2, 9, 1)
        local_report = verify_store(tmp_path / "export")
        assert local_report.ok, local_report.problems
        assert local_report.lines == 9 and local_report.sessions == 2 and local_report.blobs == 1

        local = Journal.open(tmp_path / "export", readonly=True)
        try:
            for sid in ("a", "b.x"):
                assert local.replay_full(sid) == journal.replay_full(sid)
                cluster_records = list(journal.read(sid))
                local_records = list(local.read(sid))
                assert [(r.seq, r.ts, r.event) for r in local_records] == [
                    (r.seq, r.ts, r.event) for r in cluster_records
                ]
            assert [r.pos for r in local.read("a")] == [0, 1, 4, 5, 6, 8]  # stream order, global positions
        finally:
            local.close()
    finally:
        journal.close()


def test_a_foreign_line_on_a_session_subject_is_reported_and_reads_fail_closed(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    journal = open_journal(cluster)
    try:
        journal.append("s", [started(), msg(1)], expected_seq=0)
        js = journal._nc.jetstream()
        journal._call(js.publish(journal.layout.subject("s"), b'{"not":"a line"}\n'))  # not through cairn
        report = verify_cluster(journal)
        assert [(p.code, p.sid) for p in report.problems] == [("corrupt-line", "s")]
        with pytest.raises(CorruptionError):
            list(journal.read("s"))
        with pytest.raises(CorruptionError):
            journal.load("s")
        with pytest.raises(CorruptionError):
            export_to_local(journal, tmp_path / "x")
    finally:
        journal.close()
