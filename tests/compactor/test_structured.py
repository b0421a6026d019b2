"""The JSON ledger (beyond C7): a schema a small model can fill, the headings written by the host.

Rendering is a pure function (`render_ledger`); sampling asks for it where the provider's
`structured_summary` says so, through a real OpenAI-compatible server on 127.0.0.1 (`ChatServer`)
and a real Anthropic Messages stream, and an auditor re-derives the checkpoint from `raw_summary`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cairn.actors.compactor import Compactor, verify_checkpoint
from cairn.actors.compactor.prompt import compact_instructions
from cairn.actors.compactor.sampling import summary_output_room
from cairn.actors.compactor.structured import (
    FIELDS,
    LEDGER_NAME,
    LEDGER_SCHEMA,
    LedgerBounds,
    LedgerJsonError,
    bounds_for,
    ledger_schema,
    render_ledger,
)
from cairn.actors.provider.anthropic_config import AnthropicConfig
from cairn.actors.provider.anthropic_messages import AnthropicProvider
from cairn.actors.provider.base import ProviderRequest, StructuredOutput
from cairn.actors.provider.config import OpenAIConfig, ProviderConfigError
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.events.kinds import CompactionFailed
from cairn.events.model import Message
from cairn.events.protocol import HEADINGS
from tests.compactor.builders import COUNTER, coding_session, request, text
from tests.provider.chat_server import (
    ChatServer,
    Received,
    Reply,
    Sse,
    api_error,
    chunk,
    text_reply,
    usage_chunk,
)
from tests.provider.messages_sse import (
    base_url,
    message_delta,
    message_start,
    message_stop,
    messages_server,
    stream,
    tool_events,
)


def ledger_json(**fields: list[str]) -> str:
    body = {name: [] for name in FIELDS}
    body.update(fields)
    return json.dumps(body)


GOOD = ledger_json(
    objective_and_constraints=["Fix the failing test in tests/test_app.py.", "  "],
    decisions_and_rationale=["- Use pytest -x rather than the full suite\nbecause it is faster."],
    exact_next_action=["Run pytest -x tests/test_app.py"],
)


# --- rendering (pure) ----------------------------------------------------------------------------


def test_C7_json_ledger_renders_the_seven_headings_in_order_one_line_per_item() -> None:
    rendered = render_ledger(GOOD)
    headings = [line[3:] for line in rendered.splitlines() if line.startswith("## ")]
    assert headings == list(HEADINGS)
    assert "- Fix the failing test in tests/test_app.py." in rendered.splitlines()
    # the model's own bullet dropped, its line break folded: one line an item; a blank item skipped
    assert "- Use pytest -x rather than the full suite because it is faster." in rendered.splitlines()
    assert sum(1 for line in rendered.splitlines() if line.strip() == "-") == 0
    # a line repeated in its field is kept once (SmolLM2-135M wrote one line 12 times)
    repeated = render_ledger(ledger_json(decisions_and_rationale=["use X", " use X", "use Y", "use X"]))
    assert repeated.split("## Decisions and rationale\n")[1].split("\n\n")[0] == "- use X\n- use Y"
    assert FIELDS[6] == "exact_next_action" and len(FIELDS) == 7


def test_C7_json_ledger_an_item_cannot_pass_for_a_heading() -> None:
    rendered = render_ledger(ledger_json(workspace_mutations=["## Exact next action", "Exact next action"]))
    assert [line for line in rendered.splitlines() if line.startswith("## ")] == [f"## {h}" for h in HEADINGS]


@pytest.mark.parametrize(
    ("raw", "finish", "reason"),
    [
        (
            '{"objective_and_constraints": ["a", "b',
            "length",
            "cut short by the output limit (finish 'length')",
        ),
        ("I could not do that.", "stop", "is not JSON: Expecting value at char 0"),
        ("[1, 2]", "stop", "is a list of number, not an object"),
        (json.dumps({"objective_and_constraints": []}), "stop", "lacks 6 of the seven fields: decisions_and"),
        (
            ledger_json(workspace_mutations="edited f.py"),
            "stop",
            "workspace_mutations is a string, not a list",
        ),
        (ledger_json(exact_next_action=["run", 3]), "stop", "exact_next_action is a list of number/string"),
    ],
    ids=["cut-by-length", "prose", "array", "missing-fields", "string-field", "mixed-list"],
)
def test_C7_json_ledger_a_bad_reply_is_refused_with_its_precise_reason(
    raw: str, finish: str, reason: str
) -> None:
    with pytest.raises(LedgerJsonError) as caught:
        render_ledger(raw, finish_reason=finish)
    assert reason in str(caught.value)


def test_C7_json_ledger_schema_requires_every_field_as_a_bounded_list_of_strings() -> None:
    assert LEDGER_SCHEMA["required"] == list(FIELDS) and LEDGER_SCHEMA["additionalProperties"] is False
    assert all(
        LEDGER_SCHEMA["properties"][n] == {"type": "array", "items": {"type": "string"}} for n in FIELDS
    )
    bounded = ledger_schema(LedgerBounds(2, 33))
    for name in FIELDS:
        field = bounded["properties"][name]
        assert field == {"type": "array", "items": {"type": "string", "maxLength": 33}, "maxItems": 2}


@pytest.mark.parametrize(
    ("room", "items", "chars"),
    [(8000, 11, 94), (2730, 3, 117), (682, 2, 33), (512, 2, 21), (256, 2, 16), (100_000, 12, 400)],
)
def test_C7_json_ledger_bounds_keep_even_a_degenerate_reply_within_its_room(
    room: int, items: int, chars: int
) -> None:
    """SmolLM2 filled every line with "1.1.1..." until its output ran out; under the bounds the worst
    case (one token a char, 8 more a line, 100 for the object) fits the room, above the floors."""
    bounds = bounds_for(room)
    assert bounds == (items, chars)
    if chars > 16:
        assert 7 * items * (chars + 8) + 100 <= room


def test_C7_json_ledger_setting_is_validated_and_read_from_the_environment() -> None:
    env = {"CAIRN_MODEL": "m", "CAIRN_BASE_URL": "http://127.0.0.1:1/v1"}
    assert OpenAIConfig.from_env(env).structured_summary == "auto"
    assert OpenAIConfig.from_env({**env, "CAIRN_STRUCTURED_SUMMARY": "OFF"}).structured_summary == "off"
    with pytest.raises(ProviderConfigError, match="CAIRN_STRUCTURED_SUMMARY: must be one of auto, on, off"):
        OpenAIConfig.from_env({**env, "CAIRN_STRUCTURED_SUMMARY": "yes"})
    with pytest.raises(ProviderConfigError, match="CAIRN_STRUCTURED_SUMMARY"):
        AnthropicConfig.from_env({**env, "CAIRN_STRUCTURED_SUMMARY": "json"})


# --- sampling through a real OpenAI-compatible server ------------------------------------------


def _sse(text: str, finish: str = "stop", output_tokens: int = 50) -> Sse:
    return Sse(
        (
            chunk(role="assistant", content=text[:10]),
            chunk(content=text[10:]),
            chunk(finish=finish),
            usage_chunk(100, output_tokens, 100 + output_tokens),
        )
    )


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


def _compactor(chat: ChatServer, mode: str) -> tuple[Compactor, OpenAIProvider]:
    config = OpenAIConfig(base_url=chat.url, model="small", structured_summary=mode)  # type: ignore[arg-type]
    provider = OpenAIProvider(config)
    return Compactor(provider, model="small", sleep=lambda _s: None, counter=COUNTER), provider


def _summary_bodies(chat: ChatServer) -> list[dict[str, Any]]:
    return [r.body for r in chat.requests if r.body.get("messages", [{}])[0].get("role") == "system"]


def test_C7_json_ledger_under_auto_is_asked_for_taken_and_rederived_by_an_auditor(chat: ChatServer) -> None:
    chat.plan(_sse(GOOD))
    service, provider = _compactor(chat, "auto")
    with provider:
        state = coding_session().state()
        outcome = service.compact(request(state))
    checkpoint = outcome.checkpoint
    assert checkpoint.strategy == "llm" and checkpoint.prompt_version == "cairn-ledger-json-1"
    assert checkpoint.raw_summary == GOOD
    summary = text(checkpoint.replacement_messages[0])
    decision = "- Use pytest -x rather than the full suite because it is faster."
    assert f"## Decisions and rationale\n{decision}" in summary
    verify_checkpoint(state.context, checkpoint, COUNTER)  # re-derived from the JSON alone
    (body,) = _summary_bodies(chat)
    assert body["response_format"]["type"] == "json_schema"
    # not strict (OpenAI's strict mode refuses maxLength); bounded for the room: C5's 8,000 tokens
    schema = ledger_schema(bounds_for(8000))
    assert body["response_format"]["json_schema"] == {"name": "ledger", "strict": False, "schema": schema}
    assert body["max_tokens"] == 8000
    system = body["messages"][0]["content"]
    assert "JSON object" in system and "<summary>" not in system


def test_C7_json_ledger_refused_by_the_endpoint_under_auto_is_asked_in_text_at_once_and_remembered(
    chat: ChatServer,
) -> None:
    headed = (
        "<summary>\n" + "\n".join(f"## {h}\n- public API unchanged: {h}" for h in HEADINGS) + "\n</summary>"
    )
    chat.plan(
        api_error(400, "response_format is not supported by this server", kind="invalid_request_error"),
        text_reply(headed),
        text_reply(headed),
    )
    service, provider = _compactor(chat, "auto")
    with provider:
        state = coding_session().state()
        first = service.compact(request(state))
        assert provider.structured_summary == "off"
        second = service.compact(request(state))
    assert first.checkpoint.strategy == "llm" and first.checkpoint.prompt_version == "cairn-ledger-3"
    assert first.checkpoint.diagnostics.attempts == 2 and not first.events[:-1]  # not a failure
    assert second.checkpoint.diagnostics.attempts == 1
    asked = ["response_format" in body for body in _summary_bodies(chat)]
    assert asked == [True, False, False]


def test_C7_json_ledger_refused_under_on_is_a_failed_summary_not_a_text_retry(chat: ChatServer) -> None:
    chat.plan(api_error(400, "response_format is not supported", kind="invalid_request_error"))
    service, provider = _compactor(chat, "on")
    with provider:
        outcome = service.compact(request(coding_session().state()))
        assert provider.structured_summary == "on"
    assert outcome.checkpoint.strategy == "fallback"
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "error" and "400" in failure.detail
    assert len(_summary_bodies(chat)) == 1


@pytest.mark.parametrize(
    ("reply", "detail"),
    [
        (_sse(GOOD[: len(GOOD) // 2], "length", output_tokens=8000), "cut short by the output limit"),
        (_sse(json.dumps({"objective_and_constraints": ["x"]})), "lacks 6 of the seven fields"),
    ],
    ids=["length-mid-json", "missing-fields"],
)
def test_C7_json_ledger_malformed_reply_fails_with_its_reason_and_the_fallback_recovers(
    chat: ChatServer, reply: Reply, detail: str
) -> None:
    chat.plan(reply)
    service, provider = _compactor(chat, "auto")
    with provider:
        state = coding_session().state()
        outcome = service.compact(request(state))
    assert outcome.checkpoint.strategy == "fallback"
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert detail in failure.detail
    assert len(_summary_bodies(chat)) == 1  # malformed is not retried (C5: same prompt, same shape)
    verify_checkpoint(state.context, outcome.checkpoint, COUNTER)


def test_C7_json_ledger_off_sends_the_text_protocol(chat: ChatServer) -> None:
    chat.plan(text_reply("<summary>\n" + "\n".join(f"## {h}\n- x" for h in HEADINGS) + "\n</summary>"))
    service, provider = _compactor(chat, "off")
    with provider:
        outcome = service.compact(request(coding_session().state()))
    assert outcome.checkpoint.prompt_version == "cairn-ledger-3"
    (body,) = _summary_bodies(chat)
    assert "response_format" not in body and "<summary>" in body["messages"][0]["content"]


# --- Anthropic: a forced tool call -----------------------------------------------------------


def test_C7_json_ledger_on_anthropic_is_a_forced_tool_call_whose_arguments_are_the_ledger() -> None:
    ledger = json.loads(GOOD)
    reply = stream(
        message_start({"input_tokens": 100, "output_tokens": 1}),
        *tool_events(0, "toolu_1", LEDGER_NAME, ledger),
        message_delta("tool_use", {"output_tokens": 60}),
        message_stop(),
    )
    with messages_server(reply) as server:
        provider = AnthropicProvider(
            AnthropicConfig(model="claude-test", base_url=base_url(server), api_key="sk-ant-test")
        )
        with provider:
            summary_request = ProviderRequest(
                model="claude-test",
                messages=(Message(role="user", content="x", id="u"),),
                purpose="summary",
                structured=StructuredOutput(LEDGER_NAME, json.dumps(LEDGER_SCHEMA)),
            )
            arguments, _ = provider.arguments(summary_request)
            assert arguments["tool_choice"] == {"type": "tool", "name": "ledger"}
            assert arguments["tools"][-1]["input_schema"] == LEDGER_SCHEMA
            state = coding_session().state()
            service = Compactor(provider, model="claude-test", sleep=lambda _s: None, counter=COUNTER)
            outcome = service.compact(request(state))
        received: list[Received] = server.requests
    assert outcome.checkpoint.strategy == "llm" and outcome.checkpoint.prompt_version == "cairn-ledger-json-1"
    assert json.loads(outcome.checkpoint.raw_summary or "") == ledger
    assert received[-1].body["tool_choice"] == {"type": "tool", "name": "ledger"}
    verify_checkpoint(state.context, outcome.checkpoint, COUNTER)


def test_C6_a_reply_cut_by_the_context_window_shrinks_the_prompt_and_asks_again(chat: ChatServer) -> None:
    """Beyond C6: llama.cpp's server fills its window with prompt and reply and stops with finish
    `length` and no error; a reply cut under its cap (here 50 of 8,000 tokens) shrinks the prompt."""
    chat.plan(_sse(GOOD[: len(GOOD) // 2], "length", output_tokens=50), _sse(GOOD))
    service, provider = _compactor(chat, "on")
    with provider:
        outcome = service.compact(request(coding_session().state()))
    checkpoint = outcome.checkpoint
    assert checkpoint.strategy == "llm" and not outcome.failure
    assert checkpoint.diagnostics.attempts == 2 and len(checkpoint.diagnostics.reductions) == 1
    first, second = (len(json.dumps(body["messages"])) for body in _summary_bodies(chat))
    assert second < first


@pytest.mark.parametrize(
    ("window", "cap", "room"),
    [(None, None, 8000), (128_000, None, 8000), (2048, None, 682), (2048, 512, 512), (600, None, 256)],
)
def test_C5_the_summary_asks_for_at_most_8000_tokens_the_output_cap_and_a_third_of_the_window(
    window: int | None, cap: int | None, room: int
) -> None:
    assert summary_output_room(window, cap) == room


def test_C6_in_a_small_window_the_first_prompt_is_fitted_before_any_call(chat: ChatServer) -> None:
    """Beyond C6: in a 2,048-token window the prompt gets the compact instructions and drops its
    oldest units until its tokens, 30 % more, leave the reply's 682 tokens; nothing overflows."""
    chat.plan(_sse(GOOD))
    service, provider = _compactor(chat, "on")
    with provider:
        outcome = service.compact(request(coding_session().state(), context_window=2048))
    reductions = outcome.checkpoint.diagnostics.reductions
    assert reductions[0] == "fit:compact-instructions"
    assert reductions[1:] and all(step.startswith("fit:dropped-") for step in reductions[1:])
    assert outcome.checkpoint.diagnostics.attempts == 1
    (body,) = _summary_bodies(chat)
    assert body["max_tokens"] == 682
    assert body["response_format"]["json_schema"]["schema"] == ledger_schema(LedgerBounds(2, 33))
    system = body["messages"][0]["content"]
    assert system == compact_instructions(structured=True) and COUNTER.text(system) < 200
    sent = [Message(role=m["role"], content=m["content"], id=str(n)) for n, m in enumerate(body["messages"])]
    assert COUNTER.messages(sent) * 130 // 100 <= 2048 - 682


