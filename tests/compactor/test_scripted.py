"""The scripted provider: plans of outcomes, and its deterministic ledger summary (C7 headings)."""

from __future__ import annotations

import pytest

from cairn.actors.compactor.ledger import summary_body
from cairn.actors.compactor.prompt import PromptShape, build_prompt
from cairn.actors.provider.base import ProviderFailure, ProviderRequest, complete, is_context_limit
from cairn.actors.provider.scripted import (
    Reply,
    ScriptedProvider,
    context_limit,
    empty_reply,
    http_error,
)
from tests.compactor.builders import C7_HEADINGS, coding_session


def _summary_request(messages) -> ProviderRequest:
    return ProviderRequest(model="m", messages=messages, purpose="summary", temperature=0.0)


def test_C7_scripted_summary_has_the_seven_headings_from_the_transcript() -> None:
    source = coding_session(5).state().context
    prompt = build_prompt(source, (), PromptShape())
    provider = ScriptedProvider()
    first = complete(provider, _summary_request(prompt))
    again = complete(provider, _summary_request(prompt))
    assert first.text == again.text  # deterministic
    assert first.text.index("<analysis>") < first.text.index("<summary>")
    body = summary_body(first.text)
    headings = [line[3:] for line in body.splitlines() if line.startswith("## ")]
    assert headings == list(C7_HEADINGS)
    assert "Fix the failing test in tests/test_app.py" in body
    assert first.usage is not None and first.usage.total_tokens


def test_C5_scripted_plan_of_failures_then_default() -> None:
    provider = ScriptedProvider([empty_reply(), http_error(429), http_error(400), context_limit()])
    request = _summary_request(())
    assert complete(provider, request).text == ""
    with pytest.raises(ProviderFailure) as rate:
        complete(provider, request)
    assert rate.value.retryable and rate.value.status_code == 429
    with pytest.raises(ProviderFailure) as bad:
        complete(provider, request)
    assert not bad.value.retryable
    with pytest.raises(ProviderFailure) as limit:
        complete(provider, request)
    assert limit.value.error_class == "context-limit" and is_context_limit(None, limit.value.detail)
    assert provider.pending == 0 and provider.calls == 4
    provider.script(Reply(text="planned"))
    assert complete(provider, ProviderRequest(model="m", messages=())).text == "planned"
    assert complete(provider, ProviderRequest(model="m", messages=())).text == "Done."
