"""A session's records as rows of the export's tables (`cairn.audit.tables`): pure, one record at a time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec
from msgspec import UNSET

from cairn.audit.prices import Prices
from cairn.audit.tables import table_of
from cairn.events.codec import MAX_TS_MS, Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    Event,
    EventBase,
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
from cairn.events.model import BlobPart, ImagePart, Message, Part, TextPart

_encode = msgspec.json.encode


def _json(value: Any) -> str:
    return _encode(value).decode()


@dataclass(slots=True)
class TurnFold:
    """Which turn each event of one session belongs to (see the module doc): O(one turn) memory."""

    open_turn: str | None = None
    request_turns: dict[str, str] = field(default_factory=dict)
    #: per request of the open turn: its model, and the times of its answer (the usage rows show them)
    request_facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the operator's price table (`audit.prices`): the usage rows' cost; None: unknown
    prices: Prices | None = None

    def cost_of(self, usage: Usage) -> int | None:
        """The usage's cost in millionths of the price table's currency (None: no table, or no price)."""
        if self.prices is None:
            return None
        model = self.request_facts.get(usage.request_id, {}).get("model")
        return self.prices.cost_micros(
            model, usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens
        )

    def turn_of(self, event: EventBase) -> str | None:
        """Apply `event` and return its turn (call once per event, in seq order)."""
        if isinstance(event, TurnStarted):
            self.open_turn = event.turn_id
            self.request_turns.clear()
            self.request_facts.clear()
            return event.turn_id
        if isinstance(event, Request):
            self.request_facts[event.request_id] = {"model": event.model or None}
        elif isinstance(event, AssistantMessage) and event.request_id in self.request_facts:
            self.request_facts[event.request_id].update(_times(event))
        if isinstance(event, TurnCompleted | TurnFailed | TurnCancelled):
            self.open_turn = None
            return event.turn_id
        if isinstance(event, Request):
            self.request_turns[event.request_id] = event.turn_id
            return event.turn_id
        request_id = getattr(event, "request_id", None)
        if isinstance(request_id, str) and request_id in self.request_turns:
            return self.request_turns[request_id]
        return self.open_turn


def _times(event: AssistantMessage) -> dict[str, int | None]:
    first, whole = event.first_output_ms, event.response_ms
    return {
        "first_output_ms": None if first is UNSET else first,
        "response_ms": None if whole is UNSET else whole,
    }


def _parsed(text: str) -> Any:
    """A JSON text as its value; the text itself when it is not JSON."""
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def _text(content: str | tuple[Part, ...]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


def _blob_rows(kind: str, where: str, content: str | tuple[Part, ...]) -> Iterator[dict[str, Any]]:
    if isinstance(content, str):
        return
    for index, part in enumerate(content):
        if isinstance(part, BlobPart):
            yield {
                "kind": kind,
                "location": f"{where}[{index}]",
                "sha256": part.sha256,
                "size": part.size,
                "media_type": part.media_type,
                "chars": part.chars,
            }


def _message_blobs(kind: str, where: str, messages: tuple[Message, ...]) -> Iterator[dict[str, Any]]:
    for index, message in enumerate(messages):
        yield from _blob_rows(kind, f"{where}[{index}].content", message.content)


def _count(content: tuple[Part, ...], part_type: type) -> int:
    return sum(1 for part in content if isinstance(part, part_type))


def _handoff_figures(raw: msgspec.Raw) -> dict[str, Any]:
    try:
        record = msgspec.json.decode(bytes(raw))
    except msgspec.DecodeError:
        record = {}

    def num(name: str) -> int | None:
        value = record.get(name) if isinstance(record, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    message_id = record.get("message_id") if isinstance(record, dict) else None
    return {
        "message_id": message_id if isinstance(message_id, str) else None,
        "observed_tokens": num("observed_tokens"),
        "input_budget": num("input_budget"),
        "handoff_threshold": num("handoff_threshold"),
        "compaction_threshold": num("compaction_threshold"),
        "record_json": bytes(raw).decode(),
    }


def body_row(event: Event) -> dict[str, Any]:
    # long: one match arm per event kind, each a table of its columns (assert_never keeps it total)
    """The kind table's columns (after the keys) of one event; every kind of the union has its arm."""
    match event:
        case SessionStarted():
            tools = event.read_only_tools
            return {
                "workspace": event.workspace,
                "model": event.model,
                "context_window": event.context_window,
                "max_output_tokens": event.max_output_tokens,
                "parent_session": event.parent_session,
                "parent_seq": event.parent_seq,
                "system_prompt": event.system_prompt,
                "tool_count": len(event.tool_schemas),
                "tool_schemas_json": _json([_parsed(schema) for schema in event.tool_schemas]),
                "read_only_tools_json": None if tools is None else _json(tools),
            }
        case UserMessage():
            return {
                "message_id": event.message_id,
                "text": _text(event.content),
                "parts": len(event.content),
                "images": _count(event.content, ImagePart),
                "blobs": _count(event.content, BlobPart),
                "content_json": _json(event.content),
                "idempotency_key": event.idempotency_key or None,
            }
        case TurnStarted():
            continues = event.continues if isinstance(event.continues, str) else None
            return {"message_id": event.message_id, "continues": continues}
        case TurnCompleted():
            return {"requests": event.requests}
        case TurnFailed():
            return {"phase": event.phase, "error_class": event.error_class, "error": event.error}
        case TurnCancelled() | TurnDismissed():
            return {"reason": event.reason}
        case ToolDeferred():
            return msgspec.structs.asdict(event)
        case Request():
            fields = msgspec.structs.asdict(event)
            del fields["turn_id"]
            counted = event.counted_tokens
            fields["counted_tokens"] = None if counted is UNSET else counted
            return fields
        case AssistantMessage():
            return {
                "message_id": event.message_id,
                "request_id": event.request_id,
                "text": event.text,
                "reasoning": event.reasoning,
                "finish_reason": event.finish_reason,
                "tool_call_count": len(event.tool_calls),
                "tool_calls_json": _json(event.tool_calls),
                **_times(event),
            }
        case Usage():
            writes = event.cache_write_tokens
            return {
                **msgspec.structs.asdict(event),
                "cache_write_tokens": None if writes is UNSET else writes,
            }
        case ProviderError() | CompactionFailed() | OwnerChanged():
            return msgspec.structs.asdict(event)
        case ToolResult():
            return {
                "call_id": event.call_id,
                "tool_name": event.tool_name,
                "status": event.status,
                "effect": event.effect,
                "text": _text(event.content),
                "original_chars": event.original_chars,
                "truncated": event.truncated,
                "blobs": _count(event.content, BlobPart),
                "files_json": _json(event.files),
                "content_json": _json(event.content),
                "server": None if event.server is UNSET else event.server,
                "server_tool": None if event.server_tool is UNSET else event.server_tool,
            }
        case ContextSlimmed():
            return {
                "mode": event.mode,
                "removed_count": len(event.removed_call_ids),
                "tokens_saved": event.tokens_saved,
                "marker_id": event.marker_id,
                "marker_text": event.marker_text,
                "removed_call_ids_json": _json(event.removed_call_ids),
            }
        case Handoff():
            return {"epoch": event.epoch, **_handoff_figures(event.record)}
        case CheckpointCommitted():
            diagnostics = event.diagnostics
            return {
                "epoch": event.epoch,
                "through_seq": event.through_seq,
                "trigger": event.trigger,
                "strategy": event.strategy,
                "source_tokens": event.source_tokens,
                "replacement_tokens": event.replacement_tokens,
                "reduction_tokens": event.source_tokens - event.replacement_tokens,
                "replacement_message_count": len(event.replacement_messages),
                "attempts": diagnostics.attempts,
                "target_tokens": diagnostics.target_tokens,
                "model_usage_tokens": diagnostics.model_usage_tokens,
                "source_hash": event.source_hash,
                "prompt_version": event.prompt_version,
                "raw_summary": event.raw_summary,
                "files_restored_json": _json(event.files_restored),
                "diagnostics_json": _json(diagnostics),
                "carried_json": _json(event.carried),
                "replacement_messages_json": _json(event.replacement_messages),
            }
        case _:
            assert_never(event)  # a new kind needs its columns here: mypy says so


