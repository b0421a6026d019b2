"""The verdict on a provider error: retry (C5), recover (R1-R3) or fail. Pure, like `turn`.

A provider error (`provider_verdict`): one verdict from the error, the
turn's retries and the state, the first matching row. Output: some of the
request's output reached the session. Transient: C5's list (rate limit,
5xx, timeout, reset), with one of the turn's `turn_retries` left. Hint: the
server's `Retry-After` on a 429 or 503 (`provider.retry` has that table).
Guard: a reactive checkpoint since the last response.

| R1: context-limit | R2: output | C5: transient, retry left | hint over cap | R2: guard | verdict          |
|-------------------|------------|---------------------------|---------------|-----------|------------------|
| no                | no         | yes                       | no            | -         | retry after wait |
| no                | no         | yes                       | yes           | -         | fail (the hint)  |
| no                | -          | no                        | -             | -         | fail             |
| yes               | yes        | -                         | -             | -         | fail closed      |
| yes               | no         | -                         | -             | yes       | fail (the guard) |
| yes               | no         | -                         | -             | no        | recover (R3)     |

Every verdict records the `provider-error` first (with the server's hint, and
the wait when it is retried). Retry: the same request is sent again after
the wait (375 ms, then 750 ms, or the server's `Retry-After` on a 429 or 503
with jitter), as a new `request` with the next attempt; L1 runs again before
it. Recover: R3 (`recovery`), then the same request on the smaller context.
Fail and fail closed: `turn-failed` in phase `provider` with the provider's
error, and a note saying why when the reason is not the error itself.

The guard is `carried.reactive_since_response`: set by every reactive
checkpoint, cleared by the fold at each assistant message, so it survives
replay.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from cairn.actors.provider.actor import ProviderFailed
from cairn.actors.provider.base import is_context_limit
from cairn.actors.provider.retry import RetryPolicy, decide_retry

#: what the model is shown for a tool call whose outcome was lost with the process
from cairn.actors.session.turn import MAX_ERROR_CHARS, failure_events
from cairn.events.kinds import (
    ErrorClass,
    EventBase,
    ProviderError,
)
from cairn.events.state import SessionState

Verdict = Literal["recover", "fail", "fail-closed", "fail-guard"]


def is_overflow(error_class: ErrorClass | str, status_code: int | None, message: str) -> bool:
    """R1: the provider says the request exceeded its context."""
    return error_class == "context-limit" or is_context_limit(status_code, message)


def reactive_verdict(state: SessionState, *, overflow: bool, delivered: bool) -> Verdict:
    """R2: whether a provider error may be recovered from (the last four rows of the table above)."""
    if not overflow:
        return "fail"
    if delivered:
        return "fail-closed"
    if state.carried.reactive_since_response:
        return "fail-guard"
    return "recover"


VERDICT_NOTES = {
    "fail-closed": "output had already reached the session, so the turn fails closed (R2)",
    "fail-guard": "a second context-limit error before a successful response (R2)",
}


class RetryAfter(msgspec.Struct, frozen=True):
    """C5: send the same request again after `wait_ms`."""

    wait_ms: int


class Recover(msgspec.Struct, frozen=True):
    """R3: reactive recovery, then the same request on the smaller context."""


class Fail(msgspec.Struct, frozen=True):
    """The turn fails (phase `provider`); `note` says why when it is not the error itself."""

    note: str = ""


class FailClosed(msgspec.Struct, frozen=True):
    """R2: output had already reached the session, so the turn fails closed."""

    note: str = VERDICT_NOTES["fail-closed"]


ProviderVerdict = RetryAfter | Recover | Fail | FailClosed


class FailureDecision(msgspec.Struct, frozen=True, kw_only=True):
    """What a provider error leads to: the verdict, the events to persist first, the turn's error text."""

    verdict: ProviderVerdict
    #: `provider-error`, then for a failure the turn's closing events (`failure_events`)
    events: tuple[EventBase, ...]
    #: the provider's message with the verdict's note, as `turn-failed` and the result show it
    detail: str


def provider_verdict(
    state: SessionState,
    failure: ProviderFailed,
    *,
    delivered: bool,
    retries_done: int,
    retries_allowed: int,
    draw: float,
    policy: RetryPolicy,
) -> ProviderVerdict:
    """The table above: retry after a wait, recover (R3), fail, or fail closed (R2).

    `delivered`: output of the request reached the session (the actor's own
    record, or the provider's); `retries_done` of `retries_allowed` transient
    retries this turn; `draw` a random number in [0, 1) for the jitter.
    """
    delivered = delivered or failure.delivered
    overflow = is_overflow(failure.error_class, failure.status_code, failure.message)
    retry = decide_retry(
        retries_done,
        transient=not overflow and not delivered and failure.retryable,
        retries_left=retries_allowed - retries_done,
        status=failure.status_code,
        hint_ms=failure.retry_after_ms,
        draw=draw,
        policy=policy,
    )
    if retry.retry:
        return RetryAfter(retry.wait_ms)
    verdict = reactive_verdict(state, overflow=overflow, delivered=delivered)
    if verdict == "recover":
        return Recover()
    if verdict == "fail-closed":
        return FailClosed()
    return Fail(VERDICT_NOTES.get(verdict, "") or retry.note)


def provider_failure(
    state: SessionState,
    failure: ProviderFailed,
    *,
    turn_id: str,
    request_id: str,
    delivered: bool,
    retries_done: int,
    retries_allowed: int,
    draw: float,
    policy: RetryPolicy,
) -> FailureDecision:
    """`provider_verdict`, and the events it records: the `provider-error`, then a failure's end."""
    verdict = provider_verdict(
        state,
        failure,
        delivered=delivered,
        retries_done=retries_done,
        retries_allowed=retries_allowed,
        draw=draw,
        policy=policy,
    )
    error = ProviderError(
        request_id=request_id,
        error_class=failure.error_class,
        output_delivered=delivered or failure.delivered,
        message=failure.message[:MAX_ERROR_CHARS],
        status_code=failure.status_code,
        retry_after_ms=failure.retry_after_ms,
        retry_wait_ms=verdict.wait_ms if isinstance(verdict, RetryAfter) else None,
    )
    match verdict:
        case Fail(note) | FailClosed(note):
            detail = f"{failure.message} ({note})" if note else failure.message
            closing = failure_events(state, turn_id, "provider", failure.error_class, detail)
            return FailureDecision(verdict=verdict, events=(error, *closing), detail=detail)
        case _:
            return FailureDecision(verdict=verdict, events=(error,), detail=failure.message)
