"""cairn: an event-sourced context engine for LLM agent hosts. These names are its public surface.

    from cairn import Host, SessionSettings, WorkspaceTools
    with Host.open("./cairn-data", tools=WorkspaceTools()) as host:
        turn = host.send("session-1", "fix the failing test", workspace="/repo")
        result = turn.result(timeout=60)

On a NATS JetStream cluster (the `cluster` extra), `cairn serve --nats URL`
runs hosts and `ClusterClient(url).send(...)` returns what `Host.send` does.

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

#: the public surface, written once: each public name and the module that defines it.
#: `__all__` is derived from it; the `TYPE_CHECKING` imports at the end say the same for type
#: checkers, which cannot follow a lazy import (`tests/scripts/test_package.py` holds them equal).
_WHERE: dict[str, str] = {
    # the host and its settings
    "Host": "cairn.actors.host",
    "AsyncHost": "cairn.actors.host",
    "AsyncTurn": "cairn.actors.host",
    "CompactResult": "cairn.actors.host",
    "InterruptedTurn": "cairn.actors.host",
    "HostStats": "cairn.actors.host",
    "HostConfig": "cairn.actors.host",
    "SessionSettings": "cairn.actors.session.settings",
    "CompactionConfig": "cairn.actors.compactor.service",
    "RetryPolicy": "cairn.actors.provider.retry",
    "Turn": "cairn.actors.session.stream",
    "TurnResult": "cairn.actors.session.stream",
    # what a client may see: the live stream's items and the transcript
    "client_view": "cairn.actors.host.client_view",
    "TranscriptPage": "cairn.actors.host.transcript",
    "TranscriptEntry": "cairn.actors.host.transcript",
    "ShownEvent": "cairn.actors.host.client_view",
    "ShownUserMessage": "cairn.actors.host.client_view",
    "ShownAssistantMessage": "cairn.actors.host.client_view",
    "ShownToolCall": "cairn.actors.host.client_view",
    "ShownToolResult": "cairn.actors.host.client_view",
    "ShownTurnStarted": "cairn.actors.host.client_view",
    "ShownTurnCompleted": "cairn.actors.host.client_view",
    "ShownTurnFailed": "cairn.actors.host.client_view",
    "ShownTurnCancelled": "cairn.actors.host.client_view",
    "ShownPart": "cairn.actors.host.client_view",
    "ShownText": "cairn.actors.host.client_view",
    "ShownImage": "cairn.actors.host.client_view",
    "ShownBlob": "cairn.actors.host.client_view",
    # the provider interface and what a provider yields
    "Provider": "cairn.actors.provider.base",
    "ProviderRequest": "cairn.actors.provider.base",
    "ProviderOutput": "cairn.actors.provider.base",
    "TextDelta": "cairn.actors.provider.base",
    "ReasoningDelta": "cairn.actors.provider.base",
    "ToolCallReady": "cairn.actors.provider.base",
    "UsageReport": "cairn.actors.provider.base",
    "Finished": "cairn.actors.provider.base",
    "ReasoningBlockReady": "cairn.actors.provider.base",
    "ReasoningBlock": "cairn.events.model",
    "ProviderFailure": "cairn.actors.provider.base",
    "ScriptedProvider": "cairn.actors.provider.scripted",
    # what the scripted provider answers with, and the responder it may ask
    "Reply": "cairn.actors.provider.scripted",
    "Fail": "cairn.actors.provider.scripted",
    "FailAfter": "cairn.actors.provider.scripted",
    "Auto": "cairn.actors.provider.scripted",
    "Outcome": "cairn.actors.provider.scripted",
    "Responder": "cairn.actors.provider.scripted",
    "http_error": "cairn.actors.provider.scripted",
    "network_error": "cairn.actors.provider.scripted",
    "context_limit": "cairn.actors.provider.scripted",
    "OpenAIProvider": "cairn.actors.provider.openai_compat",
    "AnthropicProvider": "cairn.actors.provider.anthropic_messages",
    # messages and their parts
    "Message": "cairn.events.model",
    "TextPart": "cairn.events.model",
    "ImagePart": "cairn.events.model",
    "ToolCall": "cairn.events.model",
    # tools
    "ToolExecutor": "cairn.actors.tools",
    "ToolInvocation": "cairn.actors.tools",
    "ToolOutcome": "cairn.actors.tools",
    "Deferred": "cairn.actors.tools",
    "ToolError": "cairn.actors.tools",
    "WorkspaceTools": "cairn.actors.tools",
    "McpTools": "cairn.actors.mcp_tools",
    "McpServer": "cairn.actors.mcp_tools",
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
    "ToolNotWaiting": "cairn.actors.errors",
    "NotInterrupted": "cairn.actors.errors",
    "TurnRunning": "cairn.actors.errors",
    "SessionExists": "cairn.actors.errors",
    "WorkspaceMismatch": "cairn.actors.errors",
    "MessageTooLarge": "cairn.actors.errors",
    "NoInputBudget": "cairn.actors.errors",
    "CompactionBlocked": "cairn.actors.compactor.errors",
    "ClusterClient": "cairn.actors.cluster.client",
    "RemoteTurn": "cairn.actors.cluster.client",
    "ClusterHost": "cairn.actors.cluster.cluster_host",
    "ClusterNames": "cairn.actors.cluster.names",
    "ClusterUnavailable": "cairn.actors.cluster.errors",
    "NoHostAnswered": "cairn.actors.cluster.errors",
    "AcceptTimeout": "cairn.actors.cluster.errors",
    "RequestRefused": "cairn.actors.cluster.errors",
    "OutcomeUnknown": "cairn.actors.cluster.errors",
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


if TYPE_CHECKING:  # `_WHERE` again, for type checkers and editors (`X as X`: re-exported)
    from cairn.actors.cluster.client import ClusterClient as ClusterClient
    from cairn.actors.cluster.client import RemoteTurn as RemoteTurn
    from cairn.actors.cluster.cluster_host import ClusterHost as ClusterHost
    from cairn.actors.cluster.errors import AcceptTimeout as AcceptTimeout
    from cairn.actors.cluster.errors import ClusterUnavailable as ClusterUnavailable
    from cairn.actors.cluster.errors import NoHostAnswered as NoHostAnswered
    from cairn.actors.cluster.errors import OutcomeUnknown as OutcomeUnknown
    from cairn.actors.cluster.errors import RequestRefused as RequestRefused
    from cairn.actors.cluster.names import ClusterNames as ClusterNames
    from cairn.actors.compactor.errors import CompactionBlocked as CompactionBlocked
    from cairn.actors.compactor.service import CompactionConfig as CompactionConfig
    from cairn.actors.errors import HostBusy as HostBusy
    from cairn.actors.errors import HostClosed as HostClosed
    from cairn.actors.errors import HostError as HostError
    from cairn.actors.errors import MessageTooLarge as MessageTooLarge
    from cairn.actors.errors import NoInputBudget as NoInputBudget
    from cairn.actors.errors import NotInterrupted as NotInterrupted
    from cairn.actors.errors import SessionExists as SessionExists
    from cairn.actors.errors import ToolNotWaiting as ToolNotWaiting
    from cairn.actors.errors import TurnRunning as TurnRunning
    from cairn.actors.errors import TurnTimeout as TurnTimeout
    from cairn.actors.errors import UnknownSession as UnknownSession
    from cairn.actors.errors import WorkspaceMismatch as WorkspaceMismatch
    from cairn.actors.host import AsyncHost as AsyncHost
    from cairn.actors.host import AsyncTurn as AsyncTurn
    from cairn.actors.host import CompactResult as CompactResult
    from cairn.actors.host import Host as Host
    from cairn.actors.host import HostConfig as HostConfig
    from cairn.actors.host import HostStats as HostStats
    from cairn.actors.host import InterruptedTurn as InterruptedTurn
    from cairn.actors.host.client_view import ShownAssistantMessage as ShownAssistantMessage
    from cairn.actors.host.client_view import ShownBlob as ShownBlob
    from cairn.actors.host.client_view import ShownEvent as ShownEvent
    from cairn.actors.host.client_view import ShownImage as ShownImage
    from cairn.actors.host.client_view import ShownPart as ShownPart
    from cairn.actors.host.client_view import ShownText as ShownText
    from cairn.actors.host.client_view import ShownToolCall as ShownToolCall
    from cairn.actors.host.client_view import ShownToolResult as ShownToolResult
    from cairn.actors.host.client_view import ShownTurnCancelled as ShownTurnCancelled
    from cairn.actors.host.client_view import ShownTurnCompleted as ShownTurnCompleted
    from cairn.actors.host.client_view import ShownTurnFailed as ShownTurnFailed
    from cairn.actors.host.client_view import ShownTurnStarted as ShownTurnStarted
    from cairn.actors.host.client_view import ShownUserMessage as ShownUserMessage
    from cairn.actors.host.client_view import client_view as client_view
    from cairn.actors.host.transcript import TranscriptEntry as TranscriptEntry
    from cairn.actors.host.transcript import TranscriptPage as TranscriptPage
    from cairn.actors.mcp_tools import McpServer as McpServer
    from cairn.actors.mcp_tools import McpTools as McpTools
    from cairn.actors.provider.anthropic_messages import AnthropicProvider as AnthropicProvider
    from cairn.actors.provider.base import Finished as Finished
    from cairn.actors.provider.base import Provider as Provider
    from cairn.actors.provider.base import ProviderFailure as ProviderFailure
    from cairn.actors.provider.base import ProviderOutput as ProviderOutput
    from cairn.actors.provider.base import ProviderRequest as ProviderRequest
    from cairn.actors.provider.base import ReasoningBlockReady as ReasoningBlockReady
    from cairn.actors.provider.base import ReasoningDelta as ReasoningDelta
    from cairn.actors.provider.base import TextDelta as TextDelta
    from cairn.actors.provider.base import ToolCallReady as ToolCallReady
    from cairn.actors.provider.base import UsageReport as UsageReport
    from cairn.actors.provider.openai_compat import OpenAIProvider as OpenAIProvider
    from cairn.actors.provider.retry import RetryPolicy as RetryPolicy
    from cairn.actors.provider.scripted import Auto as Auto
    from cairn.actors.provider.scripted import Fail as Fail
    from cairn.actors.provider.scripted import FailAfter as FailAfter
    from cairn.actors.provider.scripted import Outcome as Outcome
    from cairn.actors.provider.scripted import Reply as Reply
    from cairn.actors.provider.scripted import Responder as Responder
    from cairn.actors.provider.scripted import ScriptedProvider as ScriptedProvider
    from cairn.actors.provider.scripted import context_limit as context_limit
    from cairn.actors.provider.scripted import http_error as http_error
    from cairn.actors.provider.scripted import network_error as network_error
    from cairn.actors.session.settings import SessionSettings as SessionSettings
    from cairn.actors.session.stream import Turn as Turn
    from cairn.actors.session.stream import TurnResult as TurnResult
    from cairn.actors.tools import Deferred as Deferred
    from cairn.actors.tools import ToolError as ToolError
    from cairn.actors.tools import ToolExecutor as ToolExecutor
    from cairn.actors.tools import ToolInvocation as ToolInvocation
    from cairn.actors.tools import ToolOutcome as ToolOutcome
    from cairn.actors.tools import WorkspaceTools as WorkspaceTools
    from cairn.events.codec import Record as Record
    from cairn.events.errors import CairnError as CairnError
    from cairn.events.errors import InputError as InputError
    from cairn.events.errors import InvalidEvent as InvalidEvent
    from cairn.events.errors import InvalidSessionId as InvalidSessionId
    from cairn.events.kinds import Event as Event
    from cairn.events.model import ImagePart as ImagePart
    from cairn.events.model import Message as Message
    from cairn.events.model import ReasoningBlock as ReasoningBlock
    from cairn.events.model import TextPart as TextPart
    from cairn.events.model import ToolCall as ToolCall
    from cairn.store.errors import AcknowledgedDataMissing as AcknowledgedDataMissing
    from cairn.store.errors import CorruptionError as CorruptionError
    from cairn.store.errors import StorageError as StorageError
    from cairn.store.errors import StorageFailed as StorageFailed
    from cairn.store.errors import StoreLocked as StoreLocked
