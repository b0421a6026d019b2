"""Summary sampling (C5, C6): at most three model calls, retries with injected sleep, shrink on overflow.

| outcome of a call                      | next                                          |
|----------------------------------------|-----------------------------------------------|
| a reply with all seven ledger headings | success                                       |
| an empty reply (blank summary)         | retry after the next delay (375 ms, 750 ms)   |
| a reply missing a ledger heading (C7)  | fail `malformed` at once                      |
| retryable error (429 408 409 5xx, net) | retry after the next delay (`retry.decide_retry`) |
| ... whose `Retry-After` is over the cap| fail `error` at once, the detail says so      |
| context-limit error                    | shrink one step (C6) and retry at once        |
| shrink not possible / not smaller      | fail `overflow` (context-exhausted)           |
| any other error                        | fail `error` at once                          |
| the adapter raises something else      | fail `error` at once, its message redacted    |
| third call without success             | fail with the last call's reason              |

The delay before a retry is C5's 375 ms then 750 ms, or longer when the
server said so on a 429 or 503 (`Retry-After`, `retry-after-ms`; with
jitter, at most the policy's cap): see `actors.provider.retry`. A reply
that is not empty but lacks any of the seven headings is not retried: the
same prompt at temperature 0 would get the same shape back, and the
fallback is the honest answer (the breaker counts it, C4).

Calls go out at temperature 0 with a bounded output (8,000 tokens) and
`purpose="summary"`, which tells adapters to turn their SDK's own retries off.
The sleep and the jitter's random draw are injected so tests never wait; the
delays asked for, and the server's hint behind each, are recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from cairn.actors.compactor.ledger import missing_headings, summary_body
from cairn.actors.compactor.prompt import PromptFile, PromptShape, build_prompt, next_shape, prompt_chars
from cairn.actors.errors import describe_exception
from cairn.actors.provider.base import (
    Provider,
    ProviderFailure,
    ProviderRequest,
    UsageReport,
    complete,
    is_context_limit,
    is_retryable_status,
)
from cairn.actors.provider.redact import adapter_secrets, clean_message
from cairn.actors.provider.retry import RETRY_DELAYS_MS, RetryPolicy, decide_retry
from cairn.events.kinds import FailureReason
from cairn.events.model import Message
from cairn.events.protocol import HEADINGS

MAX_CALLS = 3
SUMMARY_MAX_OUTPUT_TOKENS = 8000

__all__ = ["MAX_CALLS", "RETRY_DELAYS_MS", "SUMMARY_MAX_OUTPUT_TOKENS", "Sampled", "Sleep", "sample_summary"]

Sleep = Callable[[float], None]
Draw = Callable[[], float]


class Sampled(msgspec.Struct, frozen=True, kw_only=True):
    """The result of sampling: the raw text on success, the failure reason otherwise."""

    raw_text: str | None
    failure: FailureReason | None = None
    detail: str = ""
    calls: int = 0
    reductions: tuple[str, ...] = ()
    delays_ms: tuple[int, ...] = ()
    #: the server's hint behind each delay (None: it gave none, or not on a 429/503)
    hints_ms: tuple[int | None, ...] = ()
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
    retry: RetryPolicy | None = None,
    draw: Draw | None = None,
) -> Sampled:
    """C5/C6: ask the model for the summary of `source`; never more than three calls.

    `retry` is the wait policy (default: C5's schedule, a 60 s cap); `draw`
    gives the jitter's number in [0, 1) (default 0: no jitter).
    """
    policy = retry if retry is not None else RetryPolicy()
    shape = PromptShape()
    messages = build_prompt(source, files, shape)
    reductions: list[str] = []
    delays: list[int] = []
    hints: list[int | None] = []
    sizes: list[int] = []
    usage = [0, 0, 0]
    failure: FailureReason = "empty"
    detail = ""
    calls = 0
    wait_ms: int | None = None  # the wait before the next call; None: send it at once

    def result(raw: str | None, reason: FailureReason | None) -> Sampled:
        return Sampled(
            raw_text=raw,
            failure=reason,
            detail=detail,
            calls=calls,
            reductions=tuple(reductions),
            delays_ms=tuple(delays),
            hints_ms=tuple(hints),
            prompt_chars=tuple(sizes),
            prompt_tokens=usage[0],
            completion_tokens=usage[1],
            total_tokens=usage[2],
            files_sent=shape.include_files and bool(files),
        )

    def plan_wait(status: int | None, hint_ms: int | None) -> str:
        """Decide the wait before the next call; returns why there is none (over the cap)."""
        nonlocal wait_ms
        decision = decide_retry(
            len(delays),
            transient=True,
            retries_left=MAX_CALLS - calls,
            status=status,
            hint_ms=hint_ms,
            draw=draw() if draw is not None else 0.0,
            policy=policy,
        )
        if decision.retry:
            wait_ms = decision.wait_ms
            delays.append(decision.wait_ms)
            hints.append(decision.hint_ms)
        return decision.note

    while calls < MAX_CALLS:
        if wait_ms is not None:
            sleep(wait_ms / 1000)
            wait_ms = None
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
            failure = "error"
            if not _is_retryable(error):
                return result(None, "error")
            note = plan_wait(error.status_code, error.retry_after_ms)
            if note:
                detail = f"{detail}; {note}"
                return result(None, "error")
            continue
        except BaseException as error:  # a host adapter's bug: this call failed, and only this call
            failure = "error"
            detail = clean_message(f"the provider adapter raised {describe_exception(error)}",
                                   adapter_secrets(provider))
            return result(None, "error")
        for index, value in enumerate(_usage_total(completion.usage)):
            usage[index] += value
        body = summary_body(completion.text)
        if not body:
            failure = "empty"
            detail = "the reply had no summary"
            plan_wait(None, None)
            continue
        missing = missing_headings(body)
        if missing:
            detail = _malformed_detail(missing, len(completion.text))
            return result(None, "malformed")
        detail = ""
        return result(completion.text, None)
    return result(None, failure)


def _malformed_detail(missing: Sequence[str], chars: int) -> str:
    if len(missing) == len(HEADINGS):
        return f"the reply ({chars} chars) has none of the seven ledger headings (C7)"
    named = ", ".join(repr(h) for h in missing)
    return f"the reply ({chars} chars) lacks {len(missing)} of the seven ledger headings (C7): {named}"
