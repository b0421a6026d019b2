"""What went wrong with a chat-completions call, as a `ProviderFailure` (R1, C5).

| what failed                                          | class           | retryable |
|------------------------------------------------------|-----------------|-----------|
| HTTP 413, or any error whose text has an R1 phrase   | `context-limit` | no (1)    |
| HTTP 429                                             | `rate-limit`    | yes       |
| HTTP 401, 403                                        | `auth`          | no        |
| HTTP 408, a timeout, a refused/reset/dropped connection, a stream cut short | `network` | yes |
| HTTP 409 (a conflict the server resolves), HTTP 5xx  | `server`        | yes       |
| an error event inside the stream (no HTTP status)    | `server`        | yes       |
| a malformed stream (not JSON, wrong shapes)          | `server`        | no        |
| any other HTTP status                                | `bad-request`   | no        |
| any other error of the SDK                           | `bad-request`   | no        |
| anything else                                        | (not a failure: `to_failure` gives None) | |

(1) An HTTP error, or a stream error event naming its status, is retryable
as its status is: a 5xx whose text has an R1 phrase is a retryable
`context-limit`.

Retryable is exactly C5's list (429, 408, 409, 5xx, timeouts, resets); an
error event inside a stream counts as a 5xx unless it carries its own status
code. Every message goes through `scrub` first, so a key the server or the
SDK echoes back never reaches a failure, and failures are raised without the
SDK exception chained to them (its text is not scrubbed). An HTTP error
carries the server's `retry-after-ms` / `Retry-After` hint as
`retry_after_ms` (parsed by `retry.parse_retry_after`; None when absent or
unparsable), whatever its status: the retry decision picks the statuses it
honours.
"""

from __future__ import annotations

import importlib
import json
import re
import ssl
from collections.abc import Callable
from typing import NamedTuple

import openai

from cairn.actors.provider.base import ProviderFailure, is_context_limit, is_retryable_status
from cairn.actors.provider.chat_stream import MalformedChunk, TruncatedStream
from cairn.actors.provider.retry import parse_retry_after
from cairn.events.kinds import ErrorClass

Scrub = Callable[[str], str]

#: longest detail kept from a server's error text
MAX_DETAIL_CHARS = 1000

REDACTED = "[redacted]"
_BEARER_RE = re.compile(r"(?i)\bbearer\s+[^\s\"',;]+")


def scrubber(*secrets: str | None) -> Scrub:
    """A function that removes each secret (and any bearer token) from a text."""
    known = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def scrub(text: str) -> str:
        for secret in known:
            text = text.replace(secret, REDACTED)
        return _BEARER_RE.sub(f"Bearer {REDACTED}", text)

    return scrub


def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(timeouts, other transport errors) of whichever HTTP stack the SDK runs on.

    SDK 1.x lets httpx's own exceptions escape while a stream is read; later
    versions wrap them, and run on httpx2.
    """
    timeouts: list[type[BaseException]] = [TimeoutError]
    transport: list[type[BaseException]] = [ConnectionError, ssl.SSLError, EOFError]
    for name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        transport.append(module.TransportError)
        transport.append(module.StreamError)
    return tuple(timeouts), tuple(transport)


_TIMEOUTS, _TRANSPORT = _transport_errors()


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def status_class(status: int | None, text: str) -> ErrorClass:
    """The class of an HTTP error (R1 first, then the status)."""
    if is_context_limit(status, text):
        return "context-limit"
    if status == 429:
        return "rate-limit"
    if status in (401, 403):
        return "auth"
    if status == 408:
        return "network"
    if status is None or status == 409 or status >= 500:
        return "server"
    return "bad-request"


def _body_message(body: object, fallback: str) -> str:
    if isinstance(body, dict):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str) and inner:
            return inner
    elif isinstance(body, str) and body.strip():
        return body
    return fallback


def _body_text(body: object) -> str:
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    try:
        return json.dumps(body, default=str)
    except (TypeError, ValueError):
        return str(body)


def _stream_status(body: object) -> int | None:
    """An HTTP-like status an in-stream error event names for itself (vLLM sends `code: 400`)."""
    if not isinstance(body, dict):
        return None
    for key in ("code", "status", "status_code"):
        value = body.get(key)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return int(value)
    return None


def _retry_hint(error: openai.APIStatusError, now_ms: int) -> int | None:
    """The server's `retry-after-ms` / `Retry-After` of an HTTP error, in ms (see `retry`)."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        items = headers.multi_items() if hasattr(headers, "multi_items") else headers
        return parse_retry_after(items, now_ms)
    except (TypeError, ValueError, AttributeError):
        return None


