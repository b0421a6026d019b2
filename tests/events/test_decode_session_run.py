"""`decode_session_run`: a run of one session's lines, all checked in one pass, or None at any doubt."""

from __future__ import annotations

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from cairn.events.codec import GENESIS, decode_run, decode_session_run, encode_line, frames_sound
from cairn.events.kinds import Usage
from tests.strategies import events as event_strategies


def _lines(events, *, sid="s1", first_seq=1, first_pos=10):
    return [
        encode_line(pos=first_pos + i, sid=sid, seq=first_seq + i, ts=1, prev=GENESIS, event=e)[0]
        for i, e in enumerate(events)
    ]


@given(st.lists(event_strategies(), min_size=1, max_size=12))
def test_a_sound_run_decodes_as_decode_run_decodes_it(events_):
    lines = _lines(events_, first_seq=5, first_pos=7)
    run, lengths = b"".join(lines), [len(line) for line in lines]
    assert decode_session_run(run, lengths, "s1", 5, 7) == decode_run(run, lengths)


def _reframed(line: bytes, change: bytes, into: bytes) -> bytes:
    prefix = line[: -len(b',"crc":"00000000"}\n')].replace(change, into)
    return prefix + b',"crc":"%08x"}\n' % crc32c.crc32c(prefix)


def test_any_doubt_gives_none():
    lines = _lines([Usage(request_id=f"r{n}") for n in range(4)], first_seq=3, first_pos=10)
    run, lengths = b"".join(lines), [len(line) for line in lines]
    assert decode_session_run(run, lengths, "s1", 3, 10) is not None
    assert decode_session_run(run, lengths, "s2", 3, 10) is None  # another session's
    assert decode_session_run(run, lengths, "s1", 4, 10) is None  # other seqs
    assert decode_session_run(run, lengths, "s1", 3, 11) is None  # other positions
    flipped = bytearray(run)
    flipped[lengths[0] + 40] ^= 0x01
    assert decode_session_run(bytes(flipped), lengths, "s1", 3, 10) is None  # a bad crc
    assert decode_session_run(run[:-1], lengths, "s1", 3, 10) is None  # a line cut short
    assert decode_session_run(run, lengths[:3], "s1", 3, 10) is None  # more lines than lengths
    moved = [lengths[0] + 1, lengths[1] - 1, *lengths[2:]]
    assert decode_session_run(run, moved, "s1", 3, 10) is None  # lengths that split lines elsewhere
    for change, into in (
        (b'"v":1', b'"v":2'),  # another version
        (b'"kind":"usage"', b'"kind":"usagf"'),  # an unknown kind
        (b'"kind":"usage","event"', b'"kind":"turn-started","event"'),  # an envelope not the body's
    ):
        forged = [lines[0], _reframed(lines[1], change, into), *lines[2:]]
        forged_run = b"".join(forged)
        assert decode_session_run(forged_run, [len(line) for line in forged], "s1", 3, 10) is None, change
    assert decode_session_run(b"{not json\n", [10], "s1", 3, 10) is None


def test_frames_sound_refuses_every_damaged_suffix_byte():
    lines = _lines([Usage(request_id=f"r{n}") for n in range(3)])
    run, lengths = b"".join(lines), [len(line) for line in lines]
    assert frames_sound(run, lengths)
    assert frames_sound(b"", [])
    assert not frames_sound(b"\n", [])
    # any change to any of the last 19 bytes of the middle line (crc field, its frame, the newline)
    end = lengths[0] + lengths[1]
    for at in range(end - 19, end):
        for into in (b"A", b"0", b"\n", b"}"):
            broken = run[:at] + into + run[at + 1 :]
            if broken != run:
                assert not frames_sound(broken, lengths), (at, into)
    # an uppercase crc is not the crc field the writer writes
    upper = lines[1][:-10] + lines[1][-10:-2].upper() + lines[1][-2:]
    if upper != lines[1]:
        assert not frames_sound(lines[0] + upper + lines[2], lengths)
    assert not frames_sound(run, [lengths[0] + lengths[1], lengths[2]])  # two lines as one
    assert not frames_sound(run, [19, lengths[0] - 19, *lengths[1:]])  # a piece no longer than its crc field
    assert not frames_sound(run + b"x", lengths)


@given(st.lists(event_strategies(), min_size=1, max_size=6), st.integers(0, 10_000), st.integers(1, 255))
def test_frames_sound_refuses_any_flipped_byte(events_, where, mask):
    lines = _lines(events_)
    run = bytearray(b"".join(lines))
    run[where % len(run)] ^= mask
    assert not frames_sound(bytes(run), [len(line) for line in lines])
