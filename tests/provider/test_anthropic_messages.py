"""The Anthropic adapter against a real Messages API server on 127.0.0.1.

Nothing is mocked: the official `anthropic` SDK talks HTTP to the loopback
server, which sends the protocol's server-sent events (`messages_sse`).
"""

from __future__ import annotations

import inspect
import logging
import time
import traceback
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from cairn.actors.provider.anthropic_config import AnthropicConfig
from cairn.actors.provider.anthropic_messages import AnthropicProvider
from cairn.actors.provider.base import (
    Finished,
    ProviderFailure,
    ProviderOutput,
    ProviderRequest,
    ReasoningBlockReady,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
    complete,
)
from cairn.actors.provider.config import ProviderConfigError
from cairn.events.model import ImagePart, Message, MessageMeta, ReasoningBlock, TextPart, ToolCall
from tests.provider.chat_server import ChatServer, Error, Sse
from tests.provider.conftest import SECRET_KEY
from tests.provider.messages_sse import (
    api_error,
    base_url,
    block_stop,
    error_event,
    message_delta,
    message_start,
    message_stop,
    messages_server,
    ping,
    redacted_thinking,
    stream,
    text_delta,
    text_events,
    text_message,
    text_start,
    thinking_events,
    tool_events,
)

READ_SCHEMA = (
    '{"type":"function","function":{"name":"read","description":"Read a file",'
    '"parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}'
)
GREP_SCHEMA = '{"name":"grep","parameters":{"type":"object","properties":{"pattern":{"type":"string"}}}}'


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with messages_server() as loopback:
        yield loopback


@pytest.fixture
def connect(server: ChatServer) -> Iterator[Any]:
    """Providers on `server`, closed at the end of the test (before the server)."""
    made: list[AnthropicProvider] = []

    def make(**settings: Any) -> AnthropicProvider:
        settings.setdefault("model", "claude-test")
        settings.setdefault("api_key", SECRET_KEY)
        provider = AnthropicProvider(AnthropicConfig(base_url=base_url(server), **settings))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


def turn(*messages: Message, **fields: Any) -> ProviderRequest:
    if not messages:
        messages = (Message(role="user", content="hello"),)
    return ProviderRequest(model="claude-test", messages=messages, **fields)


def drain(provider: AnthropicProvider, req: ProviderRequest) -> tuple[list[ProviderOutput], ProviderFailure]:
    """The output a request yields before it fails, and the failure."""
    got: list[ProviderOutput] = []
    with pytest.raises(ProviderFailure) as caught:
        for item in provider.stream(req):
            got.append(item)
    return got, caught.value


def key_sent(headers: dict[str, str]) -> bool:
    """The SDK sends the key as `x-api-key` (earlier versions) or as a bearer token (later ones)."""
    return headers.get("x-api-key") == SECRET_KEY or headers.get("authorization") == f"Bearer {SECRET_KEY}"


# --- a streamed turn ----------------------------------------------------------------------


def test_streamed_thinking_text_tool_use_usage_and_finish(server: ChatServer, connect: Any) -> None:
    server.plan(
        stream(
            message_start(
                {
                    "input_tokens": 40,
                    "cache_read_input_tokens": 1_000,
                    "cache_creation_input_tokens": 200,
                    "output_tokens": 1,
                }
            ),
            ping(),
            *thinking_events("I should read a.py first.", "sig-EqQBCgIYAhIM"),
            *text_events("Reading both.", index=1),
            ping(),
            *tool_events(2, "toolu_01", "read", {"path": "a.py"}),
            *tool_events(3, "toolu_02", "grep", {"pattern": "TODO"}),
            message_delta("tool_use", {"output_tokens": 87}),
            message_stop(),
        )
    )
    got = list(connect().stream(turn()))
    assert got == [
        ReasoningDelta("I should rea"),
        ReasoningDelta("d a.py first."),
        ReasoningBlockReady(ReasoningBlock(text="I should read a.py first.", signature="sig-EqQBCgIYAhIM")),
        TextDelta("Readin"),
        TextDelta("g both."),
        ToolCallReady(ToolCall("toolu_01", "read", '{"path": "a.py"}')),
        ToolCallReady(ToolCall("toolu_02", "grep", '{"pattern": "TODO"}')),
        UsageReport(
            prompt_tokens=1_240,
            completion_tokens=87,
            total_tokens=1_327,
            cached_prompt_tokens=1_000,
            cache_write_tokens=200,
        ),
        Finished("tool_calls"),
    ]
    (sent,) = server.requests
    assert sent.path == "/v1/messages"
    assert sent.body["stream"] is True and sent.body["model"] == "claude-test"
    assert sent.body["max_tokens"] == 8192  # the API requires a cap: the default when none is set
    assert "anthropic-version" in sent.headers
    assert key_sent(sent.headers)


