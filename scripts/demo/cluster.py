"""`cairn demo --cluster`: the demo's sessions on a 3-node NATS JetStream cluster with 3 host processes,
through a host crash and a node stop.

    cairn demo --cluster [--store DIR] [--sessions 12] [--turns 6] [--json]

`run_cluster` does, in order:

1. a fresh 3-node `LocalCluster` under `DIR/cluster/` (the demo's own
   directories `cluster/`, `cluster-export/` and `cluster-workspaces/`
   from an earlier run are removed first) and three `cairn serve --nats URL
   --host-id hN --lease-ttl 15` processes;
2. N sessions (12) of the local demo's scripted coding agent, each on its
   own workspace, sent through one `ClusterClient` (connected to the two
   nodes that will not be stopped: a client's reply inbox does not survive
   the loss of its node), M turns each (6), in three parts:
3. after the first third of the turns, the host that owns the most
   sessions is SIGKILLed, right after the next turn of one of its sessions
   streamed its first record (so that turn is open on it; the other
   sessions send only after the kill, so no message is in flight to the
   dead host, where it would be lost). Its sessions' next messages
   wait for its leases to run out (the TTL) and are taken by the surviving
   hosts, which write `owner-changed` first, replay the session and mark
   the open turn interrupted; the client's handle of that turn ends
   interrupted when the dead host goes silent, and the demo sends that turn
   again. The failover time of a moved session is the SIGKILL to its new
   owner's first acknowledged event (`owner-changed`, from the log);
4. after the second third, the node leading the events stream is stopped
   (SIGTERM): the stall is the time from the stop to the next record any
   client is streamed. The node is started again once writes flow, so the
   streams are back at 3 replicas for the rest of the run;
5. the surviving hosts stop (SIGTERM: leases released, exit 0) and a fresh
   `JetStreamJournal` checks every session: its checkpoint load equals a
   full replay, every record the client was streamed is in the log as
   streamed, no turn is left open; then the installed `cairn verify --nats
   URL` and `cairn export --nats URL --to DIR/cluster-export` run, and
   `cairn verify --store DIR/cluster-export`. The cluster is stopped at the
   end, so the commands printed for the user read the export.

The lease TTL is 15 s, the production default, on purpose: a host renews
at a third of the TTL and counts a lease lost 2 s before it ends, so a
write stall of up to 8 s loses no lease, above the 5-7 s stall of a dead
stream leader (PITFALLS "NATS JetStream"). A shorter TTL would show a
faster failover, but the node stop of step 4 could then cost healthy
hosts their sessions: the demo shows what production does, failover in
about TTL + 1 s.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.actors.cluster import ClusterClient
from cairn.demo.cluster_clients import SessionRun, Watch, send_session
from cairn.demo.cluster_facts import Checks, SessionFacts, client_agrees, health, session_facts
from cairn.demo.cluster_procs import HostProcs, cairn_command
from cairn.demo.cluster_report import client_turns, cluster_report
from cairn.demo.driver import _prepare_store
from cairn.demo.providers import Setup, scripted_setup
from cairn.demo.workspace import make_workspace
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.local_cluster import LocalCluster

#: the lease TTL of the demo's hosts (see the module doc for why 15 s)
LEASE_TTL_S = 15
HOSTS = ("h1", "h2", "h3")
#: the issue's failover target: under the lease TTL plus 2 s
FAILOVER_TARGET_S = LEASE_TTL_S + 2
#: a client's silence limit for a turn (the hosts beat every second): the killed host's turn ends so
SILENCE_S = 5.0
#: the longest a phase may take before the run gives up waiting (it then reports what happened)
PHASE_S = 120.0


def stream_leader(cluster: LocalCluster, stream: str) -> str | None:
    """The name of the node leading `stream`, from a running node's `/jsz` (None when none says)."""
    for node in cluster.nodes:
        if node.process is None:
            continue
        try:
            url = f"http://127.0.0.1:{node.http_port}/jsz?streams=true"
            with urllib.request.urlopen(url, timeout=2) as reply:
                document = json.loads(reply.read())
        except (OSError, ValueError):
            continue
        for account in document.get("account_details") or []:
            for detail in account.get("stream_detail") or []:
                if detail.get("name") == stream:
                    leader = (detail.get("cluster") or {}).get("leader")
                    if leader:
                        return str(leader)
    return None


