"""The export's tables: their names and columns (`cairn.audit.table_rows` makes their rows).

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
The fold (`table_rows.TurnFold`) keeps only the current turn's requests, so
memory does not grow with the session.

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
    turn_started          message_id, continues (the interrupted turn it continues, or null)
    turn_completed        requests int64
    turn_failed           phase, error_class, error
    turn_cancelled        reason
    turn_dismissed        reason (turn_id: the interrupted turn dismissed)
    tool_deferred         call_id, tool_name, timeout_ms int64 (a result the turn waits for)
    request               request_id, attempt int64, fingerprint, history_revision int64,
                          projected_tokens int64, phase, message_count int64, history_length int64,
                          model, fixed_tokens int64, projection_source, handoff_included bool,
                          counted_tokens int64 (cairn's own count of the request; null in older logs)
    assistant_message     message_id, request_id, text, reasoning, finish_reason,
                          tool_call_count int64, tool_calls_json, first_output_ms int64 and
                          response_ms int64 (from sending the request to the first output and
                          to the answer's end; null in older logs)
    tool_calls            one row per tool call of an assistant message: request_id, message_id,
                          call_index int64, call_id, tool_name, arguments_json (as the model sent it)
    usage                 request_id, prompt_tokens, completion_tokens, total_tokens,
                          cached_prompt_tokens (cache reads), cache_write_tokens (int64,
                          null when the provider gave none), and of its request: model,
                          first_output_ms, response_ms (null when not in the log); cost_micros
                          int64 (millionths of the currency of `--prices FILE`; null without
                          one, or for a model it does not price)
    tool_result           call_id, tool_name, status, effect, text, original_chars int64,
                          truncated bool, blobs int64, files_json, content_json, server and
                          server_tool (the MCP server that ran it and the tool's name there;
                          null for the host's own tools)
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
    "turn_started": (("message_id", STR), ("continues", STR)),
    "turn_completed": (("requests", INT),),
    "turn_failed": (("phase", STR), ("error_class", STR), ("error", STR)),
    "turn_cancelled": (("reason", STR),),
    "turn_dismissed": (("reason", STR),),
    "tool_deferred": (("call_id", STR), ("tool_name", STR), ("timeout_ms", INT)),
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
        ("counted_tokens", INT),
    ),
    "assistant_message": (
        ("message_id", STR),
        ("request_id", STR),
        ("text", STR),
        ("reasoning", STR),
        ("finish_reason", STR),
        ("tool_call_count", INT),
        ("tool_calls_json", JSON),
        ("first_output_ms", INT),
        ("response_ms", INT),
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
        ("model", STR),
        ("first_output_ms", INT),
        ("response_ms", INT),
        ("cost_micros", INT),
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
        ("server", STR),
        ("server_tool", STR),
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
