"""Every event kind of the log (DESIGN §2.1), one frozen Struct each, in one union.

Tags are spelled out and never derived from class names (PITFALLS 22): they
are part of the on-disk format. Schema evolution: a new field gets a default,
a field never changes type, a tag is never reused.

Invariants that make an event unusable are checked in `__post_init__`, which
msgspec runs on construction and on decode alike, so a bad event is refused
when it is written and again when it is replayed (K1); they raise
`InvalidEvent` (a ValueError, which msgspec's decode reports as a
ValidationError). msgspec checks no types at construction: the journal
refuses an event whose fields have the wrong type when it round-trips it
before writing (`events.codec.checked_body`). Every int is a signed 64-bit
integer (`Int64`); epochs are never negative.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from cairn.events.errors import InvalidEvent
from cairn.events.model import (
    Int64,
    Message,
    Part,
    ReasoningBlock,
    ToolCall,
    ToolEffect,
    ToolStatus,
    shape_problem,
)

# the values events carry live in `events.values`; callers import them from here too
from cairn.events.values import Carried as Carried
from cairn.events.values import CheckpointDiagnostics as CheckpointDiagnostics
from cairn.events.values import FileAccess as FileAccess
from cairn.events.values import FileOp as FileOp
from cairn.events.values import OpenTurn as OpenTurn
from cairn.events.values import ShownCount as ShownCount
from cairn.events.values import TokenCount as TokenCount
from cairn.events.values import TokenCounts as TokenCounts

#: K1 limits on a checkpoint's replacement.
MAX_REPLACEMENT_MESSAGES = 4096
MAX_REPLACEMENT_BYTES = 16 * 1024 * 1024
CHECKPOINT_VERSION = 1
HANDOFF_VERSION = 1

FailedPhase = Literal["provider", "compaction", "checkpoint", "tool", "interrupted"]
ErrorClass = Literal["context-limit", "rate-limit", "server", "network", "auth", "bad-request"]
SlimMode = Literal["micro", "snip"]
#: `malformed`: a summary without all seven ledger headings (C7); added later, older logs lack it
FailureReason = Literal["empty", "overflow", "insufficient-reduction", "error", "blocked", "malformed"]
Trigger = Literal["threshold", "reactive", "manual"]
Strategy = Literal["llm", "fallback"]
#: a compaction epoch: 0, 1, 2, ... (the index keys checkpoints by it as an unsigned integer)
Epoch = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


class EventBase(msgspec.Struct, frozen=True, gc=False, tag_field="kind", kw_only=True):
    """Base of every event body. The log line adds the envelope (see codec)."""


class SessionStarted(EventBase, frozen=True, tag="session-started"):
    workspace: str
    model: str
    context_window: Int64 | None = None
    max_output_tokens: Int64 | None = None
    parent_session: str | None = None
    parent_seq: Int64 | None = None
    system_prompt: str = ""
    #: tool schemas as canonical JSON strings, in the order they are sent
    tool_schemas: tuple[str, ...] = ()
    #: S2: tools the host declares read-only (None: the default names)
    read_only_tools: tuple[str, ...] | None = None


class UserMessage(EventBase, frozen=True, tag="user-message"):
    message_id: str
    content: tuple[Part, ...]
    #: the count of the message this makes (added later: older lines lack it, and it is never null)
    tokens: TokenCount | UnsetType = UNSET
    #: the key the host sent it with (`Host.send(idempotency_key=...)`): a send with the same key
    #: is answered from this message's turn, never recorded again (added later: absent when none)
    idempotency_key: str | UnsetType = UNSET


class TurnStarted(EventBase, frozen=True, tag="turn-started"):
    turn_id: str
    message_id: str = ""
    #: the interrupted turn this one continues (`Host.continue_turn`), its message `message_id`;
    #: absent for a turn a user message started (added later: older logs have none)
    continues: str | UnsetType = UNSET


class TurnCompleted(EventBase, frozen=True, tag="turn-completed"):
    turn_id: str
    requests: Int64 = 0


class TurnFailed(EventBase, frozen=True, tag="turn-failed"):
    turn_id: str
    phase: FailedPhase
    error_class: str = ""
    error: str = ""


class TurnCancelled(EventBase, frozen=True, tag="turn-cancelled"):
    """The host cancelled the turn (`Turn.cancel`, or a message sent with `mid_turn="interrupt"`).

    It ended on purpose: not a failure, and not a turn a crash interrupted.
    Calls of the turn left unanswered are closed with error results first.
    Added later: older logs have none.
    """

    turn_id: str
    #: why, as the host said it (may be empty)
    reason: str = ""


class ToolDeferred(EventBase, frozen=True, tag="tool-deferred"):
    """A tool's executor deferred the result of call `call_id` (`tools.Deferred`): the turn waits for
    the host to post it (`Host.resolve_tool`, a client-side tool, an approval) for at most
    `timeout_ms` from this record's time. A log that ends in such a wait is not an interrupted
    turn: loading the session resumes the wait. Added later: older logs have none."""

    call_id: str
    tool_name: str
    timeout_ms: Int64


class TurnDismissed(EventBase, frozen=True, tag="turn-dismissed"):
    """The host dismissed an interrupted turn (`Host.dismiss_interrupted`): it is no longer one to
    continue. Nothing else changes: the fold keeps nothing of it. Added later: older logs have none."""

    turn_id: str
    reason: str = ""


class Request(EventBase, frozen=True, tag="request"):
    request_id: str
    turn_id: str
    attempt: Int64
    fingerprint: str
    history_revision: Int64
    projected_tokens: Int64 | None
    phase: str
    message_count: Int64
    #: P3 baseline pieces: history messages sent, model, fixed tokens, source
    history_length: Int64 = 0
    model: str = ""
    fixed_tokens: Int64 = 0
    projection_source: str = ""
    handoff_included: bool = False
    #: cairn's own count of the request as sent (fixed + history as shown + the hand-off), whatever
    #: the projection's source: beside the provider's count in `usage`, how the two tokenizers
    #: differ (added later: older lines lack it)
    counted_tokens: Int64 | UnsetType = UNSET


class AssistantMessage(EventBase, frozen=True, tag="assistant-message"):
    message_id: str
    request_id: str
    text: str = ""
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    #: the count of the message this makes (added later: older lines lack it, and it is never null)
    tokens: TokenCount | UnsetType = UNSET
    #: the reasoning as signed blocks, sent back to a provider that wants them (Anthropic's extended
    #: thinking); added later, omitted when there are none, so older lines read back the same
    reasoning_blocks: tuple[ReasoningBlock, ...] | UnsetType = UNSET
    #: ms from sending the request to the provider's first output, and to the end of its answer, on
    #: the host's clock (added later: older lines lack them)
    first_output_ms: Int64 | UnsetType = UNSET
    response_ms: Int64 | UnsetType = UNSET


class Usage(EventBase, frozen=True, tag="usage"):
    request_id: str
    prompt_tokens: Int64 | None = None
    completion_tokens: Int64 | None = None
    total_tokens: Int64 | None = None
    #: prompt tokens read from the provider's prompt cache (part of `prompt_tokens`)
    cached_prompt_tokens: Int64 | None = None
    #: prompt tokens written to the provider's prompt cache (part of `prompt_tokens`); added
    #: later, omitted when the provider reported none (older lines lack it; never null)
    cache_write_tokens: Int64 | UnsetType = UNSET

    def whole_prompt(self) -> int | None:
        """The whole prompt: uncached input + cache reads + cache writes (None: unknown).

        `prompt_tokens` is the whole prompt by convention (as OpenAI counts its
        cached tokens in it, and as the Anthropic adapter sums input, cache read
        and cache write), so it is taken as it is when it holds the cache
        figures. A report smaller than its own cache figures cannot hold them:
        it counted only the uncached input (Anthropic's raw `input_tokens`), so
        they are added, never left out (a floor may overcount, never undercount).
        With no `prompt_tokens`, the cache figures alone are the prompt's lower
        bound. Only non-negative integers count (P1).
        """
        prompt = _usable(self.prompt_tokens)
        reads = _usable(self.cached_prompt_tokens)
        writes = _usable(self.cache_write_tokens)
        if prompt is None and reads is None and writes is None:
            return None
        cached = (reads or 0) + (writes or 0)
        if prompt is None:
            return cached
        return prompt if prompt >= cached else prompt + cached


def _usable(value: object) -> int | None:
    """A usage figure that counts: a non-negative int (not a bool); None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class ToolResult(EventBase, frozen=True, tag="tool-result"):
    call_id: str
    tool_name: str
    status: ToolStatus
    effect: ToolEffect
    content: tuple[Part, ...]
    original_chars: Int64 = 0
    truncated: bool = False
    files: tuple[FileAccess, ...] = ()
    #: the count of the message this makes (added later: older lines lack it, and it is never null)
    tokens: TokenCount | UnsetType = UNSET
    #: for a result too large to show whole, the count of what is shown instead (added later, like `tokens`)
    shown_tokens: ShownCount | UnsetType = UNSET
    #: what ran the call when not the host itself (an MCP server's name), and the tool's name there
    #: (added later, like `tokens`; absent for the host's own tools)
    server: str | UnsetType = UNSET
    server_tool: str | UnsetType = UNSET


class ProviderError(EventBase, frozen=True, tag="provider-error"):
    request_id: str
    error_class: ErrorClass
    output_delivered: bool
    message: str = ""
    status_code: Int64 | None = None
    #: the server's hint of when to try again (`retry-after-ms` / `Retry-After`), in ms
    retry_after_ms: Int64 | None = None
    #: the wait before the request was sent again, in ms; None when it was not retried
    retry_wait_ms: Int64 | None = None


class ContextSlimmed(EventBase, frozen=True, tag="context-slimmed"):
    mode: SlimMode
    removed_call_ids: tuple[str, ...]
    tokens_saved: Int64
    #: S1: the system marker put where the first removed message was
    marker_id: str = ""
    marker_text: str = ""


class Handoff(EventBase, frozen=True, tag="handoff"):
    """A hand-off record (H1) of compaction epoch `epoch`.

    `record` is kept as the raw JSON object so that strict validation (H2) can
    see extra or missing fields; the session's policy validates it, the fold
    only files it under its epoch.
    """

    epoch: Epoch
    record: msgspec.Raw

    def __post_init__(self) -> None:
        problem = raw_object_problem(self.record)
        if problem is not None:
            raise InvalidEvent(f"hand-off record: {problem}")


def raw_object_problem(raw: object) -> str | None:
    """Why `raw` cannot stand in a line as a raw JSON object, or None when it can.

    msgspec writes a Raw's bytes into the line as they are, and on decode checks
    little more than where the value ends: so the bytes must be one JSON object
    in valid UTF-8, with no lone surrogate escape, and with no raw line break
    (JSON allows one between tokens; it would split the log line in two).
    """
    if not isinstance(raw, msgspec.Raw):
        return f"expected msgspec.Raw, got {type(raw).__name__}"
    data = bytes(raw)
    if b"\n" in data or b"\r" in data:
        return "a raw line break (CR or LF) between JSON tokens"
    if data[:1] != b"{" or data[-1:] != b"}":
        return "not a JSON object (it must start with '{' and end with '}', no whitespace around)"
    try:
        value = _raw_decoder.decode(data)
    except msgspec.DecodeError as exc:
        return f"not valid JSON of valid Unicode ({exc})"
    except RecursionError:
        return "JSON nested too deeply"
    if not isinstance(value, dict):
        return "not a JSON object"
    return None


_raw_decoder = msgspec.json.Decoder()


class CompactionFailed(EventBase, frozen=True, tag="compaction-failed"):
    epoch: Epoch
    attempt: Int64
    reason: FailureReason
    consecutive_failures: Int64
    trigger: Trigger = "threshold"
    detail: str = ""
    #: the breaker's key (C4): the normalized workspace the failure counts for
    workspace: str = ""


class CheckpointCommitted(EventBase, frozen=True, tag="checkpoint-committed"):
    version: Int64
    epoch: Epoch
    through_seq: Int64
    trigger: Trigger
    strategy: Strategy
    source_tokens: Int64
    replacement_tokens: Int64
    replacement_messages: tuple[Message, ...]
    files_restored: tuple[str, ...] = ()
    source_hash: str = ""
    prompt_version: str = ""
    raw_summary: str | None = None
    diagnostics: CheckpointDiagnostics = CheckpointDiagnostics()
    carried: Carried = Carried()
    #: the count of each replacement message (added later: older lines lack it, never null)
    replacement_counts: TokenCounts | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.version != CHECKPOINT_VERSION:
            raise InvalidEvent(f"unsupported checkpoint version {self.version}")
        count = len(self.replacement_messages)
        if not 1 <= count <= MAX_REPLACEMENT_MESSAGES:
            raise InvalidEvent(
                f"a checkpoint needs 1..{MAX_REPLACEMENT_MESSAGES} replacement messages, got {count}"
            )
        counts = self.replacement_counts
        if isinstance(counts, TokenCounts) and len(counts.counts) != count:
            raise InvalidEvent(f"{len(counts.counts)} replacement counts for {count} replacement messages")
        for index, message in enumerate(self.replacement_messages):
            problem = shape_problem(message)
            if problem is not None:
                raise InvalidEvent(f"replacement message {index}: {problem}")
        try:
            size = len(msgspec.json.encode(self.replacement_messages))
        except (TypeError, ValueError) as exc:  # a lone surrogate, a value with no JSON form
            raise InvalidEvent(f"replacement messages cannot be encoded: {exc}") from None
        if size > MAX_REPLACEMENT_BYTES:
            raise InvalidEvent(f"replacement messages encode to {size} bytes, over {MAX_REPLACEMENT_BYTES}")


class OwnerChanged(EventBase, frozen=True, tag="owner-changed"):
    """A host of a cluster took the session (DESIGN §5): written FIRST, before it serves it.

    Appended with the expected seq the new owner read, so any append of a
    previous owner after it fails the journal's guard (the fence). Hidden
    like the hand-off: never in the client stream, a fork or the model's
    context; the fold keeps nothing of it.
    """

    host_id: str
    #: the revision of the new owner's lease in the lease bucket
    lease_revision: Int64
    #: the host that held the session before, when the new owner knew it
    previous_host: str | None = None

    def __post_init__(self) -> None:
        if not self.host_id:
            raise InvalidEvent("owner-changed needs the new owner's host id")


Event = (
    SessionStarted
    | UserMessage
    | TurnStarted
    | TurnCompleted
    | TurnFailed
    | TurnCancelled
    | TurnDismissed
    | Request
    | AssistantMessage
    | Usage
    | ToolResult
    | ToolDeferred
    | ProviderError
    | ContextSlimmed
    | Handoff
    | CompactionFailed
    | CheckpointCommitted
    | OwnerChanged
)

EVENT_TYPES: tuple[type[EventBase], ...] = (
    SessionStarted,
    UserMessage,
    TurnStarted,
    TurnCompleted,
    TurnFailed,
    TurnCancelled,
    TurnDismissed,
    Request,
    AssistantMessage,
    Usage,
    ToolResult,
    ToolDeferred,
    ProviderError,
    ContextSlimmed,
    Handoff,
    CompactionFailed,
    CheckpointCommitted,
    OwnerChanged,
)

#: The kind-tag table, the one of the codebase: each kind by its tag (the on-disk name) ...
KINDS: dict[str, type[EventBase]] = {str(cls.__struct_config__.tag): cls for cls in EVENT_TYPES}
#: ... each kind's tag by its class (exactly these classes: a subclass would encode another tag) ...
TAG_OF: dict[type[EventBase], str] = {cls: tag for tag, cls in KINDS.items()}
#: ... and each kind's tag as a JSON string token, quotes included, as a line's envelope spells it
TAG_JSON: dict[type[EventBase], bytes] = {cls: msgspec.json.encode(tag) for cls, tag in TAG_OF.items()}


def kind_name(event: EventBase) -> str:
    """The tag of an event's kind (`KeyError` for an object of no event class)."""
    return TAG_OF[type(event)]
