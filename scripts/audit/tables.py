"""The export's tables: their columns, and the pure mapping of a session's records to rows.

Every table starts with the same key columns, so that any two join:

    sid (string)  seq (int64)  pos (int64)  ts (timestamp[ms, UTC])  turn_id (string, null outside a turn)

`ts` is null where the line's time does not fit int64 ms (only a log written before the writers
checked their clock can hold one; `cairn verify` reports it as `bad-ts`).

`(sid, seq)` is unique in every kind table and in `events`; `pos` is the
line's global position in the log. Ids (`request_id`, `turn_id`,
`message_id`, `call_id`) are unique within a session only: join on them
together with `sid` (a fork copies its parent's ids).

`turn_id` is derived when the event does not carry it: a `request` names its
turn; an event naming a `request_id` (`assistant-message`, `usage`,
`provider-error`, `tool_calls` rows) takes that request's turn; any other
event takes the turn open at it in the session's order (from its
`turn-started` to its `turn-completed` / `turn-failed`), null outside a turn.
The fold keeps only the current turn's requests, so memory does not grow
with the session.

Column types are fixed: integers are int64 (null where the log has null),
flags bool, timestamps timestamp[ms, UTC], text string; a nested structure
is a JSON text column (`*_json`) beside the columns analysts filter on.

Tables and their columns after the keys (`json`: JSON text in a string column):

    events                one row per line: kind, request_id (of the kinds that carry one), prev
    session_started       workspace, model, context_window int64, max_output_tokens int64,
                          parent_session (a fork's parent), parent_seq int64, system_prompt,
                          tool_count int64, tool_schemas_json, read_only_tools_json
    user_message          message_id, text (its text parts joined), parts int64, images int64,
                          blobs int64, content_json, idempotency_key (null when sent without one)
    turn_started          message_id
    turn_completed        requests int64
    turn_failed           phase, error_class, error
    request               request_id, attempt int64, fingerprint, history_revision int64,
                          projected_tokens int64, phase, message_count int64, history_length int64,
                          model, fixed_tokens int64, projection_source, handoff_included bool
    assistant_message     message_id, request_id, text, reasoning, finish_reason,
                          tool_call_count int64, tool_calls_json
    tool_calls            one row per tool call of an assistant message: request_id, message_id,
                          call_index int64, call_id, tool_name, arguments_json (as the model sent it)
    usage                 request_id, prompt_tokens, completion_tokens, total_tokens,
                          cached_prompt_tokens (cache reads), cache_write_tokens (int64,
                          null when the provider gave none)
    tool_result           call_id, tool_name, status, effect, text, original_chars int64,
                          truncated bool, blobs int64, files_json, content_json
    provider_error        request_id, error_class, output_delivered bool, message,
                          status_code int64, retry_after_ms int64, retry_wait_ms int64
    context_slimmed       mode, removed_count int64, tokens_saved int64, marker_id, marker_text,
                          removed_call_ids_json
    handoff               epoch int64, message_id, observed_tokens int64, input_budget int64,
                          handoff_threshold int64, compaction_threshold int64 (from the record),
                          record_json
    compaction_failed     epoch int64, attempt int64, reason, consecutive_failures int64, trigger,
                          detail, workspace
    checkpoint_committed  epoch int64, through_seq int64, trigger, strategy, source_tokens int64,
                          replacement_tokens int64, reduction_tokens int64 (source - replacement),
                          replacement_message_count int64, attempts int64, target_tokens int64,
                          model_usage_tokens int64 (these three from its diagnostics),
                          source_hash, prompt_version, raw_summary, files_restored_json,
                          diagnostics_json, carried_json, replacement_messages_json
    owner_changed         host_id, lease_revision int64, previous_host
    blobs                 one row per blob a line references: kind, location (`content[2]`,
                          `replacement_messages[0].content[1]`), sha256, size int64 (bytes),
                          media_type, chars int64; the bytes are at STORE/blobs/<sha256[:2]>/<sha256[2:]>
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec
from msgspec import UNSET

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
    ToolResult,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import BlobPart, ImagePart, Message, Part, TextPart

#: the table format's version, in the manifest; a column is never renamed or retyped within one
SCHEMA_VERSION = 1

#: column types: string, int64, bool, timestamp[ms, UTC], JSON text (a string column)
STR, INT, BOOL, TS, JSON = "string", "int64", "bool", "timestamp", "json"

KEY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("sid", STR),
    ("seq", INT),
    ("pos", INT),
    ("ts", TS),
    ("turn_id", STR),
)

#: every table's columns after the key columns, by table name (a kind's table: its tag with `_` for `-`)
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "events": (("kind", STR), ("request_id", STR), ("prev", STR)),
    "session_started": (
        ("workspace", STR),
        ("model", STR),
        ("context_window", INT),
        ("max_output_tokens", INT),
        ("parent_session", STR),
        ("parent_seq", INT),
        ("system_prompt", STR),
        ("tool_count", INT),
        ("tool_schemas_json", JSON),
        ("read_only_tools_json", JSON),
    ),
    "user_message": (
        ("message_id", STR),
        ("text", STR),
        ("parts", INT),
        ("images", INT),
        ("blobs", INT),
        ("content_json", JSON),
        ("idempotency_key", STR),
    ),
    "turn_started": (("message_id", STR),),
    "turn_completed": (("requests", INT),),
    "turn_failed": (("phase", STR), ("error_class", STR), ("error", STR)),
    "request": (
        ("request_id", STR),
        ("attempt", INT),
        ("fingerprint", STR),
        ("history_revision", INT),
        ("projected_tokens", INT),
        ("phase", STR),
        ("message_count", INT),
        ("history_length", INT),
        ("model", STR),
        ("fixed_tokens", INT),
        ("projection_source", STR),
        ("handoff_included", BOOL),
    ),
    "assistant_message": (
        ("message_id", STR),
        ("request_id", STR),
        ("text", STR),
        ("reasoning", STR),
        ("finish_reason", STR),
        ("tool_call_count", INT),
        ("tool_calls_json", JSON),
    ),
    "tool_calls": (
        ("request_id", STR),
        ("message_id", STR),
        ("call_index", INT),
        ("call_id", STR),
        ("tool_name", STR),
        ("arguments_json", JSON),
    ),
    "usage": (
        ("request_id", STR),
        ("prompt_tokens", INT),
        ("completion_tokens", INT),
        ("total_tokens", INT),
        ("cached_prompt_tokens", INT),
        ("cache_write_tokens", INT),
    ),
    "tool_result": (
        ("call_id", STR),
        ("tool_name", STR),
        ("status", STR),
        ("effect", STR),
        ("text", STR),
        ("original_chars", INT),
        ("truncated", BOOL),
        ("blobs", INT),
        ("files_json", JSON),
        ("content_json", JSON),
    ),
    "provider_error": (
        ("request_id", STR),
        ("error_class", STR),
        ("output_delivered", BOOL),
        ("message", STR),
        ("status_code", INT),
        ("retry_after_ms", INT),
        ("retry_wait_ms", INT),
    ),
    "context_slimmed": (
        ("mode", STR),
        ("removed_count", INT),
        ("tokens_saved", INT),
        ("marker_id", STR),
        ("marker_text", STR),
        ("removed_call_ids_json", JSON),
    ),
    "handoff": (
        ("epoch", INT),
        ("message_id", STR),
        ("observed_tokens", INT),
        ("input_budget", INT),
        ("handoff_threshold", INT),
        ("compaction_threshold", INT),
        ("record_json", JSON),
    ),
    "compaction_failed": (
        ("epoch", INT),
        ("attempt", INT),
        ("reason", STR),
        ("consecutive_failures", INT),
        ("trigger", STR),
        ("detail", STR),
        ("workspace", STR),
    ),
    "checkpoint_committed": (
        ("epoch", INT),
        ("through_seq", INT),
        ("trigger", STR),
        ("strategy", STR),
        ("source_tokens", INT),
        ("replacement_tokens", INT),
        ("reduction_tokens", INT),
        ("replacement_message_count", INT),
        ("attempts", INT),
        ("target_tokens", INT),
        ("model_usage_tokens", INT),
        ("source_hash", STR),
        ("prompt_version", STR),
        ("raw_summary", STR),
        ("files_restored_json", JSON),
        ("diagnostics_json", JSON),
        ("carried_json", JSON),
        ("replacement_messages_json", JSON),
    ),
    "owner_changed": (("host_id", STR), ("lease_revision", INT), ("previous_host", STR)),
    "blobs": (
        ("kind", STR),
        ("location", STR),
        ("sha256", STR),
        ("size", INT),
        ("media_type", STR),
        ("chars", INT),
    ),
}

#: the tables in the order they are listed and written
TABLES: tuple[str, ...] = tuple(COLUMNS)


def table_of(kind: str) -> str:
    """The table of a kind's rows: its tag with `_` for `-` (`tool-result` -> `tool_result`)."""
    return kind.replace("-", "_")


