"""Shared by the cluster serving tests: a provider that can hold a turn open, hosts as child processes.

`Holding` answers like the default `ScriptedProvider`, except a message
with `HOLD` (held until `release` is set, at most `HOLD_MAX_S`) or
`SLOW<n>` (n seconds): it streams "working. " first, so the turn's request
is durable and a delta was seen before it waits.

`Child` runs a host as a process (`python -m tests.cluster.serve_child`,
or the real `cairn serve`), waits for the line saying it serves, and can
SIGKILL, SIGSTOP or SIGTERM it.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from cairn.actors.cluster.names import ClusterNames
from cairn.actors.provider.base import ProviderOutput, ProviderRequest, TextDelta
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.events.codec import Record
from cairn.events.model import text_of
from cairn.store.backend import JournalBackend
from cairn.store.errors import CorruptionError

ROOT = Path(__file__).resolve().parents[2]
HOLD_MAX_S = 30.0
_SLOW = re.compile(r"SLOW(\d+(?:\.\d+)?)")


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll the cluster for `condition` until `timeout_s` (server-side state: no event to wait on)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


def settled(journal: JournalBackend, sid: str, last_seq: int) -> list[Record]:
    """The session's records once a read reaches `last_seq` (reads go to any replica; one may lag)."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            records = list(journal.read(sid))
        except CorruptionError:  # pages from two replicas, one behind the other: read again
            records = []
        if records and records[-1].seq >= last_seq:
            return records
        assert time.monotonic() < deadline, f"{sid}: no read reached seq {last_seq} in 10 s"
        time.sleep(0.05)


def fresh_names() -> ClusterNames:
    """Subjects, a lease bucket and an event stream no other test uses."""
    return ClusterNames.named(uuid.uuid4().hex[:10])


class Holding:
    """The default scripted answers; `HOLD` and `SLOW<n>` messages wait after a first delta."""

    def __init__(self) -> None:
        self.inner = ScriptedProvider()
        self.release = threading.Event()

    def stream(self, request: ProviderRequest) -> Iterator[ProviderOutput]:
        last = next((m for m in reversed(request.messages) if m.role == "user"), None)
        text = text_of(last) if last is not None and request.purpose == "turn" else ""
        slow = _SLOW.search(text)
        if "HOLD" in text or slow is not None:
            yield TextDelta("working. ")
            if slow is not None:
                time.sleep(float(slow.group(1)))
            else:
                self.release.wait(HOLD_MAX_S)
        yield from self.inner.stream(request)


class Child:
    """A host process of the cluster (see the module doc)."""

    def __init__(self, argv: list[str], *, ready_s: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            line = pool.submit(self.proc.stdout.readline).result(ready_s)  # type: ignore[union-attr]
        if "serving" not in line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"the host did not start: {line!r} {err[-3000:]}")
        self.lines.append(line)

    @classmethod
    def test_host(cls, url: str, host_id: str, names: ClusterNames, ttl_s: int) -> Child:
        """A host with the `Holding` provider (`tests/cluster/serve_child.py`)."""
        prefix = names.prefix.removeprefix("cairn-")
        return cls([sys.executable, "-m", "tests.cluster.serve_child", url, host_id, str(ttl_s), prefix])

    @classmethod
    def cairn_serve(cls, url: str, host_id: str, names: ClusterNames, ttl_s: int) -> Child:
        """The real `cairn serve`, in the namespace of `names`."""
        prefix = names.prefix.removeprefix("cairn-")
        argv = ["--nats", url, "--host-id", host_id, "--lease-ttl", str(ttl_s), "--nats-layout", prefix]
        return cls([sys.executable, "-m", "cairn.cli", "serve", *argv])

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, "".join(self.lines) + out, err

    def end(self) -> None:
        """Make sure the process is gone (a test that failed half-way)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)