def test_a_redacted_thinking_block_is_kept_with_its_data(server: ChatServer, connect: Any) -> None:
    server.plan(
        stream(
            message_start(),
            redacted_thinking(0, "EmwKAhgBEgy3va3pzix/LafPsn4a"),
            block_stop(0),
            *text_events("Done.", index=1),
            message_delta("end_turn"),
            message_stop(),
        )
    )
    got = list(connect().stream(turn()))
    assert got[0] == ReasoningBlockReady(ReasoningBlock(redacted="EmwKAhgBEgy3va3pzix/LafPsn4a"))
    assert [i for i in got if isinstance(i, ReasoningDelta)] == []


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
    ],
)
def test_stop_reasons_are_mapped_to_the_finish_reasons_cairn_records(
    server: ChatServer, connect: Any, stop_reason: str, finish: str
) -> None:
    server.plan(text_message("Hi.", stop_reason=stop_reason))
    assert list(connect().stream(turn()))[-1] == Finished(finish)


def test_P1_usage_without_cache_fields_and_without_any_usage(server: ChatServer, connect: Any) -> None:
    server.plan(
        text_message("Hi.", usage={"input_tokens": 12, "output_tokens": 1}, output_tokens=4),
        stream(message_start({}), *text_events("Hi."), message_delta("end_turn", {}), message_stop()),
    )
    provider = connect()
    assert complete(provider, turn()).usage == UsageReport(
        prompt_tokens=12, completion_tokens=4, total_tokens=16
    )
    assert complete(provider, turn()).usage == UsageReport()


def test_P1_usage_totals_in_message_delta_win_over_message_start(server: ChatServer, connect: Any) -> None:
    server.plan(
        stream(
            message_start({"input_tokens": 5, "output_tokens": 1}),
            *text_events("Hi."),
            message_delta(
                "end_turn",
                {
                    "input_tokens": 30,
                    "cache_read_input_tokens": 700,
                    "cache_creation_input_tokens": 0,
                    "output_tokens": 9,
                },
            ),
            message_stop(),
        )
    )
    usage = complete(connect(), turn()).usage
    assert usage == UsageReport(
        prompt_tokens=730,
        completion_tokens=9,
        total_tokens=739,
        cached_prompt_tokens=700,
        cache_write_tokens=0,
    )


# --- what is sent ---------------------------------------------------------------------------


def test_system_images_tool_results_and_tools_are_sent_in_the_api_shape(
    server: ChatServer, connect: Any
) -> None:
    messages = (
        Message(role="system", content="Be brief.", id="s1"),
        Message(role="user", content=(TextPart("Look: "), ImagePart(media_type="image/png", data="QUJD"))),
        Message(
            role="assistant",
            content="Reading.",
            reasoning="private thoughts",  # no signature: never sent
            tool_calls=(
                ToolCall("toolu_a", "read", '{"path": "a.py"}'),
                ToolCall("toolu_b", "grep", '{"pattern": "x"}'),
            ),
        ),
        Message(
            role="tool", tool_call_id="toolu_a", content="print(1)\n", meta=MessageMeta(tool_status="ok")
        ),
        Message(
            role="tool",
            tool_call_id="toolu_b",
            content=(TextPart("no match; see "), ImagePart(media_type="image/jpeg", data="/9j/")),
            meta=MessageMeta(tool_status="error"),
        ),
        Message(role="user", content="And now?", meta=MessageMeta(hidden=True, origin="handoff")),
        Message(role="user", content=(ImagePart(url="https://example.invalid/a.png"),)),
    )
    server.plan(text_message("Ok."))
    complete(connect(prompt_caching=False), turn(*messages, tools=(READ_SCHEMA, GREP_SCHEMA)))
    body = server.requests[0].body
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert body["tools"] == [
        {
            "name": "read",
            "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {"name": "grep", "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}}},
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look: "},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "toolu_b", "name": "grep", "input": {"pattern": "x"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_a",
                    "content": [{"type": "text", "text": "print(1)\n"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [
                        {"type": "text", "text": "no match; see "},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"},
                        },
                    ],
                    "is_error": True,
                },
                {"type": "text", "text": "And now?"},
                {"type": "image", "source": {"type": "url", "url": "https://example.invalid/a.png"}},
            ],
        },
    ]
    assert "cache_control" not in str(body)


