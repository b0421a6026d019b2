"""The settings a new session starts with: what its `session-started` event records.

A host gives defaults (`Host.open(settings=...)`) and may override them for
one new session (`host.send(..., settings=...)`). Once a session exists its
settings come from its log, never from here: a restarted host that passes
other defaults does not change a running conversation.
"""

from __future__ import annotations

import msgspec

from cairn.events.kinds import SessionStarted


class SessionSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Model, budget and fixed context of a new session.

    `context_window` None means unknown: only local slimming runs (L3), never
    LLM compaction. `max_output_tokens` is the explicit output cap (B1).
    `tool_schemas` are JSON strings, one per tool, in the order sent (empty:
    the tool executor's own `schemas`, if it has any). `read_only_tools`
    names the tools whose results may be slimmed first (None: S2's defaults).
    """

    model: str = "scripted"
    context_window: int | None = 128_000
    max_output_tokens: int | None = None
    system_prompt: str = ""
    tool_schemas: tuple[str, ...] = ()
    read_only_tools: tuple[str, ...] | None = None


def session_started(settings: SessionSettings, workspace: str) -> SessionStarted:
    """The first event of a new session with these settings in `workspace` (absolute, normalized)."""
    return SessionStarted(
        workspace=workspace,
        model=settings.model,
        context_window=settings.context_window,
        max_output_tokens=settings.max_output_tokens,
        system_prompt=settings.system_prompt,
        tool_schemas=settings.tool_schemas,
        read_only_tools=settings.read_only_tools,
    )
