"""`decode_session_run`: a run of one session's lines, all checked in one pass, or None at any doubt."""

from __future__ import annotations

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from cairn.events.codec import GENESIS, decode_run, decode_session_run, encode_line
from cairn.events.kinds import Usage
from tests.strategies import events as event_strategies


def _run(events, *, sid="s1", first_seq=1, first_pos=10):
    lines = [
        encode_line(pos=first_pos + i, sid=sid, seq=first_seq + i, ts=1, prev=GENESIS, event=e)[0]
        for i, e in enumerate(events)
    ]
    places = []
    offset = 0
    for i, line in enumerate(lines):
        places.append((0, offset, len(line), first_pos + i))
        offset += len(line)
    return b"".join(lines), places


@given(st.lists(event_strategies(), min_size=1, max_size=12))
def test_a_sound_run_decodes_as_decode_run_decodes_it(events_):
    run, places = _run(events_, first_seq=5)
    assert decode_session_run(run, places, "s1", 5) == decode_run(run, [p[2] for p in places])


def _reframed(line: bytes, change: bytes, into: bytes) -> bytes:
    prefix = line[: -len(b',"crc":"00000000"}\n')].replace(change, into)
    return prefix + b',"crc":"%08x"}\n' % crc32c.crc32c(prefix)


def test_any_doubt_gives_none():
    events = [Usage(request_id=f"r{n}") for n in range(4)]
    run, places = _run(events, first_seq=3)
    assert decode_session_run(run, places, "s1", 3) is not None
    assert decode_session_run(run, places, "s2", 3) is None  # another session's
    assert decode_session_run(run, places, "s1", 4) is None  # other seqs
    shifted = [(s, o, n, p + 1) for s, o, n, p in places]
    assert decode_session_run(run, shifted, "s1", 3) is None  # other positions
    flipped = bytearray(run)
    flipped[places[2][1] + 40] ^= 0x01
    assert decode_session_run(bytes(flipped), places, "s1", 3) is None  # a bad crc
    assert decode_session_run(run[:-1], places, "s1", 3) is None  # a line cut short
    assert decode_session_run(run, places[:3], "s1", 3) is None  # more lines than places
    lines = run.splitlines(keepends=True)
    for change, into in (
        (b'"v":1', b'"v":2'),  # another version
        (b'"kind":"usage"', b'"kind":"usagf"'),  # an unknown kind
        (b'"kind":"usage","event"', b'"kind":"turn-started","event"'),  # an envelope not the body's
    ):
        forged = b"".join([*lines[:1], _reframed(lines[1], change, into), *lines[2:]])
        moved = [
            (0, o + (len(forged) - len(run)) * (i > 1), n + (len(forged) - len(run)) * (i == 1), p)
            for i, (_, o, n, p) in enumerate(places)
        ]
        assert decode_session_run(forged, moved, "s1", 3) is None, change
    assert decode_session_run(b"{not json\n", [(0, 0, 10, 10)], "s1", 3) is None