def test_signed_thinking_is_sent_back_verbatim_before_the_text_and_calls(
    server: ChatServer, connect: Any
) -> None:
    assistant = Message(
        role="assistant",
        content="Let me look.",
        reasoning="First a.py. Then b.",
        reasoning_blocks=(
            ReasoningBlock(text="First a.py. ", signature="sig-one"),
            ReasoningBlock(redacted="opaque=="),
            ReasoningBlock(text="Then b.", signature="sig-two"),
        ),
        tool_calls=(ToolCall("toolu_a", "read", '{"path": "a.py"}'),),
    )
    messages = (
        Message(role="user", content="Check a.py."),
        assistant,
        Message(role="tool", tool_call_id="toolu_a", content="x = 1\n"),
    )
    server.plan(text_message("Ok."))
    complete(connect(prompt_caching=False, thinking_budget=2_048), turn(*messages))
    body = server.requests[0].body
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "First a.py. ", "signature": "sig-one"},
        {"type": "redacted_thinking", "data": "opaque=="},
        {"type": "thinking", "thinking": "Then b.", "signature": "sig-two"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.py"}},
    ]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2_048}
    assert "temperature" not in body


#: what the installed SDK defines: adaptive thinking and `output_config` (2.x; not 0.49)
SDK_ADAPTIVE = hasattr(anthropic.types, "ThinkingConfigAdaptiveParam")
SDK_EFFORT = "output_config" in inspect.signature(anthropic.resources.Messages.create).parameters


@pytest.mark.skipif(not (SDK_ADAPTIVE and SDK_EFFORT), reason="the SDK has no adaptive thinking or effort")
def test_adaptive_thinking_and_effort_are_sent_and_its_signed_thinking_goes_back_as_with_enabled(
    server: ChatServer, connect: Any
) -> None:
    server.plan(
        stream(
            message_start(),
            *thinking_events("Plan: read a.py.", "sig-adaptive"),
            *text_events("Reading.", index=1),
            *tool_events(2, "toolu_a", "read", {"path": "a.py"}),
            message_delta("tool_use", {"output_tokens": 30}),
            message_stop(),
        ),
        text_message("Nothing to fix."),
    )
    provider = connect(prompt_caching=False, thinking="adaptive", effort="high")
    question = Message(role="user", content="Check a.py.")
    got = list(provider.stream(turn(question, temperature=0.7)))
    block = ReasoningBlock(text="Plan: read a.py.", signature="sig-adaptive")
    assert got[:3] == [ReasoningDelta("Plan: re"), ReasoningDelta("ad a.py."), ReasoningBlockReady(block)]
    assert ToolCallReady(ToolCall("toolu_a", "read", '{"path": "a.py"}')) in got
    first = server.requests[0].body
    assert first["thinking"] == {"type": "adaptive"}  # no budget: the model decides
    assert first["output_config"] == {"effort": "high"}
    assert "temperature" not in first
    # the next request sends the signed thinking back before the text and the call, as with enabled
    assistant = Message(
        role="assistant",
        content="Reading.",
        reasoning=block.text,
        reasoning_blocks=(block,),
        tool_calls=(ToolCall("toolu_a", "read", '{"path": "a.py"}'),),
    )
    result = Message(role="tool", tool_call_id="toolu_a", content="x = 1\n")
    complete(provider, turn(question, assistant, result))
    second = server.requests[1].body
    assert second["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Plan: read a.py.", "signature": "sig-adaptive"},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.py"}},
    ]
    assert (second["thinking"], second["output_config"]) == ({"type": "adaptive"}, {"effort": "high"})
    # C5: the summary call goes without either
    arguments, _ = provider.arguments(ProviderRequest(model="m", messages=(), purpose="summary"))
    assert "thinking" not in arguments and "output_config" not in arguments


