"""Client-side tools over HTTP (issue 25 point 2): the client runs them, the turn waits for their results.

A session declares `client_tools` with its first message; the model's call of
one reaches the client in the event stream, the turn waits in its
waiting-for-tools mode, and the client posts the result by call id. The
server's own tools (`WorkspaceTools`) run beside them in the same turn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cairn import Reply, ScriptedProvider, WorkspaceTools
from cairn.actors.http.client_tools import ClientTools, schema_name
from cairn.events.model import ToolCall
from tests.http.helpers import ApiServer, read_sse, sse_events

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, from the user's own device.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _weather_turn() -> ScriptedProvider:
    """A turn that lists the workspace (a server tool), asks the client for the weather, then answers."""
    return ScriptedProvider(
        turns=(
            Reply(text="Looking.", tool_calls=(ToolCall("c-list", "list", '{"path": "."}'),)),
            Reply(
                text="Asking your device.",
                tool_calls=(ToolCall("c-weather", "get_weather", '{"city": "Paris"}'),),
            ),
            Reply(text="It is sunny in Paris."),
        )
    )


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    tools = ClientTools(WorkspaceTools(), timeout_s=30)
    server = ApiServer(tmp_path / "store", tmp_path / "ws", _weather_turn(), tools=tools)
    yield server
    server.stop()


def test_a_client_tools_call_waits_for_the_clients_result_beside_the_servers_tools(api: ApiServer) -> None:
    sent = api.client.post("/v1/sessions/s1/messages", json={"text": "Weather?", "client_tools": [WEATHER]})
    assert sent.status_code == 202, sent.text
    asked = read_sse(
        api.client,
        "/v1/sessions/s1/events",
        lambda e: (
            e.event == "assistant-message" and any(c["name"] == "get_weather" for c in e.data["tool_calls"])
        ),
    )
    listed = [e for e in asked if e.event == "tool-result"]
    assert [e.data["tool_name"] for e in listed] == ["list"]  # the server's tool ran on the server
    assert api.client.get("/v1/sessions/s1/context").json()["tool_count"] == len(WorkspaceTools.schemas) + 1
    waiting = api.client.get("/v1/sessions/s1/tools").json()["waiting"]
    assert waiting == [{"call_id": "c-weather", "name": "get_weather", "arguments": '{"city": "Paris"}'}]
    posted = api.client.post("/v1/sessions/s1/tools/c-weather", json={"content": "sunny, 24 C"})
    assert posted.status_code == 200 and posted.json()["accepted"], posted.text
    rest = read_sse(
        api.client,
        "/v1/sessions/s1/events",
        lambda e: e.event == "turn-completed",
        headers={"Last-Event-ID": asked[-1].id},
    )
    result = next(e for e in rest if e.event == "tool-result")
    assert (result.data["call_id"], result.data["status"]) == ("c-weather", "ok")
    assert result.data["parts"] == [{"type": "text", "text": "sunny, 24 C"}]
    answer = next(e for e in rest if e.event == "assistant-message")
    assert answer.data["text"] == "It is sunny in Paris."
    again = api.client.post("/v1/sessions/s1/tools/c-weather", json={"content": "rain"})
    assert again.status_code == 409 and again.json()["code"] == "ToolNotWaiting"
    assert api.client.get("/v1/sessions/s1/tools").json()["waiting"] == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"text": "a", "client_tools": [{"description": "no name"}]}, "BadTools"),
        ({"text": "a", "client_tools": [WEATHER, WEATHER]}, "BadTools"),
        ({"text": "a", "client_tools": [{"name": "read"}]}, "BadTools"),  # the server's own
        ({"text": "a", "client_tools": "get_weather"}, "BadBody"),
    ],
)
def test_client_tools_that_cannot_be_told_apart_are_refused_before_anything_is_written(
    api: ApiServer, body: dict, code: str
) -> None:
    reply = api.client.post("/v1/sessions/s1/messages", json=body)
    assert reply.status_code == 400 and reply.json()["code"] == code, reply.text
    assert api.client.get("/v1/sessions").json() == {"sessions": []}


def test_a_result_posted_for_no_waiting_call_changes_nothing(api: ApiServer) -> None:
    assert (
        api.client.post("/v1/sessions/s1/tools/c-x", json={"content": "x"}).status_code == 404
    )  # no session
    api.client.post("/v1/sessions/s1/messages", json={"text": "Weather?", "client_tools": [WEATHER]})
    read_sse(
        api.client,
        "/v1/sessions/s1/events",
        lambda e: e.event == "assistant-message" and e.data["text"] == "Asking your device.",
    )
    unknown = api.client.post("/v1/sessions/s1/tools/c-nobody", json={"content": "x"})
    assert unknown.status_code == 409 and unknown.json()["code"] == "ToolNotWaiting"
    bad = api.client.post("/v1/sessions/s1/tools/c-weather", json={"content": "x", "status": "maybe"})
    assert bad.status_code == 400 and bad.json()["code"] == "BadBody"
    assert api.client.get("/v1/sessions/s1/tools").json()["waiting"][0]["call_id"] == "c-weather"


def test_a_client_tool_that_answers_too_late_gives_the_model_a_timeout_error(tmp_path: Path) -> None:
    tools = ClientTools(WorkspaceTools(), timeout_s=0.2)
    api = ApiServer(tmp_path / "store", tmp_path / "ws", _weather_turn(), tools=tools)
    try:
        done = api.client.post(
            "/v1/sessions/s1/messages?wait=true", json={"text": "Weather?", "client_tools": [WEATHER]}
        ).json()
        assert done["ok"]
        events = read_sse(api.client, "/v1/sessions/s1/events", lambda e: e.event == "turn-completed")
        timed_out = next(e for e in events if e.event == "tool-result" and e.data["call_id"] == "c-weather")
        assert timed_out.data["status"] == "error" and "no result came" in str(timed_out.data["parts"])
        late = api.client.post("/v1/sessions/s1/tools/c-weather", json={"content": "sunny"})
        assert late.status_code == 409 and late.json()["code"] == "ToolNotWaiting"
    finally:
        api.stop()


def test_schema_names_are_read_from_both_schema_shapes() -> None:
    assert schema_name(json.dumps(WEATHER)) == "get_weather"
    assert schema_name('{"name": "bare"}') == "bare"
    assert schema_name('{"type": "function", "function": {}}') is None
    assert schema_name("not json") is None and schema_name("[1]") is None


def test_a_turn_waiting_for_its_client_survives_a_server_restart(tmp_path: Path) -> None:
    """The server stops while the turn waits for get_weather: the log keeps the turn open (its last
    record the `tool-deferred`), nothing is listed as interrupted, and after a restart the call still
    waits; the client's result, posted to the new server, completes the turn, and a stream opened
    after the restart follows it to its end (the records of a turn no request of this server started)."""
    first = ApiServer(
        tmp_path / "store", tmp_path / "ws", _weather_turn(), tools=ClientTools(WorkspaceTools())
    )
    try:
        first.client.post("/v1/sessions/s1/messages", json={"text": "Weather?", "client_tools": [WEATHER]})
        seen = read_sse(first.client, "/v1/sessions/s1/events", lambda e: e.event == "tool-deferred")
        assert seen[-1].data["call_id"] == "c-weather" and seen[-1].data["tool_name"] == "get_weather"
    finally:
        first.stop()
    provider = ScriptedProvider(turns=(Reply(text="It is sunny in Paris."),))
    second = ApiServer(tmp_path / "store", tmp_path / "ws", provider, tools=ClientTools(WorkspaceTools()))
    try:
        assert second.client.get("/v1/interrupted").json() == {"interrupted": []}
        assert [c["call_id"] for c in second.client.get("/v1/sessions/s1/tools").json()["waiting"]] == [
            "c-weather"
        ]

        def post_result() -> None:
            posted = second.client.post("/v1/sessions/s1/tools/c-weather", json={"content": "sunny"})
            assert posted.status_code == 200, posted.text

        rest = read_sse(
            second.client,
            "/v1/sessions/s1/events",
            lambda e: e.event == "turn-completed",
            headers={"Last-Event-ID": seen[-1].id},
            on_open=post_result,
        )
        assert [e.event for e in rest] == [
            "tool-result",
            "request",
            "assistant-message",
            "usage",
            "turn-completed",
        ]
        assert rest[2].data["text"] == "It is sunny in Paris."
    finally:
        second.stop()


def test_a_stream_following_a_waiting_turn_ends_cleanly_when_the_server_stops(tmp_path: Path) -> None:
    """The stream follows the live turn (it waits for get_weather, nothing new comes) and the
    heartbeat is a minute away: the server's stop wakes it, and it ends with its last chunk sent
    (httpx raises on a body cut short), well before a heartbeat could have ended it."""
    tools = ClientTools(WorkspaceTools())
    server = ApiServer(tmp_path / "store", tmp_path / "ws", _weather_turn(), tools=tools, heartbeat_s=60)
    stopped = False
    try:
        server.client.post("/v1/sessions/s1/messages", json={"text": "Weather?", "client_tools": [WEATHER]})
        with (
            httpx.Client(base_url=server.url, timeout=30) as viewer,
            viewer.stream("GET", "/v1/sessions/s1/events") as reply,
        ):
            events = sse_events(reply.iter_lines())
            seen = [next(events)]
            while seen[-1].event != "tool-deferred":
                seen.append(next(events))
            began = time.monotonic()
            server.stop()
            stopped = True
            assert list(events) == []  # no exception: the stream's end came whole
            assert time.monotonic() - began < 30
    finally:
        if not stopped:
            server.stop()
