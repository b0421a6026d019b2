"""The HTTP API (issue 25 point 1) from outside: a real uvicorn server on 127.0.0.1, driven with httpx.

Sessions are made by their first message, turns run and stream as
Server-Sent Events whose ids are the log's seqs (deltas `seq.k`), a stream
resumes after `Last-Event-ID` or `?after=` with nothing missed or repeated,
across a server restart too; bad requests are typed problems and write nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from cairn import Host, Reply, ScriptedProvider
from cairn.actors.host.client_view import client_view
from cairn.events.kinds import UserMessage
from cairn.events.model import ToolCall
from cairn.store.journal import Journal
from tests.cluster.serve_helpers import Holding
from tests.every_kind import HoldTool
from tests.http.helpers import ApiServer, SseEvent, read_sse


@pytest.fixture
def holding() -> Holding:
    return Holding()


@pytest.fixture
def api(tmp_path: Path, holding: Holding) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path / "store", tmp_path / "workspaces", holding)
    yield server
    holding.release.set()
    server.stop()


def _log_views(store: Path, sid: str) -> list[tuple[str, dict]]:
    """Every record of `sid` a client may see, as (id, view), read from the log after the server stopped."""
    with Journal.open(store) as journal:
        views = [(str(r.seq), client_view(r)) for r in journal.read(sid)]
    return [(seq, msgspec.json.decode(msgspec.json.encode(v))) for seq, v in views if v is not None]


def _records(events: list[SseEvent]) -> list[tuple[str, dict]]:
    return [(e.id, e.data) for e in events if "." not in e.id]


def test_a_first_message_makes_the_session_and_waiting_answers_the_turns_result(api: ApiServer) -> None:
    reply = api.client.post("/v1/sessions/s1/messages", params={"wait": "true"}, json={"text": "hello"})
    assert reply.status_code == 200, reply.text
    result = reply.json()
    assert (
        result["ok"] and result["status"] == "completed" and result["session"] == "s1" and result["turn_id"]
    )
    assert api.client.get("/v1/sessions").json() == {"sessions": ["s1"]}
    about = api.client.get("/v1/sessions/s1").json()
    assert about["session"] == "s1" and about["last_seq"] == result["last_seq"] and not about["turn_running"]
    assert "system_prompt" not in about and "workspace" not in about
    page = api.client.get("/v1/sessions/s1/transcript", params={"limit": 2}).json()
    assert [e["item"]["kind"] for e in page["entries"]] == ["user-message", "turn-started"]
    assert page["more"] and page["next_after"] == page["entries"][-1]["seq"]
    assert (api.store.parent / "workspaces" / "s1").is_dir()  # the default workspace: the session's id


def test_a_turns_events_stream_with_seqs_as_ids_and_match_the_log(api: ApiServer) -> None:
    accepted = api.client.post("/v1/sessions/s1/messages", json={"text": "hello"})
    assert accepted.status_code == 202, accepted.text
    body = accepted.json()
    assert body["message_seq"] == 2 and body["turn_id"]  # session-started is seq 1
    assert body["events"] == "/v1/sessions/s1/events?after=1"
    events = read_sse(api.client, "/v1/sessions/s1/events?after=0", lambda e: e.event == "turn-completed")
    assert events[0].event == "session-started" and "workspace" not in events[0].data
    assert [e.event for e in events][1:3] == ["user-message", "turn-started"]
    api.stop()
    assert _records(events) == _log_views(api.store, "s1")  # every record the log holds, once, in order


def test_a_stream_resumes_after_its_last_event_id_with_nothing_missed_or_repeated(
    api: ApiServer, holding: Holding
) -> None:
    assert api.client.post(
        "/v1/sessions/s1/messages", params={"wait": "true"}, json={"text": "one"}
    ).is_success
    first = read_sse(api.client, "/v1/sessions/s1/events", lambda e: e.event == "turn-started")
    rest = read_sse(
        api.client,
        "/v1/sessions/s1/events",
        lambda e: e.event == "turn-completed",
        headers={"Last-Event-ID": first[-1].id},
    )
    assert rest[0].id == str(int(first[-1].id) + 1)
    again = read_sse(api.client, f"/v1/sessions/s1/events?after={rest[2].id}", lambda e: e.id == rest[-1].id)
    assert [e.id for e in again] == [e.id for e in rest[3:]]
    api.stop()
    assert _records(first + rest) == _log_views(api.store, "s1")


def test_a_live_stream_carries_deltas_and_the_turn_cancelled_over_http(
    api: ApiServer, holding: Holding
) -> None:
    assert api.client.post(
        "/v1/sessions/s1/messages", params={"wait": "true"}, json={"text": "one"}
    ).is_success
    last = api.client.get("/v1/sessions/s1").json()["last_seq"]
    answers: list[dict] = []

    def send_and_cancel() -> None:
        reply = api.client.post("/v1/sessions/s1/messages", json={"text": "HOLD this turn"})
        answers.append(reply.json())

    held = read_sse(
        api.client,
        f"/v1/sessions/s1/events?after={last}",
        lambda e: e.event == "text-delta",
        on_open=send_and_cancel,
    )
    assert [e.event for e in held][:2] == ["user-message", "turn-started"]
    assert held[-1].data == {"kind": "text-delta", "text": "working. "}
    assert held[-1].id.startswith(held[-2].id + ".") or "." in held[-1].id  # a delta: seq.k
    assert api.client.get("/v1/sessions/s1").json()["turn_running"]
    cancelled = api.client.post("/v1/sessions/s1/cancel", json={"reason": "the user pressed stop"})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    tail = read_sse(
        api.client,
        "/v1/sessions/s1/events",
        lambda e: e.event == "turn-cancelled",
        headers={"Last-Event-ID": held[-1].id},
    )
    assert tail[-1].data["reason"] == "the user pressed stop"
    assert answers[0]["turn_id"] == tail[-1].data["turn_id"]
    assert api.client.post("/v1/sessions/s1/cancel").json()["code"] == "NoTurnRunning"


def test_a_resent_idempotency_key_answers_the_first_turn_and_records_nothing(api: ApiServer) -> None:
    headers = {"Idempotency-Key": "msg-1"}
    first = api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "hi"}, headers=headers).json()
    again = api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "hi"}, headers=headers).json()
    assert again["turn_id"] == first["turn_id"] and again["last_seq"] == first["last_seq"]
    other = api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "other"}, headers=headers)
    assert other.status_code == 409 and other.json()["code"] == "IdempotencyKeyReused"
    api.stop()
    with Journal.open(api.store) as journal:
        messages = [r for r in journal.read("s1") if isinstance(r.event, UserMessage)]
    assert len(messages) == 1


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("POST", "/v1/sessions/s1/messages", {"content": b"{not json"}, 400, "BadJson"),
        ("POST", "/v1/sessions/s1/messages", {"json": {"text": 3}}, 400, "BadBody"),
        ("POST", "/v1/sessions/s1/messages", {"json": {"text": "a", "colour": "red"}}, 400, "BadBody"),
        ("POST", "/v1/sessions/s1/messages", {"json": {"text": "a", "content": []}}, 400, "BadBody"),
        ("POST", "/v1/sessions/s1/messages", {"json": {}}, 400, "BadBody"),
        (
            "POST",
            "/v1/sessions/s1/messages",
            {"json": {"text": "a", "workspace": "../etc"}},
            400,
            "BadWorkspace",
        ),
        (
            "POST",
            "/v1/sessions/s1/messages",
            {"json": {"text": "a", "workspace": "/etc"}},
            400,
            "BadWorkspace",
        ),
        ("POST", "/v1/sessions/s1/messages", {"json": {"text": "a", "mid_turn": "shout"}}, 400, "InputError"),
        (
            "POST",
            "/v1/sessions/s1/messages",
            {"content": b'{"text": "a\\ud800"}'},
            400,
            "BadJson",
        ),  # lone surrogate
        (
            "POST",
            "/v1/sessions/s1/messages",
            {"json": {"text": "a", "settings": {"context_window": 10}}},
            400,
            "NoInputBudget",
        ),
        ("POST", "/v1/sessions/s1/messages", {"content": b"x" * (17 * 2**20)}, 413, "BodyTooLarge"),
        (
            "POST",
            "/v1/sessions/s1/messages",
            {"content": b"text=a", "headers": {"content-type": "application/x-www-form-urlencoded"}},
            415,
            "NotJson",
        ),
        ("POST", "/v1/sessions/bad..id/messages", {"json": {"text": "a"}}, 400, "InvalidSessionId"),
        ("GET", "/v1/sessions/nobody", {}, 404, "UnknownSession"),
        ("GET", "/v1/sessions/nobody/events", {}, 404, "UnknownSession"),
        ("GET", "/v1/sessions/nobody/transcript", {}, 404, "UnknownSession"),
        ("POST", "/v1/sessions/nobody/cancel", {}, 404, "UnknownSession"),  # was 409 NoTurnRunning
        ("GET", "/v1/sessions/s1/transcript?limit=x", {}, 400, "BadQuery"),
        ("GET", "/v1/sessions/s1/events?after=abc", {}, 400, "InputError"),
        ("GET", "/v1/nothing-here", {}, 404, "NotFound"),
        ("DELETE", "/v1/sessions", {}, 405, "MethodNotAllowed"),
    ],
)
def test_a_bad_request_is_a_typed_problem_and_writes_nothing(
    api: ApiServer, method: str, path: str, kwargs: dict, status: int, code: str
) -> None:
    reply = api.client.request(method, path, **kwargs)
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == "application/problem+json"
    problem = reply.json()
    assert (problem["status"], problem["code"], problem["type"]) == (
        status,
        code,
        f"urn:cairn:problem:{code}",
    )
    assert problem["detail"]
    assert api.client.get("/v1/sessions").json() == {"sessions": []}
    assert not (api.store.parent / "workspaces").exists() or not any(
        (api.store.parent / "workspaces").iterdir()
    )


def test_a_stream_resumes_from_the_log_after_the_server_restarts(tmp_path: Path, holding: Holding) -> None:
    first = ApiServer(tmp_path / "store", tmp_path / "ws", holding)
    try:
        assert first.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "one"}).is_success
        seen = read_sse(first.client, "/v1/sessions/s1/events", lambda e: e.event == "turn-started")
    finally:
        first.stop()
    second = ApiServer(tmp_path / "store", tmp_path / "ws", holding)
    try:
        assert second.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "two"}).is_success
        last = second.client.get("/v1/sessions/s1").json()["last_seq"]
        rest = read_sse(
            second.client,
            "/v1/sessions/s1/events",
            lambda e: e.id == str(last),
            headers={"Last-Event-ID": seen[-1].id},
        )
    finally:
        second.stop()
    assert _records(seen + rest) == _log_views(tmp_path / "store", "s1")


def test_the_next_request_checkpoints_and_compact_now_over_http(api: ApiServer) -> None:
    """A session of a 2,000-token window (output cap 200: budget 1,800) whose first message is about
    1,200 tokens: compact now (K4: at least half the window) writes a checkpoint; the next request and
    the checkpoint list show it, without the system prompt or the summary's text."""
    settings = {"context_window": 2_000, "max_output_tokens": 200, "system_prompt": "SECRET PROMPT"}
    long = " ".join(f"word{i}" for i in range(600))
    sent = api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": long, "settings": settings})
    assert sent.status_code == 200, sent.text
    before = api.client.get("/v1/sessions/s1/context").json()
    assert before["projected_tokens"] >= 1_000 and before["input_budget"] == 1_800
    assert before["messages_hidden"] == 1 and "SECRET" not in str(before)  # the system prompt: counted only
    assert [m["role"] for m in before["messages"]][:2] == ["user", "assistant"]
    assert api.client.get("/v1/sessions/s1/checkpoints").json() == {"session": "s1", "checkpoints": []}
    compacted = api.client.post("/v1/sessions/s1/compact").json()
    assert compacted["compacted"] and compacted["reason"] == "compacted"
    record = compacted["record"]
    assert record["kind"] == "checkpoint-committed" and record["trigger"] == "manual"
    assert "replacement_messages" not in record and record["replacement_message_count"] >= 1
    listed = api.client.get("/v1/sessions/s1/checkpoints").json()["checkpoints"]
    assert [c["seq"] for c in listed] == [record["seq"]]
    after = api.client.get("/v1/sessions/s1/context").json()
    assert after["projected_tokens"] < before["projected_tokens"]
    again = api.client.post("/v1/sessions/s1/compact").json()
    assert not again["compacted"] and again["reason"] == "below-threshold" and again["record"] is None
    seen = read_sse(api.client, "/v1/sessions/s1/events", lambda e: e.event == "checkpoint-committed")
    assert seen[-1].id == str(record["seq"])