@pytest.mark.skipif(SDK_ADAPTIVE and SDK_EFFORT, reason="the installed SDK defines both")
def test_settings_the_installed_sdk_lacks_are_refused_when_the_provider_is_made(connect: Any) -> None:
    """Older SDKs (0.49) have no adaptive thinking and no `output_config`: a typed error naming the
    variable when the provider is made, never a request the SDK cannot describe."""
    if not SDK_ADAPTIVE:
        with pytest.raises(ProviderConfigError) as caught:
            connect(thinking="adaptive")
        assert caught.value.setting == "CAIRN_THINKING"
    if not SDK_EFFORT:
        with pytest.raises(ProviderConfigError) as caught:
            connect(effort="low")
        assert caught.value.setting == "CAIRN_EFFORT"


def test_a_tool_turn_without_signed_thinking_is_continued_without_thinking(
    server: ChatServer, connect: Any
) -> None:
    """A turn recorded under another provider has no thinking to send back: that request goes
    without thinking (the API refuses a tool turn that does not start with it); the next has it."""
    unsigned = Message(
        role="assistant",
        content="Let me look.",
        reasoning="reasoning from another provider, unsigned",
        tool_calls=(ToolCall("call_1", "read", '{"path": "a.py"}'),),
    )
    messages = (
        Message(role="user", content="Check a.py."),
        unsigned,
        Message(role="tool", tool_call_id="call_1", content="x = 1\n"),
    )
    server.plan(text_message("Ok."), text_message("Fine."))
    provider = connect(prompt_caching=False, thinking_budget=2_048)
    complete(provider, turn(*messages))
    body = server.requests[0].body
    assert "thinking" not in body
    assert [block["type"] for block in body["messages"][1]["content"]] == ["text", "tool_use"]
    # the turn after it ended (an answer without tool calls) thinks again
    later = (*messages, Message(role="assistant", content="Ok."), Message(role="user", content="And b.py?"))
    complete(provider, turn(*later))
    assert server.requests[1].body["thinking"] == {"type": "enabled", "budget_tokens": 2_048}


def test_cache_breakpoints_go_after_tools_system_and_the_newest_listed_messages_four_at_most(
    server: ChatServer, connect: Any
) -> None:
    messages = (
        Message(role="system", content="Be brief."),  # 0
        Message(role="user", content="one"),  # 1
        Message(role="assistant", content="two"),  # 2
        Message(role="user", content="three"),  # 3
        Message(role="assistant", content="four"),  # 4
        Message(role="user", content="five"),  # 5
    )
    server.plan(text_message("Ok."), text_message("Ok."), text_message("Ok."))
    provider = connect()
    complete(provider, turn(*messages, tools=(READ_SCHEMA,), cache_breakpoints=(1, 3, 5, 4)))
    complete(provider, turn(*messages, cache_breakpoints=(1, 3, 5, 4, 99, -1)))
    complete(provider, turn(*messages[1:]))

    def marked(body: dict[str, Any]) -> list[str]:
        found = [f"tool {t['name']}" for t in body.get("tools", []) if "cache_control" in t]
        found += [f"system {b['text']}" for b in body.get("system", []) if "cache_control" in b]
        for message in body["messages"]:
            found += [f"{message['role']} {b['text']}" for b in message["content"] if "cache_control" in b]
        for block in str(body).split("cache_control")[1:]:
            assert block.startswith("': {'type': 'ephemeral'}")
        return found

    with_tools, without_tools, bare = (r.body for r in server.requests)
    # tools and system first, then the newest two of the listed messages
    assert marked(with_tools) == ["tool read", "system Be brief.", "assistant four", "user five"]
    # no tools: three listed messages fit; indexes out of range are ignored
    assert marked(without_tools) == ["system Be brief.", "user three", "assistant four", "user five"]
    assert marked(bare) == []


