"""`Retry-After` end to end: the chat server on 127.0.0.1 answers 429 or 503 with each form of the
header, the official SDK and the real OpenAI adapter read it, and a real host's session (the turn's
transient retry) and the compactor (C5's summary retries) wait for it. Nothing is mocked; the sleep
is injected and records the waits, so no test really sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from cairn import Host, SessionSettings, WorkspaceTools
from cairn.actors.compactor import Compactor
from cairn.actors.provider.base import ProviderFailure, ProviderRequest
from cairn.actors.provider.config import OpenAIConfig
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.actors.provider.retry import RetryPolicy
from cairn.events.kinds import ProviderError, Request, TurnFailed
from cairn.events.model import Message
from tests.actors.helpers import START_MS, WAIT, Clock, config_from, reopen_and_compare
from tests.compactor.builders import COUNTER, coding_session, ledger, request
from tests.provider.chat_server import ChatServer, Error, api_error, text_reply
from tests.provider.conftest import SECRET_KEY

SID = "s"
SETTINGS = SessionSettings(model="test-model", context_window=128_000, system_prompt="You are a test agent.")
GOOD_SUMMARY = ledger("- Fix the failing test in tests/test_app.py.")


def http_date(ms: int) -> str:
    return format_datetime(datetime.fromtimestamp(ms / 1000, UTC), usegmt=True)


def rate_limited(*headers: tuple[str, str], status: int = 429) -> Error:
    kind = "requests" if status == 429 else "server_error"
    return api_error(status, "Rate limit reached, slow down", kind=kind, headers=headers)


@pytest.fixture
def provider(server: ChatServer) -> Iterator[OpenAIProvider]:
    """The adapter on the test server, reading dates against the tests' clock (START_MS)."""
    config = OpenAIConfig(
        base_url=server.url, model="test-model", api_key=SECRET_KEY, structured_summary="off"
    )
    with OpenAIProvider(config, clock_ms=Clock(START_MS)) as adapter:
        yield adapter


OpenHost = Callable[..., Host]


@pytest.fixture
def open_host(tmp_path: Path, provider: OpenAIProvider) -> Iterator[OpenHost]:
    """Hosts whose injected sleep records each wait (seconds) in `host.sleeps`; draw 0.5 (10 % jitter)."""
    before = set(threading.enumerate())
    hosts: list[Host] = []

    def make(**kwargs: Any) -> Host:
        sleeps: list[float] = []
        workspace = tmp_path / "workspace"
        workspace.mkdir(exist_ok=True)
        host = Host.open(
            tmp_path / "store",
            provider=provider,
            tools=WorkspaceTools(),
            settings=SETTINGS,
            clock_ms=Clock(START_MS),
            sleep=sleeps.append,
            retry_draw=kwargs.pop("retry_draw", lambda: 0.5),
            config=config_from(kwargs),
            **kwargs,
        )
        host.sleeps = sleeps  # type: ignore[attr-defined]
        host.workspace = workspace  # type: ignore[attr-defined]
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()
    for thread in threading.enumerate():
        if thread not in before and ("Actor-" in thread.name or thread.name.startswith("cairn-retry")):
            thread.join(WAIT)


def events_of(host: Host, kind: type[Any]) -> list[Any]:
    return [record.event for record in host.journal.read(SID) if isinstance(record.event, kind)]


def fail_once(provider: OpenAIProvider) -> ProviderFailure:
    request = ProviderRequest(model="test-model", messages=(Message(role="user", content="hello"),))
    with pytest.raises(ProviderFailure) as caught:
        list(provider.stream(request))
    return caught.value


# --- the adapter reads the hint -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "value", "hint_ms"),
    [
        ("Retry-After", "5", 5_000),
        ("retry-after", "2.5", 2_500),
        ("retry-after-ms", "1250.5", 1_251),
        ("Retry-After", http_date(START_MS + 4_000), 4_000),
        ("Retry-After", "soon", None),
        ("Retry-After", "-3", None),
    ],
)
def test_C5_the_adapter_carries_each_form_of_the_servers_hint(
    server: ChatServer, provider: OpenAIProvider, header: str, value: str, hint_ms: int | None
) -> None:
    server.plan(rate_limited((header, value)))
    failure = fail_once(provider)
    assert (failure.error_class, failure.status_code, failure.retryable) == ("rate-limit", 429, True)
    assert failure.retry_after_ms == hint_ms


def test_C5_both_headers_the_milliseconds_win(server: ChatServer, provider: OpenAIProvider) -> None:
    server.plan(rate_limited(("Retry-After", "9"), ("retry-after-ms", "300"), status=503))
    assert fail_once(provider).retry_after_ms == 300