def test_a_fork_copies_the_history_into_a_new_session(api: ApiServer) -> None:
    assert api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "hello"}).is_success
    forked = api.client.post("/v1/sessions/s1/fork", json={"target": "s2"})
    assert forked.status_code == 201 and forked.json()["session"] == "s2"
    assert api.client.get("/v1/sessions").json() == {"sessions": ["s1", "s2"]}
    assert api.client.get("/v1/sessions/s2").json()["parent_session"] == "s1"
    assert api.client.post("/v1/sessions/s1/fork", json={"target": "s2"}).json()["code"] == "SessionExists"
    assert (
        api.client.post("/v1/sessions/s1/fork", json={"target": "../x"}).json()["code"] == "InvalidSessionId"
    )
    assert api.client.post("/v1/sessions/s1/fork", json={}).json()["code"] == "BadBody"
    assert api.client.post("/v1/sessions/none/fork", json={"target": "s3"}).status_code == 404


def _interrupted(store: Path, workspace: Path, sessions: tuple[str, ...]) -> None:
    """Each of `sessions` with a turn stopped while its tool ran (as a crash leaves it), by a Python host."""
    hold = HoldTool()
    workspace.mkdir(parents=True)
    try:
        for sid in sessions:
            call = ToolCall(f"hold-{sid}", "hold", "{}")
            provider = ScriptedProvider(turns=(Reply(text="This takes a while.", tool_calls=(call,)),))
            with Host.open(store, provider=provider, tools=hold) as host:
                held = host.send(sid, "run the long job", workspace=workspace)
                assert hold.holding.wait(30)
                assert host.stop_session(sid)
                assert held.result(30).phase == "interrupted"
            hold.holding.clear()
    finally:
        hold.release.set()