@dataclass
class Faults:
    """What the run did to the cluster, and what it saw."""

    victim: str | None = None
    killed_ms: int | None = None
    victim_busy: bool = False
    node: str | None = None
    node_was_leader: bool = False
    stall_s: float | None = None
    node_restarted: bool = False
    notes: list[str] = field(default_factory=list)


def _clean(store: Path) -> tuple[Path, Path, Path]:
    """The demo's own directories under the store, emptied of an earlier run."""
    dirs = (store / "cluster", store / "cluster-export", store / "cluster-workspaces")
    for path in dirs:
        if path.exists():
            shutil.rmtree(path)
    return dirs


def run_cluster(
    store: Path, sessions: int, turns: int, *, progress: Any, setup: Setup | None = None
) -> dict[str, Any]:
    # long: every step runs inside the one `try` whose `finally` ends the hosts and the nodes
    """Run the cluster demo (see the module doc); the report. `progress(line)` tells what happens.

    Raises `DemoSetupError` when it cannot run (the store, a host that does
    not start) and `ClusterStartFailed` (no nats-server binary, no leader).
    """
    setup = setup if setup is not None else scripted_setup()
    started = time.perf_counter()
    store = store.resolve() if store.exists() else store
    _prepare_store(store)
    store = store.resolve()
    root, export_dir, spaces = _clean(store)
    cluster = LocalCluster(root)
    hosts: HostProcs | None = None
    try:
        cluster.start()
        progress(f"NATS: 3 nodes up ({cluster.url}), data under {root}")
        hosts = HostProcs(cluster.url, LEASE_TTL_S, root)
        hosts.start(list(HOSTS))
        pids = ", ".join(f"{hid} (pid {proc.pid})" for hid, proc in hosts.procs.items())
        progress(f"hosts: {pids} serving, lease TTL {LEASE_TTL_S} s")
        runs, faults, unfinished = _drive(cluster, hosts, setup, spaces, sessions, turns, progress)
        stop_codes = {hid: hosts.stop(hid) for hid in hosts.alive()}
        progress(f"surviving hosts stopped (SIGTERM): exit {stop_codes}")
        facts = _check_sessions(cluster, runs, faults)
        verify = cairn_command(["verify", "--nats", cluster.url])
        progress(f"cairn verify --nats ...: exit {verify.exit_code}")
        export = cairn_command(["export", "--nats", cluster.url, "--to", str(export_dir)])
        export_verify = cairn_command(["verify", "--store", str(export_dir)])
        progress(
            f"cairn export: exit {export.exit_code}; "
            f"cairn verify of the export: exit {export_verify.exit_code}"
        )
        host_rows = {
            hid: {"pid": proc.pid, "killed": proc.killed_ms is not None, "exit": proc.exit_code}
            for hid, proc in hosts.procs.items()
        }
        nodes = [{"name": node.name, "url": node.url} for node in cluster.nodes]
    finally:
        if hosts is not None:
            hosts.end_all()
        cluster.stop()
    checks = Checks(
        sessions=facts,
        victim=faults.victim,
        node_stopped=faults.node is not None,
        client_unfinished=unfinished + client_turns(runs)[1],
        verify_exit=verify.exit_code,
        export_exit=export.exit_code,
        export_verify_exit=export_verify.exit_code,
        hosts_stopped_cleanly=all(code == 0 for code in stop_codes.values()),
    )
    return cluster_report(
        store=store,
        sessions=sessions,
        turns=turns,
        runs=runs,
        facts=facts,
        faults=faults,
        hosts=host_rows,
        nodes=nodes,
        verify=verify,
        export=export,
        export_verify=export_verify,
        export_dir=export_dir,
        problems=health(checks),
        seconds=time.perf_counter() - started,
    )


