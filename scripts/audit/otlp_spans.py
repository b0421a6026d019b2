"""The spans of the OTLP export: ids, times and attributes, made from the lines of one turn.

`SpanMaker` is pure: `cairn.audit.otlp_fold` decides which lines belong to
which span, and hands them here once the turn closes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET

from cairn.events.codec import Record
from cairn.events.kinds import (
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    Event,
    Handoff,
    ProviderError,
    Request,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
)
from cairn.events.model import BlobPart, Part, TextPart

#: the longest string attribute value, in characters (longer ones are cut)
MAX_VALUE_CHARS = 4096
#: the most items of an array attribute (removed call ids of a slimming)
MAX_ITEMS = 64


#: span categories, the keys of `OtlpReport.spans`
TURN, CHAT, TOOL, COMPACTION, HANDOFF, SLIMMED = (
    "turn",
    "chat",
    "execute_tool",
    "compaction",
    "handoff",
    "context_slimmed",
)
CATEGORIES = (TURN, CHAT, TOOL, COMPACTION, HANDOFF, SLIMMED)


def _digest(label: str, key: tuple[object, ...], size: int) -> int:
    data = hashlib.sha256(msgspec.json.encode([label, *key])).digest()[:size]
    return int.from_bytes(data, "big") or 1  # all zero is the invalid id


def trace_id_of(*key: object) -> int:
    """The 128-bit trace id of `key` (sid, turn id): the first 16 bytes of SHA-256 of its JSON."""
    return _digest("cairn-trace", key, 16)


def span_id_of(*key: object) -> int:
    """The 64-bit span id of `key`: the first 8 bytes of SHA-256 of its JSON."""
    return _digest("cairn-span", key, 8)


_CONTROLS = {c: "\ufffd" for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)}


def clean(text: str) -> str:
    """`text` bounded for an attribute: cut to `MAX_VALUE_CHARS`, C0 controls but tab/LF/CR as U+FFFD.

    A lone surrogate (which protobuf cannot encode) becomes `?`.
    """
    cut = text[:MAX_VALUE_CHARS].translate(_CONTROLS)
    try:
        cut.encode("utf-8")
    except UnicodeEncodeError:
        cut = cut.encode("utf-8", "replace").decode("utf-8")
    return cut


def _content_text(content: tuple[Part, ...] | str) -> str:
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, BlobPart):
            pieces.append(part.preview)
    return "".join(pieces)


def content_chars(content: tuple[Part, ...]) -> int:
    return sum(
        len(part.text) if isinstance(part, TextPart) else part.chars if isinstance(part, BlobPart) else 0
        for part in content
    )


@dataclass(frozen=True, slots=True)
class PlannedSpan:
    """One span to make: ids, times (ns since the epoch), attributes, and an error when it failed."""

    category: str
    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    client: bool
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    error: str | None = None


@dataclass(slots=True)
class OpenRequest:
    """A request of the open turn and what its answer lines said so far."""

    event: Request
    seq: int
    start_ms: int
    end_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reasons: list[str] = field(default_factory=list)
    answer_chars: int = 0
    tool_calls: int = 0
    error: ProviderError | None = None
    errors: int = 0


@dataclass(slots=True)
class OpenTurn:
    """The open turn: its requests, the calls they made, and its finished child spans."""

    turn_id: str
    seq: int
    start_ms: int
    user: dict[str, Any]
    requests: dict[str, OpenRequest] = field(default_factory=dict)
    #: call id -> (request id, arguments as the model sent them)
    calls: dict[str, tuple[str, str]] = field(default_factory=dict)
    children: list[PlannedSpan] = field(default_factory=list)
    steering: int = 0


#: the latest time OTLP's fixed64 nanoseconds can say
_MAX_NS = (1 << 64) - 1


def _ns(ms: int) -> int:
    """`ms` as OTLP's unsigned nanoseconds, held within their range (a line's time outside it, only
    from a log written before the writers checked their clock, is shown at the nearest end)."""
    return min(max(ms, 0) * 1_000_000, _MAX_NS)


class SpanMaker:
    """Makes the spans of one session: each knows its session, provider and model."""

    def __init__(self, sid: str, *, provider: str, content: bool) -> None:
        self.sid = sid
        self.provider = clean(provider)
        #: whether tool arguments and results go into the spans (opt-in, as the GenAI
        #: conventions ask of content: it may hold what a user or a tool would not share)
        self.content = content
        self.model = ""
        self.max_output_tokens: int | None = None

    def _common(self, turn_id: str | None) -> dict[str, Any]:
        attributes: dict[str, Any] = {"gen_ai.conversation.id": self.sid, "cairn.session.id": self.sid}
        if turn_id is not None:
            attributes["cairn.turn.id"] = clean(turn_id)
        return attributes

    def tool_span(
        self, turn: OpenTurn, record: Record, event: ToolResult, *, after_ms: int | None
    ) -> PlannedSpan:
        """The span of a tool result: from the line before it (`after_ms`) to the result."""
        attributes = self._common(turn.turn_id)
        attributes.update(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": clean(event.tool_name),
                "gen_ai.tool.call.id": clean(event.call_id),
                "gen_ai.tool.type": "function",
                "cairn.tool.status": event.status,
                "cairn.tool.effect": event.effect,
                "cairn.tool.result.chars": event.original_chars or content_chars(event.content),
                "cairn.tool.result.truncated": event.truncated,
                "cairn.tool.files": len(event.files),
                "cairn.seq": record.seq,
            }
        )
        if event.server is not UNSET:  # an MCP server's tool: which server, and its name there
            attributes["cairn.tool.server"] = clean(event.server)
            attributes["cairn.tool.server_tool"] = clean(str(event.server_tool or ""))
        if self.content:
            attributes["gen_ai.tool.call.result"] = clean(_content_text(event.content))
        call = turn.calls.get(event.call_id)
        if call is not None:
            attributes["cairn.request.id"] = clean(call[0])
            if self.content:
                attributes["gen_ai.tool.call.arguments"] = clean(call[1])
            attributes["cairn.tool.arguments.chars"] = len(call[1])
        error = None
        if event.status == "error":
            attributes["error.type"] = "tool_error"
            error = clean(_content_text(event.content)[:200]) if self.content else "the tool failed"
        start = after_ms if after_ms is not None else record.ts
        return PlannedSpan(
            category=TOOL,
            name=clean(f"execute_tool {event.tool_name}"),
            trace_id=trace_id_of(self.sid, turn.turn_id),
            span_id=span_id_of(self.sid, record.seq),
            parent_id=span_id_of(self.sid, turn.turn_id),
            client=False,
            start_ns=_ns(min(start, record.ts)),
            end_ns=_ns(record.ts),
            attributes=attributes,
            error=error,
        )

    def instant_span(self, turn: OpenTurn | None, record: Record) -> PlannedSpan:
        """The zero-length span of a compaction, hand-off or slimming line, in its turn or alone."""
        turn_id = turn.turn_id if turn is not None else None
        attributes = self._common(turn_id)
        attributes["cairn.seq"] = record.seq
        category, name, error = _instant_kind(record.event, attributes)
        if turn is not None:
            trace_id, parent = trace_id_of(self.sid, turn.turn_id), span_id_of(self.sid, turn.turn_id)
        else:
            trace_id, parent = trace_id_of(self.sid, "line", record.seq), None
        return PlannedSpan(
            category=category,
            name=name,
            trace_id=trace_id,
            span_id=span_id_of(self.sid, record.seq),
            parent_id=parent,
            client=False,
            start_ns=_ns(record.ts),
            end_ns=_ns(record.ts),
            attributes=attributes,
            error=error,
        )

    def chat_span(self, turn: OpenTurn, request: OpenRequest, turn_end_ms: int) -> PlannedSpan:
        """The span of one request: from the request to its last answer line (or the turn's end)."""
        event = request.event
        model = event.model or self.model
        attributes = self._common(turn.turn_id)
        attributes.update(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": self.provider,
                "gen_ai.system": self.provider,
                "gen_ai.request.model": clean(model),
                "cairn.request.id": clean(event.request_id),
                "cairn.request.attempt": event.attempt,
                "cairn.request.phase": clean(event.phase),
                "cairn.request.message_count": event.message_count,
                "cairn.request.history_revision": event.history_revision,
                "cairn.request.handoff_included": event.handoff_included,
                "cairn.seq": request.seq,
            }
        )
        if self.max_output_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = self.max_output_tokens
        if event.projected_tokens is not None:
            attributes["cairn.request.projected_tokens"] = event.projected_tokens
        if request.input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = request.input_tokens
        if request.output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = request.output_tokens
        if request.cached_tokens is not None:
            attributes["gen_ai.usage.cache_read.input_tokens"] = request.cached_tokens
        if request.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = request.finish_reasons[:MAX_ITEMS]
        error = _request_outcome(request, attributes)
        attributes["cairn.response.chars"] = request.answer_chars
        attributes["cairn.response.tool_calls"] = request.tool_calls
        end_ms = request.end_ms if request.end_ms is not None else turn_end_ms
        return PlannedSpan(
            category=CHAT,
            name=clean(f"chat {model}"),
            trace_id=trace_id_of(self.sid, turn.turn_id),
            span_id=span_id_of(self.sid, turn.turn_id, event.request_id),
            parent_id=span_id_of(self.sid, turn.turn_id),
            client=True,
            start_ns=_ns(request.start_ms),
            end_ns=_ns(max(end_ms, request.start_ms)),
            attributes=attributes,
            error=error,
        )

    def turn_spans(
        self, turn: OpenTurn, record: Record, event: TurnCompleted | TurnFailed | TurnCancelled
    ) -> list[PlannedSpan]:
        """The spans of a closed turn: its root, one per request, then the others in line order."""
        attributes = self._common(turn.turn_id)
        attributes.update(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "cairn",
                "gen_ai.request.model": clean(self.model),
                "cairn.turn.requests": len(turn.requests),
                "cairn.turn.tool_results": sum(1 for c in turn.children if c.category == TOOL),
                "cairn.turn.steering_messages": turn.steering,
                "cairn.seq": turn.seq,
                **turn.user,
            }
        )
        error = None
        if isinstance(event, TurnCompleted):
            attributes["cairn.turn.outcome"] = "completed"
        elif isinstance(event, TurnCancelled):  # on purpose: not an error
            attributes["cairn.turn.outcome"] = "cancelled"
            if event.reason:
                attributes["cairn.turn.cancel_reason"] = clean(event.reason)
        else:
            attributes["cairn.turn.outcome"] = "failed"
            attributes["cairn.turn.failed_phase"] = event.phase
            attributes["error.type"] = clean(event.error_class or event.phase)
            error = clean(f"{event.phase}: {event.error}" if event.error else event.phase)
        root = PlannedSpan(
            category=TURN,
            name="invoke_agent cairn",
            trace_id=trace_id_of(self.sid, turn.turn_id),
            span_id=span_id_of(self.sid, turn.turn_id),
            parent_id=None,
            client=False,
            start_ns=_ns(turn.start_ms),
            end_ns=_ns(max(record.ts, turn.start_ms)),
            attributes=attributes,
            error=error,
        )
        chats = [self.chat_span(turn, request, record.ts) for request in turn.requests.values()]
        return [root, *chats, *turn.children]