def test_an_interrupted_turn_is_listed_then_continued_or_dismissed_over_http(tmp_path: Path) -> None:
    """Two turns a stopped host left interrupted: the API lists both, continues one (it completes,
    without running its tool again) and dismisses the other; then none is listed."""
    _interrupted(tmp_path / "store", tmp_path / "ws" / "jobs", ("a", "b"))
    api = ApiServer(tmp_path / "store", tmp_path / "ws", Holding())
    try:
        listed = api.client.get("/v1/interrupted").json()["interrupted"]
        assert sorted(t["session"] for t in listed) == ["a", "b"]
        assert all(t["text"] == "run the long job" and t["state"] == "interrupted" for t in listed)
        turn_of = {t["session"]: t["turn_id"] for t in listed}
        dismissed = api.client.post(
            f"/v1/sessions/b/turns/{turn_of['b']}/dismiss", json={"reason": "not needed"}
        )
        assert dismissed.json() == {"session": "b", "turn_id": turn_of["b"], "dismissed": True}
        again = api.client.post(f"/v1/sessions/b/turns/{turn_of['b']}/dismiss")
        assert again.status_code == 409 and again.json()["code"] == "NotInterrupted"
        continued = api.client.post(f"/v1/sessions/a/turns/{turn_of['a']}/continue?wait=true")
        assert continued.status_code == 200 and continued.json()["ok"], continued.text
        # once more: 409 NotInterrupted, as dismiss answers (it was a 400 here)
        twice = api.client.post(f"/v1/sessions/a/turns/{turn_of['a']}/continue?wait=true")
        assert twice.status_code == 409 and twice.json()["code"] == "NotInterrupted", twice.text
        assert api.client.get("/v1/interrupted").json() == {"interrupted": []}
        events = read_sse(api.client, "/v1/sessions/b/events", lambda e: e.event == "turn-dismissed")
        assert events[-1].data["reason"] == "not needed"
    finally:
        api.stop()


