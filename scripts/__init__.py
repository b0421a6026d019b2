"""cairn: an event-sourced context engine for LLM agent hosts. These names are its public surface.

    from cairn import Host, SessionSettings, WorkspaceTools
    with Host.open("./cairn-data", tools=WorkspaceTools()) as host:
        turn = host.send("session-1", "fix the failing test", workspace="/repo")
        result = turn.result(timeout=60)

Only the names in `__all__` are public; the subpackages (`cairn.events`,
`cairn.store`, `cairn.actors`) hold the parts, for audit tools (`from
cairn.store import Journal`) and for tests, and may change between releases.

In the repository this package is the `scripts/` folder (pyproject.toml maps
`events/`, `store/` and `actors/` under it). The names are loaded on first
use, so that `cairn.cli` starts without importing the runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: each public name and the module that defines it
_WHERE: dict[str, str] = {
    # the host and its settings
    "Host": "cairn.actors.host",
    "HostStats": "cairn.actors.host",
    "SessionSettings": "cairn.actors.session.settings",
    "CompactionConfig": "cairn.actors.compactor.service",
    "RetryPolicy": "cairn.actors.provider.retry",
    "Turn": "cairn.actors.session.stream",
    "TurnResult": "cairn.actors.session.stream",
    # the provider interface and what a provider yields
    "Provider": "cairn.actors.provider.base",
    "ProviderRequest": "cairn.actors.provider.base",
    "ProviderOutput": "cairn.actors.provider.base",
    "TextDelta": "cairn.actors.provider.base",
    "ReasoningDelta": "cairn.actors.provider.base",
    "ToolCallReady": "cairn.actors.provider.base",
    "UsageReport": "cairn.actors.provider.base",
    "Finished": "cairn.actors.provider.base",
    "ProviderFailure": "cairn.actors.provider.base",
    "ScriptedProvider": "cairn.actors.provider.scripted",
    "OpenAIProvider": "cairn.actors.provider.openai_compat",
    # messages and their parts
    "Message": "cairn.events.model",
    "TextPart": "cairn.events.model",
    "ImagePart": "cairn.events.model",
    "ToolCall": "cairn.events.model",
    # tools
    "ToolExecutor": "cairn.actors.tools",
    "ToolInvocation": "cairn.actors.tools",
    "ToolOutcome": "cairn.actors.tools",
    "ToolError": "cairn.actors.tools",
    "WorkspaceTools": "cairn.actors.tools",
    # records of the log
    "Record": "cairn.events.codec",
    "Event": "cairn.events.kinds",
    # typed errors
    "CairnError": "cairn.events.errors",
    "InputError": "cairn.events.errors",
    "InvalidEvent": "cairn.events.errors",
    "InvalidSessionId": "cairn.events.errors",
    "StorageError": "cairn.store.errors",
    "StorageFailed": "cairn.store.errors",
    "StoreLocked": "cairn.store.errors",
    "CorruptionError": "cairn.store.errors",
    "AcknowledgedDataMissing": "cairn.store.errors",
    "HostError": "cairn.actors.errors",
    "HostClosed": "cairn.actors.errors",
    "HostBusy": "cairn.actors.errors",
    "TurnTimeout": "cairn.actors.errors",
    "UnknownSession": "cairn.actors.errors",
    "SessionExists": "cairn.actors.errors",
    "WorkspaceMismatch": "cairn.actors.errors",
    "CompactionBlocked": "cairn.actors.compactor.errors",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """Load a public name on first use (PEP 562)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cairn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the same names, for type checkers and editors
    from cairn.actors.compactor.errors import CompactionBlocked
    from cairn.actors.compactor.service import CompactionConfig
    from cairn.actors.errors import (
        HostBusy,
        HostClosed,
        HostError,
        SessionExists,
        TurnTimeout,
        UnknownSession,
        WorkspaceMismatch,
    )
    from cairn.actors.host import Host, HostStats
    from cairn.actors.provider.base import (
        Finished,
        Provider,
        ProviderFailure,
        ProviderOutput,
        ProviderRequest,
        ReasoningDelta,
        TextDelta,
        ToolCallReady,
        UsageReport,
    )
    from cairn.actors.provider.openai_compat import OpenAIProvider
    from cairn.actors.provider.retry import RetryPolicy
    from cairn.actors.provider.scripted import ScriptedProvider
    from cairn.actors.session.settings import SessionSettings
    from cairn.actors.session.stream import Turn, TurnResult
    from cairn.actors.tools import ToolError, ToolExecutor, ToolInvocation, ToolOutcome, WorkspaceTools
    from cairn.events.codec import Record
    from cairn.events.errors import CairnError, InputError, InvalidEvent, InvalidSessionId
    from cairn.events.kinds import Event
    from cairn.events.model import ImagePart, Message, TextPart, ToolCall
    from cairn.store.errors import (
        AcknowledgedDataMissing,
        CorruptionError,
        StorageError,
        StorageFailed,
        StoreLocked,
    )
