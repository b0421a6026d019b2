"""Every event kind round-trips through the store and the codec; the golden log decodes forever."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.events.codec import decode_envelope, decode_line
from cairn.events.errors import UnknownKind
from cairn.events.kinds import KINDS, EventBase
from cairn.store import Journal, verify_store
from cairn.store.reader import iter_records
from tests.fixtures.make_golden import BASE_TS, SID, golden_events
from tests.strategies import KIND_STRATEGIES, events, put_known_blobs

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden.jsonl"
GOLDEN_SHA256 = "1fa1fedfd959ed785920a5f63ae221f3ac03f82d4ed3afb6f348173dc02cebb3"


def test_strategies_cover_every_kind() -> None:
    assert set(KIND_STRATEGIES) == set(KINDS)


@settings(max_examples=60)
@given(st.lists(events(), min_size=1, max_size=8))
def test_every_kind_round_trips_through_the_store(batch: list[EventBase]) -> None:
    root = Path(tempfile.mkdtemp(prefix="cairn-rt-"))
    try:
        with Journal.open(root) as journal:
            put_known_blobs(root)  # the blob parts drawn name them
            written = journal.append("rt", batch, expected_seq=0)
            assert [r.event for r in written] == batch
            assert list(journal.read("rt")) == written
        with Journal.open(root, readonly=True) as reader:
            assert list(reader.read("rt")) == written
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: kinds added after the golden log was written (it must not be regenerated; their round trip is above)
KINDS_AFTER_GOLDEN = {"owner-changed", "turn-cancelled", "turn-dismissed", "tool-deferred"}


def test_golden_log_is_unchanged() -> None:
    assert hashlib.sha256(GOLDEN.read_bytes()).hexdigest() == GOLDEN_SHA256, (
        "tests/fixtures/golden.jsonl changed: it records what version 1 wrote and must not be regenerated"
    )


def test_golden_log_decodes_to_the_expected_events() -> None:
    lines = GOLDEN.read_bytes().splitlines(keepends=True)
    records = [decode_line(line) for line in lines]
    assert {r.kind for r in records} == set(KINDS) - KINDS_AFTER_GOLDEN
    assert [r.event for r in records] == golden_events()
    assert [(r.pos, r.sid, r.seq, r.ts) for r in records] == [
        (i, SID, i + 1, BASE_TS + i * 1_000) for i in range(len(lines))
    ]


def test_golden_log_opens_as_a_store(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    shutil.copy(GOLDEN, tmp_path / "log" / f"{0:020d}.jsonl")
    report = verify_store(tmp_path)
    assert [p.code for p in report.problems] == ["blob"]  # the golden blob part names no real blob
    with Journal.open(tmp_path) as journal:
        assert journal.recovery.lines_indexed == len(golden_events())
        assert journal.load(SID) == journal.replay_full(SID)
        assert journal.load(SID).epoch == 1
        assert [c.epoch for c in journal.checkpoints(SID)] == [1]


def test_unknown_kinds_take_the_audit_fallback_path(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    prefix = (
        b'{"v":1,"pos":0,"sid":"f","seq":1,"ts":1,"prev":"'
        + b"0" * 32
        + b'","kind":"from-the-future","event":{"kind":"from-the-future","x":1}'
    )
    line = prefix + b',"crc":"%08x"}\n' % crc32c.crc32c(prefix)
    (tmp_path / "log" / f"{0:020d}.jsonl").write_bytes(line)
    assert decode_envelope(line).kind == "from-the-future"
    with pytest.raises(UnknownKind):
        decode_line(line)
    [listed] = list(iter_records(tmp_path))
    assert listed.envelope.kind == "from-the-future" and listed.record is None
    report = verify_store(tmp_path)
    assert [p.code for p in report.problems] == ["bad-event"]