def test_the_openapi_document_is_served_checked_in_and_names_every_route_and_only_those(
    api: ApiServer,
) -> None:
    """Issue 25 point 6: the served document is the checked-in file, which is what `openapi.py` builds
    (`python -m cairn.actors.http.openapi > actors/http/openapi.json` after a change), and its paths
    and methods are exactly the app's routes."""
    from starlette.routing import Route

    from cairn.actors.http import openapi

    served = api.client.get("/v1/openapi.json")
    assert served.status_code == 200 and served.content == openapi.checked_in()
    assert served.content.decode() == openapi.text(), "openapi.json is stale: write it again (module doc)"
    document = served.json()
    assert document["openapi"] == "3.1.0"
    documented = {(path, method.upper()) for path, ops in document["paths"].items() for method in ops}
    app = api.server.app
    routes = {
        (r.path, m) for r in app.routes if isinstance(r, Route) for m in (r.methods or ()) if m != "HEAD"
    }
    assert documented == routes
    for path, ops in document["paths"].items():
        for op in ops.values():
            named = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert named == {part[1:-1] for part in path.split("/") if part.startswith("{")}, path


def test_a_resent_idempotency_key_after_a_restart_answers_the_first_turn_from_the_log(tmp_path: Path) -> None:
    """Issue 25 point 3: a client whose connection dropped sends again with its key to a restarted
    server: the first turn's result comes back from the log and nothing is recorded or run twice; the
    same key with another body is 409."""
    headers = {"Idempotency-Key": "k-1"}
    first = ApiServer(tmp_path / "store", tmp_path / "ws", Holding())
    try:
        done = first.client.post(
            "/v1/sessions/s1/messages?wait=true", json={"text": "hi"}, headers=headers
        ).json()
    finally:
        first.stop()
    holding = Holding()
    second = ApiServer(tmp_path / "store", tmp_path / "ws", holding)
    try:
        again = second.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "hi"}, headers=headers)
        assert again.status_code == 200 and again.json()["turn_id"] == done["turn_id"]
        assert again.json()["last_seq"] == done["last_seq"] and holding.inner.calls == 0  # nothing ran
        other = second.client.post("/v1/sessions/s1/messages", json={"text": "bye"}, headers=headers)
        assert other.status_code == 409 and other.json()["code"] == "IdempotencyKeyReused"
        assert second.client.get("/v1/sessions/s1").json()["last_seq"] == done["last_seq"]
    finally:
        second.stop()


