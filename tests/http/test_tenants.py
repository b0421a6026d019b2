"""Tenants of the HTTP API (issue 25 point 4): bearer tokens, one tenant's sessions hidden from another,
per-tenant limits answered 429 with Retry-After, and the token file checked before the server starts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.actors.http.tenants import MINUTE_MS, BadTenants, Tenant, Tenants, TurnRate, token_hash
from cairn.store.journal import Journal
from tests.cluster.serve_helpers import Holding
from tests.http.helpers import ApiServer, read_sse

ACME, GLOBEX = "acme-token-1234", "globex-token-5678"


def _tenants(**acme_limits: int) -> Tenants:
    return Tenants.checked(
        (
            Tenant(name="acme", token_sha256=token_hash(ACME), **acme_limits),
            Tenant(name="globex", token_sha256=token_hash(GLOBEX)),
        )
    )


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path / "store", tmp_path / "ws", Holding(), tenants=_tenants())
    yield server
    server.stop()


def test_a_request_without_a_tenants_token_is_401_and_writes_nothing(api: ApiServer) -> None:
    for headers in ({}, _auth("wrong"), {"Authorization": "Basic YWNtZQ=="}, {"Authorization": "Bearer"}):
        reply = api.client.post("/v1/sessions/s1/messages", json={"text": "hi"}, headers=headers)
        assert reply.status_code == 401 and reply.json()["code"] == "Unauthorized"
        assert reply.headers["www-authenticate"] == "Bearer"
    assert api.client.get("/v1/sessions", headers=_auth(ACME)).json() == {"sessions": []}


def test_a_tenant_sees_streams_and_changes_only_its_own_sessions(api: ApiServer) -> None:
    """acme's s1 and globex's s1 are two sessions; each tenant's answers name its own `s1`, and acme's
    other session is the same 404 to globex as a session that does not exist."""
    for token, text in ((ACME, "acme says hi"), (GLOBEX, "globex says hi")):
        done = api.client.post(
            "/v1/sessions/s1/messages?wait=true", json={"text": text}, headers=_auth(token)
        )
        assert done.status_code == 200 and done.json()["session"] == "s1", done.text
    assert api.client.post(
        "/v1/sessions/only-acme/messages?wait=true", json={"text": "x"}, headers=_auth(ACME)
    )
    assert api.client.get("/v1/sessions", headers=_auth(ACME)).json() == {"sessions": ["only-acme", "s1"]}
    assert api.client.get("/v1/sessions", headers=_auth(GLOBEX)).json() == {"sessions": ["s1"]}
    events = read_sse(
        api.client, "/v1/sessions/s1/events", lambda e: e.event == "turn-completed", headers=_auth(GLOBEX)
    )
    said = [e.data for e in events if e.event == "user-message"]
    assert said[0]["parts"][0]["text"] == "globex says hi" and all(
        e.data.get("session", "s1") == "s1" for e in events
    )
    for method, path in (
        ("GET", "/v1/sessions/only-acme"),
        ("GET", "/v1/sessions/only-acme/events"),
        ("GET", "/v1/sessions/only-acme/transcript"),
        ("GET", "/v1/sessions/only-acme/context"),
        ("POST", "/v1/sessions/only-acme/compact"),
        ("GET", "/v1/sessions/only-acme/tools"),
    ):
        reply = api.client.request(method, path, headers=_auth(GLOBEX))
        nobody = api.client.request(method, path.replace("only-acme", "nobody"), headers=_auth(GLOBEX))
        assert (
            (reply.status_code, reply.json()["code"])
            == (nobody.status_code, nobody.json()["code"])
            == (
                404,
                "UnknownSession",
            )
        ), path
    forked = api.client.post("/v1/sessions/s1/fork", json={"target": "s2"}, headers=_auth(GLOBEX)).json()
    assert forked == {"session": "s2", "source": "s1", "last_seq": forked["last_seq"]}
    assert api.client.get("/v1/sessions/s2", headers=_auth(GLOBEX)).json()["parent_session"] == "s1"
    api.stop()
    with Journal.open(api.store) as journal:
        assert sorted(s.sid for s in journal.sessions()) == [
            "acme:only-acme",
            "acme:s1",
            "globex:s1",
            "globex:s2",
        ]


def test_a_tenants_turns_per_minute_and_live_sessions_are_429_with_retry_after(tmp_path: Path) -> None:
    api = ApiServer(tmp_path / "store", tmp_path / "ws", Holding(), tenants=_tenants(turns_per_minute=2))
    try:
        for _ in range(2):
            assert api.client.post(
                "/v1/sessions/s1/messages?wait=true", json={"text": "x"}, headers=_auth(ACME)
            )
        third = api.client.post("/v1/sessions/s1/messages", json={"text": "x"}, headers=_auth(ACME))
        assert third.status_code == 429 and third.json()["code"] == "TooManyTurns"
        assert 1 <= int(third.headers["retry-after"]) <= 60
        other = api.client.post(
            "/v1/sessions/s1/messages?wait=true", json={"text": "x"}, headers=_auth(GLOBEX)
        )
        assert other.status_code == 200  # another tenant's limit is its own
    finally:
        api.stop()
    api = ApiServer(tmp_path / "store2", tmp_path / "ws", Holding(), tenants=_tenants(max_live_sessions=1))
    try:
        assert api.client.post("/v1/sessions/a/messages?wait=true", json={"text": "x"}, headers=_auth(ACME))
        second = api.client.post("/v1/sessions/b/messages", json={"text": "x"}, headers=_auth(ACME))
        assert second.status_code == 429 and second.json()["code"] == "TooManySessions"
        assert second.headers["retry-after"] == "5"
        assert api.client.post("/v1/sessions/a/messages?wait=true", json={"text": "y"}, headers=_auth(ACME))
    finally:
        api.stop()


def test_a_message_over_the_tenants_size_is_413(tmp_path: Path) -> None:
    api = ApiServer(tmp_path / "store", tmp_path / "ws", Holding(), tenants=_tenants(max_message_bytes=1_000))
    try:
        big = api.client.post("/v1/sessions/s1/messages", json={"text": "x" * 2_000}, headers=_auth(ACME))
        assert big.status_code == 413 and big.json()["code"] == "BodyTooLarge"
        small = api.client.post(
            "/v1/sessions/s1/messages?wait=true", json={"text": "x" * 500}, headers=_auth(ACME)
        )
        assert small.status_code == 200
    finally:
        api.stop()


def test_turn_rate_is_a_rolling_minute() -> None:
    rate = TurnRate(2)
    assert rate.admit(0) == 0 and rate.admit(10_000) == 0
    assert rate.admit(30_000) == 30  # the first start leaves the window at 60,000
    assert rate.admit(59_999) == 1
    assert rate.admit(MINUTE_MS) == 0  # the first one left
    assert TurnRate(0).admit(0) == 0 and TurnRate(0).admit(0) == 0  # no limit


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{", "the tenants file"),
        ('{"tenants": []}', "no tenants"),
        ('{"tenants": [{"name": "Acme", "token_sha256": "' + "a" * 64 + '"}]}', "a tenant name"),
        ('{"tenants": [{"name": "acme", "token_sha256": "abc"}]}', "64 lowercase hex"),
        (
            '{"tenants": [{"name": "acme", "token_sha256": "' + "a" * 64 + '", "turns_per_minute": -1}]}',
            "limits",
        ),
        (
            '{"tenants": [{"name": "a", "token_sha256": "'
            + "a" * 64
            + '"}, {"name": "b", "token_sha256": "'
            + "a" * 64
            + '"}]}',
            "used once",
        ),
        ('{"tenants": [{"name": "acme", "token": "plain"}]}', "the tenants file"),
    ],
)
def test_a_bad_tenants_file_is_refused_naming_what_is_wrong(tmp_path: Path, content: str, said: str) -> None:
    path = tmp_path / "tenants.json"
    path.write_text(content)
    with pytest.raises(BadTenants, match=said):
        Tenants.load(path)


def test_cairn_serve_listens_beyond_loopback_only_with_a_tenants_file(tmp_path: Path) -> None:
    def serve(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "cairn.cli", "serve", "--store", str(tmp_path / "s"), *argv]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    wide = serve("--http", "0.0.0.0:0")
    assert wide.returncode == 2 and "loopback only" in wide.stderr
    (tmp_path / "bad.json").write_text('{"tenants": []}')
    bad = serve("--http", "127.0.0.1:0", "--tenants", str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and "no tenants" in bad.stderr
    assert not (tmp_path / "s").exists()
