"""The scripted model's prompt cache: reads the longest prefix an earlier request wrote at a breakpoint."""

from __future__ import annotations

import msgspec

from cairn.actors.provider.base import ProviderRequest, UsageReport, complete
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.events.model import Message

# the scripted estimate: 4 tokens a message plus a token per 4 chars
SYSTEM = Message(role="system", content="s" * 40)  # 14
ASK = Message(role="user", content="u" * 80)  # 24
REPLY = Message(role="assistant", content="a" * 40)  # 14
MORE = Message(role="user", content="v" * 40)  # 14


def _usage(provider: ScriptedProvider, *messages: Message, points: tuple[int, ...]) -> UsageReport:
    request = ProviderRequest(model="m", messages=messages, cache_breakpoints=points)
    usage = complete(provider, request).usage
    assert usage is not None
    return usage


def test_a_request_writes_its_prefix_and_the_next_reads_it() -> None:
    provider = ScriptedProvider(prompt_cache=True)
    first = _usage(provider, SYSTEM, ASK, points=(1,))
    assert (first.prompt_tokens, first.cached_prompt_tokens, first.cache_write_tokens) == (38, 0, 38)
    second = _usage(provider, SYSTEM, ASK, REPLY, MORE, points=(3,))
    assert (second.prompt_tokens, second.cached_prompt_tokens, second.cache_write_tokens) == (66, 38, 28)
    assert second.total_tokens == 66 + second.completion_tokens  # type: ignore[operator]


def test_a_rewritten_history_reads_only_the_system_prompt() -> None:
    provider = ScriptedProvider(prompt_cache=True)
    _usage(provider, SYSTEM, ASK, REPLY, MORE, points=(3,))
    slimmed = _usage(provider, SYSTEM, REPLY, MORE, points=(2,))
    assert (slimmed.prompt_tokens, slimmed.cached_prompt_tokens, slimmed.cache_write_tokens) == (42, 14, 28)


def test_the_prefix_of_an_earlier_breakpoint_survives_a_change_after_it() -> None:
    provider = ScriptedProvider(prompt_cache=True)
    _usage(provider, SYSTEM, ASK, REPLY, MORE, points=(1, 3))
    changed = _usage(provider, SYSTEM, ASK, MORE, points=(1, 2))
    assert (changed.cached_prompt_tokens, changed.cache_write_tokens) == (38, 14)


def test_without_a_cache_the_usage_has_no_cache_figures() -> None:
    usage = _usage(ScriptedProvider(), SYSTEM, ASK, points=(1,))
    assert usage == UsageReport(prompt_tokens=38, completion_tokens=1, total_tokens=39)


def test_another_model_or_other_tools_share_no_prefix() -> None:
    provider = ScriptedProvider(prompt_cache=True)
    _usage(provider, SYSTEM, ASK, points=(1,))
    request = ProviderRequest(
        model="m", messages=(SYSTEM, ASK), tools=('{"name":"read"}',), cache_breakpoints=(1,)
    )
    usage = complete(provider, request).usage
    assert usage is not None and usage.cached_prompt_tokens == 0
    other = complete(provider, msgspec.structs.replace(request, model="n", tools=())).usage
    assert other is not None and other.cached_prompt_tokens == 0
