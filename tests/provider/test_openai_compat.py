"""The OpenAI-compatible adapter against a real chat-completions server on 127.0.0.1.

Nothing is mocked: the official SDK talks HTTP to `tests.provider.chat_server`.
"""

from __future__ import annotations

import logging
import time
import traceback

import pytest

from cairn.actors.compactor import CompactionConfig, Compactor
from cairn.actors.provider.base import (
    Finished,
    ProviderFailure,
    ProviderOutput,
    ProviderRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
    complete,
)
from cairn.actors.provider.config import OpenAIConfig
from cairn.actors.provider.openai_compat import OpenAIProvider, provider_from_env
from cairn.actors.session.tracker import provider_floor
from cairn.events.kinds import Usage
from cairn.events.model import ImagePart, Message, MessageMeta, TextPart, ToolCall
from tests.compactor.builders import COUNTER, coding_session, ledger, request
from tests.provider.chat_server import (
    ChatServer,
    Error,
    Sse,
    api_error,
    call_more,
    call_start,
    chunk,
    text_reply,
    usage_chunk,
)
from tests.provider.conftest import SECRET_KEY, Connect

GOOD_SUMMARY = ledger("- Fix the failing test in tests/test_app.py.", analysis="The session fixed a test.")
READ_SCHEMA = '{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}'


def turn(*messages: Message, **fields: object) -> ProviderRequest:
    if not messages:
        messages = (Message(role="user", content="hello"),)
    return ProviderRequest(model="test-model", messages=messages, **fields)  # type: ignore[arg-type]


def drain(provider: OpenAIProvider, req: ProviderRequest) -> tuple[list[ProviderOutput], ProviderFailure]:
    """The output a request yields before it fails, and the failure."""
    got: list[ProviderOutput] = []
    with pytest.raises(ProviderFailure) as caught:
        for item in provider.stream(req):
            got.append(item)
    return got, caught.value


# --- a normal turn -------------------------------------------------------------