def _request_outcome(request: OpenRequest, attributes: dict[str, Any]) -> str | None:
    """Sets the request's outcome (and its provider error's attributes); its error, if it failed."""
    failure = request.error
    if failure is None:
        attributes["cairn.request.outcome"] = "answered" if request.end_ms is not None else "unanswered"
        return None
    attributes["error.type"] = failure.error_class
    attributes["cairn.provider_error.count"] = request.errors
    attributes["cairn.provider_error.output_delivered"] = failure.output_delivered
    attributes["cairn.provider_error.message"] = clean(failure.message)
    if failure.status_code is not None:
        attributes["http.response.status_code"] = failure.status_code
    if failure.retry_after_ms is not None:
        attributes["cairn.provider_error.retry_after_ms"] = failure.retry_after_ms
    attributes["cairn.request.outcome"] = "provider-error"
    return clean(f"{failure.error_class}: {failure.message}")


def _instant_kind(event: Event, attributes: dict[str, Any]) -> tuple[str, str, str | None]:
    """The category, name and error of an instant span; its attributes go into `attributes`."""
    error = None
    if isinstance(event, CheckpointCommitted):
        category, name = COMPACTION, "cairn.compaction"
        attributes.update(
            {
                "cairn.compaction.outcome": "committed",
                "cairn.compaction.epoch": event.epoch,
                "cairn.compaction.trigger": event.trigger,
                "cairn.compaction.strategy": event.strategy,
                "cairn.compaction.tokens_before": event.source_tokens,
                "cairn.compaction.tokens_after": event.replacement_tokens,
                "cairn.compaction.through_seq": event.through_seq,
                "cairn.compaction.attempts": event.diagnostics.attempts,
                "cairn.compaction.target_tokens": event.diagnostics.target_tokens,
                "cairn.compaction.model_usage_tokens": event.diagnostics.model_usage_tokens,
                "cairn.compaction.replacement_messages": len(event.replacement_messages),
            }
        )
    elif isinstance(event, CompactionFailed):
        category, name = COMPACTION, "cairn.compaction"
        attributes.update(
            {
                "cairn.compaction.outcome": "failed",
                "cairn.compaction.epoch": event.epoch,
                "cairn.compaction.trigger": event.trigger,
                "cairn.compaction.attempt": event.attempt,
                "cairn.compaction.reason": event.reason,
                "cairn.compaction.consecutive_failures": event.consecutive_failures,
                "cairn.compaction.detail": clean(event.detail),
                "error.type": event.reason,
            }
        )
        error = clean(f"compaction failed: {event.reason}: {event.detail}")
    elif isinstance(event, Handoff):
        category, name = HANDOFF, "cairn.handoff"
        attributes["cairn.handoff.epoch"] = event.epoch
        attributes.update(_handoff_figures(event.record))
    else:
        assert isinstance(event, ContextSlimmed)
        category, name = SLIMMED, "cairn.context_slimmed"
        attributes.update(
            {
                "cairn.slimmed.mode": event.mode,
                "cairn.slimmed.removed_count": len(event.removed_call_ids),
                "cairn.slimmed.removed_call_ids": [clean(c) for c in event.removed_call_ids[:MAX_ITEMS]],
                "cairn.slimmed.tokens_saved": event.tokens_saved,
            }
        )
    return category, name, error


def _handoff_figures(raw: msgspec.Raw) -> dict[str, Any]:
    try:
        record = msgspec.json.decode(bytes(raw))
    except msgspec.DecodeError:
        return {}
    if not isinstance(record, dict):
        return {}
    figures: dict[str, Any] = {}
    for name in ("observed_tokens", "input_budget", "handoff_threshold", "compaction_threshold"):
        value = record.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
            figures[f"cairn.handoff.{name}"] = value
    return figures
