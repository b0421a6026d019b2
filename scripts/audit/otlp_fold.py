"""The fold of the OTLP export: which of a session's lines belong to which turn, request or span."""

from __future__ import annotations

from typing import Any, assert_never

import msgspec

from cairn.audit.otlp_spans import OpenRequest, OpenTurn, PlannedSpan, SpanMaker, clean, content_chars
from cairn.events.codec import Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    Handoff,
    OwnerChanged,
    ProviderError,
    Request,
    SessionStarted,
    ToolDeferred,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnDismissed,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import ImagePart

#: user messages kept while no turn is open (the turn that starts names one of them)
_PENDING_USERS = 16


def _add(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


class TraceFold:
    """One session's records, in seq order, as planned spans: a turn's spans when it closes.

    `add` returns the spans a record completes that belong to the run
    (closing line at `since` or later); memory holds one turn.
    """

    def __init__(self, sid: str, *, provider: str, since: int, content: bool = False) -> None:
        self.sid = sid
        self.spans = SpanMaker(sid, provider=provider, content=content)
        self.since = since
        self.turn: OpenTurn | None = None
        self.pending_users: dict[str, dict[str, Any]] = {}
        self.prev_ms: int | None = None
        #: turns started but not closed by the end of the run (not exported), and lines that
        #: name a turn other than the open one (a request or tool result outside its turn)
        self.abandoned_turns = 0
        self.unplaced = 0

    @property
    def open_turns(self) -> int:
        """Turns not closed by the last record added: 1 or 0."""
        return 1 if self.turn is not None else 0

    def add(self, record: Record) -> list[PlannedSpan]:
        """Fold `record` in; the spans it completes that the run exports."""
        try:
            return self._add(record)
        finally:
            self.prev_ms = record.ts

    def _add(self, record: Record) -> list[PlannedSpan]:
        event = record.event
        turn = self.turn
        match event:
            case SessionStarted():
                self.spans.model = event.model
                self.spans.max_output_tokens = event.max_output_tokens
            case UserMessage():
                if turn is not None:
                    turn.steering += 1
                else:
                    if (
                        len(self.pending_users) >= _PENDING_USERS
                    ):  # messages that start no turn: keep the last
                        del self.pending_users[next(iter(self.pending_users))]
                    self.pending_users[event.message_id] = _user_attributes(event)
            case TurnStarted():
                if turn is not None:
                    self.abandoned_turns += 1
                user = self.pending_users.get(event.message_id, {})
                self.pending_users.clear()
                self.turn = OpenTurn(event.turn_id, record.seq, record.ts, user)
            case Request():
                if turn is None or event.turn_id != turn.turn_id:
                    self.unplaced += 1
                else:
                    turn.requests[event.request_id] = OpenRequest(event, record.seq, record.ts)
            case AssistantMessage() | Usage() | ProviderError():
                request = turn.requests.get(event.request_id) if turn is not None else None
                if turn is None or request is None:
                    self.unplaced += 1
                else:
                    self._answer(turn, request, event, record.ts)
            case ToolResult():
                if turn is None:
                    self.unplaced += 1
                else:
                    turn.children.append(self.spans.tool_span(turn, record, event, after_ms=self.prev_ms))
            case CheckpointCommitted() | CompactionFailed() | Handoff() | ContextSlimmed():
                span = self.spans.instant_span(turn, record)
                if turn is not None:
                    turn.children.append(span)
                elif record.pos >= self.since:
                    return [span]
            case TurnCompleted() | TurnFailed() | TurnCancelled():
                if turn is None or event.turn_id != turn.turn_id:
                    self.unplaced += 1
                    return []
                self.turn = None
                if record.pos < self.since:
                    return []
                return self.spans.turn_spans(turn, record, event)
            case OwnerChanged() | TurnDismissed() | ToolDeferred():
                pass  # a change of owner, a dismissal: not part of any trace
            case _:
                assert_never(event)  # a new kind needs its place in the traces: mypy says so
        return []

    @staticmethod
    def _answer(
        turn: OpenTurn, request: OpenRequest, event: AssistantMessage | Usage | ProviderError, ts: int
    ) -> None:
        request.end_ms = ts if request.end_ms is None else max(request.end_ms, ts)
        if isinstance(event, AssistantMessage):
            if event.finish_reason is not None:
                request.finish_reasons.append(clean(event.finish_reason))
            request.answer_chars += len(event.text)
            request.tool_calls += len(event.tool_calls)
            for call in event.tool_calls:
                turn.calls[call.id] = (event.request_id, call.arguments)
        elif isinstance(event, Usage):
            request.input_tokens = _add(request.input_tokens, event.prompt_tokens)
            request.output_tokens = _add(request.output_tokens, event.completion_tokens)
            request.cached_tokens = _add(request.cached_tokens, event.cached_prompt_tokens)
        else:
            request.errors += 1
            request.error = event


def _user_attributes(event: UserMessage) -> dict[str, Any]:
    """The attributes a user message gives the turn it starts."""
    attributes: dict[str, Any] = {
        "cairn.user_message.id": clean(event.message_id),
        "cairn.user_message.chars": content_chars(event.content),
        "cairn.user_message.parts": len(event.content),
        "cairn.user_message.images": sum(1 for p in event.content if isinstance(p, ImagePart)),
    }
    if not isinstance(event.tokens, msgspec.UnsetType):
        attributes["cairn.user_message.tokens"] = event.tokens.count
    return attributes
