"""The request profile (CONTEXT-RULES P2): the fixed part of every request, its fingerprint and cost.

A profile is what a request sends besides history: the system messages and
the tool schemas. Its fingerprint is SHA-256 over three canonical JSON
documents separated by a newline (JSON text never contains a raw newline):
the model name, the system messages, the tool schemas (each re-encoded with
sorted keys). Its fixed tokens are count(system messages) + count(JSON of the
tools) + 8 per tool, and 0 for the tools part without tools.
"""

from __future__ import annotations

import functools
import hashlib

import msgspec

from cairn.actors.tokens import TokenCounter
from cairn.events.model import Message
from cairn.events.state import SessionInfo

#: P2: tokens added per tool schema for the provider's framing of it
TOOL_OVERHEAD = 8
SYSTEM_MESSAGE_ID = "system"

_canonical = msgspec.json.Encoder(order="sorted")


class RequestProfile(msgspec.Struct, frozen=True, kw_only=True):
    """P2: the system messages and tool schemas one request sends, with their cost."""

    model: str
    system: tuple[Message, ...]
    tools: tuple[str, ...]
    fingerprint: str
    system_tokens: int
    tools_tokens: int

    @property
    def fixed_tokens(self) -> int:
        return self.system_tokens + self.tools_tokens


def system_messages(system_prompt: str) -> tuple[Message, ...]:
    """The system messages of a session: its prompt, when it has one."""
    if not system_prompt:
        return ()
    return (Message(role="system", content=system_prompt, id=SYSTEM_MESSAGE_ID),)


def tools_json(tools: tuple[str, ...]) -> str:
    """The JSON array of the tool schemas as sent ("" without tools)."""
    return "[" + ",".join(tools) + "]" if tools else ""


def _canonical_schema(schema: str) -> bytes:
    try:
        return _canonical.encode(msgspec.json.decode(schema))
    except msgspec.DecodeError:  # not JSON: hash it as the string it is
        return _canonical.encode(schema)


def fingerprint(model: str, system: tuple[Message, ...], tools: tuple[str, ...]) -> str:
    """P2: SHA-256 over model, system messages and tool schemas, as hex."""
    digest = hashlib.sha256()
    digest.update(_canonical.encode(model))
    digest.update(b"\n")
    digest.update(_canonical.encode(system))
    digest.update(b"\n[")
    digest.update(b",".join(_canonical_schema(schema) for schema in tools))
    digest.update(b"]")
    return digest.hexdigest()


@functools.lru_cache(maxsize=64)
def _fixed_parts(
    model: str, system_prompt: str, tools: tuple[str, ...]
) -> tuple[tuple[Message, ...], str, str]:
    """System messages, tool JSON and fingerprint of one setting, built once.

    Returning the same objects each time makes their token counts cache hits.
    """
    system = system_messages(system_prompt)
    return system, tools_json(tools), fingerprint(model, system, tools)


def profile_of(
    info: SessionInfo | None, counter: TokenCounter, *, model: str | None = None
) -> RequestProfile:
    """The profile of a session's next request (`model` overrides the session's)."""
    name = model if model is not None else (info.model if info is not None else "")
    prompt = info.system_prompt if info is not None else ""
    tools = info.tool_schemas if info is not None else ()
    system, schemas, digest = _fixed_parts(name, prompt, tools)
    tools_tokens = counter.fixed_text(schemas) + TOOL_OVERHEAD * len(tools) if tools else 0
    return RequestProfile(
        model=name,
        system=system,
        tools=tools,
        fingerprint=digest,
        system_tokens=counter.messages(system),
        tools_tokens=tools_tokens,
    )
