"""One summary call and what it came to: a summary, or one of the failures `sampling` acts on.

The classes are the rows of `sampling`'s table; `ask` makes the call and
classifies it. Pure apart from the call itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from cairn.actors.compactor.ledger import missing_headings, summary_body
from cairn.actors.compactor.structured import LedgerJsonError, render_ledger
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
from cairn.events.protocol import HEADINGS


class Summary(msgspec.Struct, frozen=True):
    """A reply with all seven ledger headings: success."""

    text: str


class Blank(msgspec.Struct, frozen=True):
    """A reply with no summary in it: retried after the next delay."""


class Malformed(msgspec.Struct, frozen=True):
    """A reply missing a ledger heading (C7): fails at once."""

    detail: str


class Overflow(msgspec.Struct, frozen=True):
    """A context-limit error: shrink one step (C6) and send again at once."""

    detail: str


class Transient(msgspec.Struct, frozen=True):
    """A retryable error (C5): send again after the planned wait."""

    detail: str
    status: int | None
    hint_ms: int | None


class Fatal(msgspec.Struct, frozen=True):
    """Any other error, or the adapter raising something else: fails at once."""

    detail: str
    status: int | None = None


#: what one summary call came to (the rows of the module table)
Answer = Summary | Blank | Malformed | Overflow | Transient | Fatal


def ask(provider: Provider, request: ProviderRequest, usage: list[int]) -> Answer:
    """One call and its classification; a reply's usage (prompt, completion, total) is added to
    `usage`. A JSON ledger is the reply's text, or the arguments of its call of the ledger tool (a
    forced tool call)."""
    try:
        completion = complete(provider, request)
    except ProviderFailure as error:
        return _failed(error)
    except BaseException as error:  # a host adapter's bug: this call failed, and only this call
        detail = f"the provider adapter raised {describe_exception(error)}"
        return Fatal(clean_message(detail, adapter_secrets(provider)))
    for index, value in enumerate(_usage_total(completion.usage)):
        usage[index] += value
    cut = _cut_by_window(completion.finish_reason, completion.usage, request.max_output_tokens)
    if cut is not None:
        return Overflow(cut)
    if request.structured is not None:
        call = next((c for c in completion.tool_calls if c.name == request.structured.name), None)
        raw = call.arguments if call is not None else completion.text
        if not raw.strip():
            return Blank()
        try:
            render_ledger(raw, finish_reason=completion.finish_reason)
        except LedgerJsonError as error:
            return Malformed(str(error))
        return Summary(raw)
    body = summary_body(completion.text)
    if not body:
        return Blank()
    missing = missing_headings(body)
    if missing:
        return Malformed(_malformed_detail(missing, len(completion.text)))
    return Summary(completion.text)


def _cut_by_window(finish: str | None, usage: UsageReport | None, asked: int | None) -> str | None:
    """Why a reply was cut by the context window (a `length` finish under the cap asked), or None."""
    made = usage.completion_tokens if usage is not None else None
    if finish != "length" or not isinstance(made, int) or asked is None or made >= asked:
        return None
    return f"the reply stopped at {made} output tokens ({asked:,} asked): the context window is full"


def _failed(error: ProviderFailure) -> Overflow | Transient | Fatal:
    """A provider's failure as a row of the table: context limit, retryable, or neither."""
    detail: str = error.error_class
    if error.status_code:
        detail = f"{detail}: status {error.status_code}"
    if _is_overflow(error):
        return Overflow(detail)
    if _is_retryable(error):
        return Transient(detail, error.status_code, error.retry_after_ms)
    return Fatal(detail, error.status_code)


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


def _malformed_detail(missing: Sequence[str], chars: int) -> str:
    if len(missing) == len(HEADINGS):
        return f"the reply ({chars} chars) has none of the seven ledger headings (C7)"
    named = ", ".join(repr(h) for h in missing)
    return f"the reply ({chars} chars) lacks {len(missing)} of the seven ledger headings (C7): {named}"
