"""Turns sent with the cluster client: the same stream and result as `Host.send`, wherever they land.

Two cluster hosts in this process, on the shared 3-node cluster, in a
namespace of its own per test (`ClusterNames.named`). Hosts and clients
connect to the same node here: a subscription made on one node reaches
the others' routing tables a moment later, and the tests that move the
queue subscription between hosts must not race that.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest

from cairn import Host, HostConfig, WorkspaceTools
from cairn.actors.cluster import ClusterClient, ClusterHost, NoHostAnswered
from cairn.actors.cluster.frames import ErrorFrame, decode_frame
from cairn.actors.cluster.names import ClusterNames
from cairn.actors.cluster.outbox import Outbox
from cairn.actors.provider.base import TextDelta
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.events.codec import Record
from cairn.events.errors import InvalidSessionId
from cairn.events.kinds import AssistantMessage, OwnerChanged, UserMessage
from cairn.events.model import ToolCall
from cairn.store import Journal
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.loop import LoopThread
from tests.cluster.serve_helpers import fresh_names, settled

WAIT = 30.0
CONFIG = HostConfig(sweep=False)


def plan() -> ScriptedProvider:
    """A turn that reads a file with a tool, then answers in three deltas."""
    call = ToolCall("c1", "read", '{"path": "notes.txt"}')
    return ScriptedProvider(
        turns=(Reply(text="Reading the notes.", tool_calls=(call,)), Reply(text="The notes say hello.")),
        chunk_chars=8,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("hello from the notes\n")
    return tmp_path / "ws"


@pytest.fixture
def names() -> ClusterNames:
    return fresh_names()


@pytest.fixture
def hosts(cluster: LocalCluster, names: ClusterNames) -> Iterator[tuple[ClusterHost, ClusterHost]]:
    opened = [
        ClusterHost.open(
            cluster.urls[0],
            host_id=name,
            names=names,
            provider=plan(),
            tools=WorkspaceTools(),
            config=CONFIG,
            release_idle_s=None,
        )
        for name in ("host-a", "host-b")
    ]
    yield opened[0], opened[1]
    for host in opened:
        host.close(grace_s=1.0)


@pytest.fixture
def client(cluster: LocalCluster, names: ClusterNames) -> Iterator[ClusterClient]:
    with ClusterClient(cluster.urls[0], names=names, accept_timeout_s=WAIT) as made:
        yield made


def _shape(items: list[object]) -> list[object]:
    """A stream without what differs between runs: the records' positions in the log and times (an
    answer's latency included)."""
    out: list[object] = []
    for item in items:
        if isinstance(item, Record):
            event = item.event
            if isinstance(event, AssistantMessage):
                event = msgspec.structs.replace(
                    event, first_output_ms=msgspec.UNSET, response_ms=msgspec.UNSET
                )
            out.append((item.sid, item.seq, item.kind, event))
        else:
            out.append(item)
    return out


def test_a_turn_through_the_cluster_streams_the_records_deltas_and_result_a_local_host_send_gives(
    hosts: tuple[ClusterHost, ClusterHost], client: ClusterClient, workspace: Path, tmp_path: Path
) -> None:
    remote = client.send("parity.1", "what do the notes say?", workspace=workspace)
    remote_items = list(remote.events(timeout=WAIT))
    remote_result = remote.result(WAIT)
    assert remote.host_id in ("host-a", "host-b") and remote_result.ok

    # the same session on a local store: the same first event (the owner's fence), the same provider
    owner = next(h for h in hosts if h.host_id == remote.host_id)
    stored = {r.seq: r for r in settled(owner.journal, "parity.1", remote_result.last_seq)}
    fence = stored[1]
    assert isinstance(fence.event, OwnerChanged) and fence.event.host_id == remote.host_id
    with Journal.open(tmp_path / "local") as journal:
        journal.append("parity.1", [fence.event], expected_seq=0)
    with Host.open(tmp_path / "local", provider=plan(), tools=WorkspaceTools(), config=CONFIG) as host:
        local = host.send(
            "parity.1", "what do the notes say?", workspace=workspace, idempotency_key=remote.idempotency_key
        )
        local_items = list(local.events(timeout=WAIT))
        local_result = local.result(WAIT)

    assert _shape(remote_items) == _shape(local_items)
    assert [i for i in remote_items if isinstance(i, TextDelta)] == [
        TextDelta("Reading "), TextDelta("the note"), TextDelta("s."), TextDelta("The note"),
        TextDelta("s say he"), TextDelta("llo."),
    ]  # fmt: skip
    assert {r.kind for r in remote_items if isinstance(r, Record)} >= {"tool-result", "turn-completed"}
    unclocked = {"provider_seconds": 0.0}
    assert msgspec.structs.replace(remote_result, **unclocked) == msgspec.structs.replace(
        local_result, **unclocked
    )
    # the records are the log's own lines, decoded and checked on the client
    assert all(stored[r.seq].event == r.event for r in remote_items if isinstance(r, Record))