def test_a_workspace_that_is_a_file_or_leads_outside_and_too_deep_json_are_400_not_500(
    api: ApiServer, tmp_path: Path
) -> None:
    """Found from outside: a workspace naming a file in the folder of workspaces was a 500 in plain
    text (FileExistsError), a link there to a folder elsewhere let the session work outside it, and
    JSON nested 100,000 deep was a 500 (RecursionError). Each is now a typed 400, nothing written."""
    folders = tmp_path / "workspaces"
    folders.mkdir(exist_ok=True)
    (folders / "afile").write_text("not a folder")
    (tmp_path / "outside").mkdir()
    (folders / "escape").symlink_to(tmp_path / "outside")

    def named(workspace: str) -> dict[str, object]:
        return {"json": {"text": "a", "workspace": workspace}}

    plain = {"json": {"text": "a"}}
    deep = {"content": b"[" * 100_000 + b"]" * 100_000}
    cases = [
        ("/v1/sessions/s1/messages", named("afile"), "BadWorkspace", "is taken by a file"),
        ("/v1/sessions/afile/messages", plain, "BadWorkspace", "is taken by a file"),
        ("/v1/sessions/s2/messages", named("escape"), "BadWorkspace", "leads outside"),
        ("/v1/sessions/escape/messages", plain, "BadWorkspace", "leads outside"),
        ("/v1/sessions/s3/messages", deep, "BadJson", "too deeply"),
    ]
    for path, kwargs, code, says in cases:
        reply = api.client.post(path, **kwargs)
        assert reply.status_code == 400, (path, reply.text)
        assert reply.headers["content-type"] == "application/problem+json"
        assert reply.json()["code"] == code and says in reply.json()["detail"], reply.text
    assert api.client.get("/v1/sessions").json() == {"sessions": []}
    assert not any((tmp_path / "outside").iterdir())


