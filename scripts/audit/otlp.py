"""`cairn export --format otlp`: a store's sessions as OpenTelemetry traces (GenAI semantic conventions).

One trace per turn, built from the log alone:

    invoke_agent cairn            the turn (root): turn-started .. turn-completed / turn-failed
    ├─ chat MODEL                 one per `request` line: from the request to its last answer line
    ├─ execute_tool NAME          one per `tool-result` line: from the line before it to the result
    ├─ cairn.compaction           one per `checkpoint-committed` / `compaction-failed` (an instant)
    ├─ cairn.handoff              one per `handoff` (an instant)
    └─ cairn.context_slimmed      one per `context-slimmed` (an instant)

A compaction, hand-off or slimming outside any turn is a trace of its own
with that one span. Tool spans are children of the turn, as the GenAI
conventions put `execute_tool` beside the `chat` that asked for it (the
request is named in `cairn.request.id`). Tools run one after another and
each result is written when its tool returns, so a tool span runs from the
line before its result (the answer that asked for it, or the previous
result) to the result.

Times are the lines' `ts` (unix ms, as nanoseconds); the log records when a
checkpoint was committed, not when its compaction began, so compaction,
hand-off and slimming are zero-length spans at their line. Ids are derived
from the log (SHA-256 of the key, see `trace_id_of` / `span_id_of`): the
trace of a turn from (sid, turn id), the turn's root span from the same key,
a chat span from (sid, turn id, request id), every other span from (sid, its
line's seq). Exporting the same log again gives the same ids, so a backend
that receives a turn twice can tell.

Which turns a run exports: those whose closing line (`turn-completed` /
`turn-failed`) lies at a position in [since, until) (see
`cairn.audit.export`), and the lone spans whose line does. A turn still
open at `until` is not exported (counted as `open_turns`): it is exported
by the run that sees it close. A session is read twice through the
journal's checked path, like the table export: a corrupt session is
reported and none of its spans are sent.

Values are bounded: every string taken from the log (tool arguments and
results, error messages, names, ids) is cut to `MAX_VALUE_CHARS` characters,
its C0 control characters other than tab, newline and carriage return (NUL
among them, which some backends' databases refuse) become U+FFFD, and the
SDK's `SpanLimits` enforce the same length on every attribute. A span's
attributes are a fixed set, so their number is bounded too. The sizes that
were cut stay visible (`cairn.tool.result.chars`, ...).

`--to FILE` writes OTLP/JSON as the collector's file exporter does: one
`ExportTraceServiceRequest` per line (at most `BATCH_SPANS` spans each), in
protobuf's JSON mapping with OTLP's changes (trace and span ids as hex,
enums as integers). `--otlp-endpoint URL` sends the same requests as
OTLP/HTTP protobuf with the SDK's exporter.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, assert_never
from urllib.parse import urlsplit, urlunsplit

import msgspec

from cairn.audit import require
from cairn.audit.export import ExportRefused, Progress, Skipped, check_session, sessions_to_export
from cairn.events.codec import Record, validate_session_id
from cairn.events.errors import CairnError
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
    ToolResult,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import BlobPart, ImagePart, Part, TextPart

#: the longest string attribute value, in characters (longer ones are cut)
MAX_VALUE_CHARS = 4096
#: the most items of an array attribute (removed call ids of a slimming)
MAX_ITEMS = 64
#: spans per OTLP request (one line of the file, one POST to the endpoint)
BATCH_SPANS = 512
#: seconds the endpoint gets for one request, retries included (the SDK exporter's deadline)
DEFAULT_TIMEOUT = 10.0
#: `gen_ai.provider.name` when none is given: the log does not record which provider served a request
UNKNOWN_PROVIDER = "unknown"
SCOPE = "cairn.audit.otlp"
TRACES_PATH = "/v1/traces"
_PROGRESS_EVERY = 256
_PENDING_USERS = 16

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


class OtlpDeliveryFailed(CairnError):
    """The OTLP endpoint did not accept a request within the timeout (exit 2)."""


# --- the pure part: a session's records as planned spans ---------------------------------


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


def _content_chars(content: tuple[Part, ...]) -> int:
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
class _Request:
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
class _Turn:
    turn_id: str
    seq: int
    start_ms: int
    user: dict[str, Any]
    requests: dict[str, _Request] = field(default_factory=dict)
    #: call id -> (request id, arguments as the model sent them)
    calls: dict[str, tuple[str, str]] = field(default_factory=dict)
    children: list[PlannedSpan] = field(default_factory=list)
    steering: int = 0


def _add(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


#: the latest time OTLP's fixed64 nanoseconds can say
_MAX_NS = (1 << 64) - 1


def _ns(ms: int) -> int:
    """`ms` as OTLP's unsigned nanoseconds, held within their range (a line's time outside it, only
    from a log written before the writers checked their clock, is shown at the nearest end)."""
    return min(max(ms, 0) * 1_000_000, _MAX_NS)


class TraceFold:
    """One session's records, in seq order, as planned spans: a turn's spans when it closes.

    `add` returns the spans a record completes that belong to the run
    (closing line at `since` or later); memory holds one turn.
    """

    def __init__(self, sid: str, *, provider: str, since: int, content: bool = False) -> None:
        self.sid = sid
        self.provider = clean(provider)
        #: whether tool arguments and results go into the spans (opt-in, as the GenAI
        #: conventions ask of content: it may hold what a user or a tool would not share)
        self.content = content
        self.since = since
        self.model = ""
        self.max_output_tokens: int | None = None
        self.turn: _Turn | None = None
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

    def _common(self, turn_id: str | None) -> dict[str, Any]:
        attributes: dict[str, Any] = {"gen_ai.conversation.id": self.sid, "cairn.session.id": self.sid}
        if turn_id is not None:
            attributes["cairn.turn.id"] = clean(turn_id)
        return attributes

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
                self.model = event.model
                self.max_output_tokens = event.max_output_tokens
            case UserMessage():
                if turn is not None:
                    turn.steering += 1
                else:
                    if (
                        len(self.pending_users) >= _PENDING_USERS
                    ):  # messages that start no turn: keep the last
                        del self.pending_users[next(iter(self.pending_users))]
                    self.pending_users[event.message_id] = {
                        "cairn.user_message.id": clean(event.message_id),
                        "cairn.user_message.chars": _content_chars(event.content),
                        "cairn.user_message.parts": len(event.content),
                        "cairn.user_message.images": sum(
                            1 for p in event.content if isinstance(p, ImagePart)
                        ),
                        **(
                            {"cairn.user_message.tokens": event.tokens.count}
                            if not isinstance(event.tokens, msgspec.UnsetType)
                            else {}
                        ),
                    }
            case TurnStarted():
                if turn is not None:
                    self.abandoned_turns += 1
                user = self.pending_users.get(event.message_id, {})
                self.pending_users.clear()
                self.turn = _Turn(event.turn_id, record.seq, record.ts, user)
            case Request():
                if turn is None or event.turn_id != turn.turn_id:
                    self.unplaced += 1
                else:
                    turn.requests[event.request_id] = _Request(event, record.seq, record.ts)
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
                    turn.children.append(self._tool_span(turn, record, event))
            case CheckpointCommitted() | CompactionFailed() | Handoff() | ContextSlimmed():
                span = self._instant_span(turn, record)
                if turn is not None:
                    turn.children.append(span)
                elif record.pos >= self.since:
                    return [span]
            case TurnCompleted() | TurnFailed():
                if turn is None or event.turn_id != turn.turn_id:
                    self.unplaced += 1
                    return []
                self.turn = None
                if record.pos < self.since:
                    return []
                return self._close(turn, record, event)
            case OwnerChanged():
                pass  # a change of owner is not part of any trace
            case _:
                assert_never(event)  # a new kind needs its place in the traces: mypy says so
        return []

    @staticmethod
    def _answer(
        turn: _Turn, request: _Request, event: AssistantMessage | Usage | ProviderError, ts: int
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

    def _tool_span(self, turn: _Turn, record: Record, event: ToolResult) -> PlannedSpan:
        attributes = self._common(turn.turn_id)
        attributes.update(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": clean(event.tool_name),
                "gen_ai.tool.call.id": clean(event.call_id),
                "gen_ai.tool.type": "function",
                "cairn.tool.status": event.status,
                "cairn.tool.effect": event.effect,
                "cairn.tool.result.chars": event.original_chars or _content_chars(event.content),
                "cairn.tool.result.truncated": event.truncated,
                "cairn.tool.files": len(event.files),
                "cairn.seq": record.seq,
            }
        )
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
        start = self.prev_ms if self.prev_ms is not None else record.ts
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

    def _instant_span(self, turn: _Turn | None, record: Record) -> PlannedSpan:
        event = record.event
        turn_id = turn.turn_id if turn is not None else None
        attributes = self._common(turn_id)
        attributes["cairn.seq"] = record.seq
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

    def _chat_span(self, turn: _Turn, request: _Request, turn_end_ms: int) -> PlannedSpan:
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
        error = None
        failure = request.error
        if failure is not None:
            attributes["error.type"] = failure.error_class
            attributes["cairn.provider_error.count"] = request.errors
            attributes["cairn.provider_error.output_delivered"] = failure.output_delivered
            attributes["cairn.provider_error.message"] = clean(failure.message)
            if failure.status_code is not None:
                attributes["http.response.status_code"] = failure.status_code
            if failure.retry_after_ms is not None:
                attributes["cairn.provider_error.retry_after_ms"] = failure.retry_after_ms
            error = clean(f"{failure.error_class}: {failure.message}")
            outcome = "provider-error"
        else:
            outcome = "answered" if request.end_ms is not None else "unanswered"
        attributes["cairn.request.outcome"] = outcome
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

    def _close(self, turn: _Turn, record: Record, event: TurnCompleted | TurnFailed) -> list[PlannedSpan]:
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
        chats = [self._chat_span(turn, request, record.ts) for request in turn.requests.values()]
        return [root, *chats, *turn.children]


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


# --- the SDK: planned spans as OpenTelemetry spans -----------------------------------------


class _SdkSpans:
    """Makes `PlannedSpan`s into SDK spans (ids preset, times given, limits applied), in batches."""

    def __init__(self) -> None:
        require("opentelemetry.sdk.trace")
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.id_generator import IdGenerator
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        class PresetIds(IdGenerator):
            """The ids of the next span, set before it starts (the SDK asks its generator)."""

            trace_id = 0
            span_id = 0

            def generate_trace_id(self) -> int:
                return self.trace_id

            def generate_span_id(self) -> int:
                return self.span_id

        ended: list[ReadableSpan] = []

        class Collect(SpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                ended.append(span)

        self._trace = trace
        self._context = Context
        self._ids = PresetIds()
        self.ended = ended
        limits = SpanLimits(
            max_span_attributes=128,
            max_span_attribute_length=MAX_VALUE_CHARS,
            max_attribute_length=MAX_VALUE_CHARS,
            max_events=128,
            max_links=0,
        )
        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES apply, as for any SDK; else the service is cairn
        resource = Resource.create({})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "cairn"}))
        if "service.instance.id" not in _env_resource_keys():  # the SDK's is random: re-exports would differ
            kept = {k: v for k, v in resource.attributes.items() if k != "service.instance.id"}
            resource = Resource(kept, resource.schema_url)
        provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=resource,
            id_generator=self._ids,
            span_limits=limits,
            shutdown_on_exit=False,
        )
        provider.add_span_processor(Collect())
        self._tracer = provider.get_tracer(SCOPE)
        self._kinds = (trace.SpanKind.INTERNAL, trace.SpanKind.CLIENT)

    def make(self, planned: PlannedSpan) -> None:
        trace = self._trace
        if planned.parent_id is None:
            context = self._context()
        else:
            parent = trace.SpanContext(
                planned.trace_id,
                planned.parent_id,
                is_remote=False,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )
            context = trace.set_span_in_context(trace.NonRecordingSpan(parent), self._context())
        self._ids.trace_id, self._ids.span_id = planned.trace_id, planned.span_id
        span = self._tracer.start_span(
            planned.name,
            context=context,
            kind=self._kinds[planned.client],
            attributes=planned.attributes,
            start_time=planned.start_ns,
        )
        if planned.error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, planned.error))
        span.end(end_time=planned.end_ns)

    def take(self, count: int) -> list[Any]:
        """The first `count` ended spans (fewer when fewer ended), removed from the list."""
        spans = self.ended[:count]
        del self.ended[:count]
        return spans


def _env_resource_keys() -> set[str]:
    text = os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return {item.split("=", 1)[0].strip() for item in text.split(",") if "=" in item}


# --- the two destinations ------------------------------------------------------------------


def otlp_json(request: Any) -> str:
    """One `ExportTraceServiceRequest` as an OTLP/JSON line: protobuf's JSON mapping, ids as hex."""
    from google.protobuf import json_format

    data = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource in data.get("resourceSpans", ()):
        for scope in resource.get("scopeSpans", ()):
            for span in scope.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _b64_to_hex(span[key])
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _b64_to_hex(text: str) -> str:
    import base64

    return base64.b64decode(text).hex()


