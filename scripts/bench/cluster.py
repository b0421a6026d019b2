"""The `cluster` suite of `cairn bench` (issue 12): the JetStream backend against the local log.

It starts its own 3-node cluster on 127.0.0.1 (`LocalCluster`, replicas 3)
in a scratch directory and measures, each time against the local journal
in the same run (these machines are shared and noisy, so the judged
figures are ratios):

- durable appends per second with 1, 16 and 256 sessions, each session a
  thread appending one event per call and waiting for its ack (the store
  suite's `append_rate`, the same event mix), local and cluster in
  alternating pairs; target: the cluster at least 0.5x the local log at 256
  sessions (the median of the pairs), with the threads where the OS places
  them (cairn's default placement);
- the cost of loading a long session from its checkpoint: time and
  messages (lines) read, cluster against local;
- the failover time from a host's SIGKILL to the first acknowledged event
  of one of its sessions on another host (`cluster_failover`: `cairn
  serve` processes, the production lease TTL of 15 s); target: under the
  TTL + 2 s;
- the stall of appends in flight when the stream leader is SIGKILLed
  (`cluster_leader`); target: under the 12 s request timeout.

Needs the `cluster` extra (nats-py and the nats-server binary).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cairn.bench._figure import Comparison, Figure, compare, unavailable
from cairn.bench._measure import timed
from cairn.bench.cluster_leader import bench_leader_kill
from cairn.bench.store import append_events, append_rate
from cairn.bench.store_replay import write_long_session
from cairn.store import Journal
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.local_cluster import ClusterStartFailed, LocalCluster

#: the judged ratio: the cluster's durable appends at 256 sessions against the local log's
TARGET_RATIO = 0.5


@dataclass(frozen=True)
class Sizes:
    """How much each measure does: rounds of append pairs, appends per session, the long session."""

    rounds: int
    per_session: dict[int, int]
    load_events: int
    #: sessions sent before a host is killed, and the hosts' lease TTL (None: the production default)
    failover_sessions: int = 8
    lease_ttl_s: int | None = None
    #: sessions appending when the stream leader is killed, and how long they go on after it
    leader_sessions: int = 48
    leader_after_s: float = 20.0


FULL = Sizes(3, {1: 600, 16: 150, 256: 24}, 100_000)
QUICK = Sizes(2, {1: 200, 16: 40, 256: 4}, 20_000, failover_sessions=4)
#: the test suite's smoke run: every figure, nothing measured to any precision (a 2 s lease TTL)
SMOKE = Sizes(
    1,
    {1: 20, 16: 4, 256: 1},
    2_000,
    failover_sessions=2,
    lease_ttl_s=2,
    leader_sessions=4,
    leader_after_s=0.5,
)


def bench_appends(workdir: Path, cluster_url: str, layout: Layout, sizes: Sizes) -> list[Figure]:
    """Durable appends, 1/16/256 sessions, cluster against local in alternating pairs (module doc)."""
    events = append_events()
    runs = itertools.count()

    def local(sessions: int, per_session: int) -> float:
        root = workdir / f"append-{next(runs)}"
        try:
            with Journal.open(root) as journal:
                return append_rate(journal, sessions, per_session, events)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def cluster(sessions: int, per_session: int) -> float:
        journal = JetStreamJournal.open(cluster_url, layout=layout)
        try:
            return append_rate(journal, sessions, per_session, events, prefix=f"a{next(runs)}")
        finally:
            journal.close()

    measures: list[tuple[str, Callable[[], float]]] = []
    comparisons: list[Comparison] = []
    for sessions, per_session in sizes.per_session.items():
        measures += [
            (f"local/{sessions}", functools.partial(local, sessions, per_session)),
            (f"cluster/{sessions}", functools.partial(cluster, sessions, per_session)),
        ]
        comparisons.append(
            Comparison(
                f"cluster.append.sessions_{sessions}.ratio",
                f"local/{sessions}",
                f"cluster/{sessions}",
                f"R3 cluster over the local log, {sessions} sessions x {per_session}, threads placed by "
                "the OS (events/s)",
                target=TARGET_RATIO if sessions == 256 else None,
                says=f">= {TARGET_RATIO} x local",
            )
        )
    return compare(measures, comparisons, sizes.rounds).figures


def bench_load(workdir: Path, cluster_url: str, layout: Layout, sizes: Sizes) -> list[Figure]:
    """Loading a long session from its checkpoint: cluster against local, time and lines read."""
    total = sizes.load_events
    every = 200
    local = Journal.open(workdir / "load")
    remote = JetStreamJournal.open(cluster_url, layout=layout)
    try:
        write_long_session(local, "long", total, every)
        write_long_session(remote, "long", total, every)
        remote.load("long")  # the pointer is written with the appends; this checks it is there
        before = remote.messages_read
        remote_state = remote.load("long")
        remote_read = remote.messages_read - before
        assert remote_state == remote.replay_full("long"), "the cluster's load differs from its full replay"
        remote_s = timed(lambda: remote.load("long"), 5 if total < 100_000 else 9)
        local_s = timed(lambda: local.load("long"), 5 if total < 100_000 else 9)
        checkpoint = local.checkpoints("long")[-1].seq
        tail = local.last_seq("long") - checkpoint + 1
        events = local.last_seq("long")
    finally:
        local.close()
        remote.close()
    ratio = remote_s / local_s
    return [
        Figure(
            "cluster.load_ms",
            round(remote_s * 1000, 2),
            "ms",
            detail=f"a session of {events:,} events, a checkpoint every {every}, {tail - 1} after the last; "
            f"local log {local_s * 1000:.2f} ms ({ratio:.1f}x)",
            explore=True,
        ),
        Figure(
            "cluster.load_messages_read",
            remote_read,
            "messages",
            f"<= {tail + 3} (O(tail))",
            remote_read <= tail + 3,
            f"the session's last message, its checkpoint and session-started checked, then the {tail} lines "
            f"from the checkpoint on; the local log reads {tail + 1} lines; the session holds {events:,}",
        ),
    ]


def _failover(workdir: Path, cluster: LocalCluster, sizes: Sizes) -> list[Figure]:
    try:
        from cairn.bench.cluster_failover import bench_failover
    except ImportError as exc:
        return [unavailable("cluster.failover", f"not measured: no cluster hosts here ({exc})")]
    if sizes.lease_ttl_s is None:
        return bench_failover(workdir, cluster, sizes.failover_sessions)
    return bench_failover(workdir, cluster, sizes.failover_sessions, sizes.lease_ttl_s)


def run(quick: bool, sizes: Sizes | None = None) -> list[Figure]:
    """The `cluster` suite, on its own cluster in a scratch directory removed at the end."""
    sizes = sizes if sizes is not None else QUICK if quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="cairn-bench-cluster-"))
    steps: list[Callable[[], list[Figure]]] = []
    try:
        with contextlib.ExitStack() as stack:
            try:
                cluster = stack.enter_context(LocalCluster(workdir / "nats"))
            except ClusterStartFailed as exc:
                return [unavailable("cluster", str(exc))]
            steps = [
                lambda: bench_appends(workdir, cluster.url, Layout.named("bench_append"), sizes),
                lambda: bench_load(workdir, cluster.url, Layout.named("bench_load"), sizes),
                lambda: _failover(workdir, cluster, sizes),
                lambda: bench_leader_kill(
                    cluster, Layout.named("bench_leader"), sizes.leader_sessions, sizes.leader_after_s
                ),
            ]
            figures: list[Figure] = []
            for step in steps:
                figures += step()
            return figures
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from cairn import bench

    return bench.main(argv, suite="cluster")


if __name__ == "__main__":
    sys.exit(main())