def columns(table: str) -> tuple[tuple[str, str], ...]:
    """All columns of `table`, key columns first."""
    return KEY_COLUMNS + COLUMNS[table]


_encode = msgspec.json.encode


def _json(value: Any) -> str:
    return _encode(value).decode()


@dataclass(slots=True)
class TurnFold:
    """Which turn each event of one session belongs to (see the module doc): O(one turn) memory."""

    open_turn: str | None = None
    request_turns: dict[str, str] = field(default_factory=dict)

    def turn_of(self, event: EventBase) -> str | None:
        """Apply `event` and return its turn (call once per event, in seq order)."""
        if isinstance(event, TurnStarted):
            self.open_turn = event.turn_id
            self.request_turns.clear()
            return event.turn_id
        if isinstance(event, TurnCompleted | TurnFailed):
            self.open_turn = None
            return event.turn_id
        if isinstance(event, Request):
            self.request_turns[event.request_id] = event.turn_id
            return event.turn_id
        request_id = getattr(event, "request_id", None)
        if isinstance(request_id, str) and request_id in self.request_turns:
            return self.request_turns[request_id]
        return self.open_turn


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
            return {"message_id": event.message_id}
        case TurnCompleted():
            return {"requests": event.requests}
        case TurnFailed():
            return {"phase": event.phase, "error_class": event.error_class, "error": event.error}
        case Request():
            fields = msgspec.structs.asdict(event)
            del fields["turn_id"]
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


def rows_of(record: Record, turn_id: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every row `record` makes, as (table, row): its `events` row, its kind's row, tool calls, blobs."""
    event = record.event
    kind = record.kind
    ts = record.ts if -MAX_TS_MS - 1 <= record.ts <= MAX_TS_MS else None
    keys = {"sid": record.sid, "seq": record.seq, "pos": record.pos, "ts": ts, "turn_id": turn_id}
    request_id = getattr(event, "request_id", None)
    yield "events", {**keys, "kind": kind, "request_id": request_id, "prev": record.prev}
    yield table_of(kind), {**keys, **body_row(event)}
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