class _FileSink:
    """OTLP/JSON lines into a temporary file beside `path`, moved into place by `commit`."""

    def __init__(self, path: Path) -> None:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        self._encode = encode_spans
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._handle = open(self.tmp, "x", encoding="utf-8")  # noqa: SIM115 (closed by commit/abort)

    def send(self, spans: list[Any]) -> None:
        self._handle.write(otlp_json(self._encode(spans)))
        self._handle.write("\n")

    def commit(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        if self.path.exists() or self.path.is_symlink():
            raise ExportRefused(f"{self.path} appeared while exporting: not replacing it")
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._handle.close()
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class _EndpointSink:
    """OTLP/HTTP protobuf requests to `url` with the SDK's exporter (bounded by `timeout`)."""

    _LOGGER = "opentelemetry.exporter.otlp"

    def __init__(self, url: str, timeout: float) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.url = url
        self._exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
        self.sent = 0

    def send(self, spans: list[Any]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        logger = logging.getLogger(self._LOGGER)
        capture = _Capture()
        propagate = logger.propagate
        logger.addHandler(capture)
        logger.propagate = False  # the reason goes into the error, not onto stderr as a log line
        try:
            result = self._exporter.export(spans)
        finally:
            logger.removeHandler(capture)
            logger.propagate = propagate
        if result is not SpanExportResult.SUCCESS:
            reason = "; ".join(capture.messages[-2:]) or "no reason given"
            raise OtlpDeliveryFailed(
                f"{self.url} did not take a request of {len(spans)} spans ({reason}); "
                f"{self.sent} spans were delivered before it: exporting again sends the same ids"
            )
        self.sent += len(spans)

    def commit(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]

    def abort(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]


def endpoint_url(url: str) -> str:
    """The traces URL of `url`: `http(s)://host[:port]` gets `/v1/traces`; a URL with a path is kept."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExportRefused(f"--otlp-endpoint must be an http:// or https:// URL with a host, got {url!r}")
    try:
        parts.port  # noqa: B018 (parsing the port checks it)
    except ValueError:
        raise ExportRefused(f"--otlp-endpoint has a bad port: {url!r}") from None
    if parts.path in ("", "/"):
        parts = parts._replace(path=TRACES_PATH)
    return urlunsplit(parts)


# --- the run -------------------------------------------------------------------------------


@dataclass
class OtlpReport:
    """One run: where to, the [since, until) positions, sessions read, traces and spans per category.

    `errors`: spans with an error status; `requests`: OTLP requests made (file
    lines or POSTs); `open_turns`: turns not closed by `until` (or never
    closed before the next began), not exported; `unplaced`: lines naming a
    turn or request other than the open one, left out; `skipped`: corrupt
    sessions, none of whose spans were exported.
    """

    to: str
    since: int
    until: int
    sessions: int = 0
    traces: int = 0
    spans: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    errors: int = 0
    requests: int = 0
    open_turns: int = 0
    unplaced: int = 0
    skipped: list[Skipped] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"format": "otlp", **asdict(self)}


def export_otlp(
    journal: Any,
    *,
    to: Path | None = None,
    endpoint: str | None = None,
    session: str | None = None,
    since: int | None = None,
    provider: str = UNKNOWN_PROVIDER,
    content: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> OtlpReport:
    """Export `journal`'s turns (all sessions, or `session`) closing at `since` or later as traces.

    Exactly one of `to` (an OTLP/JSON file, which must not exist) and
    `endpoint` (an OTLP/HTTP URL). Refuses (`ExportRefused`, nothing
    written or sent) a bad target, session id or `since`; raises
    `OtlpDeliveryFailed` when the endpoint does not take a request within
    `timeout` seconds (retries included). Tool arguments and results go into
    the spans only with `content` (their sizes always do).
    """
    if (to is None) == (endpoint is None):
        raise ExportRefused("give one of --to FILE and --otlp-endpoint URL")
    if session is not None:
        validate_session_id(session)
    since = 0 if since is None else since
    if since < 0:
        raise ExportRefused(f"--since must be a position (0 or more), got {since}")
    if not timeout > 0:
        raise ExportRefused(f"--otlp-timeout must be more than 0 seconds, got {timeout}")
    if not provider or len(provider) > 128:
        raise ExportRefused("--gen-ai-provider must be 1 to 128 characters")
    if to is not None:
        _check_file_target(to)
    url = endpoint_url(endpoint) if endpoint is not None else None
    require("opentelemetry.sdk.trace")
    require("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    summaries, until = sessions_to_export(journal, session, since)
    report = OtlpReport(to=str(to) if to is not None else str(url), since=since, until=until)
    sdk = _SdkSpans()
    sink: _FileSink | _EndpointSink = _FileSink(to) if to is not None else _EndpointSink(str(url), timeout)
    try:
        _run(journal, summaries, report, sdk, sink, provider, content, progress, warn)
        sink.commit()
    except BaseException:
        sink.abort()
        raise
    return report


def _check_file_target(to: Path) -> None:
    if to.is_symlink() or to.exists():
        raise ExportRefused(f"{to} exists: name a new file")
    if not to.parent.is_dir():
        raise ExportRefused(f"{to.parent} is not a directory")


def _run(
    journal: Any,
    summaries: list[Any],
    report: OtlpReport,
    sdk: _SdkSpans,
    sink: _FileSink | _EndpointSink,
    provider: str,
    content: bool,
    progress: Progress | None,
    warn: Callable[[str], None] | None,
) -> None:
    since, until = report.since, report.until
    todo = [s for s in summaries if s.last_seq > 0 and s.last_pos >= since]
    total = 2 * sum(s.last_seq for s in todo)
    done = 0

    def send(spans: list[Any]) -> None:
        sink.send(spans)
        report.requests += 1

    for summary in todo:
        sid = summary.sid
        problem = check_session(journal, sid, until, progress, done, total)  # pass 1
        if problem is not None:
            report.skipped.append(problem)
            if warn is not None:
                warn(f"skipped session {sid}: {problem.error}")
            done += 2 * summary.last_seq
            continue
        done += summary.last_seq
        fold = TraceFold(sid, provider=provider, since=since, content=content)
        for count, record in enumerate(_records(journal, sid, until), 1):  # pass 2: its spans
            for planned in fold.add(record):
                sdk.make(planned)
                report.spans[planned.category] += 1
                report.traces += planned.parent_id is None
                report.errors += planned.error is not None
            while len(sdk.ended) >= BATCH_SPANS:
                send(sdk.take(BATCH_SPANS))
            if progress is not None and count % _PROGRESS_EVERY == 0:
                progress(done + count, total)
        report.open_turns += fold.open_turns + fold.abandoned_turns
        report.unplaced += fold.unplaced
        done += summary.last_seq
        report.sessions += 1
    while sdk.ended:
        send(sdk.take(BATCH_SPANS))
    if progress is not None:
        progress(total, total)


def _records(journal: Any, sid: str, until: int) -> Iterator[Record]:
    for record in journal.read(sid):
        if record.pos >= until:
            return
        yield record
