"""A cluster host as a child process for the failover tests.

    python -m tests.cluster.serve_child URL HOST_ID TTL_S NAMESPACE


The same as `cairn serve` (`scripts/_cli_serve.py`) but with the `Holding`
provider, so a turn can be held open when the process is killed. Prints
`serving` when it serves; SIGTERM closes it as `cairn serve` does.
"""

from __future__ import annotations

import signal
import sys
import threading

from cairn.actors.cluster import ClusterHost, ClusterNames
from tests.cluster.serve_helpers import Holding


def main(url: str, host_id: str, ttl_s: str, namespace: str) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    host = ClusterHost.open(
        url, host_id=host_id, names=ClusterNames.named(namespace), ttl_s=int(ttl_s), provider=Holding()
    )
    print(f"host {host.host_id} serving", flush=True)
    stop.wait()
    host.close(grace_s=1.0)
    print(f"host {host.host_id} stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