def _drive(
    cluster: LocalCluster,
    hosts: HostProcs,
    setup: Setup,
    spaces: Path,
    sessions: int,
    turns: int,
    progress: Any,
) -> tuple[list[SessionRun], Faults, list[str]]:
    # long: it is the run's script, read top to bottom
    """The sessions' client threads, the host kill after the first third, the node stop after the second."""
    faults = Faults()
    stream = Layout().stream
    planned = stream_leader(cluster, stream) or cluster.nodes[0].name
    index = next(i for i, node in enumerate(cluster.nodes) if node.name == planned)
    client_urls = [node.url for i, node in enumerate(cluster.nodes) if i != index]
    gates = (max(1, turns // 3), max(2, 2 * turns // 3))
    sids = [f"demo-{n}" for n in range(1, sessions + 1)]
    runs = []
    for n, sid in enumerate(sids, 1):
        make_workspace(spaces / sid, n)
        runs.append(SessionRun(sid, spaces / sid))
    watch = Watch()
    client = ClusterClient(client_urls, accept_timeout_s=LEASE_TTL_S + 15.0, silence_s=SILENCE_S)
    try:
        threads = [
            threading.Thread(
                target=send_session,
                args=(client, setup, run, turns, gates, watch, setup.wait_s),
                name=f"demo-client-{run.sid}",
                daemon=True,
            )
            for run in runs
        ]
        for thread in threads:
            thread.start()
        progress(f"{sessions} sessions started, {turns} turns each, through the cluster client")
        if not watch.wait_all(sids, gates[0], PHASE_S):
            faults.notes.append(f"not every session finished turn {gates[0]} in {PHASE_S} s")
        owners = dict(watch.served_by)
        counts = {hid: sum(1 for owner in owners.values() if owner == hid) for hid in HOSTS}
        faults.victim = max(HOSTS, key=lambda hid: (counts[hid], -HOSTS.index(hid)))
        watch.victim = faults.victim
        watch.probe = next((sid for sid in sids if owners.get(sid) == faults.victim), None)
        progress(
            f"owners after turn {gates[0]}: " + ", ".join(f"{hid}: {counts[hid]} sessions" for hid in HOSTS)
        )
        watch.probe_go.set()
        faults.victim_busy = watch.victim_busy.wait(10.0)
        faults.killed_ms = hosts.kill(faults.victim)
        watch.after_kill.set()
        busy = f", while {watch.probe} had a turn open on it" if faults.victim_busy else ""
        progress(f"SIGKILL {faults.victim} (it owned {counts[faults.victim]} sessions{busy})")
        if not watch.wait_all(sids, gates[1], PHASE_S):
            faults.notes.append(f"not every session finished turn {gates[1]} in {PHASE_S} s")
        progress(f"every session past turn {gates[1]}: the killed host's sessions run elsewhere")
        _stop_node(cluster, index, planned, stream, watch, faults, progress)
        for thread in threads:
            thread.join(PHASE_S)
        unfinished = [
            f"{thread.name}: still running after {PHASE_S} s" for thread in threads if thread.is_alive()
        ]
    finally:
        watch.probe_go.set()
        watch.after_kill.set()
        watch.after_stop.set()
        client.close()
    return runs, faults, unfinished


def _stop_node(
    cluster: LocalCluster, index: int, planned: str, stream: str, watch: Watch, faults: Faults, progress: Any
) -> None:
    """Stop node `index` (SIGTERM), let the sessions go on, measure the stall, start it again."""
    faults.node = planned
    faults.node_was_leader = stream_leader(cluster, stream) == planned
    stopped_at = time.monotonic()
    cluster.stop_node(index)
    role = "the leader" if faults.node_was_leader else "a follower"
    progress(f"node {planned} stopped (SIGTERM), {role} of stream {stream}")
    watch.after_stop.set()
    arrived = watch.record_after(stopped_at, PHASE_S)
    if arrived is None:
        faults.notes.append(f"no record was acknowledged within {PHASE_S} s of the node stop")
        return
    faults.stall_s = arrived - stopped_at
    progress(f"writes flow again {faults.stall_s:.2f} s after the stop; restarting {planned}")
    cluster.start_node(index)
    cluster.wait_ready(60.0)
    faults.node_restarted = True


def _check_sessions(cluster: LocalCluster, runs: list[SessionRun], faults: Faults) -> list[SessionFacts]:
    """Every session read back by a fresh journal: facts, checkpoint load vs full replay, client's view."""
    facts = []
    with JetStreamJournal.open(cluster.urls) as journal:
        for run in runs:
            records = list(journal.read(run.sid))
            one = session_facts(run.sid, records, killed_ms=faults.killed_ms, victim=faults.victim)
            one.replayed = journal.load(run.sid) == journal.replay_full(run.sid)
            one.client_agrees = client_agrees(records, run.seen)
            facts.append(one)
    return facts
