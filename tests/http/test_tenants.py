"""Tenants of the HTTP API (issue 25 point 4): bearer tokens, one tenant's sessions hidden from another,
per-tenant limits answered 429 with Retry-After, and the token file checked before the server starts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.actors.http.tenants import MINUTE_MS, BadTenants, RollingQuota, Tenant, Tenants, token_hash
from cairn.events.kinds import UserMessage
from cairn.events.model import TextPart
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


def test_a_tenants_message_bytes_per_minute_are_429_with_retry_after_and_cost_nothing_when_refused(
    tmp_path: Path,
) -> None:
    """A quota of 1,000 message bytes a minute: two bodies of about 420 bytes fit, a third is 429
    `TooManyMessageBytes` with the seconds until the first leaves the minute, and refusing it spent
    no turn; a body over the whole minute's bytes is 413 (no wait would make it fit)."""
    api = ApiServer(
        tmp_path / "store",
        tmp_path / "ws",
        Holding(),
        tenants=_tenants(message_bytes_per_minute=1_000, turns_per_minute=3),
    )
    try:
        for _ in range(2):
            sent = api.client.post(
                "/v1/sessions/s1/messages?wait=true", json={"text": "x" * 400}, headers=_auth(ACME)
            )
            assert sent.status_code == 200, sent.text
        third = api.client.post("/v1/sessions/s1/messages", json={"text": "x" * 400}, headers=_auth(ACME))
        assert third.status_code == 429 and third.json()["code"] == "TooManyMessageBytes", third.text
        assert "over its 1000 bytes a minute" in third.json()["detail"]
        assert 1 <= int(third.headers["retry-after"]) <= 60
        small = api.client.post(
            "/v1/sessions/s1/messages?wait=true", json={"text": "x" * 10}, headers=_auth(ACME)
        )
        assert small.status_code == 200, small.text  # the refused one spent neither bytes nor a turn
        huge = api.client.post("/v1/sessions/s1/messages", json={"text": "x" * 1_200}, headers=_auth(ACME))
        assert huge.status_code == 413 and huge.json()["code"] == "BodyTooLarge"
        assert "retry-after" not in huge.headers
        other = api.client.post(
            "/v1/sessions/s1/messages?wait=true", json={"text": "x" * 900}, headers=_auth(GLOBEX)
        )
        assert other.status_code == 200  # another tenant's bytes are its own
    finally:
        api.stop()
    with Journal.open(tmp_path / "store") as journal:
        said = [r.event.content for r in journal.read("acme:s1") if isinstance(r.event, UserMessage)]
    assert [len(part.text) for (part,) in said if isinstance(part, TextPart)] == [400, 400, 10]


def test_rolling_quota_counts_turns_in_a_rolling_minute() -> None:
    rate = RollingQuota(2)
    assert rate.admit(0) == 0 and rate.admit(10_000) == 0
    assert rate.admit(30_000) == 30  # the first start leaves the window at 60,000
    assert rate.admit(59_999) == 1
    assert rate.admit(MINUTE_MS) == 0  # the first one left
    assert RollingQuota(0).admit(0) == 0 and RollingQuota(0).admit(0, 10**9) == 0  # no limit


def test_rolling_quota_weighs_amounts_and_waits_for_enough_to_leave() -> None:
    data = RollingQuota(1_000)
    assert data.admit(0, 300) == 0 and data.admit(20_000, 300) == 0 and data.admit(40_000, 300) == 0
    assert data.wait_s(45_000, 100) == 0  # 900 + 100 fits exactly
    assert data.wait_s(45_000, 400) == 15  # 300 must leave: the first, at 60,000
    assert data.wait_s(45_000, 700) == 35  # 600 must leave: the first two, the second at 80,000
    assert data.wait_s(45_000, 1_000) == 55  # all three
    assert data.admit(45_000, 400) == 15 and data.admit(60_000, 400) == 0  # a refusal spent nothing
    with pytest.raises(ValueError, match="never fit"):
        data.wait_s(60_000, 1_001)


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
            '{"tenants": [{"name": "acme", "token_sha256": "'
            + "a" * 64
            + '", "message_bytes_per_minute": -5}]}',
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