_NO_FACTS = {"model": None, "first_output_ms": None, "response_ms": None, "cost_micros": None}


def rows_of(
    record: Record, turn_id: str | None, fold: TurnFold | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every row `record` makes, as (table, row): its `events` row, its kind's row, tool calls, blobs.
    A usage row carries its request's model and answer times, from `fold` (after its `turn_of`)."""
    event = record.event
    kind = record.kind
    ts = record.ts if -MAX_TS_MS - 1 <= record.ts <= MAX_TS_MS else None
    keys = {"sid": record.sid, "seq": record.seq, "pos": record.pos, "ts": ts, "turn_id": turn_id}
    request_id = getattr(event, "request_id", None)
    yield "events", {**keys, "kind": kind, "request_id": request_id, "prev": record.prev}
    body = body_row(event)
    if isinstance(event, Usage):
        facts = fold.request_facts.get(event.request_id) if fold is not None else None
        body.update({**_NO_FACTS, **(facts or {})})
        body["cost_micros"] = fold.cost_of(event) if fold is not None else None
    yield table_of(kind), {**keys, **body}
    if isinstance(event, AssistantMessage):
        for index, call in enumerate(event.tool_calls):
            yield (
                "tool_calls",
                {
                    **keys,
                    "request_id": event.request_id,
                    "message_id": event.message_id,
                    "call_index": index,
                    "call_id": call.id,
                    "tool_name": call.name,
                    "arguments_json": call.arguments,
                },
            )
    blobs: Iterator[dict[str, Any]] | None = None
    if isinstance(event, UserMessage | ToolResult):
        blobs = _blob_rows(kind, "content", event.content)
    elif isinstance(event, CheckpointCommitted):
        blobs = _message_blobs(kind, "replacement_messages", event.replacement_messages)
    if blobs is not None:
        for blob in blobs:
            yield "blobs", {**keys, **blob}
