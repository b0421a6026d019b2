"""Hypothesis strategies for every event kind, reusable across the test suite.

`events()` draws any event of the union; `event_of(kind)` one kind; `KIND_STRATEGIES`
maps every kind tag to its strategy (a test asserts it covers `events.kinds.KINDS`).
Every drawn event is valid: it encodes, and decodes back equal.
"""

from __future__ import annotations

import msgspec
from hypothesis import strategies as st

from events.kinds import (
    AssistantMessage,
    Carried,
    CheckpointCommitted,
    CheckpointDiagnostics,
    CompactionFailed,
    ContextSlimmed,
    EventBase,
    FileAccess,
    Handoff,
    OpenTurn,
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
from events.model import BlobPart, ImagePart, Message, MessageMeta, Part, TextPart, ToolCall

# JSON-safe text: any unicode except lone surrogates (which UTF-8 cannot carry).
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
ids = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=16)
ints = st.integers(min_value=0, max_value=2**40)
opt_ints = st.none() | ints
ts = st.integers(min_value=0, max_value=2**45)
sha = st.text("0123456789abcdef", min_size=64, max_size=64)

text_parts = st.builds(TextPart, text=text)
image_parts = st.builds(
    ImagePart,
    media_type=st.sampled_from(["image/png", "image/jpeg"]),
    data=st.sampled_from(["", "aGVsbG8=", "iVBORw0KGgo="]),
    url=st.sampled_from(["", "https://example.invalid/a.png"]),
)
blob_parts = st.builds(
    BlobPart, sha256=sha, size=ints, media_type=st.sampled_from(["text/plain", "image/png"]),
    chars=ints, preview=text,
)
parts: st.SearchStrategy[Part] = st.one_of(text_parts, image_parts, blob_parts)
content = st.lists(parts, max_size=3).map(tuple)
tool_calls = st.lists(st.builds(ToolCall, id=ids, name=ids, arguments=st.just('{"path": "a.py"}')),
                      max_size=3, unique_by=lambda c: c.id).map(tuple)
file_access = st.builds(FileAccess, path=text, op=st.sampled_from(["read", "write", "delete"]), ts=ts)


def _messages() -> st.SearchStrategy[tuple[Message, ...]]:
    user = st.builds(lambda t, i: Message(role="user", content=t, id=i), text, st.just("") | ids)
    system = st.builds(lambda t: Message(role="system", content=t, meta=MessageMeta(origin="summary")), text)
    assistant = st.builds(
        lambda t, calls: Message(role="assistant", content=t, tool_calls=calls), text, tool_calls
    )
    tool = st.builds(lambda t, cid: Message(role="tool", content=t, tool_call_id=cid, name="read"), text, ids)
    return st.lists(st.one_of(user, system, assistant, tool), min_size=1, max_size=4).map(tuple)


carried = st.builds(
    Carried,
    revision=st.integers(0, 1000),
    recent_files=st.lists(file_access, max_size=3).map(tuple),
    compaction_failures=st.integers(0, 5),
    last_compaction_failure_ts=st.none() | ts,
    last_response_ts=st.none() | ts,
    open_turn=st.none() | st.builds(OpenTurn, turn_id=ids, started_seq=ints,
                                    task=st.lists(text, max_size=2).map(tuple)),
    reactive_since_response=st.booleans(),
)

