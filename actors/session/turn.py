"""Pure decisions of the turn loop: the events of each step, the verdict on a provider error, interruptions.

The session actor (turn_loop.py) carries these out: it persists what they
return, applies the acknowledged records with `evolve`, and only then runs
effects. Nothing here reads a clock, a file or a thread.

Ids are derived from the seq the event will take, so they are unique in the
session and the same on replay: user message `u<seq>`, turn `t<seq>`,
request `r<seq>`, assistant message `a<seq>`.

How a turn ends (`turn-failed` phase, or `turn-completed`):

| what happened                                                 | phase / end      |
|---------------------------------------------------------------|------------------|
| the model replied without tool calls (and no message waits)   | completed        |
| slimming not recorded; compaction failed, blocked or no smaller | `compaction`     |
| the checkpoint could not be written (K2)                      | `checkpoint`     |
| provider error not retried (C5) nor recovered (R1-R2), or the request/response not recorded | `provider` |
| reactive recovery found nothing smaller (R3): the original error | `provider`       |
| a tool result could not be recorded                           | `tool`           |
| the host stopped, or the process died, mid-turn               | `interrupted`    |
| the host cancelled it (`Turn.cancel`, `mid_turn="interrupt"`) | `turn-cancelled` |

The verdict on a provider error is `verdict.provider_verdict`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import UNSET

from cairn.actors.provider.base import UsageReport
from cairn.actors.session.settings import SessionSettings, session_started
from cairn.actors.session.tool_budget import TURN_LIMIT, bound_stored, content_chars, render_result
from cairn.actors.tools import ToolOutcome
from cairn.events.kinds import (
    AssistantMessage,
    EventBase,
    FailedPhase,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, Part, ReasoningBlock, ToolCall, parts_of
from cairn.events.state import SessionState

#: what the model is shown for a tool call whose outcome was lost with the process
INTERRUPTED_RESULT = "[the tool call was interrupted before its result was recorded; its outcome is unknown]"
#: what the model is shown for a tool call whose turn the host cancelled while it ran or waited
CANCELLED_RESULT = (
    "[the turn was cancelled before this tool call's result was recorded; its outcome is unknown]"
)
MAX_ERROR_CHARS = 2_000


UserContent = str | tuple[Part, ...]
"""What a host sends as a user message: text, or parts (text and images, M1)."""


def _text(content: UserContent) -> tuple[Part, ...]:
    return parts_of(content)


# --- starting a turn ------------------------------------------------------------------


def start_events(
    state: SessionState,
    texts: Sequence[UserContent],
    *,
    settings: SessionSettings | None = None,
    workspace: str | None = None,
    keys: Sequence[str | None] = (),
) -> tuple[list[EventBase], str]:
    """The events that open a turn with `texts` (the first opens it, the rest steer it), and its id.

    A session without `session-started` gets one first, from `settings` and
    `workspace`. The turn's task (C11) is the first text plus every later
    one (the fold adds user messages to the open turn). `keys` are the
    texts' idempotency keys, in order (None: none).
    """
    events: list[EventBase] = []
    seq = state.last_seq
    if state.info is None:
        if settings is None or workspace is None:
            raise ValueError("a new session needs settings and a workspace")
        events.append(session_started(settings, workspace))
        seq += 1
    first = f"u{seq + 1}"
    key_of = list(keys) + [None] * (len(texts) - len(keys))
    events.append(_user_message(first, texts[0], key_of[0]))
    turn_id = f"t{seq + 2}"
    events.append(TurnStarted(turn_id=turn_id, message_id=first))
    seq += 2
    for text, key in zip(texts[1:], key_of[1:], strict=True):
        seq += 1
        events.append(_user_message(f"u{seq}", text, key))
    return events, turn_id


def steering_events(
    state: SessionState, texts: Sequence[UserContent], keys: Sequence[str | None] = ()
) -> list[EventBase]:
    """User messages sent while a turn runs: recorded before its next request (C11 task)."""
    key_of = list(keys) + [None] * (len(texts) - len(keys))
    return [
        _user_message(f"u{state.last_seq + index + 1}", text, key)
        for index, (text, key) in enumerate(zip(texts, key_of, strict=True))
    ]


def _user_message(message_id: str, text: UserContent, key: str | None) -> UserMessage:
    if key is None:
        return UserMessage(message_id=message_id, content=_text(text))
    return UserMessage(message_id=message_id, content=_text(text), idempotency_key=key)


# --- a response and its tools -------------------------------------------------------------


def unique_calls(calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    """Tool calls with the first of any repeated id kept (K1: ids are unique within a message)."""
    seen: set[str] = set()
    kept: list[ToolCall] = []
    for call in calls:
        if call.id not in seen:
            seen.add(call.id)
            kept.append(call)
    return tuple(kept)


def response_events(
    state: SessionState,
    *,
    request_id: str,
    text: str,
    reasoning: str,
    calls: Sequence[ToolCall],
    usage: UsageReport | None,
    finish_reason: str | None,
    reasoning_blocks: Sequence[ReasoningBlock] = (),
    first_output_ms: int | None = None,
    response_ms: int | None = None,
) -> list[EventBase]:
    """The assistant message of a response, then its usage when the provider reported one. The
    times (ms from sending the request to its first output and to its end) are recorded when known."""
    events: list[EventBase] = [
        AssistantMessage(
            message_id=f"a{state.last_seq + 1}",
            request_id=request_id,
            text=text,
            reasoning=reasoning or None,
            tool_calls=unique_calls(calls),
            finish_reason=finish_reason,
            reasoning_blocks=tuple(reasoning_blocks) if reasoning_blocks else msgspec.UNSET,
            first_output_ms=msgspec.UNSET if first_output_ms is None else first_output_ms,
            response_ms=msgspec.UNSET if response_ms is None else response_ms,
        )
    ]
    if usage is not None:
        events.append(
            Usage(
                request_id=request_id,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                total_tokens=usage.total_tokens,
                cached_prompt_tokens=usage.cached_prompt_tokens,
                cache_write_tokens=UNSET if usage.cache_write_tokens is None else usage.cache_write_tokens,
            )
        )
    return events


def tool_result_event(
    call: ToolCall,
    outcome: ToolOutcome,
    *,
    read_only: frozenset[str],
    used: int,
    max_chars: int | None = None,
) -> tuple[ToolResult, int]:
    """The `tool-result` of one call, and the chars of the turn's X2 budget used after it.

    The content is recorded whole (X3) up to `max_chars` of text (the host's
    `max_tool_output_chars`; beyond, `bound_stored` keeps its two ends);
    `truncated` says whether the model sees less of it (X1/X2),
    `original_chars` how much the tool returned.
    """
    returned = _text(outcome.content) if isinstance(outcome.content, str) else outcome.content
    original = content_chars(returned)
    content = _text(bound_stored(returned, max_chars))
    effect = outcome.effect or ("read" if call.name in read_only else "write")
    message = Message(role="tool", content=content, tool_call_id=call.id, name=call.name)
    rendered, shown = render_result(message, max(0, TURN_LIMIT - used))
    event = ToolResult(
        call_id=call.id,
        tool_name=call.name,
        status=outcome.status,
        effect=effect,
        content=content,
        original_chars=original,
        truncated=rendered is not message,
        files=outcome.files,
        server=UNSET if outcome.server is None else outcome.server,
        server_tool=UNSET if outcome.server_tool is None else outcome.server_tool,
    )
    return event, used + shown


def error_outcome(text: str) -> ToolOutcome:
    return ToolOutcome(content=text[:MAX_ERROR_CHARS], status="error")


# --- ending a turn ---------------------------------------------------------------------------


def unanswered_calls(context: Sequence[Message]) -> tuple[ToolCall, ...]:
    """The calls of the latest assistant message that no tool result answers yet.

    Only the latest tool-calling message can be open: results are recorded
    right after it, before anything else.
    """
    answered: set[str] = set()
    for message in reversed(context):
        if message.role == "tool":
            answered.add(message.tool_call_id or "")
            continue
        if message.role == "assistant" and message.tool_calls:
            return tuple(call for call in message.tool_calls if call.id not in answered)
        if message.role in ("user", "assistant"):
            return ()
    return ()


def closing_results(state: SessionState, text: str = INTERRUPTED_RESULT) -> list[EventBase]:
    """Error results (saying `text`) for calls left unanswered, so the history stays a valid
    conversation (M2)."""
    return [
        ToolResult(
            call_id=call.id,
            tool_name=call.name,
            status="error",
            effect="read",
            content=_text(text),
            original_chars=len(text),
        )
        for call in unanswered_calls(state.context)
    ]


def failure_events(
    state: SessionState, turn_id: str, phase: FailedPhase, error_class: str = "", error: str = ""
) -> list[EventBase]:
    """Close a failed turn: results for unanswered calls, then `turn-failed`."""
    return [
        *closing_results(state),
        TurnFailed(turn_id=turn_id, phase=phase, error_class=error_class, error=error[:MAX_ERROR_CHARS]),
    ]


def cancel_events(state: SessionState, turn_id: str, reason: str) -> list[EventBase]:
    """End a turn the host cancelled: results for its unanswered calls, then `turn-cancelled`."""
    return [
        *closing_results(state, CANCELLED_RESULT),
        TurnCancelled(turn_id=turn_id, reason=reason[:MAX_ERROR_CHARS]),
    ]


def completion_event(turn_id: str, requests: int) -> TurnCompleted:
    return TurnCompleted(turn_id=turn_id, requests=requests)


def interrupted_events(state: SessionState, reason: str) -> list[EventBase]:
    """What a session owes its log when loaded with a turn that never ended (or stopped mid-turn)."""
    turn = state.open_turn
    if turn is None:
        return []
    return failure_events(state, turn.turn_id, "interrupted", "interrupted", reason)
