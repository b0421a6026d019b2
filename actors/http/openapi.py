"""The HTTP API's OpenAPI 3.1 document: built here from the routes and the body types, checked in beside
(`openapi.json`), served at `GET /v1/openapi.json`.

`python -m cairn.actors.http.openapi > actors/http/openapi.json` writes it
again after a change; a test holds the file equal to what this builds and
every route of the app documented (and nothing else).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import msgspec

from cairn.actors.host.transcript import TranscriptPage
from cairn.actors.http.base import ForkBody, MessageBody, ReasonBody, ToolResultBody
from cairn.actors.session.stream import TurnResult

#: (method, path, summary, request body type or None, success status, response schema name or None)
OPERATIONS: tuple[tuple[str, str, str, type[Any] | None, int, str | None], ...] = (
    ("get", "/v1/health", "Whether the server serves", None, 200, None),
    ("get", "/v1/openapi.json", "This document", None, 200, None),
    ("get", "/v1/sessions", "The caller's session ids", None, 200, None),
    ("get", "/v1/sessions/{session}", "A session's model, window, last seq and open turn", None, 200, None),
    ("post", "/v1/sessions/{session}/messages", "Send a message; the first makes it", MessageBody, 202, None),
    ("get", "/v1/sessions/{session}/events", "The session's events as Server-Sent Events", None, 200, None),
    ("get", "/v1/sessions/{session}/transcript", "A page of what the session's user saw", None, 200,
     "TranscriptPage"),
    ("post", "/v1/sessions/{session}/cancel", "Cancel the running turn", ReasonBody, 200, "TurnResult"),
    ("get", "/v1/sessions/{session}/tools", "The client-tool calls the turn waits for", None, 200, None),
    ("post", "/v1/sessions/{session}/tools/{call}", "A client tool's result", ToolResultBody, 200, None),
    ("get", "/v1/sessions/{session}/context", "The next request's figures and messages", None, 200, None),
    ("get", "/v1/sessions/{session}/checkpoints", "The session's checkpoints", None, 200, None),
    ("post", "/v1/sessions/{session}/compact", "Compact now (K4)", None, 200, None),
    ("post", "/v1/sessions/{session}/fork", "A new session with this one's history", ForkBody, 201, None),
    ("get", "/v1/interrupted", "The caller's interrupted turns", None, 200, None),
    ("post", "/v1/sessions/{session}/turns/{turn}/continue", "Continue an interrupted turn", None, 202, None),
    ("post", "/v1/sessions/{session}/turns/{turn}/dismiss", "Dismiss an interrupted turn", ReasonBody, 200,
     None),
)  # fmt: skip

_PROBLEM = {
    "type": "object",
    "description": "RFC 9457: every refusal; `code` is typed (BadJson, UnknownSession, TooManyTurns, ...)",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string"},
    },
}
_QUERY = {
    "wait": "true: answer when the turn ends, with its result (200)",
    "after": "a stream position (seq, or seq.k) or a seq: what comes after it",
    "limit": "the most entries of a page (1 to 1,000)",
    "images": "true: images' base64 data in the views",
}
_QUERIES_OF = {
    "/v1/sessions/{session}/messages": ("wait",),
    "/v1/sessions/{session}/events": ("after", "images"),
    "/v1/sessions/{session}/transcript": ("after", "limit", "images"),
    "/v1/sessions/{session}/turns/{turn}/continue": ("wait",),
}


def document() -> dict[str, Any]:
    """The OpenAPI document of the routes (`OPERATIONS`)."""
    bodies = [kind for _, _, _, kind, _, _ in OPERATIONS if kind is not None]
    _, components = msgspec.json.schema_components(
        [*dict.fromkeys(bodies), TurnResult, TranscriptPage], ref_template="#/components/schemas/{name}"
    )
    components["Problem"] = _PROBLEM
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, body, status, answer in OPERATIONS:
        operation: dict[str, Any] = {"summary": summary, "parameters": _parameters(path)}
        if body is not None:
            ref = {"$ref": f"#/components/schemas/{body.__name__}"}
            operation["requestBody"] = {
                "required": body is not ReasonBody,
                "content": {"application/json": {"schema": ref}},
            }
        media = "text/event-stream" if path.endswith("/events") else "application/json"
        schema = {"$ref": f"#/components/schemas/{answer}"} if answer else {"type": "object"}
        operation["responses"] = {
            str(status): {"description": "done", "content": {media: {"schema": schema}}},
            "4XX": {
                "description": "refused",
                "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
            },
            "5XX": {
                "description": "the host failed",
                "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
            },
        }
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "cairn HTTP API", "version": "1"},
        "components": {
            "schemas": dict(sorted(components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
        "paths": paths,
    }


def _parameters(path: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in ("session", "turn", "call")
        if "{" + name + "}" in path
    ]
    for name in _QUERIES_OF.get(path, ()):
        found.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "description": _QUERY[name],
                "schema": {"type": "string"},
            }
        )
    if path.endswith("/messages"):
        found.append(
            {"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"}}
        )
    if path.endswith("/events"):
        found.append(
            {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}}
        )
    return found


def text() -> str:
    """The document as the checked-in file holds it."""
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


def checked_in() -> bytes:
    """The checked-in `openapi.json` (what the server serves)."""
    return resources.files("cairn.actors.http").joinpath("openapi.json").read_bytes()


if __name__ == "__main__":
    print(text(), end="")
