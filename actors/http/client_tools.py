"""Tools a session's client runs (issue 25 point 2): the server's executor, with their calls deferred.

A session may declare, with its first message, tools that its client runs
(`client_tools`: JSON schemas, as the model sees them). They are sent to the
model beside the server's own tools (`WorkspaceTools`, ...). When the model
calls one, `ClientTools` answers `Deferred`: the turn waits in its
waiting-for-tools mode, the client sees the call in the event stream (the
`assistant-message` with its `tool_calls`) and posts its result by call id
(`Host.resolve_tool`); after the timeout the model gets an error result
instead. Calls of the server's tools run here as before, and a call naming
neither is the server executor's to refuse.

Which names are a session's client tools is read from its log (the tool
schemas of its `session-started` that the server does not serve), once per
session, so it holds after a restart too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from cairn.actors.tools import Deferred, ToolExecutor, ToolInvocation, ToolOutcome
from cairn.events.kinds import OwnerChanged, SessionStarted
from cairn.store.backend import JournalBackend


def schema_name(schema: str) -> str | None:
    """The function name of a tool schema (`{"type": "function", "function": {...}}` or the bare
    function), None when it has none."""
    try:
        value = json.loads(schema)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    function = value.get("function") if value.get("type") == "function" else value
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else None


def canonical_schema(schema: dict[str, Any]) -> str:
    """A schema as the session stores it: canonical JSON (sorted keys, no spaces)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class ClientTools:
    """`server`'s calls run here; a session's client tools are deferred to its client (module doc).

    Set `journal` once the host is open (the names are read from the log).
    """

    def __init__(self, server: ToolExecutor, *, timeout_s: float | None = None) -> None:
        self.server = server
        self.schemas: tuple[str, ...] = tuple(getattr(server, "schemas", ()) or ())
        self.read_only = getattr(server, "read_only", None)
        self.server_names = frozenset(name for name in map(schema_name, self.schemas) if name)
        self.timeout_s = timeout_s
        self.journal: JournalBackend | None = None
        self._names: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome | Deferred:
        if invocation.name not in self.server_names and invocation.name in self.client_names(
            invocation.session
        ):
            return Deferred(timeout_s=self.timeout_s)
        return self.server(invocation)

    def client_names(self, session: str) -> frozenset[str]:
        """The names of `session`'s client tools (read from its log the first time)."""
        with self._lock:
            known = self._names.get(session)
        if known is not None:
            return known
        names = self.client_names_of(self._declared(session))
        with self._lock:
            self._names[session] = names
        return names

    def client_names_of(self, schemas: Iterable[str]) -> frozenset[str]:
        """The names among `schemas` that the server does not serve."""
        return frozenset(name for name in map(schema_name, schemas) if name and name not in self.server_names)

    def _declared(self, session: str) -> tuple[str, ...]:
        if self.journal is None:
            return ()
        # the first record, past the fences a cluster's host writes when it takes the session
        first = next(
            (r for r in self.journal.read(session, 1) if not isinstance(r.event, OwnerChanged)), None
        )
        return (
            first.event.tool_schemas if first is not None and isinstance(first.event, SessionStarted) else ()
        )
