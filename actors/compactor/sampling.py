"""Summary sampling (C5, C6): at most three model calls, retries with injected sleep, shrink on overflow.

| outcome of a call                      | next                                          |
|----------------------------------------|-----------------------------------------------|
| a reply with a non-blank summary       | success                                       |
| an empty reply (blank summary)         | retry after the next delay (375 ms, 750 ms)   |
| retryable error (429 408 409 5xx, net) | retry after the next delay                    |
| context-limit error                    | shrink one step (C6) and retry at once        |
| shrink not possible / not smaller      | fail `overflow` (context-exhausted)           |
| any other error                        | fail `error` at once                          |
| third call without success             | fail with the last call's reason              |

Calls go out at temperature 0 with a bounded output (8,000 tokens) and
`purpose="summary"`, which tells adapters to turn their SDK's own retries off.
The sleep is injected so tests never wait; the delays asked for are recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from actors.compactor.ledger import summary_body
from actors.compactor.prompt import PromptFile, PromptShape, build_prompt, next_shape, prompt_chars
from actors.provider.base import (
    Provider,
    ProviderFailure,
    ProviderRequest,
    UsageReport,
    complete,
    is_context_limit,
    is_retryable_status,
)
from events.kinds import FailureReason
from events.model import Message

MAX_CALLS = 3
RETRY_DELAYS_MS = (375, 750)
SUMMARY_MAX_OUTPUT_TOKENS = 8000

Sleep = Callable[[float], None]


class Sampled(msgspec.Struct, frozen=True, kw_only=True):
    """The result of sampling: the raw text on success, the failure reason otherwise."""

    raw_text: str | None
    failure: FailureReason | None = None
    detail: str = ""
    calls: int = 0
    reductions: tuple[str, ...] = ()
    delays_ms: tuple[int, ...] = ()
    prompt_chars: tuple[int, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    files_sent: bool = True


def _usage_total(usage: UsageReport | None) -> tuple[int, int, int]:
    if usage is None:
        return 0, 0, 0
    prompt = usage.prompt_tokens if isinstance(usage.prompt_tokens, int) and usage.prompt_tokens >= 0 else 0
    completion = (
        usage.completion_tokens
        if isinstance(usage.completion_tokens, int) and usage.completion_tokens >= 0
        else 0
    )
    total = usage.total_tokens if isinstance(usage.total_tokens, int) and usage.total_tokens >= 0 else 0
    return prompt, completion, max(total, prompt + completion)


def _is_overflow(failure: ProviderFailure) -> bool:
    return failure.error_class == "context-limit" or is_context_limit(failure.status_code, failure.detail)


def _is_retryable(failure: ProviderFailure) -> bool:
    return failure.retryable or is_retryable_status(failure.status_code)


def sample_summary(
    provider: Provider,
    *,
    model: str,
    source: Sequence[Message],
    files: Sequence[PromptFile],
    sleep: Sleep,
    request_id: str = "",
    timeout_s: float | None = None,
) -> Sampled:
    """C5/C6: ask the model for the summary of `source`; never more than three calls."""
    shape = PromptShape()
    messages = build_prompt(source, files, shape)
    reductions: list[str] = []
    delays: list[int] = []
    sizes: list[int] = []
    usage = [0, 0, 0]
    failure: FailureReason = "empty"
    detail = ""
    calls = 0

    def result(raw: str | None, reason: FailureReason | None) -> Sampled:
        return Sampled(
            raw_text=raw,
            failure=reason,
            detail=detail,
            calls=calls,
            reductions=tuple(reductions),
            delays_ms=tuple(delays),
            prompt_chars=tuple(sizes),
            prompt_tokens=usage[0],
            completion_tokens=usage[1],
            total_tokens=usage[2],
            files_sent=shape.include_files and bool(files),
        )

    def wait() -> None:
        delay = RETRY_DELAYS_MS[min(len(delays), len(RETRY_DELAYS_MS) - 1)]
        delays.append(delay)
        sleep(delay / 1000)

    while calls < MAX_CALLS:
        if calls and failure != "overflow":
            wait()
        calls += 1
        sizes.append(prompt_chars(messages))
        request = ProviderRequest(
            model=model,
            messages=messages,
            purpose="summary",
            temperature=0.0,
            max_output_tokens=SUMMARY_MAX_OUTPUT_TOKENS,
            timeout_s=timeout_s,
            request_id=f"{request_id}:{calls}" if request_id else "",
        )
        try:
            completion = complete(provider, request)
        except ProviderFailure as error:
            detail = error.error_class
            if error.status_code:
                detail = f"{detail}: status {error.status_code}"
            if _is_overflow(error):
                failure = "overflow"
                if calls >= MAX_CALLS:
                    detail = "context-exhausted: still over the limit after the last call"
                    return result(None, "overflow")
                step = next_shape(source, files, shape)
                if step is None:
                    detail = "context-exhausted: nothing left to shrink"
                    return result(None, "overflow")
                smaller = build_prompt(source, files, step[0])
                if prompt_chars(smaller) >= prompt_chars(messages):
                    detail = f"context-exhausted: {step[1]} did not shrink the prompt"
                    return result(None, "overflow")
                shape, messages = step[0], smaller
                reductions.append(step[1])
                continue
            if _is_retryable(error):
                failure = "error"
                continue
            failure = "error"
            return result(None, "error")
        for index, value in enumerate(_usage_total(completion.usage)):
            usage[index] += value
        if summary_body(completion.text):
            detail = ""
            return result(completion.text, None)
        failure = "empty"
        detail = "the reply had no summary"
    return result(None, failure)