def test_C6_the_prompt_is_fitted_to_the_endpoints_window_when_it_is_smaller_than_the_sessions(
    chat: ChatServer,
) -> None:
    """Beyond C6: a session started with 100,000 tokens, summarized on an endpoint configured with
    2,048 (`CAIRN_CONTEXT_WINDOW`, a small local server's slot): the first prompt is fitted to
    2,048, as if the session's window were that, and the reply asks for 682 tokens. Before, the
    prompt went out whole and overflowed three times (the quality bench on SmolLM2: 20 of 20)."""
    chat.plan(_sse(GOOD))
    config = OpenAIConfig(base_url=chat.url, model="small", structured_summary="on", context_window=2048)
    provider = OpenAIProvider(config)
    service = Compactor(provider, model="small", sleep=lambda _s: None, counter=COUNTER)
    with provider:
        assert provider.context_window == 2048
        outcome = service.compact(request(coding_session().state(), context_window=100_000))
    reductions = outcome.checkpoint.diagnostics.reductions
    assert reductions[0] == "fit:compact-instructions" and outcome.checkpoint.diagnostics.attempts == 1
    (body,) = _summary_bodies(chat)
    assert body["max_tokens"] == 682


def test_C6_a_reply_stopped_at_the_endpoints_own_output_cap_is_cut_by_it_not_by_the_window(
    chat: ChatServer,
) -> None:
    """Beyond C5/C6: an endpoint configured with a 512-token output cap (`CAIRN_MAX_OUTPUT_TOKENS`),
    which the adapter applies to every call. The summary asks for 512, not the 8,000 its session
    allows, and a ledger stopped at 512 with finish `length` was cut by that cap: one `malformed`
    call that says so, not three "overflows" each shrinking the prompt (the quality bench on
    SmolLM2 before: 13 of 20 summaries failed `context-exhausted` that way)."""
    chat.plan(_sse(GOOD[: len(GOOD) // 2], "length", output_tokens=512), _sse(GOOD))
    config = OpenAIConfig(base_url=chat.url, model="small", structured_summary="on", max_output_tokens=512)
    provider = OpenAIProvider(config)
    service = Compactor(provider, model="small", sleep=lambda _s: None, counter=COUNTER)
    with provider:
        assert provider.max_output_tokens == 512
        outcome = service.compact(request(coding_session().state()))
    failure = outcome.failure
    assert failure is not None and failure.reason == "malformed" and "output limit" in failure.detail
    assert outcome.checkpoint.strategy == "fallback"
    (body,) = _summary_bodies(chat)
    assert body["max_tokens"] == 512
