"""The `audit` bench: its store is what a host writes and verifies clean; a measured child reports back.

Speed is never judged here (that is `cairn bench`'s job): only that the
store holds the kinds the report and export show, that it is written by
batch appends as asked, and that a child run reports its time and memory.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from cairn.bench import SUITES
from cairn.bench import audit as bench_audit
from cairn.store import Journal
from cairn.store.verify import verify_store


def test_the_bench_store_holds_turns_failures_and_checkpoints_and_verifies_clean(tmp_path: Path) -> None:
    assert SUITES["audit"] == "cairn.bench.audit"
    written = bench_audit.build_store(tmp_path / "store", 6_000, sessions=2)
    with Journal.open(tmp_path / "store", readonly=True) as journal:
        summaries = list(journal.sessions())
        assert [s.sid for s in summaries] == ["bench-0", "bench-1"]
        assert sum(s.last_seq for s in summaries) == written
        for summary in summaries:
            assert 3_000 <= summary.last_seq < 3_000 + 20  # whole turns: at most one turn past the size
            kinds = Counter(r.kind for r in journal.read(summary.sid))
            assert kinds["session-started"] == 1
            assert kinds["checkpoint-committed"] >= 1 and kinds["provider-error"] >= 1
            assert kinds["turn-failed"] >= 1 and kinds["context-slimmed"] >= 1
            assert kinds["turn-started"] == kinds["turn-completed"] + kinds["turn-failed"]
            assert kinds["usage"] == kinds["assistant-message"]
    assert verify_store(tmp_path / "store").ok


def test_a_measured_child_reports_its_time_and_peaks(tmp_path: Path) -> None:
    bench_audit.build_store(tmp_path / "store", 600, sessions=2)
    for task in bench_audit.TASKS:
        result = bench_audit.measure(task, tmp_path / "store", tmp_path)
        assert result["code"] == 0 and result["seconds"] > 0
        assert result["hwm_kib"] >= result["anon_kib"] > 10_000  # an interpreter holds more than 10 MiB
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # every child's output removed
