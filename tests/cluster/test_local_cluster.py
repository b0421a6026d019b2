"""The local 3-node cluster: it comes up with a leader, serves R3 streams, and leaves nothing running."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest

from cairn.store.errors import StorageError
from cairn.store.jetstream.local_cluster import ClusterStartFailed, LocalCluster


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _replicated_publish(url: str, stream: str) -> tuple[int, int]:
    client = await nats.connect(url.split(","))
    try:
        js = client.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream}.>"], num_replicas=3)
        # a new R3 stream answers once its replicas elected a leader: under load that can take a
        # few seconds, and a publish before it finds no responder (NATS says so; nothing is stored)
        deadline = time.monotonic() + 30
        while True:
            try:
                ack = await js.publish(f"{stream}.x", b"hello")
                break
            except nats.js.errors.NoStreamResponseError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        info = await js.stream_info(stream)
        return ack.seq, len(info.cluster.replicas or []) if info.cluster else 0
    finally:
        await client.close()


def test_three_nodes_serve_a_stream_replicated_three_times(cluster: LocalCluster) -> None:
    assert len(cluster.urls) == 3
    ports = [port for node in cluster.nodes for port in (node.client_port, node.route_port, node.http_port)]
    assert len(set(ports)) == 9
    seq, followers = asyncio.run(_replicated_publish(cluster.url, "SMOKE"))
    assert seq == 1
    assert followers == 2  # the leader plus two replicas


def test_stop_leaves_no_process_even_when_the_block_raises(tmp_path: Path) -> None:
    pids = []
    with pytest.raises(RuntimeError, match="boom"), LocalCluster(tmp_path / "c") as running:
        pids = [node.process.pid for node in running.nodes if node.process is not None]
        assert len(pids) == 3 and all(_alive(pid) for pid in pids)
        raise RuntimeError("boom")
    # stop() waited for each process, so each is reaped: no zombie, no orphan
    assert not any(_alive(pid) for pid in pids)


def test_a_killed_node_comes_back_on_its_own_ports_and_data(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c") as running:
        seq, _ = asyncio.run(_replicated_publish(running.url, "KEEP"))
        assert seq == 1
        port = running.nodes[0].client_port
        running.kill(0)
        assert running.nodes[0].process is None
        running.start_node(0)
        running.wait_ready()
        assert running.nodes[0].client_port == port
        assert (running.nodes[0].root / "jetstream").is_dir()


def test_a_missing_binary_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_NATS_SERVER", str(tmp_path / "no-such-binary"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    with pytest.raises(ClusterStartFailed, match="cluster` extra") as caught:
        LocalCluster(tmp_path / "c").start()
    assert isinstance(caught.value, StorageError)


_PARENT = """
import sys
from cairn.store.jetstream.local_cluster import LocalCluster
cluster = LocalCluster(sys.argv[1]).start()
print(" ".join(str(node.process.pid) for node in cluster.nodes), flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_no_server_outlives_a_parent_killed_outright(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path / "c")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 3 and all(_alive(pid) for pid in pids)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling other processes' exit (the kernel's signal), not a thread
    assert not any(_alive(pid) for pid in pids)