def test_streamed_turn_yields_reasoning_text_split_tool_calls_usage_and_finish(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(
        Sse(
            (
                chunk(role="assistant", reasoning="Need the file. "),
                chunk(reasoning="And a grep."),
                chunk(content="Reading "),
                chunk(content="both."),
                chunk(tool_calls=[call_start(0, "call_a", "read_file", '{"pa')]),
                chunk(tool_calls=[call_more(0, 'th": "a.py"}')]),
                chunk(tool_calls=[call_start(1, "call_b", "grep")]),
                chunk(tool_calls=[call_more(1, '{"pattern"')]),
                chunk(tool_calls=[call_more(1, ': "TODO"}')]),
                chunk(finish="tool_calls"),
                usage_chunk(120, 30, 150, prompt_tokens_details={"cached_tokens": 64}),
            )
        )
    )
    provider = connect()
    got = list(provider.stream(turn()))
    assert got == [
        ReasoningDelta("Need the file. "),
        ReasoningDelta("And a grep."),
        TextDelta("Reading "),
        TextDelta("both."),
        ToolCallReady(ToolCall("call_a", "read_file", '{"path": "a.py"}')),
        ToolCallReady(ToolCall("call_b", "grep", '{"pattern": "TODO"}')),
        UsageReport(prompt_tokens=120, completion_tokens=30, total_tokens=150, cached_prompt_tokens=64),
        Finished("tool_calls"),
    ]
    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.headers["authorization"] == f"Bearer {SECRET_KEY}"


def test_messages_and_tools_are_sent_in_the_protocol_shape_without_meta(
    server: ChatServer, connect: Connect
) -> None:
    hidden = MessageMeta(seq=7, hidden=True, origin="handoff", record="secret-record")
    messages = (
        Message(role="system", content="Be brief.", id="s1"),
        Message(
            role="user", content=(TextPart("Look: "), ImagePart(media_type="image/png", data="QUJD")), id="u1"
        ),
        Message(
            role="assistant",
            content="",
            reasoning="private thoughts",
            tool_calls=(ToolCall("call_a", "read_file", '{"path": "a.py"}'),),
            id="a1",
        ),
        Message(role="tool", content="file text", tool_call_id="call_a", id="t1"),
        Message(role="user", content="Context is filling up.", id="h1", meta=hidden),
    )
    provider = connect()
    complete(provider, turn(*messages, tools=(READ_SCHEMA,), temperature=0.5, max_output_tokens=500))
    body = server.requests[0].body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look: "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "file text"},
        {"role": "user", "content": "Context is filling up."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ]
    assert (body["temperature"], body["max_tokens"], body["model"]) == (0.5, 500, "test-model")
    assert "private thoughts" not in str(body) and "secret-record" not in str(body)


def test_reasoning_under_the_reasoning_key_and_the_configured_output_cap(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(Sse((chunk(reasoning="hmm", reasoning_key="reasoning"), chunk(content="ok", finish="stop"))))
    provider = connect(max_output_tokens=1234, output_cap_field="max_completion_tokens")
    result = complete(provider, turn())
    assert (result.reasoning, result.text, result.finish_reason) == ("hmm", "ok", "stop")
    body = server.requests[0].body
    assert body["max_completion_tokens"] == 1234 and "max_tokens" not in body
    assert "temperature" not in body


# --- usage (P1) -----------------------------------------------------------------


def test_P1_a_server_without_usage_gives_a_usage_report_with_no_fields(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(text_reply("No usage here.", usage=None))
    result = complete(connect(), turn())
    assert result.text == "No usage here."
    assert result.usage == UsageReport()
    assert provider_floor(Usage(request_id="r1", **_fields(result.usage))) is None


def test_P1_partial_or_garbled_usage_passes_only_usable_fields(server: ChatServer, connect: Connect) -> None:
    server.plan(
        Sse((chunk(content="x", finish="stop"), usage_chunk(None, -3, 900))),
        Sse((chunk(content="x", finish="stop"), usage_chunk("12", 4, None))),  # type: ignore[arg-type]
    )
    provider = connect()
    first = complete(provider, turn()).usage
    second = complete(provider, turn()).usage
    assert first == UsageReport(total_tokens=900)
    assert second == UsageReport(completion_tokens=4)
    assert provider_floor(Usage(request_id="r1", **_fields(first))) == 900
    assert provider_floor(Usage(request_id="r2", **_fields(second))) == 4


def _fields(usage: UsageReport | None) -> dict[str, int | None]:
    assert usage is not None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


# --- errors before the first chunk (R1, C5) -----------------------------------------


def test_R1_context_length_exceeded_before_the_first_chunk_is_a_context_limit(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(
        api_error(
            400,
            "This model's maximum context length is 8192 tokens. "
            "However, your messages resulted in 9000 tokens.",
            code="context_length_exceeded",
        )
    )
    got, failure = drain(connect(), turn())
    assert got == []
    assert failure.error_class == "context-limit"
    assert (failure.status_code, failure.retryable, failure.output_delivered) == (400, False, False)
    assert "maximum context length is 8192" in failure.detail


@pytest.mark.parametrize(
    "reply",
    [
        Error(413, "Request Entity Too Large"),
        api_error(400, "prompt is too long: 210000 tokens > 200000 maximum"),
        api_error(400, "Bad input", code="context_length_exceeded"),
    ],
    ids=["http-413", "phrase-in-message", "code-only"],
)
def test_R1_413_and_the_R1_phrases_are_context_limits(
    server: ChatServer, connect: Connect, reply: Error
) -> None:
    server.plan(reply)
    _, failure = drain(connect(), turn())
    assert failure.error_class == "context-limit"
    assert failure.status_code == reply.status
    assert not failure.output_delivered


def test_R1_an_error_event_inside_the_stream_naming_the_context_limit(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(Sse(({"error": {"message": "maximum context length exceeded", "code": 400}},)))
    got, failure = drain(connect(), turn())
    assert got == []
    assert (failure.error_class, failure.status_code, failure.output_delivered) == (
        "context-limit",
        400,
        False,
    )


@pytest.mark.parametrize(
    ("status", "error_class", "retryable"),
    [
        (400, "bad-request", False),
        (404, "bad-request", False),
        (422, "bad-request", False),
        (401, "auth", False),
        (403, "auth", False),
        (408, "network", True),
        (409, "server", True),
        (429, "rate-limit", True),
        (500, "server", True),
        (502, "server", True),
        (503, "server", True),
    ],
)
def test_C5_http_statuses_map_to_classes_and_retryability(
    server: ChatServer, connect: Connect, status: int, error_class: str, retryable: bool
) -> None:
    server.plan(api_error(status, "something went wrong"))
    _, failure = drain(connect(), turn())
    assert (failure.error_class, failure.status_code, failure.retryable) == (error_class, status, retryable)
    assert not failure.output_delivered
    assert len(server.requests) == 1  # the SDK's own retries are off


# --- output boundary (R2) ------------------------------------------------------


def test_R2_connection_dropped_after_content_fails_with_output_delivered(
    server: ChatServer, connect: Connect
) -> None:
    events = (chunk(content="Partial "), chunk(content="answer"), chunk(content=" never sent", finish="stop"))
    server.plan(Sse(events, drop_after=2))
    got, failure = drain(connect(), turn())
    assert got == [TextDelta("Partial "), TextDelta("answer")]
    assert (failure.error_class, failure.retryable, failure.output_delivered) == ("network", True, True)
    assert "connection" in failure.detail


def test_R2_connection_dropped_before_any_output_has_nothing_delivered(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(Sse((chunk(content="never sent"),), drop_after=0))
    got, failure = drain(connect(), turn())
    assert got == []
    assert (failure.error_class, failure.output_delivered) == ("network", False)


def test_R2_tool_call_fragments_are_not_output_until_the_call_is_complete(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(
        Sse(
            (chunk(tool_calls=[call_start(0, "call_a", "read_file", '{"pa')]), chunk(content="x")),
            drop_after=1,
        )
    )
    got, failure = drain(connect(), turn())
    assert got == []
    assert not failure.output_delivered


def test_R2_a_stream_that_ends_without_a_finish_reason_fails_closed(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(Sse((chunk(content="cut here"),)))  # [DONE] but no finish reason
    got, failure = drain(connect(), turn())
    assert got == [TextDelta("cut here")]
    assert (failure.error_class, failure.retryable, failure.output_delivered) == ("network", True, True)
    assert "finish reason" in failure.detail


def test_R2_an_error_event_after_content_is_delivered_output(server: ChatServer, connect: Connect) -> None:
    server.plan(Sse((chunk(content="Half"), {"error": {"message": "The server had an error"}})))
    got, failure = drain(connect(), turn())
    assert got == [TextDelta("Half")]
    assert (failure.error_class, failure.retryable, failure.output_delivered) == ("server", True, True)


# --- malformed streams -------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "words"),
    [
        (("data: {not json at all\n\n",), "not valid JSON"),
        (("data: 42\n\n",), "not a JSON object"),
        (('data: {"choices": "zero"}\n\n',), "`choices` is not a list"),
        (
            (chunk(tool_calls=[{"index": 0, "function": {"arguments": "{}"}}], finish="tool_calls"),),
            "no function name",
        ),
    ],
    ids=["not-json", "not-an-object", "choices-not-a-list", "nameless-call"],
)
def test_malformed_stream_lines_give_a_clear_server_failure(
    server: ChatServer, connect: Connect, events: tuple[object, ...], words: str
) -> None:
    server.plan(Sse(events))  # type: ignore[arg-type]
    got, failure = drain(connect(), turn())
    assert got == []
    assert (failure.error_class, failure.retryable, failure.output_delivered) == ("server", False, False)
    assert "malformed stream" in failure.detail and words in failure.detail


def test_a_malformed_line_after_content_keeps_the_output_boundary(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(Sse((chunk(content="fine"), "data: {broken\n\n")))
    got, failure = drain(connect(), turn())
    assert got == [TextDelta("fine")]
    assert failure.output_delivered and "malformed stream" in failure.detail


def test_a_server_that_does_not_stream_gives_a_clear_failure(server: ChatServer, connect: Connect) -> None:
    server.plan(Error(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}))
    got, failure = drain(connect(), turn())
    assert got == [] and failure.error_class == "server"
    assert "not an event stream" in failure.detail


# --- timeouts -------------------------------------------------------------------


def test_a_stalled_stream_hits_the_configured_timeout_as_a_retryable_network_failure(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(Sse((chunk(content="slow "), chunk(content="never")), stall_after=1))
    provider = connect(timeout_s=0.3)
    started = time.monotonic()
    got, failure = drain(provider, turn())
    elapsed = time.monotonic() - started
    assert got == [TextDelta("slow ")]
    assert (failure.error_class, failure.retryable, failure.output_delivered) == ("network", True, True)
    assert "within 0.3 s" in failure.detail
    assert 0.25 <= elapsed < 5


def test_the_request_timeout_overrides_the_configured_one_before_any_output(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(Sse((chunk(content="never"),), stall_after=0))
    provider = connect(timeout_s=600)
    started = time.monotonic()
    got, failure = drain(provider, turn(timeout_s=0.3))
    assert time.monotonic() - started < 5
    assert got == [] and failure.error_class == "network" and not failure.output_delivered


# --- the summary call (C5, C6) through the compactor -------------------------------------


def _compactor(provider: OpenAIProvider, sleeps: list[float]) -> Compactor:
    return Compactor(provider, model="test-model", sleep=sleeps.append, counter=COUNTER)


def test_C5_429_then_success_for_the_summary_call_waits_375_ms_once(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(api_error(429, "Rate limit reached for requests", kind="requests"), text_reply(GOOD_SUMMARY))
    sleeps: list[float] = []
    outcome = _compactor(connect(), sleeps).compact(request(coding_session(12).state()))
    assert outcome.strategy == "llm"
    assert len(server.requests) == 2
    assert sleeps == [0.375]
    assert outcome.checkpoint.diagnostics.retry_delays_ms == (375,)
    assert outcome.usage == UsageReport(prompt_tokens=10, completion_tokens=5, total_tokens=15)
    for sent in server.requests:
        assert sent.body["temperature"] == 0
        assert sent.body["max_tokens"] == 8_000  # C5, stated literally
        assert "tools" not in sent.body


def test_C5_5xx_three_times_fails_the_summary_after_three_calls(server: ChatServer, connect: Connect) -> None:
    server.plan(*(api_error(503, "The server is overloaded", kind="server_error") for _ in range(5)))
    sleeps: list[float] = []
    outcome = _compactor(connect(), sleeps).compact(request(coding_session(12).state()))
    assert len(server.requests) == 3
    assert sleeps == [0.375, 0.75]
    assert outcome.strategy == "fallback"
    failure = outcome.failure
    assert failure is not None and failure.reason == "error" and failure.attempt == 3


def test_C5_a_summary_call_that_stalls_is_retried_as_a_timeout(server: ChatServer, connect: Connect) -> None:
    server.plan(Sse((chunk(content="<analysis>"),), stall_after=1), text_reply(GOOD_SUMMARY))
    sleeps: list[float] = []
    config = CompactionConfig(summary_timeout_s=0.3)
    service = Compactor(connect(), model="test-model", sleep=sleeps.append, counter=COUNTER, config=config)
    outcome = service.compact(request(coding_session(12).state()))
    assert outcome.strategy == "llm" and len(server.requests) == 2 and sleeps == [0.375]


def test_C6_a_context_limit_on_the_summary_call_shrinks_and_retries_at_once(
    server: ChatServer, connect: Connect
) -> None:
    server.plan(
        api_error(400, "maximum context length exceeded", code="context_length_exceeded"),
        text_reply(GOOD_SUMMARY),
    )
    sleeps: list[float] = []
    outcome = _compactor(connect(), sleeps).compact(request(coding_session(12).state()))
    assert outcome.strategy == "llm" and len(server.requests) == 2 and sleeps == []
    assert outcome.checkpoint.diagnostics.reductions
    first, second = (len(str(r.body["messages"])) for r in server.requests)
    assert second < first


def test_C5_the_summary_call_has_temperature_0_a_bounded_output_and_60_s(connect: Connect) -> None:
    provider = connect(max_output_tokens=20_000, timeout_s=900)
    summary = ProviderRequest(
        model="m", messages=(), purpose="summary", temperature=0.7, max_output_tokens=50_000
    )
    arguments, timeout = provider.arguments(summary)
    assert (arguments["temperature"], arguments["max_tokens"], timeout) == (0.0, 8000, 60.0)
    arguments, timeout = provider.arguments(
        ProviderRequest(model="m", messages=(), purpose="summary", timeout_s=5)
    )
    assert (arguments["max_tokens"], timeout) == (8000, 5)
    small = connect(max_output_tokens=1000)
    assert small.arguments(summary)[0]["max_tokens"] == 1000
    arguments, timeout = provider.arguments(ProviderRequest(model="m", messages=()))
    assert (arguments["max_tokens"], timeout, "temperature" in arguments) == (20_000, 900, False)


# --- the key never leaks ------------------------------------------------------------


def test_the_api_key_never_leaks_into_errors_reprs_tracebacks_or_logs(
    server: ChatServer, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    server.plan(
        api_error(401, f"Incorrect API key provided: {SECRET_KEY}.", code="invalid_api_key"),
        Error(500, f"upstream said Authorization: Bearer {SECRET_KEY}"),
        Sse(({"error": {"message": f"key {SECRET_KEY} revoked"}},)),
    )
    caplog.set_level(logging.DEBUG)
    provider = connect()
    failures = [drain(provider, turn())[1] for _ in range(3)]
    assert [f.error_class for f in failures] == ["auth", "server", "server"]
    assert failures[0].status_code == 401 and "Incorrect API key provided" in failures[0].detail
    texts = [repr(provider), repr(provider.config), caplog.text]
    for failure in failures:
        texts += [str(failure), repr(failure), failure.detail, "".join(traceback.format_exception(failure))]
        assert failure.__cause__ is None and failure.__context__ is None
    for text in texts:
        assert SECRET_KEY not in text
    assert "[redacted]" in failures[0].detail
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET_KEY}"


def test_a_bad_tool_schema_is_a_bad_request_before_anything_is_sent(
    server: ChatServer, connect: Connect
) -> None:
    with pytest.raises(ProviderFailure) as caught:
        connect().stream(turn(tools=("[1, 2]",)))
    assert caught.value.error_class == "bad-request" and "tool schema 0" in caught.value.detail
    assert server.requests == []


def test_closing_the_stream_early_closes_the_response(server: ChatServer, connect: Connect) -> None:
    server.plan(Sse((chunk(content="one"), chunk(content="two")), stall_after=1), text_reply("next"))
    provider = connect(timeout_s=5)
    stream = provider.stream(turn())
    assert next(stream) == TextDelta("one")
    stream.close()  # type: ignore[attr-defined]
    assert complete(provider, turn()).text == "next"


def test_provider_from_env_reads_the_cairn_variables(server: ChatServer) -> None:
    env = {
        "CAIRN_BASE_URL": server.url,
        "CAIRN_API_KEY": SECRET_KEY,
        "CAIRN_MODEL": "env-model",
        "CAIRN_CONTEXT_WINDOW": "16000",
        "CAIRN_MAX_OUTPUT_TOKENS": "2000",
    }
    with provider_from_env(env) as provider:
        assert provider.config == OpenAIConfig(
            model="env-model",
            base_url=server.url,
            api_key=SECRET_KEY,
            context_window=16000,
            max_output_tokens=2000,
        )
        result = complete(provider, ProviderRequest(model="", messages=(Message(role="user", content="hi"),)))
    assert result.text == "Done."
    assert server.requests[0].body["model"] == "env-model"
    assert server.requests[0].body["max_tokens"] == 2000