KIND_STRATEGIES: dict[str, st.SearchStrategy[EventBase]] = {
    "session-started": st.builds(
        SessionStarted,
        workspace=st.just("/work/repo") | text.map(lambda t: "/" + t.replace("\x00", "")),
        model=ids,
        context_window=st.none() | st.integers(1, 2_000_000),
        max_output_tokens=st.none() | st.integers(1, 100_000),
        parent_session=st.none() | ids,
        parent_seq=st.none() | ints,
        system_prompt=text,
        tool_schemas=st.lists(st.just('{"name":"read"}'), max_size=2).map(tuple),
        read_only_tools=st.none() | st.lists(ids, max_size=2).map(tuple),
    ),
    "user-message": st.builds(UserMessage, message_id=ids, content=content),
    "turn-started": st.builds(TurnStarted, turn_id=ids, message_id=st.just("") | ids),
    "turn-completed": st.builds(TurnCompleted, turn_id=ids, requests=st.integers(0, 50)),
    "turn-failed": st.builds(
        TurnFailed, turn_id=ids,
        phase=st.sampled_from(["provider", "compaction", "checkpoint", "tool", "interrupted"]),
        error_class=st.just("") | ids, error=text,
    ),
    "request": st.builds(
        Request, request_id=ids, turn_id=ids, attempt=st.integers(1, 5), fingerprint=ids,
        history_revision=st.integers(0, 100), projected_tokens=opt_ints, phase=ids,
        message_count=st.integers(0, 500), history_length=st.integers(0, 500), model=st.just("") | ids,
        fixed_tokens=st.integers(0, 10_000), projection_source=st.just("") | ids,
        handoff_included=st.booleans(),
    ),
    "assistant-message": st.builds(
        AssistantMessage, message_id=ids, request_id=ids, text=text, reasoning=st.none() | text,
        tool_calls=tool_calls, finish_reason=st.none() | st.sampled_from(["stop", "tool_calls", "length"]),
    ),
    "usage": st.builds(
        Usage, request_id=ids, prompt_tokens=opt_ints, completion_tokens=opt_ints,
        total_tokens=opt_ints, cached_prompt_tokens=opt_ints,
    ),
    "tool-result": st.builds(
        ToolResult, call_id=ids, tool_name=ids, status=st.sampled_from(["ok", "error"]),
        effect=st.sampled_from(["read", "write"]), content=content, original_chars=ints,
        truncated=st.booleans(), files=st.lists(file_access, max_size=2).map(tuple),
    ),
    "provider-error": st.builds(
        ProviderError, request_id=ids,
        error_class=st.sampled_from(
            ["context-limit", "rate-limit", "server", "network", "auth", "bad-request"]
        ),
        output_delivered=st.booleans(), message=text, status_code=st.none() | st.integers(100, 599),
    ),
    "context-slimmed": st.builds(
        ContextSlimmed, mode=st.sampled_from(["micro", "snip"]),
        removed_call_ids=st.lists(ids, max_size=3).map(tuple), tokens_saved=ints,
        marker_id=st.just("") | ids, marker_text=text,
    ),
    "handoff": st.builds(
        Handoff, epoch=st.integers(0, 100),
        record=st.dictionaries(st.sampled_from(["version", "goal", "next"]), text, max_size=3).map(
            lambda d: msgspec.Raw(msgspec.json.encode(d))
        ),
    ),
    "compaction-failed": st.builds(
        CompactionFailed, epoch=st.integers(0, 100), attempt=st.integers(1, 5),
        reason=st.sampled_from(["empty", "overflow", "insufficient-reduction", "error", "blocked"]),
        consecutive_failures=st.integers(0, 10), trigger=st.sampled_from(["threshold", "reactive", "manual"]),
        detail=text,
    ),
    "checkpoint-committed": st.builds(
        CheckpointCommitted, version=st.just(1), epoch=st.integers(1, 100), through_seq=ints,
        trigger=st.sampled_from(["threshold", "reactive", "manual"]),
        strategy=st.sampled_from(["llm", "fallback"]),
        source_tokens=ints, replacement_tokens=ints, replacement_messages=_messages(),
        files_restored=st.lists(text, max_size=2).map(tuple), source_hash=st.just("") | sha,
        prompt_version=st.just("") | ids, raw_summary=st.none() | text,
        diagnostics=st.builds(CheckpointDiagnostics, attempts=st.integers(0, 3)), carried=carried,
    ),
}


def event_of(kind: str) -> st.SearchStrategy[EventBase]:
    return KIND_STRATEGIES[kind]


def events() -> st.SearchStrategy[EventBase]:
    """Any event of any kind."""
    return st.one_of(*KIND_STRATEGIES.values())
