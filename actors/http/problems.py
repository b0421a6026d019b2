"""Errors of the HTTP API as `application/problem+json` (RFC 9457), and request bodies read with a bound.

Every refusal is one `Problem`: the HTTP status, a typed `code` a client can
switch on (the name of cairn's error class where one exists:
`InvalidSessionId`, `UnknownSession`, `TurnRunning` ...; else one of this
module's: `BadJson`, `BodyTooLarge`, `NotFound`, `MethodNotAllowed`), and a
`detail` in words. The `type` is `urn:cairn:problem:<code>`.

| status | codes                                                                    |
|--------|--------------------------------------------------------------------------|
| 400    | `BadJson`, `BadBody`, every `InputError` not named below                 |
| 404    | `UnknownSession`, `NotFound` (no such route)                             |
| 405    | `MethodNotAllowed`                                                       |
| 409    | `TurnRunning`, `NotInterrupted`, `SessionExists`, `WorkspaceMismatch`,   |
|        | `ToolNotWaiting`, `IdempotencyKeyReused`, `NoTurnRunning`                |
| 413    | `BodyTooLarge`                                                           |
| 415    | `NotJson` (a body that does not say `application/json`)                  |
| 503    | `StorageFailed`, `HostClosed`, `HostBusy`, `SessionUnavailable` (a hung  |
|        | holder on a cluster), every other host error                             |
| 504    | `HostTimeout` and `TurnTimeout`                                          |

A request is checked whole (its body, its arguments) before anything is
sent to the host: a refused request writes nothing.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from cairn.actors.errors import (
    HostError,
    HostTimeout,
    NotInterrupted,
    NoTurnRunning,
    SessionExists,
    ToolNotWaiting,
    TurnRunning,
    UnknownSession,
    WorkspaceMismatch,
)
from cairn.events.errors import CairnError, InputError
from cairn.store.errors import StorageFailed

PROBLEM_TYPE = "application/problem+json"
#: the largest request body the API reads, by default (images travel inline as base64)
MAX_BODY_BYTES = 16 * 1024 * 1024

_CONFLICTS = (TurnRunning, NotInterrupted, SessionExists, WorkspaceMismatch, ToolNotWaiting, NoTurnRunning)
#: every other `HostError` too (a cluster's: `SessionUnavailable`, `ClusterUnavailable`)
_UNAVAILABLE = (StorageFailed, HostError)


class Problem(Exception):
    """A refusal the API answers with: `status`, a typed `code`, and `detail` in words."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "type": f"urn:cairn:problem:{self.code}",
            "title": self.code,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        }

    def response(self) -> Response:
        return Response(
            msgspec.json.encode(self.body()),
            status_code=self.status,
            media_type=PROBLEM_TYPE,
            headers=self.headers,
        )


def problem_of(exc: CairnError) -> Problem:
    """The problem cairn's error `exc` is answered with (the table in the module doc)."""
    code = type(exc).__name__
    if isinstance(exc, UnknownSession):
        return Problem(404, code, str(exc))
    if isinstance(exc, _CONFLICTS):
        return Problem(409, code, str(exc))
    if isinstance(exc, InputError):
        return Problem(400, code, str(exc))
    if isinstance(exc, HostTimeout):
        return Problem(504, code, str(exc))
    if isinstance(exc, _UNAVAILABLE):
        return Problem(503, code, str(exc))
    return Problem(500, code, str(exc))


async def read_json(request: Request, *, limit: int = MAX_BODY_BYTES) -> Any:
    """The request's JSON body, read up to `limit` bytes: `BodyTooLarge` (413) past it, `NotJson`
    (415) for another media type, `BadJson` (400) for bytes that do not parse; an empty body is {}."""
    return (await read_json_sized(request, limit=limit))[0]


async def read_json_sized(request: Request, *, limit: int = MAX_BODY_BYTES) -> tuple[Any, int]:
    """`read_json`, with the number of bytes the body had (what a tenant's byte quota counts)."""
    media = request.headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Problem(413, "BodyTooLarge", f"the body is {declared} bytes; at most {limit} are read")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Problem(413, "BodyTooLarge", f"the body is over {limit} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    if not data.strip():
        return {}, size
    if media not in ("application/json", "") and not media.endswith("+json"):
        raise Problem(415, "NotJson", f"the body must be application/json, not {media}")
    try:
        return msgspec.json.decode(data), size
    except msgspec.DecodeError as exc:
        raise Problem(400, "BadJson", f"the body is not JSON: {exc}") from None
    except RecursionError:  # msgspec's own depth limit: refused, not a 500
        raise Problem(400, "BadJson", "the body is JSON nested too deeply") from None


def convert(value: Any, kind: type[Any], what: str) -> Any:
    """`value` (decoded JSON) as `kind` (a msgspec Struct), or `BadBody` (400) naming the field."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise Problem(400, "BadBody", f"{what}: {exc}") from None
