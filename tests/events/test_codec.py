"""The line codec: framing, checksum, chain digest, strict typed decoding."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.events.codec import (
    GENESIS,
    MAX_LINE_BYTES,
    chain_digest,
    decode_envelope,
    decode_line,
    decode_lines,
    decode_run,
    encode_line,
    validate_session_id,
)
from cairn.events.errors import (
    ChecksumMismatch,
    CorruptLine,
    InputError,
    InvalidSessionId,
    LineTooLarge,
    MalformedEvent,
    UnknownKind,
    UnsupportedVersion,
)
from cairn.events.kinds import CheckpointCommitted, Usage, UserMessage
from cairn.events.model import Message, TextPart
from tests.strategies import events as event_strategies


def _line(event, *, sid="s1", seq=1, pos=0, ts=1_700_000_000_000, prev=GENESIS):
    return encode_line(pos=pos, sid=sid, seq=seq, ts=ts, prev=prev, event=event)


def _reframe(content: dict) -> bytes:
    """Re-encode a line from edited JSON with a *valid* checksum (a deliberate forgery)."""
    import crc32c

    prefix = json.dumps(content, separators=(",", ":")).encode()[:-1]
    return prefix + b',"crc":"%08x"}\n' % crc32c.crc32c(prefix)


def test_line_is_plain_json_with_envelope_and_checksum():
    line, digest = _line(Usage(request_id="r1", prompt_tokens=10, completion_tokens=2, total_tokens=12))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    obj = json.loads(line)
    assert obj["v"] == 1 and obj["sid"] == "s1" and obj["seq"] == 1 and obj["kind"] == "usage"
    assert obj["prev"] == GENESIS and len(obj["crc"]) == 8
    assert obj["event"] == {
        "kind": "usage",
        "request_id": "r1",
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "total_tokens": 12,
        "cached_prompt_tokens": None,
    }
    assert chain_digest(line) == digest and len(digest) == 32


def test_decode_round_trips_envelope_and_body():
    event = UserMessage(message_id="m1", content=(TextPart("hé\nllo"),))
    line, _ = _line(event, seq=7, pos=41, ts=5)
    record = decode_line(line)
    assert (record.pos, record.sid, record.seq, record.ts, record.prev) == (41, "s1", 7, 5, GENESIS)
    assert record.event == event and record.kind == "user-message"


def test_flipped_byte_is_a_checksum_mismatch_naming_the_place():
    line, _ = _line(Usage(request_id="r1"))
    broken = line.replace(b'"r1"', b'"r2"')
    with pytest.raises(ChecksumMismatch, match="seg-0 @ 12"):
        decode_line(broken, where="seg-0 @ 12")


def test_truncated_line_is_corrupt_not_a_crash():
    line, _ = _line(Usage(request_id="r1"))
    for cut in (1, 10, len(line) // 2, len(line) - 3):
        with pytest.raises(CorruptLine):
            decode_line(line[:cut])


def test_unknown_kind_is_a_typed_error_but_its_envelope_is_readable():
    line, _ = _line(Usage(request_id="r1"))
    obj = json.loads(line)
    obj.pop("crc")
    obj["kind"] = obj["event"]["kind"] = "from-the-future"
    forged = _reframe(obj)
    with pytest.raises(UnknownKind) as info:
        decode_line(forged)
    assert info.value.kind == "from-the-future"
    assert decode_envelope(forged).kind == "from-the-future"


def test_unknown_schema_version_is_rejected():
    line, _ = _line(Usage(request_id="r1"))
    obj = json.loads(line)
    obj.pop("crc")
    obj["v"] = 2
    with pytest.raises(UnsupportedVersion):
        decode_line(_reframe(obj))


def test_unknown_fields_are_ignored_for_schema_evolution():
    line, _ = _line(Usage(request_id="r1", total_tokens=3))
    obj = json.loads(line)
    obj.pop("crc")
    obj["added_in_a_later_version"] = {"x": 1}
    obj["event"]["added_later_too"] = [1, 2]
    assert decode_line(_reframe(obj)).event == Usage(request_id="r1", total_tokens=3)


def test_envelope_kind_must_match_the_body():
    line, _ = _line(Usage(request_id="r1"))
    obj = json.loads(line)
    obj.pop("crc")
    obj["kind"] = "user-message"
    with pytest.raises(MalformedEvent, match="differs"):
        decode_line(_reframe(obj))


def test_body_of_wrong_type_is_malformed_with_a_path():
    line, _ = _line(Usage(request_id="r1"))
    obj = json.loads(line)
    obj.pop("crc")
    obj["event"]["prompt_tokens"] = "many"
    with pytest.raises(MalformedEvent, match="prompt_tokens"):
        decode_line(_reframe(obj))


def test_errors_are_input_errors_and_value_errors():
    assert issubclass(MalformedEvent, InputError) and issubclass(MalformedEvent, ValueError)


@pytest.mark.parametrize(
    "sid", ["", "a/b", "..", "a..b", "x\x00y", "s" * 129, ".hidden", "tab\tid", "sp ace", "/abs"]
)
def test_bad_session_ids_are_rejected(sid):
    with pytest.raises(InvalidSessionId):
        validate_session_id(sid)


@pytest.mark.parametrize("sid", ["s", "session-1", "a.b", "user@host:42", "s" * 128])
def test_good_session_ids_pass(sid):
    assert validate_session_id(sid) == sid


def test_line_over_the_limit_is_refused_before_encoding_finishes():
    huge = UserMessage(message_id="m", content=(TextPart("x" * (MAX_LINE_BYTES + 1)),))
    with pytest.raises(LineTooLarge, match="line limit"):
        _line(huge)


def test_a_line_of_exactly_the_limit_is_written_and_read_and_one_byte_more_is_refused():
    def with_text(chars: int) -> UserMessage:
        return UserMessage(message_id="m", content=(TextPart("x" * chars),))

    overhead = len(_line(with_text(0))[0])
    line, _ = _line(with_text(MAX_LINE_BYTES - overhead))
    assert len(line) == MAX_LINE_BYTES  # newline included
    assert decode_line(line).event == with_text(MAX_LINE_BYTES - overhead)
    with pytest.raises(LineTooLarge, match=f"encodes to {MAX_LINE_BYTES + 1} bytes"):
        _line(with_text(MAX_LINE_BYTES - overhead + 1))


def _checkpoint(**overrides):
    fields = dict(
        version=1,
        epoch=1,
        through_seq=10,
        trigger="threshold",
        strategy="fallback",
        source_tokens=100,
        replacement_tokens=10,
        replacement_messages=(Message(role="user", content="summary"),),
    )
    fields.update(overrides)
    return CheckpointCommitted(**fields)


def test_K1_checkpoint_limits_are_checked_on_write():
    with pytest.raises(ValueError, match=r"1\.\.4096"):
        _checkpoint(replacement_messages=())
    with pytest.raises(ValueError, match="version"):
        _checkpoint(version=2)
    with pytest.raises(ValueError, match="tool_call_id"):
        _checkpoint(replacement_messages=(Message(role="tool", content="x"),))


def test_K1_unknown_checkpoint_version_is_refused_on_replay():
    line, _ = _line(_checkpoint())
    obj = json.loads(line)
    obj.pop("crc")
    obj["event"]["version"] = 2
    with pytest.raises(UnsupportedVersion, match="checkpoint version"):
        decode_line(_reframe(obj))


def test_K1_oversized_checkpoint_is_refused_on_replay():
    line, _ = _line(_checkpoint())
    obj = json.loads(line)
    obj.pop("crc")
    obj["event"]["replacement_messages"] = [{"role": "user", "content": "x"}] * 4097
    with pytest.raises(MalformedEvent, match="4096"):
        decode_line(_reframe(obj))


def test_struct_tags_are_explicit_and_stable():
    # renaming a class must never orphan stored events (PITFALLS 22)
    data = msgspec.json.encode(Usage(request_id="r"))
    assert data.startswith(b'{"kind":"usage"')


def _run_of(events_: list, sid: str = "s1") -> tuple[bytes, list[int]]:
    lines = [_line(e, sid=sid, seq=i + 1, pos=i)[0] for i, e in enumerate(events_)]
    return b"".join(lines), [len(line) for line in lines]


@given(st.lists(event_strategies(), min_size=1, max_size=12))
def test_decoding_a_run_equals_decoding_each_line(events_):
    run, lengths = _run_of(events_)
    lines = run.splitlines(keepends=True)
    assert decode_run(run, lengths) == [decode_line(line) for line in lines]
    assert [r.event for r in decode_lines(lines)] == events_


def test_a_bad_line_in_a_run_is_named_precisely():
    run, lengths = _run_of([Usage(request_id=f"r{n}") for n in range(5)])
    broken = bytearray(run)
    third = sum(lengths[:2])
    broken[third + 60] ^= 0x01  # inside the third line's envelope
    with pytest.raises(ChecksumMismatch, match="seg-7 line 3"):
        decode_run(bytes(broken), lengths, where="seg-7")
    with pytest.raises(ChecksumMismatch, match="seg-7:"):  # the first line has no line number
        decode_run(bytes(broken)[third:], lengths[2:], where="seg-7")


def test_lengths_that_do_not_cover_the_run_take_the_checked_path():
    run, lengths = _run_of([Usage(request_id="a"), Usage(request_id="b")])
    with pytest.raises(CorruptLine):
        decode_run(run, [lengths[0] + 3, lengths[1] - 3])


def _deep_line(length: int, *, valid_crc: bool) -> bytes:
    """A line of `length` bytes that is JSON nested far past msgspec's depth limit."""
    import crc32c

    depth = 1_100
    body = b'{"x":' + b"[" * depth + b"]" * depth
    pad = length - len(body) - 19 - 1
    prefix = body + b',"p":"' + b"y" * (pad - 6) + b'"'
    crc = crc32c.crc32c(prefix) if valid_crc else 0
    line = prefix + b',"crc":"%08x"}\n' % crc
    assert len(line) == length
    return line


