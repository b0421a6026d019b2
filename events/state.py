"""SessionState and its fold: `evolve(state, record)` and `replay(records)`.

`SessionState` is what a session knows after folding its log: its settings,
its *effective context* (the latest checkpoint's replacement plus every
message recorded after it, K3) and the small derived state the policies read.
It never holds the canonical history: that stays on disk (DESIGN §2.6).

Fold rules, one per kind (refuse in decide, never here: every well-formed
event applies):

| kind                 | effect                                                        |
|----------------------|---------------------------------------------------------------|
| session-started      | settings                                                      |
| user-message         | append a user message; a turn in progress adds it to its task |
| turn-started         | open the turn, its task = the text of the message named       |
| turn-completed/failed| close the turn                                                |
| request              | becomes the last request; its usage is not yet known          |
| assistant-message    | append; marks a provider response (clears the reactive flag)  |
| usage                | attached to the last request when the ids match (P3, P6)      |
| tool-result          | append a tool message; file accesses become recent files      |
| provider-error       | nothing (the decision it causes is recorded by other events)  |
| context-slimmed      | remove the named tool turns, insert the marker, revision + 1  |
| handoff              | filed under the current epoch when its epoch is current (H3)  |
| compaction-failed    | the breaker's consecutive count and time                      |
| checkpoint-committed | context = replacement, new epoch, carried state from the event|
| owner-changed        | nothing (who serves the session is the cluster's business)    |

Stored token counts: `context_counts` runs beside `context`, one entry per
message: the `TokenCount` its event recorded (a checkpoint's
`replacement_counts` for its replacement; a tool result's `ShownCount` when
it has no `TokenCount`), or None. The fold only files
them; whether a count is trusted (its counter, the message as rendered) is
the reader's decision (`actors.session.view`). A state whose `context_counts`
is not as long as its `context` (built by hand) has none.

`replay` and `evolve` share one implementation (`_Fold.apply`); replay keeps
the accumulator mutable so folding n events costs O(n), evolve copies once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec
from msgspec import UNSET

from cairn.events.codec import Record
from cairn.events.kinds import (
    EVENT_TYPES,
    AssistantMessage,
    Carried,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    FileAccess,
    Handoff,
    OpenTurn,
    OwnerChanged,
    ProviderError,
    Request,
    SessionStarted,
    ShownCount,
    TokenCount,
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
from cairn.events.model import Message, MessageMeta, TextPart, text_of
from cairn.events.tool_turns import kept_indexes

#: How many distinct recent file accesses the state keeps (W1 filters, then takes 5).
RECENT_FILES_KEPT = 64


class SessionInfo(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """The settings a session was started with (from `session-started`)."""

    workspace: str
    model: str
    context_window: int | None = None
    max_output_tokens: int | None = None
    parent_session: str | None = None
    parent_seq: int | None = None
    system_prompt: str = ""
    tool_schemas: tuple[str, ...] = ()
    read_only_tools: tuple[str, ...] | None = None
    started_ts: int = 0


class SessionState(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    sid: str = ""
    info: SessionInfo | None = None
    last_seq: int = 0
    last_ts: int = 0
    context: tuple[Message, ...] = ()
    epoch: int = 0
    #: hand-off events filed under the current epoch, in log order (H3)
    epoch_handoffs: tuple[Handoff, ...] = ()
    last_request: Request | None = None
    last_request_seq: int = 0
    last_usage: Usage | None = None
    checkpoint_seq: int = 0
    carried: Carried = Carried()
    #: the stored count of each context message (None: none stored), beside `context`
    context_counts: tuple[TokenCount | ShownCount | None, ...] = ()

    @property
    def revision(self) -> int:
        """P5: increases on every destructive rewrite (checkpoint, slimming)."""
        return self.carried.revision

    @property
    def open_turn(self) -> OpenTurn | None:
        return self.carried.open_turn


class _Fold:
    """The mutable accumulator behind `evolve` and `replay`.

    The carried state is kept unpacked while folding and packed into a
    `Carried` only when frozen: replay is a hot path (DESIGN §2.6).
    """

    __slots__ = (
        "checkpoint_seq",
        "compaction_failures",
        "context",
        "counts",
        "epoch",
        "epoch_handoffs",
        "info",
        "last_compaction_failure_ts",
        "last_request",
        "last_request_seq",
        "last_response_ts",
        "last_seq",
        "last_ts",
        "last_usage",
        "open_turn",
        "reactive_since_response",
        "recent_files",
        "revision",
        "sid",
    )

    def __init__(self, state: SessionState) -> None:
        self.sid = state.sid
        self.info = state.info
        self.last_seq = state.last_seq
        self.last_ts = state.last_ts
        self.context: list[Message] = list(state.context)
        counts = state.context_counts
        self.counts: list[TokenCount | ShownCount | None] = (
            list(counts) if len(counts) == len(self.context) else [None] * len(self.context)
        )
        self.epoch = state.epoch
        self.epoch_handoffs: list[Handoff] = list(state.epoch_handoffs)
        self.last_request = state.last_request
        self.last_request_seq = state.last_request_seq
        self.last_usage = state.last_usage
        self.checkpoint_seq = state.checkpoint_seq
        self._unpack(state.carried)

    def _unpack(self, carried: Carried) -> None:
        self.revision = carried.revision
        self.recent_files = carried.recent_files
        self.compaction_failures = carried.compaction_failures
        self.last_compaction_failure_ts = carried.last_compaction_failure_ts
        self.last_response_ts = carried.last_response_ts
        self.open_turn = carried.open_turn
        self.reactive_since_response = carried.reactive_since_response

    def freeze(self) -> SessionState:
        return SessionState(
            sid=self.sid,
            info=self.info,
            last_seq=self.last_seq,
            last_ts=self.last_ts,
            context=tuple(self.context),
            epoch=self.epoch,
            epoch_handoffs=tuple(self.epoch_handoffs),
            last_request=self.last_request,
            last_request_seq=self.last_request_seq,
            last_usage=self.last_usage,
            checkpoint_seq=self.checkpoint_seq,
            context_counts=tuple(self.counts),
            carried=Carried(
                revision=self.revision,
                recent_files=self.recent_files,
                compaction_failures=self.compaction_failures,
                last_compaction_failure_ts=self.last_compaction_failure_ts,
                last_response_ts=self.last_response_ts,
                open_turn=self.open_turn,
                reactive_since_response=self.reactive_since_response,
            ),
        )

    def apply(self, record: Record) -> None:
        self.sid = record.sid
        self.last_seq = record.seq
        self.last_ts = record.ts
        event = record.event
        _APPLY[type(event)](self, event, record)

    # one method per kind, registered in _APPLY below

    def _user_message(self, event: UserMessage, record: Record) -> None:
        self.context.append(
            Message(role="user", content=event.content, id=event.message_id, meta=MessageMeta(record.seq))
        )
        tokens = event.tokens
        self.counts.append(None if tokens is UNSET else tokens)
        turn = self.open_turn
        if turn is not None:
            task = (*turn.task, text_of(event.content))
            self.open_turn = OpenTurn(turn.turn_id, turn.started_seq, task)

    def _assistant_message(self, event: AssistantMessage, record: Record) -> None:
        self.context.append(
            Message(
                role="assistant",
                content=event.text,
                reasoning=event.reasoning,
                tool_calls=event.tool_calls,
                id=event.message_id,
                meta=MessageMeta(record.seq),
                reasoning_blocks=() if event.reasoning_blocks is UNSET else event.reasoning_blocks,
            )
        )
        tokens = event.tokens
        self.counts.append(None if tokens is UNSET else tokens)
        self.last_response_ts = record.ts
        self.reactive_since_response = False

    def _tool_result(self, event: ToolResult, record: Record) -> None:
        self.context.append(
            Message(
                role="tool",
                content=event.content,
                tool_call_id=event.call_id,
                name=event.tool_name,
                meta=MessageMeta(
                    seq=record.seq,
                    tool_status=event.status,
                    tool_effect=event.effect,
                    original_chars=event.original_chars,
                    truncated=event.truncated,
                ),
            )
        )
        tokens = event.tokens
        if tokens is UNSET:
            shown = event.shown_tokens
            self.counts.append(None if shown is UNSET else shown)
        else:
            self.counts.append(tokens)
        if event.files:
            self.recent_files = _remember_files(self.recent_files, event, record.ts)

    def _request(self, event: Request, record: Record) -> None:
        self.last_request = event
        self.last_request_seq = record.seq
        self.last_usage = None

    def _usage(self, event: Usage, record: Record) -> None:
        if self.last_request is not None and event.request_id == self.last_request.request_id:
            self.last_usage = event

    def _turn_started(self, event: TurnStarted, record: Record) -> None:
        task: tuple[str, ...] = ()
        for message in reversed(self.context):
            if message.role == "user" and message.id == event.message_id:
                task = (text_of(message.content),)
                break
        self.open_turn = OpenTurn(event.turn_id, record.seq, task)

    def _turn_ended(self, event: TurnCompleted | TurnFailed | TurnCancelled, record: Record) -> None:
        if self.open_turn is not None and self.open_turn.turn_id == event.turn_id:
            self.open_turn = None

    def _handoff(self, event: Handoff, record: Record) -> None:
        if event.epoch == self.epoch:
            self.epoch_handoffs.append(event)

    def _compaction_failed(self, event: CompactionFailed, record: Record) -> None:
        if event.reason != "blocked":
            self.compaction_failures = event.consecutive_failures
            self.last_compaction_failure_ts = record.ts

    def _checkpoint(self, event: CheckpointCommitted, record: Record) -> None:
        self.context = list(event.replacement_messages)
        stored = event.replacement_counts
        self.counts = (
            [None] * len(self.context)
            if stored is UNSET
            else [TokenCount(count, stored.counter) for count in stored.counts]
        )
        self.epoch = event.epoch
        self.epoch_handoffs = []
        self.checkpoint_seq = record.seq
        self.last_request = None
        self.last_request_seq = 0
        self.last_usage = None
        self._unpack(event.carried)

    def _session_started(self, event: SessionStarted, record: Record) -> None:
        self.info = SessionInfo(
            workspace=event.workspace,
            model=event.model,
            context_window=event.context_window,
            max_output_tokens=event.max_output_tokens,
            parent_session=event.parent_session,
            parent_seq=event.parent_seq,
            system_prompt=event.system_prompt,
            tool_schemas=event.tool_schemas,
            read_only_tools=event.read_only_tools,
            started_ts=record.ts,
        )

    def _provider_error(self, event: ProviderError, record: Record) -> None:
        pass

    def _owner_changed(self, event: OwnerChanged, record: Record) -> None:
        pass

    def _tool_deferred(self, event: ToolDeferred, record: Record) -> None:
        pass  # the wait is read from the open turn's records when the session loads (`deferred`)

    def _turn_dismissed(self, event: TurnDismissed, record: Record) -> None:
        pass  # for `interrupted_turns` only: the context and the open turn are as they were

    def _slimmed(self, event: ContextSlimmed, record: Record) -> None:
        keep, first_removed = kept_indexes(self.context, event.removed_call_ids)
        context, counts = self.context, self.counts
        kept = [context[index] for index in keep]
        kept_counts = [counts[index] for index in keep]
        if first_removed is not None and event.marker_text:
            marker = Message(
                role="system",
                content=event.marker_text,
                id=event.marker_id,
                meta=MessageMeta(seq=record.seq, origin="snip-marker"),
            )
            kept.insert(first_removed, marker)
            kept_counts.insert(first_removed, None)
        self.context = kept
        self.counts = kept_counts
        self.revision += 1


_APPLY: dict[type, Callable[[_Fold, Any, Record], None]] = {
    SessionStarted: _Fold._session_started,
    UserMessage: _Fold._user_message,
    TurnStarted: _Fold._turn_started,
    TurnCompleted: _Fold._turn_ended,
    TurnFailed: _Fold._turn_ended,
    TurnCancelled: _Fold._turn_ended,
    Request: _Fold._request,
    AssistantMessage: _Fold._assistant_message,
    Usage: _Fold._usage,
    ToolResult: _Fold._tool_result,
    ProviderError: _Fold._provider_error,
    ContextSlimmed: _Fold._slimmed,
    Handoff: _Fold._handoff,
    CompactionFailed: _Fold._compaction_failed,
    CheckpointCommitted: _Fold._checkpoint,
    OwnerChanged: _Fold._owner_changed,
    TurnDismissed: _Fold._turn_dismissed,
    ToolDeferred: _Fold._tool_deferred,
}
assert set(_APPLY) == set(EVENT_TYPES), "every event kind needs a fold rule"


def _remember_files(recent: tuple[FileAccess, ...], event: ToolResult, ts: int) -> tuple[FileAccess, ...]:
    """Newest first, one entry per path, at most RECENT_FILES_KEPT."""
    fresh = [msgspec.structs.replace(access, ts=ts) for access in reversed(event.files)]
    seen = {access.path for access in fresh}
    merged = fresh + [access for access in recent if access.path not in seen]
    return tuple(merged[:RECENT_FILES_KEPT])


def evolve(state: SessionState, record: Record) -> SessionState:
    """Apply one recorded event. Total and pure: every well-formed event applies."""
    fold = _Fold(state)
    fold.apply(record)
    return fold.freeze()


class Replayer:
    """Folds records fed in pages onto a state: replay without holding the whole history.

    `feed` applies each record with the same per-kind rules as `evolve`;
    `state()` freezes the result (cheap to call once at the end, O(context)
    each time). Owned by one thread.
    """

    __slots__ = ("_fold",)

    def __init__(self, state: SessionState | None = None) -> None:
        self._fold = _Fold(state if state is not None else SessionState())

    def feed(self, records: Iterable[Record]) -> None:
        fold = self._fold
        rules = _APPLY
        record = None
        for record in records:  # no rule reads last_seq / last_ts: they are set once, after
            event = record.event
            rules[type(event)](fold, event, record)
        if record is not None:
            fold.sid = record.sid
            fold.last_seq = record.seq
            fold.last_ts = record.ts

    def state(self) -> SessionState:
        return self._fold.freeze()


def replay(records: Iterable[Record], state: SessionState | None = None) -> SessionState:
    """Fold records (in seq order) onto `state` (an empty session by default)."""
    replayer = Replayer(state)
    replayer.feed(records)
    return replayer.state()


def user_text_message(message_id: str, text: str) -> UserMessage:
    """Convenience for hosts and tests: a plain-text user message event."""
    return UserMessage(message_id=message_id, content=(TextPart(text),))


def carried_for_checkpoint(state: SessionState, *, reset_breaker: bool) -> Carried:
    """The `carried` value a new checkpoint must hold so replay from it is complete.

    A checkpoint is a destructive rewrite, so the revision goes up (P5); an
    LLM success resets the breaker's count (C4), a fallback keeps it.
    """
    carried = state.carried
    return msgspec.structs.replace(
        carried,
        revision=carried.revision + 1,
        compaction_failures=0 if reset_breaker else carried.compaction_failures,
        last_compaction_failure_ts=None if reset_breaker else carried.last_compaction_failure_ts,
    )