def test_a_message_queued_behind_a_running_turn_is_told_where_its_events_will_be(
    api: ApiServer, holding: Holding
) -> None:
    """Found from outside: `mid_turn: queue` answered 202 with `message_seq` and `turn_id` null and no
    `events` URL, so a client could not find its message. It has no seq until the running turn
    ends; the answer now names the stream from the session's end when it was accepted."""
    assert api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "one"}).is_success
    running = api.client.post("/v1/sessions/s1/messages", json={"text": "HOLD this turn"}).json()
    assert running["message_seq"] is not None
    last = api.client.get("/v1/sessions/s1").json()["last_seq"]
    queued = api.client.post("/v1/sessions/s1/messages", json={"text": "after it", "mid_turn": "queue"})
    assert queued.status_code == 202
    body = queued.json()
    assert body["message_seq"] is None and body["turn_id"] is None
    assert body["events"] == f"/v1/sessions/s1/events?after={last}"
    holding.release.set()
    seen = read_sse(
        api.client,
        body["events"],
        lambda e: e.event == "turn-completed" and e.data["turn_id"] != running["turn_id"],
    )
    asked = [e.data for e in seen if e.event == "user-message"]
    assert len(asked) == 1 and "after it" in json.dumps(asked[0]), asked


def test_a_steering_message_and_a_continued_turn_are_answered_at_once_not_when_the_turn_allows(
    tmp_path: Path, holding: Holding
) -> None:
    """Found from outside: without `wait`, a message steering a running turn was answered only when
    that turn's tool returned (9 s, `turn_id` null), and `continue` only when the continued turn
    ended (10 s): a 202 waited on the turn. Both answer before the held turn is released now."""
    first = ApiServer(tmp_path / "store", tmp_path / "ws", holding)
    try:
        held = first.client.post("/v1/sessions/s1/messages", json={"text": "HOLD this turn"}).json()
        steer = first.client.post("/v1/sessions/s1/messages", json={"text": "and also this"}, timeout=10)
        assert steer.status_code == 202 and steer.json()["events"].startswith("/v1/sessions/s1/events")
    finally:
        first.stop()  # the held turn ends interrupted
    second = ApiServer(tmp_path / "store", tmp_path / "ws", holding)
    try:
        path = f"/v1/sessions/s1/turns/{held['turn_id']}/continue"
        continued = second.client.post(path, timeout=10)  # the continued turn holds again
        assert continued.status_code == 202, continued.text
        body = continued.json()
        assert body["turn_id"] and body["message_seq"] and body["status"] == "accepted"
        assert body["events"] == f"/v1/sessions/s1/events?after={body['message_seq'] - 1}"
    finally:
        holding.release.set()
        second.stop()


def test_a_workspace_mismatch_names_no_path_of_the_server(api: ApiServer, tmp_path: Path) -> None:
    """Found from outside: the 409 said "session s1 works in /tmp/.../ws/wsB, not /tmp/.../ws/wsA",
    the server's own paths, which a client (a tenant among others) never names."""
    made = api.client.post("/v1/sessions/s1/messages?wait=true", json={"text": "a", "workspace": "wsA"})
    assert made.status_code == 200, made.text
    other = api.client.post("/v1/sessions/s1/messages", json={"text": "b", "workspace": "wsB"})
    assert other.status_code == 409 and other.json()["code"] == "WorkspaceMismatch"
    assert str(tmp_path) not in other.text and "another workspace" in other.json()["detail"]