def test_a_deeply_nested_line_in_a_run_gets_the_typed_error_of_its_line():
    good = [
        _line(
            Usage(request_id=f"r{i}", prompt_tokens=1, completion_tokens=1, total_tokens=2), seq=i + 1, pos=i
        )[0]
        for i in range(3)
    ]
    damaged = _deep_line(len(good[1]) + 3000, valid_crc=False)
    with pytest.raises(ChecksumMismatch, match="line 2"):
        decode_run(
            b"".join([good[0], damaged, good[2]]), [len(good[0]), len(damaged), len(good[2])], where="seg@0"
        )
    forged = _deep_line(len(good[1]) + 3000, valid_crc=True)
    with pytest.raises(CorruptLine, match="nested too deeply"):
        decode_run(b"".join([good[0], forged]), [len(good[0]), len(forged)])
    with pytest.raises(CorruptLine, match="nested too deeply"):
        decode_envelope(forged)


@pytest.mark.parametrize("spell", ["upper", "plus", "space", "underscore"])
def test_a_crc_field_must_be_eight_lowercase_hex_digits(spell):
    """Each spelling parses to the line's true crc with int(..., 16): only strictness refuses it."""
    import crc32c

    for n in range(1_000):  # a line whose crc has a leading zero nibble, so 7 digits can spell it
        line, _ = _line(Usage(request_id=f"r{n}", prompt_tokens=1, completion_tokens=1, total_tokens=2))
        cut = len(line) - 19
        crc = crc32c.crc32c(line[:cut])
        if crc < 0x1000_0000 and any(c in b"abcdef" for c in b"%07x" % crc):
            break
    digits = b"%07x" % crc
    field = {
        "upper": b"0" + digits.upper(),
        "plus": b"+" + digits,
        "space": b" " + digits,
        "underscore": digits[:3] + b"_" + digits[3:],
    }[spell]
    assert len(field) == 8 and int(field, 16) == crc
    with pytest.raises(CorruptLine, match="8 lowercase hex digits"):
        decode_line(line[:cut] + b',"crc":"' + field + b'"}\n')