def test_a_breakpoint_never_goes_on_a_thinking_block(server: ChatServer, connect: Any) -> None:
    messages = (
        Message(role="user", content="one"),
        Message(
            role="assistant",
            content="",
            reasoning_blocks=(ReasoningBlock(text="hm", signature="s"),),
            tool_calls=(ToolCall("toolu_a", "read", "{}"),),
        ),
    )
    server.plan(text_message("Ok."))
    complete(connect(), turn(*messages, cache_breakpoints=(1,)))
    content = server.requests[0].body["messages"][1]["content"]
    assert "cache_control" not in content[0]
    assert content[1]["cache_control"] == {"type": "ephemeral"}


def test_C5_the_summary_call_has_temperature_0_a_bounded_cap_no_thinking_and_60_s(connect: Any) -> None:
    provider = connect(max_output_tokens=20_000, timeout_s=900, thinking_budget=4_096)
    summary = ProviderRequest(
        model="m", messages=(), purpose="summary", temperature=0.7, max_output_tokens=50_000
    )
    arguments, timeout = provider.arguments(summary)
    assert (arguments["max_tokens"], timeout) == (8000, 60.0)
    assert "thinking" not in arguments
    # temperature 0 where the SDK still takes one; later SDKs have no sampling parameters
    takes_temperature = "temperature" in inspect.signature(anthropic.resources.Messages.create).parameters
    assert arguments.get("temperature") == (0.0 if takes_temperature else None)
    arguments, timeout = provider.arguments(ProviderRequest(model="m", messages=()))
    assert (arguments["max_tokens"], timeout, arguments["thinking"]["budget_tokens"]) == (20_000, 900, 4_096)
    # a request's own cap under the budget cuts the budget; under 1,025 it turns thinking off
    arguments, _ = provider.arguments(ProviderRequest(model="m", messages=(), max_output_tokens=3_000))
    assert (arguments["max_tokens"], arguments["thinking"]["budget_tokens"]) == (3_000, 2_999)
    arguments, _ = provider.arguments(ProviderRequest(model="m", messages=(), max_output_tokens=1_000))
    assert arguments["max_tokens"] == 1_000 and "thinking" not in arguments


def test_a_bad_tool_schema_is_a_bad_request_before_anything_is_sent(server: ChatServer, connect: Any) -> None:
    with pytest.raises(ProviderFailure) as caught:
        connect().stream(turn(tools=('{"parameters": {}}',)))
    assert caught.value.error_class == "bad-request" and "tool schema 0" in caught.value.detail
    assert server.requests == []


# --- errors (R1, C5) --------------------------------------------------------------------------