def test_a_message_that_reaches_a_host_not_holding_the_session_is_forwarded_and_served_by_the_holder(
    hosts: tuple[ClusterHost, ClusterHost], client: ClusterClient, workspace: Path
) -> None:
    a, b = hosts
    b.stop_accepting()  # only a gets clients' messages: a takes the session
    first = client.send("forward-me", "hello", workspace=workspace)
    assert first.result(WAIT).ok and first.host_id == "host-a"

    a.stop_accepting()
    b.start()  # now only b gets clients' messages; a still holds the session
    second = client.send("forward-me", "and again")
    result = second.result(WAIT)
    assert result.ok and second.host_id == "host-a"
    assert b.stats.forwarded == 1 and b.stats.served == 0 and b.stats.claimed == 0
    records = settled(a.journal, "forward-me", result.last_seq)
    owners = [r.event.host_id for r in records if isinstance(r.event, OwnerChanged)]
    assert owners == ["host-a"]  # one owner, one fence: nothing was taken over


def test_session_ids_with_dots_are_encoded_and_ids_with_spaces_or_wildcards_are_refused_before_sending(
    hosts: tuple[ClusterHost, ClusterHost], client: ClusterClient, workspace: Path
) -> None:
    turn = client.send("team.alpha:42", "hello", workspace=workspace)
    assert turn.result(WAIT).ok
    assert [s.sid for s in hosts[0].journal.sessions()] == ["team.alpha:42"]
    for bad in ("a b", "a*", "a>", "", "x" * 129):
        with pytest.raises(InvalidSessionId):
            client.send(bad, "hello", workspace=workspace)


def test_a_client_with_no_host_listening_gets_no_host_answered_at_once(cluster: LocalCluster) -> None:
    with (
        ClusterClient(cluster.url, names=fresh_names(), accept_timeout_s=WAIT) as lonely,
        pytest.raises(NoHostAnswered),
    ):
        lonely.send("nobody", "hello", workspace="/tmp")


def test_a_request_that_is_not_a_turn_request_gets_an_error_frame_not_silence(
    hosts: tuple[ClusterHost, ClusterHost], cluster: LocalCluster, names: ClusterNames
) -> None:
    loop = LoopThread()
    try:

        async def ask() -> bytes:
            nc = await nats.connect(cluster.urls)
            try:
                msg = await nc.request(names.turn_subject("s"), b"\x93not a request", timeout=WAIT)
                return bytes(msg.data)
            finally:
                await nc.close()

        frame = decode_frame(loop.call(ask(), WAIT))
    finally:
        loop.close()
    assert isinstance(frame, ErrorFrame) and frame.error_class == "InputError"


def test_a_closed_client_resolves_its_open_turns_and_refuses_new_ones(
    hosts: tuple[ClusterHost, ClusterHost], cluster: LocalCluster, names: ClusterNames, workspace: Path
) -> None:
    client = ClusterClient(cluster.url, names=names)
    assert client.send("closing", "hello", workspace=workspace).result(WAIT).ok
    client.close()
    with pytest.raises(Exception, match="closed"):
        client.send("closing", "again")
    shutil.rmtree(workspace)


