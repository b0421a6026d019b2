"""Signed reasoning blocks (Anthropic's extended thinking) in messages and assistant-message events.

The field is optional and omitted when empty: every line written before it
decodes and encodes back byte for byte, and a message without blocks is
written as before.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from cairn.actors.compactor.fallback import flatten
from cairn.events.codec import decode_line, encode_line
from cairn.events.kinds import AssistantMessage
from cairn.events.model import Message, ReasoningBlock, shape_problem

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden.jsonl"
BLOCKS = (ReasoningBlock(text="Read a.py first.", signature="sig-1"), ReasoningBlock(redacted="opaque=="))


def test_golden_lines_with_messages_encode_back_byte_for_byte() -> None:
    """The kinds that hold a `Message` or the new field: an assistant message, a checkpoint's messages."""
    lines = [
        line
        for line in GOLDEN.read_bytes().splitlines(keepends=True)
        if b'"kind":"assistant-message"' in line or b'"kind":"checkpoint-committed"' in line
    ]
    assert len(lines) == 2
    for line in lines:
        record = decode_line(line)
        again, _ = encode_line(
            pos=record.pos, sid=record.sid, seq=record.seq, ts=record.ts, prev=record.prev, event=record.event
        )
        assert again == line


def test_an_assistant_message_without_blocks_is_written_as_before() -> None:
    event = AssistantMessage(message_id="a1", request_id="r1", text="Hi.", reasoning="hm")
    assert msgspec.json.encode(event) == (
        b'{"kind":"assistant-message","message_id":"a1","request_id":"r1","text":"Hi.",'
        b'"reasoning":"hm","tool_calls":[],"finish_reason":null}'
    )
    assert b"reasoning_blocks" not in msgspec.json.encode(Message(role="assistant", content="Hi."))


def test_blocks_round_trip_through_a_line_in_order() -> None:
    event = AssistantMessage(message_id="a1", request_id="r1", text="Hi.", reasoning_blocks=BLOCKS)
    line, _ = encode_line(pos=0, sid="s", seq=1, ts=1, prev="0" * 32, event=event)
    assert (
        b'"reasoning_blocks":[{"text":"Read a.py first.","signature":"sig-1"},{"redacted":"opaque=="}]'
        in line
    )
    assert decode_line(line).event == event
    message = Message(role="assistant", content="Hi.", reasoning_blocks=BLOCKS)
    assert msgspec.json.decode(msgspec.json.encode(message), type=Message) == message


def test_only_an_assistant_message_carries_blocks() -> None:
    assert shape_problem(Message(role="assistant", reasoning_blocks=BLOCKS)) is None
    problem = shape_problem(Message(role="user", content="x", reasoning_blocks=BLOCKS))
    assert problem == "only an assistant message can carry reasoning"


def test_the_fallback_summary_drops_the_blocks_with_the_reasoning() -> None:
    """F4: the fallback keeps no reasoning, signed or not."""
    flat = flatten(Message(role="assistant", content="Hi.", reasoning_blocks=BLOCKS))
    assert (flat.reasoning, flat.reasoning_blocks, flat.content) == (None, (), "Hi.")
