"""Hypothesis strategies for every event kind, reusable across the test suite.

`events()` draws any event of the union; `event_of(kind)` one kind; `KIND_STRATEGIES`
maps every kind tag to its strategy (a test asserts it covers `events.kinds.KINDS`).
Every drawn event is valid: it encodes, and decodes back equal. Blob parts name
the payloads of `KNOWN_BLOBS`: a store test puts them first (`put_known_blobs`).

`HOSTILE_KIND_STRATEGIES` draws the same kinds with any Unicode (lone surrogates,
control characters, U+2028 ...) in every free string field and hand-off records
that are not always JSON objects: some of them the journal must refuse.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st

from cairn.events.errors import InvalidEvent
from cairn.events.kinds import (
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
from cairn.events.model import BlobPart, ImagePart, Message, MessageMeta, Part, TextPart, ToolCall
from cairn.store.blobs import BlobStore

# JSON-safe text: any unicode except lone surrogates (which UTF-8 cannot carry).
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
ids = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=16)
ints = st.integers(min_value=0, max_value=2**40)
opt_ints = st.none() | ints
ts = st.integers(min_value=0, max_value=2**45)
sha = st.text("0123456789abcdef", min_size=64, max_size=64)

#: the payloads blob parts name: a test that appends them puts these in its store first (`put_known_blobs`)
KNOWN_BLOBS: tuple[bytes, ...] = (b"", b"hello", "h\u00e9llo \u2028 w\u00f6rld".encode(), bytes(range(256)))


def put_known_blobs(root: Path) -> None:
    """Store every payload of KNOWN_BLOBS in the blob store of the store at `root`."""
    blobs = BlobStore(root)
    for data in KNOWN_BLOBS:
        blobs.put(data)


def _blob_parts(text: st.SearchStrategy[str]) -> st.SearchStrategy[BlobPart]:
    return st.builds(
        lambda data, media_type, chars, preview: BlobPart(
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            media_type=media_type,
            chars=chars,
            preview=preview,
        ),
        st.sampled_from(KNOWN_BLOBS),
        st.sampled_from(["text/plain", "image/png"]),
        ints,
        text,
    )


def _content(text: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[Part, ...]]:
    text_parts = st.builds(TextPart, text=text)
    image_parts = st.builds(
        ImagePart,
        media_type=st.sampled_from(["image/png", "image/jpeg"]),
        data=st.sampled_from(["", "aGVsbG8=", "iVBORw0KGgo="]),
        url=st.sampled_from(["", "https://example.invalid/a.png"]),
    )
    parts: st.SearchStrategy[Part] = st.one_of(text_parts, image_parts, _blob_parts(text))
    return st.lists(parts, max_size=3).map(tuple)


Strings = st.SearchStrategy[str]


def _tool_calls(ids: Strings, text: Strings) -> st.SearchStrategy[tuple[ToolCall, ...]]:
    arguments = st.just('{"path": "a.py"}') | text
    return st.lists(
        st.builds(ToolCall, id=ids, name=ids, arguments=arguments), max_size=3, unique_by=lambda c: c.id
    ).map(tuple)


content = _content(text)
tool_calls = _tool_calls(ids, st.just('{"path": "a.py"}'))
file_access = st.builds(FileAccess, path=text, op=st.sampled_from(["read", "write", "delete"]), ts=ts)


def _messages(text: Strings, ids: Strings) -> st.SearchStrategy[tuple[Message, ...]]:
    calls = _tool_calls(ids, text)
    user = st.builds(lambda t, i: Message(role="user", content=t, id=i), text, st.just("") | ids)
    system = st.builds(lambda t: Message(role="system", content=t, meta=MessageMeta(origin="summary")), text)
    assistant = st.builds(lambda t, c: Message(role="assistant", content=t, tool_calls=c), text, calls)
    tool = st.builds(lambda t, cid: Message(role="tool", content=t, tool_call_id=cid, name="read"), text, ids)
    return st.lists(st.one_of(user, system, assistant, tool), min_size=1, max_size=4).map(tuple)


def _carried(text: st.SearchStrategy[str], ids: st.SearchStrategy[str]) -> st.SearchStrategy[Carried]:
    files = st.builds(FileAccess, path=text, op=st.sampled_from(["read", "write", "delete"]), ts=ts)
    return st.builds(
        Carried,
        revision=st.integers(0, 1000),
        recent_files=st.lists(files, max_size=3).map(tuple),
        compaction_failures=st.integers(0, 5),
        last_compaction_failure_ts=st.none() | ts,
        last_response_ts=st.none() | ts,
        open_turn=st.none()
        | st.builds(OpenTurn, turn_id=ids, started_seq=ints, task=st.lists(text, max_size=2).map(tuple)),
        reactive_since_response=st.booleans(),
    )


carried = _carried(text, ids)

Build = Callable[..., st.SearchStrategy[Any]]


def kind_strategies(
    text: st.SearchStrategy[str],
    ids: st.SearchStrategy[str],
    records: st.SearchStrategy[msgspec.Raw],
    build: Build = st.builds,
) -> dict[str, st.SearchStrategy[Any]]:
    """A strategy for every kind, drawing its free strings from `text` and `ids`.

    Literal fields stay within their values; `records` gives hand-off records;
    `build` builds each event from its class and fields (`st.builds`, or one
    that keeps a construction's InvalidEvent, see `HOSTILE_KIND_STRATEGIES`).
    """
    content = _content(text)
    files = st.builds(FileAccess, path=text, op=st.sampled_from(["read", "write", "delete"]), ts=ts)
    return {
        "session-started": build(
            SessionStarted,
            workspace=st.just("/work/repo") | text.map(lambda t: "/" + t.replace("\x00", "")),
            model=ids,
            context_window=st.none() | st.integers(1, 2_000_000),
            max_output_tokens=st.none() | st.integers(1, 100_000),
            parent_session=st.none() | ids,
            parent_seq=st.none() | ints,
            system_prompt=text,
            tool_schemas=st.lists(st.just('{"name":"read"}') | text, max_size=2).map(tuple),
            read_only_tools=st.none() | st.lists(ids, max_size=2).map(tuple),
        ),
        "user-message": build(UserMessage, message_id=ids, content=content),
        "turn-started": build(
            TurnStarted, turn_id=ids, message_id=st.just("") | ids, continues=st.just(msgspec.UNSET) | ids
        ),
        "turn-completed": build(TurnCompleted, turn_id=ids, requests=st.integers(0, 50)),
        "turn-failed": build(
            TurnFailed,
            turn_id=ids,
            phase=st.sampled_from(["provider", "compaction", "checkpoint", "tool", "interrupted"]),
            error_class=st.just("") | ids,
            error=text,
        ),
        "turn-cancelled": build(TurnCancelled, turn_id=ids, reason=text),
        "turn-dismissed": build(TurnDismissed, turn_id=ids, reason=text),
        "tool-deferred": build(ToolDeferred, call_id=ids, tool_name=ids, timeout_ms=st.integers(0, 2**40)),
        "request": build(
            Request,
            request_id=ids,
            turn_id=ids,
            attempt=st.integers(1, 5),
            fingerprint=ids,
            history_revision=st.integers(0, 100),
            projected_tokens=opt_ints,
            phase=ids,
            message_count=st.integers(0, 500),
            history_length=st.integers(0, 500),
            model=st.just("") | ids,
            fixed_tokens=st.integers(0, 10_000),
            projection_source=st.just("") | ids,
            handoff_included=st.booleans(),
        ),
        "assistant-message": build(
            AssistantMessage,
            message_id=ids,
            request_id=ids,
            text=text,
            reasoning=st.none() | text,
            tool_calls=_tool_calls(ids, st.just('{"path": "a.py"}') | text),
            finish_reason=st.none() | st.sampled_from(["stop", "tool_calls", "length"]) | text,
        ),
        "usage": build(
            Usage,
            request_id=ids,
            prompt_tokens=opt_ints,
            completion_tokens=opt_ints,
            total_tokens=opt_ints,
            cached_prompt_tokens=opt_ints,
            cache_write_tokens=st.just(msgspec.UNSET) | ints,
        ),
        "tool-result": build(
            ToolResult,
            call_id=ids,
            tool_name=ids,
            status=st.sampled_from(["ok", "error"]),
            effect=st.sampled_from(["read", "write"]),
            content=content,
            original_chars=ints,
            truncated=st.booleans(),
            files=st.lists(files, max_size=2).map(tuple),
        ),
        "provider-error": build(
            ProviderError,
            request_id=ids,
            error_class=st.sampled_from(
                ["context-limit", "rate-limit", "server", "network", "auth", "bad-request"]
            ),
            output_delivered=st.booleans(),
            message=text,
            status_code=st.none() | st.integers(100, 599),
        ),
        "context-slimmed": build(
            ContextSlimmed,
            mode=st.sampled_from(["micro", "snip"]),
            removed_call_ids=st.lists(ids, max_size=3).map(tuple),
            tokens_saved=ints,
            marker_id=st.just("") | ids,
            marker_text=text,
        ),
        "handoff": build(Handoff, epoch=st.integers(0, 100), record=records),
        "owner-changed": build(OwnerChanged, host_id=ids, lease_revision=ints, previous_host=st.none() | ids),
        "compaction-failed": build(
            CompactionFailed,
            epoch=st.integers(0, 100),
            attempt=st.integers(1, 5),
            reason=st.sampled_from(["empty", "overflow", "insufficient-reduction", "error", "blocked"]),
            consecutive_failures=st.integers(0, 10),
            trigger=st.sampled_from(["threshold", "reactive", "manual"]),
            detail=text,
            workspace=st.just("") | text,
        ),
        "checkpoint-committed": build(
            CheckpointCommitted,
            version=st.just(1),
            epoch=st.integers(1, 100),
            through_seq=ints,
            trigger=st.sampled_from(["threshold", "reactive", "manual"]),
            strategy=st.sampled_from(["llm", "fallback"]),
            source_tokens=ints,
            replacement_tokens=ints,
            replacement_messages=_messages(text, ids),
            files_restored=st.lists(text, max_size=2).map(tuple),
            source_hash=st.just("") | sha,
            prompt_version=st.just("") | ids,
            raw_summary=st.none() | text,
            diagnostics=st.builds(
                CheckpointDiagnostics,
                attempts=st.integers(0, 3),
                reductions=st.lists(text, max_size=2).map(tuple),
                omitted_files=st.lists(text, max_size=2).map(tuple),
                failure_reason=st.none() | text,
                breaker=st.just("") | text,
                failure_detail=text,
                snipped_call_ids=st.lists(ids, max_size=2).map(tuple),
            ),
            carried=_carried(text, ids),
        ),
    }


#: JSON objects of JSON-safe text, as the session writes hand-off records
records = st.dictionaries(st.sampled_from(["version", "goal", "next"]), text, max_size=3).map(
    lambda d: msgspec.Raw(msgspec.json.encode(d))
)
KIND_STRATEGIES: dict[str, st.SearchStrategy[EventBase]] = kind_strategies(text, ids, records)


def event_of(kind: str) -> st.SearchStrategy[EventBase]:
    return KIND_STRATEGIES[kind]


def events() -> st.SearchStrategy[EventBase]:
    """Any event of any kind."""
    return st.one_of(*KIND_STRATEGIES.values())


# --- hostile input: any Unicode in every string field ------------------------------------

#: characters that have broken logs elsewhere: line and paragraph separators, NEL, CR/LF, NUL,
#: DEL, a BOM, quotes and backslashes, the last code point
_NASTY = ["\u2028", "\u2029", "\x85", "\n", "\r", "\x00", "\x1f", "\x7f", "\ufeff", '"', "\\", "\U0010ffff"]
#: lone surrogates: valid in a Python str, not in Unicode text (UTF-8 cannot carry them)
_SURROGATES = ["\ud800", "\udbff", "\udc00", "\udc80", "\udfff"]
#: any code point at all (st.text() alone leaves out the surrogates)
any_char = st.characters(exclude_categories=())


def _with_one_of(chars: list[str]) -> st.SearchStrategy[str]:
    around = st.text(any_char, max_size=4)
    return st.tuples(around, st.sampled_from(chars), around).map("".join)


#: any text, with a nasty character in about half the draws and a lone surrogate in a quarter
any_text = st.one_of(
    st.text(any_char, max_size=12), _with_one_of(_NASTY), _with_one_of(_NASTY), _with_one_of(_SURROGATES)
)
any_ids = any_text.filter(bool)


def _raw_records() -> st.SearchStrategy[msgspec.Raw]:
    """Hand-off records as bytes: JSON objects of any text (Python's json escapes lone surrogates
    as `\\ud800`), and raw bytes that are not one JSON object at all."""
    objects = st.dictionaries(any_text, any_text | st.integers() | st.none(), max_size=3).map(
        lambda d: json.dumps(d).encode()
    )
    utf8_objects = st.dictionaries(text, text, max_size=3).map(
        lambda d: json.dumps(d, ensure_ascii=False).encode()
    )
    odd = st.sampled_from(
        [
            b"[1]",
            b'"text"',
            b"{",
            b'{"a":\n1}',
            b'{"a":1}\r',
            b' {"a":1}',
            b'{"a":"\xff"}',
            b"{}",
            b'{"a":[]}',
        ]
    )
    return st.one_of(objects, utf8_objects, odd).map(msgspec.Raw)


def _attempt(cls: type[EventBase], **fields: Any) -> EventBase | InvalidEvent:
    """The event, or the InvalidEvent its construction raised (a typed refusal before any append)."""
    try:
        return cls(**fields)
    except InvalidEvent as exc:
        return exc


def _build_or_refusal(cls: type[EventBase], **fields: Any) -> st.SearchStrategy[Any]:
    return st.builds(functools.partial(_attempt, cls), **fields)


#: every kind with any Unicode in every free string field; draws an event, or the InvalidEvent
#: that constructing it raised
HOSTILE_KIND_STRATEGIES: dict[str, st.SearchStrategy[EventBase | InvalidEvent]] = kind_strategies(
    any_text, any_ids, _raw_records(), _build_or_refusal
)
