"""Sessions on the real OpenAI-compatible adapter: a real Host, its journal, its actor threads, the
official SDK, and the chat-completions server on 127.0.0.1 (`chat_server`). Nothing is mocked.

What the adapter tests check call by call, these check through the turn loop: tool calls and usage
recorded (P1, P3), a server without usage (P3/P4), reactive recovery and its guard (R1-R3), the
output boundary (R2), and the API key kept out of everything a session leaves behind.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import Host, SessionSettings, WorkspaceTools, cli
from cairn.actors.provider.base import TextDelta
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    ProviderError,
    Request,
    ToolResult,
    TurnFailed,
    Usage,
)
from tests.actors.helpers import WAIT, Clock, config_from, reopen_and_compare, words
from tests.provider.chat_server import (
    ChatServer,
    Error,
    Reply,
    Sse,
    api_error,
    call_more,
    call_start,
    chunk,
    text_reply,
    usage_chunk,
)
from tests.provider.conftest import SECRET_KEY, Connect

SID = "s"
SETTINGS = SessionSettings(
    model="test-model", context_window=128_000, system_prompt="You are a test agent. Use the tools."
)
OVERFLOW = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens."
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
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\n")
    return root


@pytest.fixture
def open_host(tmp_path: Path, connect: Connect) -> Iterator[OpenHost]:
    """Hosts on `tmp_path / "store"` with an OpenAI provider on the test server; closed after the
    test, and their actor threads joined (so the conftest finds none left running)."""
    before = set(threading.enumerate())
    hosts: list[Host] = []

    def make(provider: OpenAIProvider | None = None, **kwargs: Any) -> Host:
        host = Host.open(
            tmp_path / "store",
            provider=provider if provider is not None else connect(),
            tools=kwargs.pop("tools", WorkspaceTools()),
            settings=kwargs.pop("settings", SETTINGS),
            clock_ms=kwargs.pop("clock_ms", Clock()),
            sleep=lambda seconds: None,
            config=config_from(kwargs),
            **kwargs,
        )
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()
    for thread in threading.enumerate():
        if thread not in before and "Actor-" in thread.name:
            thread.join(WAIT)  # a stopped actor's thread is on its way out


def read_call(
    call_id: str = "call_1", path: str = "notes.txt", usage: tuple[int, int, int] = (300, 20, 320)
) -> Sse:
    """A streamed reply that says a word, then calls `read` on `path`, its arguments in two fragments."""
    arguments = json.dumps({"path": path})
    return Sse(
        (
            chunk(role="assistant", content="Let me read it. "),
            chunk(tool_calls=[call_start(0, call_id, "read", arguments[:5])]),
            chunk(tool_calls=[call_more(0, arguments[5:])]),
            chunk(finish="tool_calls"),
            usage_chunk(*usage),
        )
    )


def events_of(host: Host, kind: type[Any], sid: str = SID) -> list[Any]:
    return [record.event for record in host.journal.read(sid) if isinstance(record.event, kind)]


def overflow() -> Error:
    return api_error(400, OVERFLOW, code="context_length_exceeded")


def warm_up(host: Host, server: ChatServer, workspace: Path) -> None:
    """A first turn with a tool call and a long question, so the session has history worth compacting."""
    server.plan(read_call(), text_reply("The notes list alpha and beta.", usage=(2_300, 10, 2_310)))
    question = "What is in notes.txt? Some background first: " + words(2_000, "background")
    assert host.send(SID, question, workspace=workspace).result(WAIT).ok


# --- a normal turn (P1, P3, P4) ---------------------------------------------------------------


def test_P3_a_streamed_turn_runs_its_tool_records_usage_and_the_next_request_starts_from_the_floor(
    open_host: OpenHost, server: ChatServer, connect: Connect, workspace: Path, tmp_path: Path
) -> None:
    server.plan(
        read_call(usage=(300, 20, 320)),
        text_reply("The notes list alpha and beta.", usage=(400, 10, 405)),  # floor: max(405, 410)
    )
    host = open_host()

    turn = host.send(SID, "What is in notes.txt?", workspace=workspace)
    streamed = "".join(item.text for item in turn.events(timeout=WAIT) if isinstance(item, TextDelta))
    result = turn.result(WAIT)

    assert result.ok and result.requests == 2
    assert result.text == "The notes list alpha and beta."
    assert streamed == "Let me read it. The notes list alpha and beta."
    first, final = events_of(host, AssistantMessage)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("call_1", "read", {"path": "notes.txt"})
    ]
    assert first.finish_reason == "tool_calls" and final.finish_reason == "stop"
    (tool,) = events_of(host, ToolResult)
    assert (tool.call_id, tool.status, tool.content[0].text) == ("call_1", "ok", "alpha\nbeta\n")
    usages = events_of(host, Usage)
    assert [(u.prompt_tokens, u.completion_tokens, u.total_tokens) for u in usages] == [
        (300, 20, 320),
        (400, 10, 405),
    ]

    # what went over the wire: tool schemas, then the call and its result in the protocol shape
    second = server.requests[1].body
    assert [t["function"]["name"] for t in second["tools"]] == ["read", "write", "list", "grep"]
    assert second["stream_options"] == {"include_usage": True}
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert second["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "alpha\nbeta\n"}

    # P4 inside the turn: the second request is the first's floor plus the tool result it adds
    counter = TokenCounter()
    state = host.state(SID)
    r1, r2 = events_of(host, Request)
    assert r1.projection_source == "local_estimate"
    assert r2.projection_source == "provider_plus_estimate"
    assert r2.projected_tokens == 320 + counter.message(state.context[2])

    # after the turn: nothing added since the reply, so the next request is the floor itself
    projection = host.next_request(SID).projection
    assert (projection.source, projection.tokens, projection.floor) == ("provider", 410, 410)

    # and the next turn's request is that floor plus the new user message
    assert host.send(SID, "Thanks.").result(WAIT).ok
    r3 = events_of(host, Request)[2]
    assert r3.projection_source == "provider_plus_estimate"
    assert r3.projected_tokens == 410 + counter.message(host.state(SID).context[4])
    # a fresh host on the same store rebuilds the same state and next request (nothing is sent)
    reopen_and_compare(host, tmp_path / "store", [SID], provider=connect()).close()


@pytest.mark.parametrize(
    "reply",
    [
        text_reply("No usage from this server.", usage=None),
        Sse((chunk(content="Null usage.", finish="stop"), usage_chunk(None, None, None))),
        Sse((chunk(content="Garbled usage.", finish="stop"), usage_chunk(-1, "9", None))),  # type: ignore[arg-type]
    ],
    ids=["no-usage-chunk", "null-fields", "unusable-fields"],
)
def test_P3_a_response_without_usable_usage_clears_the_baseline_and_the_next_is_a_local_estimate(
    open_host: OpenHost, server: ChatServer, workspace: Path, reply: Reply
) -> None:
    host = open_host()
    server.plan(text_reply("Hello.", usage=(200, 5, 205)))
    assert host.send(SID, "Hi.", workspace=workspace).result(WAIT).ok
    assert host.next_request(SID).projection.source == "provider"

    server.plan(reply)
    result = host.send(SID, "And now?").result(WAIT)

    assert result.ok
    projection = host.next_request(SID).projection
    assert projection.source == "local_estimate" and projection.floor is None
    assert projection.tokens == projection.local_tokens
    server.plan(text_reply("Fine.", usage=None))
    assert host.send(SID, "Once more.").result(WAIT).ok
    assert events_of(host, Request)[-1].projection_source == "local_estimate"
    assert host.state(SID).open_turn is None


# --- reactive recovery (R1-R3) -----------------------------------------------------------------


def test_R3_a_context_limit_before_the_first_chunk_is_recovered_once_by_a_reactive_checkpoint(
    open_host: OpenHost, server: ChatServer, workspace: Path
) -> None:
    host = open_host()
    warm_up(host, server, workspace)
    server.plan(
        overflow(), text_reply(LEDGER, usage=(900, 150, 1050)), text_reply("Recovered.", usage=(300, 3, 303))
    )

    result = host.send(SID, "Summarise the notes.").result(WAIT)

    assert result.ok and result.text == "Recovered."
    (error,) = events_of(host, ProviderError)
    assert (error.error_class, error.status_code, error.output_delivered) == ("context-limit", 400, False)
    (checkpoint,) = events_of(host, CheckpointCommitted)
    assert (checkpoint.trigger, checkpoint.strategy) == ("reactive", "llm")
    overflowed, summary, replayed = (r.body for r in server.requests[2:])
    # the summary went through the same endpoint, with C5's bounds and no tools
    assert summary["temperature"] == 0 and summary["max_tokens"] <= 8_000
    assert "tools" not in summary and "<summary>" in summary["messages"][0]["content"]
    # the checkpoint was durable before the request was replayed on the new context (K2, R3)
    kinds = [record.line_kind for record in host.journal.read(SID)]
    assert kinds.index("checkpoint-committed") < len(kinds) - 1 - kinds[::-1].index("request")
    first, retry = events_of(host, Request)[-2:]
    assert (first.attempt, retry.attempt) == (1, 2) and retry.history_revision > first.history_revision
    assert "Read the file before answering." in json.dumps(replayed["messages"])
    assert checkpoint.replacement_tokens < checkpoint.source_tokens
    assert len(json.dumps(replayed["messages"])) < len(json.dumps(overflowed["messages"]))


def test_R2_a_second_context_limit_before_a_successful_response_fails_the_turn(
    open_host: OpenHost, server: ChatServer, workspace: Path
) -> None:
    host = open_host()
    warm_up(host, server, workspace)
    server.plan(overflow(), text_reply(LEDGER), overflow())

    result = host.send(SID, "Summarise the notes.").result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "context-limit")
    assert "second context-limit error" in result.error
    assert len(events_of(host, CheckpointCommitted)) == 1  # recovered once, not twice
    assert len(server.requests) == 2 + 3
    (failed,) = events_of(host, TurnFailed)
    assert (failed.phase, failed.error_class) == ("provider", "context-limit")

    # a successful response re-arms recovery: the next overflow is recovered again
    server.plan(text_reply("Back."), overflow(), text_reply(LEDGER), text_reply("Recovered again."))
    assert host.send(SID, "Hello?").result(WAIT).ok
    assert host.send(SID, "Again, please.").result(WAIT).text == "Recovered again."
    assert [c.trigger for c in events_of(host, CheckpointCommitted)] == ["reactive", "reactive"]


# --- the output boundary (R2) -------------------------------------------------------------------


def test_R2_a_connection_dropped_after_some_content_fails_the_turn_closed(
    open_host: OpenHost, server: ChatServer, workspace: Path
) -> None:
    host = open_host()
    server.plan(
        Sse(
            (chunk(role="assistant", content="Half of "), chunk(content="an answer"), chunk(finish="stop")),
            drop_after=2,
        )
    )

    turn = host.send(SID, "Tell me something.", workspace=workspace)
    streamed = [item.text for item in turn.events(timeout=WAIT) if isinstance(item, TextDelta)]
    result = turn.result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "network")
    assert streamed and "".join(streamed) in ("Half of ", "Half of an answer")
    (error,) = events_of(host, ProviderError)
    assert error.output_delivered and error.error_class == "network"
    assert events_of(host, AssistantMessage) == [] and events_of(host, CheckpointCommitted) == []
    assert len(server.requests) == 1  # nothing retried, nothing compacted


def test_R2_a_context_limit_after_some_content_fails_closed_without_recovery(
    open_host: OpenHost, server: ChatServer, workspace: Path
) -> None:
    host = open_host()
    warm_up(host, server, workspace)
    server.plan(
        Sse(
            (
                chunk(role="assistant", content="Sure, "),
                {"error": {"message": "maximum context length exceeded", "code": 400}},
            )
        )
    )

    result = host.send(SID, "Go on.").result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "context-limit")
    assert "fails closed (R2)" in result.error
    (error,) = events_of(host, ProviderError)
    assert error.output_delivered
    assert events_of(host, CheckpointCommitted) == []
    assert len(server.requests) == 2 + 1  # no summary call, no replay


# --- the API key --------------------------------------------------------------------------------


def test_the_api_key_never_reaches_the_log_the_cli_or_the_turn_error(
    open_host: OpenHost,
    server: ChatServer,
    workspace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    host = open_host(turn_retries=0)  # each planned error ends its turn (retries: test below)
    warm_up(host, server, workspace)
    server.plan(api_error(401, f"Incorrect API key provided: {SECRET_KEY}.", code="invalid_api_key"))
    denied = host.send(SID, "Again?").result(WAIT)
    server.plan(Error(500, f"upstream rejected Authorization: Bearer {SECRET_KEY}"))
    broken = host.send(SID, "And again?").result(WAIT)
    server.plan(Sse((chunk(content="Partly "), {"error": {"message": f"key {SECRET_KEY} was revoked"}})))
    cut = host.send(SID, "Last try.").result(WAIT)
    errors = [e.message for e in events_of(host, ProviderError)]
    host.close()

    assert [(r.phase, r.error_class) for r in (denied, broken, cut)] == [
        ("provider", "auth"),
        ("provider", "server"),
        ("provider", "server"),
    ]
    assert "Incorrect API key provided: [redacted]" in denied.error
    assert all(server.requests[n].headers["authorization"] == f"Bearer {SECRET_KEY}" for n in range(5))
    assert len(errors) == 3 and all("[redacted]" in text for text in errors)
    for result in (denied, broken, cut):
        assert SECRET_KEY not in result.error and SECRET_KEY not in repr(result)
    secret = SECRET_KEY.encode()
    files = [path for path in (tmp_path / "store").rglob("*") if path.is_file()]
    assert files
    for path in files:  # segments, blobs, the index: every byte the store holds
        assert secret not in path.read_bytes(), f"the key is in {path}"
    assert cli.main(["log", SID, "--store", str(tmp_path / "store"), "--json"]) == 0
    out = capsys.readouterr().out
    assert "Incorrect API key provided" in out and SECRET_KEY not in out


def test_a_rate_limited_turn_is_sent_again_and_completes(
    open_host: OpenHost, server: ChatServer, workspace: Path
) -> None:
    """A 429 and a 503 before any output: the session sends the request again (attempts 2, 3)."""
    host = open_host()
    warm_up(host, server, workspace)
    server.plan(Error(429, "slow down"), Error(503, "overloaded"))
    result = host.send(SID, "Once more, please.").result(WAIT)
    assert result.ok, result
    errors = events_of(host, ProviderError)
    assert [e.status_code for e in errors] == [429, 503]
    assert [e.output_delivered for e in errors] == [False, False]
    requests = events_of(host, Request)
    assert [r.attempt for r in requests[-3:]] == [1, 2, 3]