def test_R1_413_is_a_context_limit(server: ChatServer, connect: Any) -> None:
    server.plan(api_error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes."))
    _, failure = drain(connect(), turn())
    assert (failure.error_class, failure.status_code, failure.retryable) == ("context-limit", 413, False)
    assert not failure.output_delivered


def test_R1_prompt_is_too_long_400_is_a_context_limit(server: ChatServer, connect: Any) -> None:
    server.plan(api_error(400, "invalid_request_error", "prompt is too long: 208153 tokens > 200000 maximum"))
    _, failure = drain(connect(), turn())
    assert (failure.error_class, failure.status_code, failure.retryable) == ("context-limit", 400, False)
    assert "208153 tokens" in failure.detail and "req_test_1" in failure.detail


def test_R1_prompt_is_too_long_as_an_error_event_in_the_stream(server: ChatServer, connect: Any) -> None:
    server.plan(
        stream(
            message_start(), error_event("invalid_request_error", "prompt is too long: 9 tokens > 8 maximum")
        )
    )
    got, failure = drain(connect(), turn())
    assert got == []
    assert (failure.error_class, failure.status_code, failure.retryable) == ("context-limit", 400, False)
    assert not failure.output_delivered


@pytest.mark.parametrize(
    ("status", "kind", "error_class", "retryable", "hint_ms"),
    [
        (429, "rate_limit_error", "rate-limit", True, 7_000),
        (529, "overloaded_error", "server", True, 7_000),
        (500, "api_error", "server", True, 7_000),
        (401, "authentication_error", "auth", False, None),
        (403, "permission_error", "auth", False, None),
        (404, "not_found_error", "bad-request", False, None),
    ],
)
def test_C5_http_errors_are_classed_and_carry_their_retry_after(
    server: ChatServer, connect: Any, status: int, kind: str, error_class: str, retryable: bool, hint_ms: Any
) -> None:
    headers = (("retry-after", "7"),) if hint_ms is not None else ()
    server.plan(api_error(status, kind, "something went wrong", headers=headers))
    _, failure = drain(connect(), turn())
    assert (failure.error_class, failure.status_code, failure.retryable) == (error_class, status, retryable)
    assert failure.retry_after_ms == hint_ms
    assert not failure.output_delivered
    assert f"HTTP {status} ({kind})" in failure.detail
    assert len(server.requests) == 1  # the SDK's own retries are off


def test_C5_retry_after_ms_wins_over_retry_after_on_a_429(server: ChatServer, connect: Any) -> None:
    server.plan(
        api_error(
            429, "rate_limit_error", "slow down", headers=(("retry-after", "9"), ("retry-after-ms", "1250"))
        )
    )
    _, failure = drain(connect(), turn())
    assert (failure.error_class, failure.retry_after_ms) == ("rate-limit", 1_250)


@pytest.mark.parametrize(
    ("kind", "error_class", "status", "retryable"),
    [
        ("overloaded_error", "server", 529, True),
        ("rate_limit_error", "rate-limit", 429, True),
        ("api_error", "server", 500, True),
        ("authentication_error", "auth", 401, False),
        ("some_new_error", "server", None, True),
    ],
)
def test_an_error_event_before_any_output_is_classed_by_its_type(
    server: ChatServer, connect: Any, kind: str, error_class: str, status: int | None, retryable: bool
) -> None:
    server.plan(stream(message_start(), ping(), error_event(kind, "Overloaded")))
    got, failure = drain(connect(), turn())
    assert got == []
    assert (failure.error_class, failure.status_code, failure.retryable) == (error_class, status, retryable)
    assert not failure.output_delivered and "in the stream" in failure.detail


# --- the output boundary (R2) ---------------------------------------------------------------


def test_R2_an_overloaded_error_event_after_text_is_delivered_output(
    server: ChatServer, connect: Any
) -> None:
    server.plan(
        stream(
            message_start(),
            text_start(0),
            text_delta(0, "Partial"),
            error_event("overloaded_error", "Overloaded"),
        )
    )
    got, failure = drain(connect(), turn())
    assert got == [TextDelta("Partial")]
    assert (failure.error_class, failure.status_code, failure.retryable) == ("server", 529, True)
    assert failure.output_delivered


def test_R2_a_stream_cut_before_any_output_is_a_retryable_network_failure(
    server: ChatServer, connect: Any
) -> None:
    server.plan(stream(message_start(), ping(), *text_events("never sent"), message_stop(), drop_after=2))
    got, failure = drain(connect(), turn())
    assert got == []
    assert (failure.error_class, failure.retryable, failure.output_delivered) == ("network", True, False)


def test_R2_a_stream_cut_after_text_fails_closed_with_output_delivered(
    server: ChatServer, connect: Any
) -> None:
    events = (
        message_start(),
        text_start(0),
        text_delta(0, "Partial "),
        text_delta(0, "answer"),
        block_stop(0),
    )
    server.plan(stream(*events, message_delta("end_turn"), message_stop(), drop_after=4))
    got, failure = drain(connect(), turn())
    assert got == [TextDelta("Partial "), TextDelta("answer")]
    assert (failure.error_class, failure.output_delivered) == ("network", True)


def test_R2_a_tool_call_cut_mid_input_is_not_output(server: ChatServer, connect: Any) -> None:
    events = tuple(tool_events(0, "toolu_a", "read", {"path": "a.py"}))
    server.plan(stream(message_start(), *events[:3], *events[3:], message_stop(), drop_after=4))
    got, failure = drain(connect(), turn())
    assert got == [] and not failure.output_delivered and failure.retryable


def test_R2_a_stream_that_ends_without_message_stop_fails_closed(server: ChatServer, connect: Any) -> None:
    server.plan(stream(message_start(), *text_events("All of it."), message_delta("end_turn")))
    got, failure = drain(connect(), turn())
    assert got == [TextDelta("All o"), TextDelta("f it.")]
    assert (failure.error_class, failure.output_delivered) == ("network", True)
    assert "message_stop" in failure.detail


def test_a_malformed_event_is_a_clear_server_failure(server: ChatServer, connect: Any) -> None:
    server.plan(stream(message_start(), "event: content_block_delta\ndata: {not json\n\n"))
    _, failure = drain(connect(), turn())
    assert (failure.error_class, failure.retryable) == ("server", False)
    assert "malformed stream" in failure.detail


def test_a_server_that_does_not_stream_gives_a_clear_failure(server: ChatServer, connect: Any) -> None:
    server.plan(Error(200, {"id": "msg_1", "type": "message", "content": []}))
    _, failure = drain(connect(), turn())
    assert failure.error_class == "server" and "not an event stream" in failure.detail


def test_a_stalled_stream_hits_the_timeout_as_a_retryable_network_failure(
    server: ChatServer, connect: Any
) -> None:
    server.plan(stream(message_start(), *text_events("Hel"), stall_after=3))
    started = time.monotonic()
    got, failure = drain(connect(timeout_s=0.3), turn())
    assert time.monotonic() - started < 20  # bounded by the timeout, not by the server's stall limit
    assert got == [TextDelta("H")]
    assert (failure.error_class, failure.retryable, failure.output_delivered) == ("network", True, True)


# --- the key never leaks --------------------------------------------------------------------


def test_the_api_key_never_leaks_into_errors_reprs_tracebacks_or_logs(
    server: ChatServer, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server.plan(
        api_error(401, "authentication_error", f"invalid x-api-key: {SECRET_KEY}"),
        Error(500, f"upstream said Authorization: Bearer {SECRET_KEY}"),
        stream(message_start(), error_event("api_error", f"key {SECRET_KEY} revoked")),
    )
    caplog.set_level(logging.DEBUG)
    provider = connect()
    failures = [drain(provider, turn())[1] for _ in range(3)]
    assert [f.error_class for f in failures] == ["auth", "server", "server"]
    assert failures[0].status_code == 401 and "invalid x-api-key" in failures[0].detail
    texts = [repr(provider), repr(provider.config), str(provider.config), caplog.text]
    for failure in failures:
        texts += [str(failure), repr(failure), failure.detail, "".join(traceback.format_exception(failure))]
        assert failure.__cause__ is None and failure.__context__ is None
    for text in texts:
        assert SECRET_KEY not in text
    assert "[redacted]" in failures[0].detail
    assert all(key_sent(r.headers) for r in server.requests)


def test_closing_the_stream_early_closes_the_response(server: ChatServer, connect: Any) -> None:
    server.plan(text_message("A long answer."))
    iterator = connect().stream(turn())
    assert next(iter(iterator)) == TextDelta("A long ")
    iterator.close()  # type: ignore[attr-defined]
    assert complete(connect(), turn()).text == "Done."


def test_the_sdk_reads_no_key_of_its_own_from_the_environment(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-environment-1234")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-from-the-environment-1234")
    with AnthropicProvider(AnthropicConfig(model="m", base_url=base_url(server))) as provider:
        assert complete(provider, turn()).text == "Done."
    (sent,) = server.requests
    assert "from-the-environment" not in str(sent.headers)


def test_a_plain_text_reply_streams_as_sse_events() -> None:
    """The server side of these tests: a raw event as it goes over the wire."""
    reply = text_message("Hi")
    assert isinstance(reply, Sse) and not reply.done
    assert reply.events[0].startswith('event: message_start\ndata: {"type": "message_start"')  # type: ignore[union-attr]
