"""The leader-loss figure of the `cluster` suite: how long appends stall when the stream leader is SIGKILLed.

`sessions` threads append one event per call to their own sessions and
wait for each ack (as `append_rate` does); once every session has
appended, the node leading the stream is SIGKILLed. A new leader takes
writes after the election (5-7 s here: PITFALLS "NATS JetStream"). The
figure is the longest call that ended after the kill (under way at it, or
begun after it), from its start to its acknowledgement (or its failure):
the longest a session's turn waits on the store when the cluster loses its
leader. Not only the calls under way at the kill: on a quiet machine the
few calls in flight at that instant may be acknowledged before the node
dies, and it is the next ones that wait out the election. Target: under the 12 s
request timeout, which an append in flight at the kill waited out whole
before attempts were shortened (`writer.attempt_timeout`); the median and
the calls that failed outright are reported beside it. The killed node is
started again and the cluster waited on before the suite goes on.
"""

from __future__ import annotations

import threading
import time

from cairn.bench._figure import Figure
from cairn.bench._measure import LoadMeter
from cairn.events.kinds import SessionStarted
from cairn.events.state import user_text_message
from cairn.store.errors import StorageError
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.local_cluster import LocalCluster

#: what a call in flight at the kill waited before attempts were shortened: the request timeout
BEFORE_S = 12.0


class _Calls:
    """Every call's start and end (monotonic), and the calls that failed, from all writer threads."""

    def __init__(self, sessions: int) -> None:
        self.lock = threading.Lock()
        self.spans: list[tuple[float, float]] = []
        self.failed: list[str] = []
        self.ready = threading.Barrier(sessions + 1)
        self.stop = threading.Event()


def _writer(journal: JetStreamJournal, sid: str, calls: _Calls) -> None:
    seq = journal.append(sid, [SessionStarted(workspace="/w", model="m")], expected_seq=0)[-1].seq
    calls.ready.wait()
    n = 0
    while not calls.stop.is_set():
        began = time.monotonic()
        try:
            event = user_text_message(f"u{n}", f"{sid} call {n}")
            seq = journal.append(sid, [event], expected_seq=seq)[-1].seq
        except StorageError as exc:  # doubtful: go on from what the cluster holds
            with calls.lock:
                calls.failed.append(f"{type(exc).__name__}: {exc}")
            seq = journal.last_seq(sid)
        with calls.lock:
            calls.spans.append((began, time.monotonic()))
        n += 1


def bench_leader_kill(cluster: LocalCluster, layout: Layout, sessions: int, after_s: float) -> list[Figure]:
    """Kill the stream leader under `sessions` appending threads; the stall of the calls in flight."""
    journal = JetStreamJournal.open(cluster.url, layout=layout)
    calls = _Calls(sessions)
    threads = [
        threading.Thread(target=_writer, args=(journal, f"leader-{n}", calls), daemon=True)
        for n in range(sessions)
    ]
    load = LoadMeter()
    try:
        for thread in threads:
            thread.start()
        calls.ready.wait(120)
        info = journal._call(journal._nc.jetstream().stream_info(layout.stream))
        leader = info.cluster.leader if info.cluster else None
        index = next(i for i, node in enumerate(cluster.nodes) if node.name == leader)
        with load:
            killed = time.monotonic()
            cluster.kill(index)
            calls.stop.wait(after_s)  # appends go on through the election and after it
            calls.stop.set()
            for thread in threads:
                thread.join(120)
    finally:
        calls.stop.set()
        journal.close()
    cluster.start_node(index)
    cluster.wait_ready()
    stalls = [end - began for began, end in calls.spans if end >= killed]
    if not stalls:
        return [
            Figure(
                "cluster.leader_kill_stall_s",
                0,
                "s",
                f"< {BEFORE_S:.0f} s",
                False,
                "no call ended after the kill",
            )
        ]
    worst = max(stalls)
    at_kill = [end - began for began, end in calls.spans if began <= killed <= end]
    waited = [stall for stall in stalls if stall >= 1.0]
    detail = (
        f"the longest of the {len(stalls):,} calls that ended after leader {leader} was SIGKILLed "
        f"(under way at it or begun after it; {len(waited)} of them waited 1 s or more); the "
        f"{len(at_kill)} under way at the kill took at most {max(at_kill, default=0.0):.2f} s; "
        f"{len(calls.failed)} calls failed"
    )
    return [
        Figure.measured(
            "cluster.leader_kill_stall_s",
            round(worst, 2),
            "s",
            detail,
            load,
            target=f"< {BEFORE_S:.0f} s",
            met=worst < BEFORE_S and not calls.failed,
        )
    ]
