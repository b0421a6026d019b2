"""No id or value can break a log line, and what `checked_body` passes reads back equal (issue 10).

The codec side of the journal's refusals: regex validators match the whole string (`$`
alone lets a final newline through), every string of the envelope goes through the JSON
encoder, and the schema's bounds hold on decode as on write.
"""

from __future__ import annotations

import json

import crc32c
import msgspec
import pytest

from cairn.events.body_check import checked_body
from cairn.events.codec import GENESIS, decode_line, encode_line, validate_session_id
from cairn.events.errors import InvalidEvent, InvalidSessionId, MalformedEvent
from cairn.events.kinds import Handoff, TurnStarted, Usage, UserMessage
from cairn.events.model import Message, TextPart, ToolCall, shape_problem


@pytest.mark.parametrize("tail", ["\n", "\r\n", "\r", "\x00", "\u2028", " ", "\x85", "\n\n"], ids=ascii)
def test_session_ids_must_match_as_a_whole(tail: str) -> None:
    assert validate_session_id("abc") == "abc"
    for sid in ("abc" + tail, "a" + tail + "bc"):
        with pytest.raises(InvalidSessionId):
            validate_session_id(sid)


@pytest.mark.parametrize("sid", ['a"b', "a\nb", "a\\b", "\u2028", "a\U0001f600b", "\x00"], ids=ascii)
def test_the_envelope_escapes_whatever_session_id_it_is_given(sid: str) -> None:
    line, _ = encode_line(pos=0, sid=sid, seq=1, ts=5, prev=GENESIS, event=TurnStarted(turn_id="t"))
    assert line.count(b"\n") == 1 and line.endswith(b"\n") and b"\r" not in line
    assert json.loads(line)["sid"] == sid
    assert decode_line(line).sid == sid


def test_a_session_id_with_no_json_form_is_refused_by_the_codec() -> None:
    for sid in ("a\ud800", 12):
        with pytest.raises(InvalidSessionId):
            encode_line(pos=0, sid=sid, seq=1, ts=5, prev=GENESIS, event=TurnStarted(turn_id="t"))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad_id", ["m\n", "m\r\n", "m\x00", "\n", "x" * 129])
def test_message_and_tool_call_ids_must_match_as_a_whole(bad_id: str) -> None:
    assert shape_problem(Message(role="user", content="x", id=bad_id)) is not None
    call = ToolCall(id=bad_id, name="read")
    assert shape_problem(Message(role="assistant", tool_calls=(call,))) is not None
    assert shape_problem(Message(role="user", content="x", id="m\u2028")) is None  # not a control char


def test_checked_body_gives_the_decoded_copy_and_its_body() -> None:
    event = UserMessage(message_id="m", content=(TextPart("h\u00e9\u2028\x00"),))
    stored, body = checked_body(event)
    assert stored == event and stored is not event
    assert body == msgspec.json.encode(event)


def test_encode_line_checks_the_event_as_the_journal_does() -> None:
    with pytest.raises(InvalidEvent, match="non-finite") as info:
        encode_line(
            pos=0, sid="s", seq=1, ts=5, prev=GENESIS, event=Usage(request_id="r", prompt_tokens=float("nan"))
        )  # type: ignore[arg-type]
    assert info.value.path == "$.prompt_tokens"
    with pytest.raises(InvalidEvent, match="not an event"):
        encode_line(pos=0, sid="s", seq=1, ts=5, prev=GENESIS, event="usage")  # type: ignore[arg-type]


def _forged(event_json: dict) -> bytes:
    """A line with a valid checksum around an event body nobody could have appended."""
    content = {
        "v": 1,
        "pos": 0,
        "sid": "s",
        "seq": 1,
        "ts": 5,
        "prev": GENESIS,
        "kind": event_json["kind"],
        "event": event_json,
    }
    prefix = json.dumps(content, separators=(",", ":")).encode()[:-1]
    return prefix + b',"crc":"%08x"}\n' % crc32c.crc32c(prefix)


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "usage", "request_id": "r", "total_tokens": 2**63},
        {"kind": "usage", "request_id": "r", "total_tokens": -(2**63) - 1},
        {
            "kind": "compaction-failed",
            "epoch": -1,
            "attempt": 1,
            "reason": "error",
            "consecutive_failures": 1,
        },
        {"kind": "handoff", "epoch": 0, "record": [1]},
        {"kind": "handoff", "epoch": 0, "record": "text"},
    ],
    ids=repr,
)
def test_the_schema_bounds_hold_on_decode_too(body: dict) -> None:
    with pytest.raises(MalformedEvent):
        decode_line(_forged(body))


def test_a_hand_off_record_is_kept_byte_for_byte() -> None:
    raw = b'{"goal": "a \\u2028 b",\t"n":[1, 2.50]}'
    event = Handoff(epoch=3, record=msgspec.Raw(raw))
    line, _ = encode_line(pos=0, sid="s", seq=1, ts=5, prev=GENESIS, event=event)
    record = decode_line(line).event
    assert isinstance(record, Handoff) and bytes(record.record) == raw
