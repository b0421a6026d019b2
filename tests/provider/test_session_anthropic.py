"""Sessions on the real Anthropic adapter: a real Host, its journal, its actor threads, the official
SDK, and the loopback server speaking the Messages streaming protocol (`messages_sse`). Nothing is
mocked.

What the adapter tests check call by call, these check through the turn loop and the log: signed
thinking kept in the log and sent back on the next request, the tool loop in the API's shape,
usage with the cache figures, reactive recovery from `prompt is too long` (R1, R3), the output
boundary (R2), and the key kept out of the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cairn import Host, SessionSettings, WorkspaceTools
from cairn.actors.provider.anthropic_config import AnthropicConfig
from cairn.actors.provider.anthropic_messages import AnthropicProvider
from cairn.actors.provider.base import ReasoningDelta, TextDelta
from cairn.events.kinds import AssistantMessage, CheckpointCommitted, ProviderError, TurnFailed, Usage
from cairn.events.model import ReasoningBlock
from tests.actors.helpers import WAIT, Clock, config_from, reopen_and_compare, words
from tests.provider.chat_server import ChatServer
from tests.provider.conftest import SECRET_KEY
from tests.provider.messages_sse import (
    api_error,
    base_url,
    error_event,
    message_delta,
    message_start,
    message_stop,
    messages_server,
    stream,
    text_delta,
    text_events,
    text_message,
    text_start,
    thinking_events,
    tool_events,
)

SID = "s"
SIGNATURE = "EqoBCkgIARABGAIiQL2vb3dHJ5fC1bHh0Qk9dPzM"
SETTINGS = SessionSettings(
    model="claude-test", context_window=128_000, system_prompt="You are a test agent. Use the tools."
)
LEDGER = (
    "<analysis>The user asked about the notes file; it was read.</analysis>\n<summary>\n"
    "## Objective and constraints\n- Answer questions about notes.txt.\n"
    "## Decisions and rationale\n- Read the file before answering.\n"
    "## Workspace mutations\n- No evidence observed.\n"
    "## Verification evidence\n- notes.txt was read: it lists alpha and beta.\n"
    "## Active tasks and background work\n- No evidence observed.\n"
    "## Open risks or blockers\n- No evidence observed.\n"
    "## Exact next action\n- Answer the latest question.\n"
    "</summary>"
)

OpenHost = Callable[..., Host]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with messages_server() as loopback:
        yield loopback


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\n")
    return root


@pytest.fixture
def open_host(tmp_path: Path, server: ChatServer) -> Iterator[OpenHost]:
    """Hosts on `tmp_path / "store"` with an Anthropic provider on the loopback server; closed after
    the test with their providers, and their actor threads joined."""
    before = set(threading.enumerate())
    hosts: list[Host] = []
    providers: list[AnthropicProvider] = []

    def make(**kwargs: Any) -> Host:
        config = AnthropicConfig(
            model="claude-test",
            base_url=base_url(server),
            api_key=SECRET_KEY,
            thinking_budget=2_048,
            structured_summary="off",  # the scripted server answers summaries in text (C7)
        )
        provider = AnthropicProvider(config)
        providers.append(provider)
        host = Host.open(
            tmp_path / "store",
            provider=provider,
            tools=WorkspaceTools(),
            settings=SETTINGS,
            clock_ms=Clock(),
            sleep=lambda seconds: None,
            config=config_from(kwargs),
            **kwargs,
        )
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()
    for provider in providers:
        provider.close()
    for thread in threading.enumerate():
        if thread not in before and "Actor-" in thread.name:
            thread.join(WAIT)


def events_of(host: Host, kind: type[Any]) -> list[Any]:
    return [record.event for record in host.journal.read(SID) if isinstance(record.event, kind)]


def think_then_read() -> Any:
    """Thinking with its signature, a word, and a `read` call on notes.txt; the cache read from."""
    return stream(
        message_start(
            {
                "input_tokens": 50,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 1_500,
                "output_tokens": 1,
            }
        ),
        *thinking_events("The user wants notes.txt; read it.", SIGNATURE),
        *text_events("Let me read it.", index=1),
        *tool_events(2, "toolu_01", "read", {"path": "notes.txt"}),
        message_delta("tool_use", {"output_tokens": 60}),
        message_stop(),
    )


def test_signed_thinking_is_logged_and_sent_back_with_its_signature_in_the_tool_loop(
    open_host: OpenHost, server: ChatServer, workspace: Path, tmp_path: Path
) -> None:
    server.plan(
        think_then_read(),
        text_message(
            "The notes list alpha and beta.",
            usage={
                "input_tokens": 40,
                "cache_read_input_tokens": 1_500,
                "cache_creation_input_tokens": 80,
                "output_tokens": 1,
            },
            output_tokens=9,
        ),
    )
    host = open_host()

    turn = host.send(SID, "What is in notes.txt?", workspace=workspace)
    streamed = list(turn.events(timeout=WAIT))
    result = turn.result(WAIT)

    assert result.ok and result.requests == 2 and result.text == "The notes list alpha and beta."
    thought = "".join(i.text for i in streamed if isinstance(i, ReasoningDelta))
    assert thought == "The user wants notes.txt; read it."
    assert "".join(i.text for i in streamed if isinstance(i, TextDelta)) == (
        "Let me read it.The notes list alpha and beta."
    )

    # the log keeps the block with its signature, and the reasoning text as before
    first, final = events_of(host, AssistantMessage)
    assert first.reasoning == "The user wants notes.txt; read it."
    assert first.reasoning_blocks == (
        ReasoningBlock(text="The user wants notes.txt; read it.", signature=SIGNATURE),
    )
    assert first.finish_reason == "tool_calls" and final.finish_reason == "stop"
    assert final.reasoning is None and b"reasoning_blocks" not in msgspec.json.encode(final)
    assert SIGNATURE.encode() in msgspec.json.encode(first)
    usages = events_of(host, Usage)
    assert [(u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens) for u in usages] == [
        (1_550, 60, 0),
        (1_620, 9, 1_500),
    ]

    # the second request: the assistant turn starts with the signed thinking, then text and call;
    # the tool result follows in a user message; tools and system prompt carry breakpoints
    second = server.requests[1].body
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 2_048}
    assert second["system"] == [
        {
            "type": "text",
            "text": "You are a test agent. Use the tools.",
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert [t["name"] for t in second["tools"]] == ["read", "write", "list", "grep"]
    assert second["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assistant, results = second["messages"][1:]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "The user wants notes.txt; read it.", "signature": SIGNATURE},
        {"type": "text", "text": "Let me read it."},
        {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"path": "notes.txt"}},
    ]
    assert results["role"] == "user"
    assert results["content"][0]["type"] == "tool_result"
    assert results["content"][0]["tool_use_id"] == "toolu_01"
    assert results["content"][0]["content"] == [{"type": "text", "text": "alpha\nbeta\n"}]

    # the next turn sends the block again, from the replayed state as from the live one
    server.plan(text_message("Yes."))
    assert host.send(SID, "Thanks.").result(WAIT).ok
    assert server.requests[2].body["messages"][1]["content"][0]["signature"] == SIGNATURE
    fresh = reopen_and_compare(host, tmp_path / "store", [SID], provider=_closed_provider(server))
    try:
        signed = [m.reasoning_blocks for m in fresh.state(SID).context if m.reasoning_blocks]
        assert signed == [(ReasoningBlock(text="The user wants notes.txt; read it.", signature=SIGNATURE),)]
    finally:
        fresh.close()
    for path in (tmp_path / "store").rglob("*"):
        if path.is_file():
            assert SECRET_KEY.encode() not in path.read_bytes(), path


def _closed_provider(server: ChatServer) -> AnthropicProvider:
    provider = AnthropicProvider(AnthropicConfig(model="claude-test", base_url=base_url(server)))
    provider.close()  # the replayed host sends nothing
    return provider


def test_R3_prompt_is_too_long_is_recovered_once_by_a_reactive_checkpoint(
    open_host: OpenHost, server: ChatServer, workspace: Path
) -> None:
    host = open_host()
    server.plan(think_then_read(), text_message("The notes list alpha and beta."))
    question = "What is in notes.txt? Some background first: " + words(2_000, "background")
    assert host.send(SID, question, workspace=workspace).result(WAIT).ok
    server.plan(
        api_error(400, "invalid_request_error", "prompt is too long: 208153 tokens > 200000 maximum"),
        text_message(LEDGER),
        text_message("Recovered."),
    )

    result = host.send(SID, "Summarise.").result(WAIT)

    assert result.ok and result.text == "Recovered."
    (error,) = events_of(host, ProviderError)
    assert (error.error_class, error.status_code, error.output_delivered) == ("context-limit", 400, False)
    (checkpoint,) = events_of(host, CheckpointCommitted)
    assert (checkpoint.trigger, checkpoint.strategy) == ("reactive", "llm")
    summary = server.requests[3].body
    assert summary["max_tokens"] <= 8_000 and "thinking" not in summary
    assert "tools" not in summary and "<summary>" in summary["system"][0]["text"]


def test_R2_an_overloaded_stream_after_text_fails_the_turn_closed(
    open_host: OpenHost, server: ChatServer, workspace: Path
) -> None:
    host = open_host()
    server.plan(
        stream(
            message_start(),
            text_start(0),
            text_delta(0, "Half of an answer"),
            error_event("overloaded_error", "Overloaded"),
        )
    )

    result = host.send(SID, "Tell me something.", workspace=workspace).result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "server")
    assert len(server.requests) == 1  # output was delivered: never retried (R2)
    (error,) = events_of(host, ProviderError)
    assert (error.status_code, error.output_delivered) == (529, True)
    (failed,) = events_of(host, TurnFailed)
    assert failed.phase == "provider"


@pytest.mark.parametrize(
    ("status", "kind", "error_class"),
    [(429, "rate_limit_error", "rate-limit"), (529, "overloaded_error", "server")],
)
def test_C5_a_429_or_529_is_retried_after_its_retry_after(
    open_host: OpenHost, server: ChatServer, workspace: Path, status: int, kind: str, error_class: str
) -> None:
    host = open_host()
    server.plan(api_error(status, kind, "try later", headers=(("retry-after", "2"),)), text_message("Back."))

    result = host.send(SID, "Hello?", workspace=workspace).result(WAIT)

    assert result.ok and result.text == "Back." and len(server.requests) == 2
    (error,) = events_of(host, ProviderError)
    assert (error.error_class, error.status_code, error.retry_after_ms) == (error_class, status, 2_000)
    assert error.retry_wait_ms is not None and 2_000 <= error.retry_wait_ms <= 2_400  # + up to 20 % jitter


@pytest.mark.parametrize(("status", "kind"), [(401, "authentication_error"), (403, "permission_error")])
def test_C5_401_and_403_fail_the_turn_without_a_retry_and_without_the_key(
    open_host: OpenHost, server: ChatServer, workspace: Path, tmp_path: Path, status: int, kind: str
) -> None:
    host = open_host()
    server.plan(api_error(status, kind, f"invalid x-api-key {SECRET_KEY}"))

    result = host.send(SID, "Hello?", workspace=workspace).result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "auth")
    assert len(server.requests) == 1 and SECRET_KEY not in result.error
    (error,) = events_of(host, ProviderError)
    assert (error.status_code, error.retry_wait_ms) == (status, None)
    assert SECRET_KEY not in error.message and "[redacted]" in error.message
    host.close()
    for path in (tmp_path / "store").rglob("*"):
        if path.is_file():
            assert SECRET_KEY.encode() not in path.read_bytes(), path
