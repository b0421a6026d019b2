"""What went wrong with a Messages API call, as a `ProviderFailure` (R1, R2, C5).

The same table as `chat_errors`, with Anthropic's own statuses and error types:

| what failed                                              | class           | retryable |
|----------------------------------------------------------|-----------------|-----------|
| HTTP 413, or an error whose text has an R1 phrase        | `context-limit` | no (1)    |
|   (Anthropic: `prompt is too long: N tokens > M maximum`)|                 |           |
| HTTP 429 (`rate_limit_error`)                            | `rate-limit`    | yes       |
| HTTP 529 (`overloaded_error`), 500 (`api_error`), 5xx, 409 | `server`      | yes       |
| HTTP 401, 403 (`authentication_error`, `permission_error`) | `auth`        | no        |
| HTTP 408, a timeout, a refused/reset/dropped connection, a stream cut short | `network` | yes |
| an `error` event inside the stream                       | as its `error.type`'s status (2) |  |
| a malformed stream (not JSON, wrong shapes)              | `server`        | no        |
| any other HTTP status, any other error of the SDK        | `bad-request`   | no        |
| anything else                                            | (not a failure: `to_failure` gives None) | |

(1) As in `chat_errors`: retryable as its status is (a 5xx with an R1
phrase is a retryable `context-limit`).
(2) `invalid_request_error` 400, `authentication_error` 401,
`permission_error` 403, `not_found_error` 404, `request_too_large` 413,
`rate_limit_error` 429, `api_error` 500, `timeout_error` 504,
`overloaded_error` 529; an unknown type is a retryable `server` error
without a status. Whether output was delivered before it is the caller's
(R2: a retryable error after output still fails the turn).

An HTTP error carries the server's `retry-after-ms` / `Retry-After` as
`retry_after_ms`; cairn honours it on 429, 503 and 529 (`retry`). Every
message goes through `scrub` first, and failures are raised without the
SDK's exception chained to them.
"""

from __future__ import annotations

import json

import anthropic

from cairn.actors.provider.base import ProviderFailure, is_retryable_status
from cairn.actors.provider.chat_errors import (
    _TIMEOUTS,
    _TRANSPORT,
    Scrub,
    _body_text,
    _failure_of,
    _Found,
    _malformed,
    _retry_hint,
    status_class,
)
from cairn.actors.provider.chat_stream import MalformedChunk, TruncatedStream

#: the HTTP status each error type of an in-stream `error` event stands for
ERROR_TYPE_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _error_of(body: object) -> tuple[str, str]:
    """(`error.type`, `error.message`) of an Anthropic error body; empty strings where absent."""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            kind, message = inner.get("type"), inner.get("message")
            return (kind if isinstance(kind, str) else "", message if isinstance(message, str) else "")
        message = body.get("message")
        if isinstance(message, str):
            return "", message
    elif isinstance(body, str):
        return "", body.strip()
    return "", ""


def to_failure(
    error: BaseException,
    *,
    scrub: Scrub,
    endpoint: str,
    timeout_s: float,
    output_delivered: bool,
    now_ms: int = 0,
) -> ProviderFailure | None:
    """The failure an exception of a Messages API call stands for (the module table); None if it is
    not one. `now_ms` is the clock a `Retry-After` date is read against."""
    found = _classify(error, endpoint, timeout_s, now_ms)
    return None if found is None else _failure_of(found, scrub, output_delivered)


def _classify(error: BaseException, endpoint: str, timeout_s: float, now_ms: int) -> _Found | None:
    if isinstance(error, anthropic.APIStatusError):
        if error.status_code < 400:  # the SDK raises an in-stream `error` event on the 200 response
            return _stream_error(error, endpoint)
        return _http_error(error, endpoint, now_ms)
    if isinstance(error, (anthropic.APITimeoutError, *_TIMEOUTS)):
        return _Found("network", f"no response from {endpoint} within {timeout_s:g} s", retryable=True)
    if isinstance(error, (anthropic.APIConnectionError, *_TRANSPORT)):
        cause = error.__cause__ if isinstance(error, anthropic.APIConnectionError) else error
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
        return _Found("network", f"connection to {endpoint} failed: {reason}", retryable=True)
    if isinstance(error, TruncatedStream):
        return _Found("network", f"stream from {endpoint} cut short: {error}", retryable=True)
    if isinstance(error, (MalformedChunk, json.JSONDecodeError, ValueError)):
        return _Found("server", f"malformed stream from {endpoint}: {_malformed(error)}", retryable=False)
    if isinstance(error, anthropic.APIError):
        return _stream_error(error, endpoint)
    if isinstance(error, anthropic.AnthropicError):
        return _Found("bad-request", f"{type(error).__name__}: {error}", retryable=False)
    return None


def _http_error(error: anthropic.APIStatusError, endpoint: str, now_ms: int) -> _Found:
    """An HTTP error status: R1 first, then the status; the server's retry hint kept."""
    status = error.status_code
    kind, message = _error_of(error.body)
    message = message or str(error)
    request_id = getattr(error, "request_id", None)
    suffix = f" (request id {request_id})" if isinstance(request_id, str) and request_id else ""
    named = f" ({kind})" if kind else ""
    return _Found(
        status_class(status, f"{message} {_body_text(error.body)}"),
        f"HTTP {status}{named} from {endpoint}: {message}{suffix}",
        status,
        retry_after_ms=_retry_hint(error, now_ms),  # type: ignore[arg-type]
    )


def _stream_error(error: anthropic.APIError, endpoint: str) -> _Found:
    """An `error` event inside the stream: classed as the status its type stands for."""
    kind, message = _error_of(error.body)
    message = message or error.message
    status = ERROR_TYPE_STATUS.get(kind)
    error_class = status_class(status, f"{message} {_body_text(error.body)}")
    retryable = is_retryable_status(status) if status is not None else error_class == "server"
    named = f" ({kind})" if kind else ""
    return _Found(error_class, f"error in the stream{named} from {endpoint}: {message}", status, retryable)
