"""The HTTP API on a cluster (issue 25 point 1, `--nats`): any server answers for any session.

Two API servers in this process, each the front end of a `ClusterHost` of
the shared 3-node cluster (a namespace of its own per test). A session is
held by the host that claimed it; the other server runs each operation on
it through that holder (`actors/http/places.py`), and its event streams
hear of the holder's appends from the cluster's log (`SessionWatch`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cairn import HostConfig, Reply, ScriptedProvider, WorkspaceTools
from cairn.actors.cluster import ClusterHost
from cairn.actors.cluster.names import ClusterNames
from cairn.actors.host.async_host import AsyncHost
from cairn.actors.http.app import HttpConfig
from cairn.actors.http.client_tools import ClientTools
from cairn.actors.http.serve import HttpServer, bind_socket
from cairn.actors.provider.base import Provider
from cairn.demo.http_demo import Server
from cairn.events.kinds import OwnerChanged
from cairn.events.model import ToolCall
from cairn.store.jetstream.local_cluster import LocalCluster
from tests.cluster.serve_helpers import Holding, fresh_names, settled, wait_for
from tests.http.helpers import read_sse

WAIT_S = 30.0
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


class ClusterApi:
    """An API server over a `ClusterHost`, served from a thread until `stop()`."""

    def __init__(
        self, url: str, host_id: str, names: ClusterNames, provider: Provider, workspaces: Path
    ) -> None:
        self.tools = ClientTools(WorkspaceTools(), timeout_s=60)
        self.cluster = ClusterHost.open(
            url,
            host_id=host_id,
            names=names,
            provider=provider,
            tools=self.tools,
            config=HostConfig(sweep=False),
            release_idle_s=None,
        )
        self._opened: concurrent.futures.Future[HttpServer] = concurrent.futures.Future()
        self._config = HttpConfig(workspaces=workspaces, heartbeat_s=0.5)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        self.server = self._opened.result(WAIT_S)
        self.client = httpx.Client(base_url=self.server.address, timeout=WAIT_S)

    async def _main(self) -> None:
        host = AsyncHost(self.cluster.host, concurrent.futures.ThreadPoolExecutor(8))
        server = HttpServer(
            host, self._config, bind_socket("127.0.0.1:0"), grace=1.0, tools=self.tools, cluster=self.cluster
        )
        self._opened.set_result(server)
        await server.serve()

    def stop(self) -> None:
        self.client.close()
        self.server.stop()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the server did not stop"
        assert self.cluster.wait_closed(WAIT_S)


def _provider() -> Holding:
    """Scripted answers; a turn with a client tool call for "Weather?"; `HOLD` holds a turn open."""
    holding = Holding()
    holding.inner = ScriptedProvider(
        turns=(
            Reply(text="Hello there."),
            Reply(text="Hello again."),
            Reply(text="Asking.", tool_calls=(ToolCall("c-w", "get_weather", '{"city": "Oslo"}'),)),
            Reply(text="Sunny in Oslo."),
        )
    )
    return holding


@pytest.fixture
def pair(cluster: LocalCluster, tmp_path: Path) -> Iterator[tuple[ClusterApi, ClusterApi]]:
    names = fresh_names()
    provider = _provider()
    a = ClusterApi(cluster.urls[0], "api-a", names, provider, tmp_path / "ws")
    b = ClusterApi(cluster.urls[0], "api-b", names, provider, tmp_path / "ws")
    yield a, b
    provider.release.set()
    for api in (a, b):
        api.stop()


def _owners(api: ClusterApi, sid: str) -> list[str]:
    last = api.cluster.journal.last_seq(sid)
    records = settled(api.cluster.journal, sid, last)
    return [r.event.host_id for r in records if isinstance(r.event, OwnerChanged)]


def test_a_session_held_by_one_server_is_served_through_the_other_without_moving(
    pair: tuple[ClusterApi, ClusterApi],
) -> None:
    a, b = pair
    first = a.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "hi"})
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "completed"
    assert a.cluster.ownership.holds("s1")

    about = b.client.get("/v1/sessions/s1")  # from the log: b does not take it to read it
    assert about.status_code == 200, about.text
    assert about.json()["turn_running"] is False
    assert not b.cluster.ownership.holds("s1")

    second = b.client.post("/v1/sessions/s1/messages", json={"text": "again"})
    assert second.status_code == 202, second.text
    accepted = second.json()
    assert accepted["message_seq"] is not None and accepted["turn_id"]
    events = read_sse(
        b.client,
        f"/v1/sessions/s1/events?after={accepted['message_seq'] - 1}",
        lambda e: e.event == "turn-completed",
    )
    kinds = [e.event for e in events]
    assert kinds[0] == "user-message" and "again" in str(events[0].data)
    assert "assistant-message" in kinds
    assert _owners(a, "s1") == ["api-a"], "the session stayed with the host that held it"
    assert not b.cluster.ownership.holds("s1")

    context = b.client.get("/v1/sessions/s1/context")
    assert context.status_code == 200, context.text
    shown = [m["role"] for m in context.json()["messages"]]
    assert shown.count("user") == 2

    compacted = b.client.post("/v1/sessions/s1/compact")
    assert compacted.status_code == 200, compacted.text
    nothing = b.client.post("/v1/sessions/s1/cancel", json={})
    assert nothing.status_code == 409 and nothing.json()["code"] == "NoTurnRunning"
    assert _owners(a, "s1") == ["api-a"]


def test_a_stream_on_one_server_follows_turns_the_other_runs_live(
    pair: tuple[ClusterApi, ClusterApi],
) -> None:
    a, b = pair
    assert a.client.post("/v1/sessions/s2/messages?wait=true", json={"text": "hi"}).status_code == 200
    last = a.cluster.journal.last_seq("s2")

    def send_on_a() -> None:
        assert a.client.post("/v1/sessions/s2/messages", json={"text": "more"}).status_code == 202

    events = read_sse(  # opened on b after the first turn: only a's next turn comes, live
        b.client,
        f"/v1/sessions/s2/events?after={last}",
        lambda e: e.event == "turn-completed",
        on_open=send_on_a,
    )
    assert events[0].event == "user-message" and "more" in str(events[0].data)
    seqs = [int(e.id) for e in events]
    assert seqs == sorted(seqs) and seqs[0] == last + 1 and len(set(seqs)) == len(seqs)
    wait_for(lambda: b.cluster.watch.watched == 0, WAIT_S, "the stream's consumer goes with it")


def test_a_turn_held_open_on_one_server_is_cancelled_through_the_other(
    pair: tuple[ClusterApi, ClusterApi],
) -> None:
    a, b = pair
    sent = a.client.post("/v1/sessions/s3/messages", json={"text": "HOLD on"})
    assert sent.status_code == 202, sent.text
    wait_for(lambda: b.client.get("/v1/sessions/s3").json()["turn_running"], WAIT_S, "the turn runs on a")
    cancelled = b.client.post("/v1/sessions/s3/cancel", json={"reason": "changed my mind"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert not b.cluster.ownership.holds("s3")


def test_a_client_tool_result_posted_to_the_other_server_reaches_the_waiting_turn(
    pair: tuple[ClusterApi, ClusterApi],
) -> None:
    a, b = pair
    first = {"text": "hi", "client_tools": [WEATHER]}  # the session's tools that its client runs
    assert a.client.post("/v1/sessions/s4/messages?wait=true", json=first).status_code == 200
    assert a.client.post("/v1/sessions/s4/messages?wait=true", json={"text": "again"}).status_code == 200
    sent = a.client.post("/v1/sessions/s4/messages", json={"text": "Weather?"})
    assert sent.status_code == 202, sent.text
    wait_for(lambda: b.client.get("/v1/sessions/s4/tools").json()["waiting"] != [], WAIT_S, "the call waits")
    waiting = b.client.get("/v1/sessions/s4/tools").json()["waiting"]
    assert [w["call_id"] for w in waiting] == ["c-w"]
    posted = b.client.post("/v1/sessions/s4/tools/c-w", json={"content": "sunny, 21 C"})
    assert posted.status_code == 200, posted.text
    again = b.client.post("/v1/sessions/s4/tools/c-w", json={"content": "sunny"})
    assert again.status_code == 409 and again.json()["code"] == "ToolNotWaiting"
    events = read_sse(
        b.client,
        f"/v1/sessions/s4/events?after={sent.json()['message_seq'] - 1}",
        lambda e: e.event == "turn-completed",
    )
    results = [e.data for e in events if e.event == "tool-result"]
    assert results and "sunny, 21 C" in str(results[0])
    assert _owners(a, "s4") == ["api-a"]


def test_a_session_whose_server_stopped_is_taken_by_the_next_one_asked(
    pair: tuple[ClusterApi, ClusterApi],
) -> None:
    a, b = pair
    assert a.client.post("/v1/sessions/s5/messages?wait=true", json={"text": "hi"}).status_code == 200
    a.stop()  # releases its leases
    later = b.client.post("/v1/sessions/s5/messages?wait=true", json={"text": "again"})
    assert later.status_code == 200, later.text
    assert later.json()["status"] == "completed"
    assert b.cluster.ownership.holds("s5")
    assert _owners(b, "s5") == ["api-a", "api-b"]
    forked = b.client.post("/v1/sessions/s5/fork", json={"target": "s5-copy"})
    assert forked.status_code == 201, forked.text
    copy = b.client.post("/v1/sessions/s5-copy/messages?wait=true", json={"text": "on the copy"})
    assert copy.status_code == 200, copy.text


def test_cairn_serve_http_on_a_cluster_serves_one_session_from_two_processes_and_stops_on_sigterm(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """Two `cairn serve --http --nats` processes: a session made through one is continued and streamed
    through the other; SIGTERM stops each with exit 0, its leases released."""
    layout = fresh_names().prefix.removeprefix("cairn-")
    options = ("--nats", cluster.urls[0], "--nats-layout", layout)
    servers = [Server(tmp_path / name, cluster=(*options, "--host-id", name)) for name in ("p1", "p2")]
    try:
        for server in servers:
            server.start()
        one, two = (httpx.Client(base_url=s.url, timeout=WAIT_S) for s in servers)
        with one, two:
            made = one.post("/v1/sessions/demo-1/messages?wait=true", json={"text": "List the files."})
            assert made.status_code == 200 and made.json()["ok"], made.text
            more = two.post("/v1/sessions/demo-1/messages?wait=true", json={"text": "And again."})
            assert more.status_code == 200 and more.json()["ok"], more.text
            events = read_sse(
                two, "/v1/sessions/demo-1/events", lambda e: e.data.get("seq") == more.json()["last_seq"]
            )
            assert [e.event for e in events].count("turn-completed") == 2
        for server in servers:
            assert server.signal(signal.SIGTERM) == 0
            assert server.proc is not None and server.proc.stdout is not None
            assert "leases released" in server.proc.stdout.read()
    finally:
        for server in servers:
            server.end()
    err = (tmp_path / "p1" / "server.log").read_text()
    assert "Traceback" not in err, err[-3000:]


def test_a_session_whose_server_hangs_is_taken_by_the_server_asked_once_its_lease_ends(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A holder that stops answering (SIGSTOP): the other server's send waits for its lease to end
    (TTL 3 s here), claims the session and runs the turn; the holder, woken, has lost it."""
    layout = fresh_names().prefix.removeprefix("cairn-")
    options = ("--nats", cluster.urls[0], "--nats-layout", layout, "--lease-ttl", "3")
    servers = [Server(tmp_path / name, cluster=(*options, "--host-id", name)) for name in ("h1", "h2")]
    try:
        for server in servers:
            server.start()
        one, two = (httpx.Client(base_url=s.url, timeout=WAIT_S) for s in servers)
        with one, two:
            made = one.post("/v1/sessions/demo-1/messages?wait=true", json={"text": "List the files."})
            assert made.status_code == 200 and made.json()["ok"], made.text
            assert servers[0].proc is not None
            servers[0].proc.send_signal(signal.SIGSTOP)
            began = time.monotonic()
            taken = two.post("/v1/sessions/demo-1/messages?wait=true", json={"text": "And again."})
            took = time.monotonic() - began
            servers[0].proc.send_signal(signal.SIGCONT)
            assert taken.status_code == 200 and taken.json()["ok"], taken.text
            print(f"the send to a hung holder's session completed after {took:.1f} s (TTL 3 s)")
            assert took < 25.0
            events = read_sse(
                two, "/v1/sessions/demo-1/events", lambda e: e.data.get("seq") == taken.json()["last_seq"]
            )
            assert [e.event for e in events].count("turn-completed") == 2
        for server in servers:
            assert server.signal(signal.SIGTERM) == 0
    finally:
        for server in servers:
            server.end()