# --- the turn waits for it --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "header", "value", "hint_ms", "wait_ms"),
    [
        (429, "Retry-After", "2", 2_000, 2_200),
        (503, "retry-after-ms", "1500", 1_500, 1_650),
        (429, "Retry-After", http_date(START_MS + 4_000), 4_000, 4_400),
        (429, "Retry-After", "0.1", 100, 412),  # shorter than the 375 ms floor: the floor, plus jitter
    ],
    ids=["429-seconds", "503-milliseconds", "429-http-date", "429-under-the-floor"],
)
def test_C5_a_turn_waits_the_servers_hint_plus_jitter_and_records_both(
    open_host: OpenHost,
    server: ChatServer,
    tmp_path: Path,
    status: int,
    header: str,
    value: str,
    hint_ms: int,
    wait_ms: int,
) -> None:
    host = open_host()
    server.plan(rate_limited((header, value), status=status), text_reply("Done after the wait."))

    result = host.send(SID, "Hello.", workspace=host.workspace).result(WAIT)  # type: ignore[attr-defined]

    assert result.ok and result.text == "Done after the wait."
    assert host.sleeps == [wait_ms / 1000]  # type: ignore[attr-defined]
    (error,) = events_of(host, ProviderError)
    assert (error.status_code, error.retry_after_ms, error.retry_wait_ms) == (status, hint_ms, wait_ms)
    assert [r.attempt for r in events_of(host, Request)] == [1, 2]
    reopen_and_compare(host, tmp_path / "store", [SID]).close()


def test_C5_a_hint_over_the_60_s_cap_fails_the_turn_at_once_and_says_why(
    open_host: OpenHost, server: ChatServer
) -> None:
    host = open_host()
    server.plan(rate_limited(("Retry-After", "120")), text_reply("never"))

    result = host.send(SID, "Hello.", workspace=host.workspace).result(WAIT)  # type: ignore[attr-defined]

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "rate-limit")
    assert "wait 120 s" in result.error and "60 s cap" in result.error
    assert host.sleeps == []  # type: ignore[attr-defined]
    assert len(server.requests) == 1
    (error,) = events_of(host, ProviderError)
    assert (error.retry_after_ms, error.retry_wait_ms) == (120_000, None)
    (failed,) = events_of(host, TurnFailed)
    assert "60 s cap" in failed.error


def test_C5_the_cap_is_a_host_setting(open_host: OpenHost, server: ChatServer) -> None:
    host = open_host(retry=RetryPolicy(max_wait_ms=180_000))
    server.plan(rate_limited(("Retry-After", "120")), text_reply("Done."))

    assert host.send(SID, "Hello.", workspace=host.workspace).result(WAIT).ok  # type: ignore[attr-defined]
    assert host.sleeps == [132.0]  # type: ignore[attr-defined]


def test_C5_a_hint_on_a_500_is_ignored_the_floor_applies(open_host: OpenHost, server: ChatServer) -> None:
    host = open_host()
    server.plan(
        api_error(500, "internal", kind="server_error", headers=(("Retry-After", "30"),)),
        text_reply("Done."),
    )

    assert host.send(SID, "Hello.", workspace=host.workspace).result(WAIT).ok  # type: ignore[attr-defined]
    assert host.sleeps == [0.375]  # type: ignore[attr-defined]
    (error,) = events_of(host, ProviderError)
    assert (error.retry_after_ms, error.retry_wait_ms) == (30_000, 375)  # recorded, not honoured


def test_C5_the_jitter_comes_from_the_injected_draw(open_host: OpenHost, server: ChatServer) -> None:
    draws = iter([0.0, 0.999])
    host = open_host(retry_draw=lambda: next(draws))
    server.plan(rate_limited(("Retry-After", "10")), rate_limited(("Retry-After", "10")), text_reply("Done."))

    assert host.send(SID, "Hello.", workspace=host.workspace).result(WAIT).ok  # type: ignore[attr-defined]
    assert host.sleeps == [10.0, 11.998]  # type: ignore[attr-defined]


# --- the summary calls wait for it (C5) ----------------------------------------------------------------


def test_C5_a_summary_call_waits_the_servers_hint_and_the_checkpoint_records_it(
    server: ChatServer, provider: OpenAIProvider
) -> None:
    server.plan(
        rate_limited(("Retry-After", "3")),
        rate_limited(("retry-after-ms", "100"), status=503),
        text_reply(GOOD_SUMMARY),
    )
    sleeps: list[float] = []
    service = Compactor(provider, model="test-model", sleep=sleeps.append, counter=COUNTER, draw=lambda: 0.5)

    outcome = service.compact(request(coding_session(12).state()))

    assert outcome.strategy == "llm" and len(server.requests) == 3
    assert sleeps == [3.3, 0.825]  # 3 s + 10 %; then the 750 ms floor (over a 100 ms hint) + 10 %
    diagnostics = outcome.checkpoint.diagnostics
    assert diagnostics.retry_delays_ms == (3_300, 825)
    assert diagnostics.retry_after_ms == (3_000, 100)


def test_C5_a_summary_hint_over_the_cap_fails_the_summary_at_once(
    server: ChatServer, provider: OpenAIProvider
) -> None:
    server.plan(rate_limited(("Retry-After", "3600")), text_reply(GOOD_SUMMARY))
    sleeps: list[float] = []
    service = Compactor(provider, model="test-model", sleep=sleeps.append, counter=COUNTER)

    outcome = service.compact(request(coding_session(12).state()))

    assert outcome.strategy == "fallback" and len(server.requests) == 1 and sleeps == []
    failure = outcome.failure
    assert failure is not None and failure.reason == "error" and failure.attempt == 1
    assert "3600 s" in failure.detail and "60 s cap" in failure.detail