# --- idempotency keys and broken reply streams (issue 23 point 2) -----------------------------


def _keyed(host: ClusterHost, sid: str, last_seq: int) -> list[UserMessage]:
    records = settled(host.journal, sid, last_seq)
    return [r.event for r in records if isinstance(r.event, UserMessage) and r.event.idempotency_key]


def test_every_send_carries_a_key_and_a_resend_with_it_runs_nothing_twice(
    hosts: tuple[ClusterHost, ClusterHost], client: ClusterClient, workspace: Path
) -> None:
    first = client.send("keyed.1", "what do the notes say?", workspace=workspace)
    result = first.result(WAIT)
    assert result.ok and len(first.idempotency_key) == 32  # a fresh key when the caller gave none
    again = client.send("keyed.1", "what do the notes say?", idempotency_key=first.idempotency_key)
    assert again.result(WAIT) == msgspec.structs.replace(result, provider_seconds=0.0)
    owner = next(h for h in hosts if h.host_id == first.host_id)
    assert [m.idempotency_key for m in _keyed(owner, "keyed.1", result.last_seq)] == [first.idempotency_key]


class _DropFrames:
    """A host-side fault: the first stream's frames numbered in `drop` never leave the host."""

    def __init__(self, drop: set[int], monkeypatch: pytest.MonkeyPatch) -> None:
        self.drop = drop
        self.streams: list[str] = []
        real = Outbox.send

        def send(outbox: Outbox, frame: Any) -> bool:
            if outbox.reply_to not in self.streams:
                self.streams.append(outbox.reply_to)
            if outbox.reply_to == self.streams[0] and getattr(frame, "n", None) in self.drop:
                return True  # as if the network lost it
            return real(outbox, frame)

        monkeypatch.setattr(Outbox, "send", send)


def test_a_lost_first_frame_is_asked_again_under_the_same_key_and_the_turn_runs_once(
    hosts: tuple[ClusterHost, ClusterHost],
    client: ClusterClient,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: `RequestRefused: StreamBroken: frame 1 came where frame 0 was due` for a turn that
    ran (a caller that sent again doubled it). Now the client asks again under the same key; the
    host joins the turn (or answers from the log) and the handle gets the whole stream."""
    fault = _DropFrames({0}, monkeypatch)
    turn = client.send("keyed.2", "what do the notes say?", workspace=workspace)
    result = turn.result(WAIT)
    assert result.ok and result.text == "The notes say hello." and len(fault.streams) == 2
    records = [item for item in turn.events(timeout=WAIT) if isinstance(item, Record)]
    assert [r.kind for r in records][-1] == "turn-completed"
    owner = next(h for h in hosts if h.host_id == turn.host_id)
    assert len(_keyed(owner, "keyed.2", result.last_seq)) == 1
    started = [r for r in settled(owner.journal, "keyed.2", result.last_seq) if r.kind == "turn-started"]
    assert len(started) == 1


def test_a_frame_lost_after_acceptance_leaves_the_outcome_unknown_and_the_key_finds_it(
    hosts: tuple[ClusterHost, ClusterHost],
    client: ClusterClient,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _DropFrames({2}, monkeypatch)
    turn = client.send("keyed.3", "what do the notes say?", workspace=workspace)
    broken = turn.result(WAIT)
    assert (broken.status, broken.phase, broken.error_class) == ("failed", "interrupted", "OutcomeUnknown")
    assert "frame 3 came where frame 2 was due" in broken.error
    assert f"send again with idempotency_key={turn.idempotency_key!r}" in broken.error
    found = client.send("keyed.3", "what do the notes say?", idempotency_key=turn.idempotency_key)
    assert found.result(WAIT).ok and found.result(WAIT).text == "The notes say hello."
