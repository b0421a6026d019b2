"""What the HTTP API answers about a session besides its events: the next request, checkpoints, recovery.

Pure builders of JSON-ready dicts from what the host returns, in the
client's view: the next request without the system prompt, the tool
schemas or the hidden hand-off (H6; they are counted, not shown), a
checkpoint without the summary that replaced history, an interrupted turn
with the message to send again.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cairn.actors.host.client_view import client_view
from cairn.actors.host.interrupted import InterruptedTurn
from cairn.actors.session.manual import CompactResult
from cairn.actors.session.request import AssembledRequest, budget_figures
from cairn.actors.tokens import TokenCounter
from cairn.events.codec import Record
from cairn.events.model import text_of
from cairn.store.backend import JournalBackend


def next_request_body(session: str, request: AssembledRequest, counter: TokenCounter) -> dict[str, Any]:
    """The next request's figures and the messages a client may see of it, with their local counts."""
    shown = [
        {
            "index": index,
            "role": message.role,
            "id": message.id or message.tool_call_id or "",
            "origin": message.meta.origin,
            "tokens": counter.message(message),
            "text": text_of(message),
        }
        for index, message in enumerate(request.messages)
        if message.role != "system" and not message.meta.hidden
    ]
    return {
        "session": session,
        "model": request.model,
        "message_count": len(request.messages),
        "messages_hidden": len(request.messages) - len(shown),
        "tool_count": len(request.tools),
        "handoff_included": request.handoff_included,
        "history_revision": request.history_revision,
        "parts": msgspec.to_builtins(request.parts),
        **budget_figures(request),
        "messages": shown,
    }


def checkpoint_records(journal: JournalBackend, session: str) -> list[Record]:
    """The session's `checkpoint-committed` records, oldest first (reads the log: run off the loop)."""
    found: list[Record] = []
    for ref in journal.checkpoints(session):
        found.extend(journal.read(session, ref.seq, ref.seq))
    return found


def checkpoints_body(session: str, records: list[Record]) -> dict[str, Any]:
    """The checkpoints as the client view shows them (the summary's messages counted, not shown)."""
    return {"session": session, "checkpoints": [client_view(record) for record in records]}


def interrupted_body(turns: list[InterruptedTurn]) -> dict[str, Any]:
    return {"interrupted": msgspec.to_builtins(turns)}


def compact_body(result: CompactResult) -> dict[str, Any]:
    """A compaction's answer: whether it compacted, why not, and the checkpoint's view when it did."""
    body: dict[str, Any] = msgspec.to_builtins(result)
    body["record"] = client_view(result.record) if result.record is not None else None
    return body