class _Found(NamedTuple):
    """What an exception stands for, before the detail is clipped and scrubbed."""

    error_class: ErrorClass
    detail: str
    status: int | None = None
    #: None: as C5 says for `status`
    retryable: bool | None = None
    retry_after_ms: int | None = None


def to_failure(
    error: BaseException,
    *,
    scrub: Scrub,
    endpoint: str,
    timeout_s: float,
    output_delivered: bool,
    now_ms: int = 0,
) -> ProviderFailure | None:
    """The failure an exception of a chat-completions call stands for (the module table); None if
    it is not one.

    `now_ms` is the caller's clock, against which a `Retry-After` date is read.
    """
    found = _classify(error, endpoint, timeout_s, now_ms)
    return None if found is None else _failure_of(found, scrub, output_delivered)


def _failure_of(found: _Found, scrub: Scrub, output_delivered: bool) -> ProviderFailure:
    """The `ProviderFailure` of a classified error: its detail clipped and scrubbed, retryable by
    its status unless the row said otherwise (shared with `anthropic_errors`)."""
    retryable = is_retryable_status(found.status) if found.retryable is None else found.retryable
    return ProviderFailure(
        found.error_class,
        scrub(_clip(found.detail)),
        status_code=found.status,
        retryable=retryable,
        output_delivered=output_delivered,
        retry_after_ms=found.retry_after_ms,
    )


def _classify(error: BaseException, endpoint: str, timeout_s: float, now_ms: int) -> _Found | None:
    """The row of the module table `error` falls in, most specific first."""
    if isinstance(error, openai.APIStatusError):
        return _http_error(error, endpoint, now_ms)
    if isinstance(error, (openai.APITimeoutError, *_TIMEOUTS)):
        return _Found("network", f"no response from {endpoint} within {timeout_s:g} s", retryable=True)
    if isinstance(error, (openai.APIConnectionError, *_TRANSPORT)):
        cause = error.__cause__ if isinstance(error, openai.APIConnectionError) else error
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
        return _Found("network", f"connection to {endpoint} failed: {reason}", retryable=True)
    if isinstance(error, openai.APIError):  # an error event inside the stream
        return _stream_error(error, endpoint)
    if isinstance(error, TruncatedStream):
        return _Found("network", f"stream from {endpoint} cut short: {error}", retryable=True)
    if isinstance(error, (MalformedChunk, json.JSONDecodeError, ValueError)):
        return _Found("server", f"malformed stream from {endpoint}: {_malformed(error)}", retryable=False)
    if isinstance(error, openai.OpenAIError):
        return _Found("bad-request", f"{type(error).__name__}: {error}", retryable=False)
    return None


def _http_error(error: openai.APIStatusError, endpoint: str, now_ms: int) -> _Found:
    """An HTTP error status: R1 first, then the status; the server's retry hint kept."""
    status = error.status_code
    body = error.body
    message = _body_message(body, str(error))
    request_id = getattr(error, "request_id", None)
    suffix = f" (request id {request_id})" if isinstance(request_id, str) and request_id else ""
    return _Found(
        status_class(status, f"{message} {_body_text(body)}"),
        f"HTTP {status} from {endpoint}: {message}{suffix}",
        status,
        retry_after_ms=_retry_hint(error, now_ms),
    )


def _stream_error(error: openai.APIError, endpoint: str) -> _Found:
    """An error event inside the stream: a 5xx unless it names its own status."""
    body = error.body
    message = _body_message(body, error.message)
    code = _stream_status(body)
    error_class = status_class(code, f"{message} {_body_text(body)}")
    retryable = is_retryable_status(code) if code is not None else error_class == "server"
    where = "in the stream" if code is None else f"in the stream (status {code})"
    return _Found(error_class, f"error {where} from {endpoint}: {message}", code, retryable)


def _malformed(error: ValueError) -> str:
    """What was wrong with a stream: our assembler's words, the SDK's JSON error, or its own."""
    if isinstance(error, json.JSONDecodeError):  # the SDK could not decode a `data:` line
        line = error.doc if len(error.doc) <= 80 else error.doc[:79] + "…"
        return f"a data line is not valid JSON ({error.msg}): {line!r}"
    return str(error)  # our assembler's words, or a chunk the SDK could not turn into its types
