"""The JetStream journal on a clock that gives no time a line can carry (issue 23 point 4): the
append is refused with `BadClock` before anything is published, on the real 3-node cluster."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cairn.store import BadClock
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.verify import verify_cluster
from tests.cluster.js_helpers import fresh_layout
from tests.store.helpers import msg, started


def test_a_bad_clocks_append_is_refused_on_the_cluster_and_nothing_is_published(
    cluster: LocalCluster,
) -> None:
    now: list[Callable[[], object]] = [lambda: 1_000]
    journal = JetStreamJournal.open(cluster.url, layout=fresh_layout(), clock_ms=lambda: now[0]())  # type: ignore[arg-type,return-value]
    try:
        journal.append("s", [started()], expected_seq=0)
        for clock, said in ((lambda: -5, "the clock gave -5"), (lambda: 2**63, f"the clock gave {2**63}")):
            now[0] = clock
            with pytest.raises(BadClock, match=said):
                journal.append("s", [msg(2)], expected_seq=1)
            with pytest.raises(BadClock, match=said):
                journal.append_async("s", [msg(2)], expected_seq=1).result(10)
        assert journal.last_seq("s") == 1
        [record] = journal.append("s", [msg(2)], expected_seq=1, ts_ms=2_000)
        assert record.ts == 2_000
        report = verify_cluster(journal)
        assert report.ok and report.lines == 2, report.problems
    finally:
        journal.close()
