"""The hand-off (H1-H7): when it is recorded, its strict record, its hidden message."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.session.budget import budget_for, snapshot, thresholds
from cairn.actors.session.handoff import (
    HandoffRecord,
    InvalidHandoff,
    decide_handoff,
    encode_record,
    epoch_handoff,
    format_created_at,
    handoff_failure_line,
    handoff_message,
    is_handoff,
    is_hidden_event,
    render_text,
    strip_handoff,
    validate_record,
)
from cairn.actors.session.request import assemble, request_event
from cairn.actors.session.tracker import occupancy
from cairn.events.kinds import Handoff, UserMessage
from cairn.events.model import Message, TextPart
from tests.session.builders import Session, new_view, summary_message

FIELDS = [
    "version",
    "message_id",
    "observed_tokens",
    "input_budget",
    "handoff_threshold",
    "compaction_threshold",
    "created_at",
]


def _valid() -> dict[str, object]:
    return {
        "version": 1,
        "message_id": "handoff-1",
        "observed_tokens": 75_000,
        "input_budget": 100_000,
        "handoff_threshold": 70_000,
        "compaction_threshold": 80_000,
        "created_at": "2026-01-31T12:00:00.000Z",
    }


def _raw(fields: dict[str, object]) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def _record(**changes: object) -> HandoffRecord:
    return validate_record(_raw({**_valid(), **changes}))


def _band_session(observed: int = 75_000) -> tuple[Session, object]:
    """Window 110,000 with cap 10,000 (budget 100,000); the provider says `observed`."""
    session = Session(window=110_000, cap=10_000)
    session.user("port the service to the new API")
    view = new_view()
    session.request(view, "r1")
    session.assistant("Starting.", request_id="r1")
    session.usage("r1", observed - 100, 100, None)
    return session, view


def test_H1_one_record_is_written_in_the_band_with_exactly_the_v1_fields() -> None:
    session, view = _band_session()
    occ = occupancy(session.state, view)
    assert occ.snapshot.phase == "handoff_band"
    event = decide_handoff(session.state, occ.snapshot, now_ms=1_700_000_000_123)
    assert event is not None and event.epoch == session.state.epoch
    fields = json.loads(bytes(event.record))
    assert list(fields) == FIELDS
    assert fields == {
        "version": 1,
        "message_id": f"handoff-e0-s{session.state.last_seq + 1}",
        "observed_tokens": 75_000,
        "input_budget": 100_000,
        "handoff_threshold": 70_000,
        "compaction_threshold": 80_000,
        "created_at": "2023-11-14T22:13:20.123Z",
    }
    session.add(event)
    assert epoch_handoff(session.state).status == "current"
    again = occupancy(session.state, view)
    assert decide_handoff(session.state, again.snapshot, now_ms=1_700_000_060_000) is None  # one per epoch


def test_H1_nothing_is_written_outside_the_band_or_after_a_failure() -> None:
    for observed, phase in ((69_000, "below_handoff"), (80_000, "compaction_due")):
        session, view = _band_session(observed)
        snap = occupancy(session.state, view).snapshot
        assert snap.phase == phase
        assert decide_handoff(session.state, snap, now_ms=0) is None
    session, view = _band_session()
    snap = occupancy(session.state, view).snapshot
    assert decide_handoff(session.state, snap, now_ms=0, write_failed=True) is None  # H7: no retry
    assert decide_handoff(session.state, snapshot(budget_for(None, None), 75_000), now_ms=0) is None


def test_H1_a_checkpoint_starts_an_epoch_that_may_have_its_own_handoff() -> None:
    session, view = _band_session()
    event = decide_handoff(session.state, occupancy(session.state, view).snapshot, now_ms=0)
    assert event is not None
    session.add(event)
    session.checkpoint((summary_message(),))
    assert (session.state.epoch, epoch_handoff(session.state).status) == (1, "none")
    band = snapshot(budget_for(110_000, 10_000), 72_000)
    fresh = decide_handoff(session.state, band, now_ms=0)
    assert fresh is not None and fresh.epoch == 1


def test_H1_created_at_is_utc_with_milliseconds() -> None:
    assert format_created_at(0) == "1970-01-01T00:00:00.000Z"
    assert format_created_at(1_709_164_800_999) == "2024-02-29T00:00:00.999Z"
    assert format_created_at(-1) == "1969-12-31T23:59:59.999Z"


INVALID = {
    "extra field": {**_valid(), "note": "hi"},
    "missing field": {k: v for k, v in _valid().items() if k != "created_at"},
    "version 2": {**_valid(), "version": 2},
    "version true": {**_valid(), "version": True},
    "129-char id": {**_valid(), "message_id": "m" * 129},
    "empty id": {**_valid(), "message_id": ""},
    "control char in id": {**_valid(), "message_id": "hand\x07off"},
    "C1 control char in id": {**_valid(), "message_id": "hand\x85off"},
    "handoff threshold off by one": {**_valid(), "handoff_threshold": 70_001},
    "compaction threshold off by one": {**_valid(), "compaction_threshold": 79_999},
    "observed at compaction": {**_valid(), "observed_tokens": 80_000},
    "observed below band": {**_valid(), "observed_tokens": 69_999},
    "negative observed": {**_valid(), "observed_tokens": -1},
    "zero budget": {**_valid(), "input_budget": 0, "handoff_threshold": 0, "compaction_threshold": 0},
    "float tokens": {**_valid(), "observed_tokens": 75_000.0},
    "date 2026-02-30": {**_valid(), "created_at": "2026-02-30T12:00:00.000Z"},
    "no milliseconds": {**_valid(), "created_at": "2026-01-31T12:00:00Z"},
    "offset instead of Z": {**_valid(), "created_at": "2026-01-31T12:00:00.000+00:00"},
    "microseconds": {**_valid(), "created_at": "2026-01-31T12:00:00.000000Z"},
    "hour 24": {**_valid(), "created_at": "2026-01-31T24:00:00.000Z"},
    "unicode digits": {**_valid(), "created_at": "２026-01-31T12:00:00.000Z"},
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_H2_invalid_records_are_rejected(case: str) -> None:
    raw = _raw(INVALID[case])
    with pytest.raises(InvalidHandoff):
        validate_record(raw)
    session = Session()
    session.add(Handoff(epoch=0, record=msgspec.Raw(raw)))
    assert epoch_handoff(session.state).status == "suppressed"


def test_H2_duplicate_fields_and_non_objects_are_rejected() -> None:
    duplicated = _raw(_valid())[:-1] + b',"version":1}'
    for raw in (duplicated, b"[1]", b"not json", b'"text"'):
        with pytest.raises(InvalidHandoff):
            validate_record(raw)


def test_H2_the_edges_of_the_rules_are_valid() -> None:
    assert _record(message_id="m" * 128).message_id == "m" * 128
    assert _record(message_id="ü" * 128).message_id == "ü" * 128
    assert _record(observed_tokens=70_000).observed_tokens == 70_000
    assert _record(observed_tokens=79_999).observed_tokens == 79_999
    assert _record(created_at="2024-02-29T23:59:59.999Z").created_at == "2024-02-29T23:59:59.999Z"
    record = _record()
    assert validate_record(encode_record(record)) == record
    assert list(json.loads(encode_record(record))) == FIELDS


def test_H3_one_valid_record_is_current_and_two_suppress_the_epoch() -> None:
    session = Session()
    assert epoch_handoff(session.state).status == "none"
    session.add(Handoff(epoch=0, record=msgspec.Raw(_raw(_valid()))))
    current = epoch_handoff(session.state)
    assert current.status == "current" and current.record == _record()
    session.add(Handoff(epoch=0, record=msgspec.Raw(_raw({**_valid(), "message_id": "other"}))))
    suppressed = epoch_handoff(session.state)
    assert suppressed.status == "suppressed" and suppressed.record is None
    band = snapshot(budget_for(110_000, 10_000), 75_000)
    assert decide_handoff(session.state, band, now_ms=0) is None  # none written while suppressed
    occ = occupancy(session.state, new_view())
    assert occ.handoff is None  # and none projected
    session.add(Handoff(epoch=7, record=msgspec.Raw(_raw(_valid()))))  # another epoch: not filed
    assert len(session.state.epoch_handoffs) == 2
    session.checkpoint((summary_message(),))
    assert epoch_handoff(session.state).status == "none"


def test_H4_the_hidden_message_carries_every_point_of_the_rule() -> None:
    record = _record(observed_tokens=76_543)
    message = handoff_message(record, 3)
    assert message.role == "user" and message.id == "handoff-1"
    assert message.meta.hidden and message.meta.origin == "handoff"
    assert message.meta.record == "handoff:3:handoff-1"
    text = render_text(record)
    assert message.content == text
    lowered = text.lower()
    for point in (
        "context rollover is near",
        "continue the task from its current state",
        "objective",
        "decisions",
        "changes",
        "verification",
        "background work",
        "blockers",
        "exact next action",
        "exact commands and their arguments",
        "claim nothing you have not proven",
        "bookkeeping files",
        "headroom before compaction: 3,457 tokens",
    ):
        assert point in lowered, point
    assert len(text.encode()) <= 2_000  # H4, stated literally


def test_H4_the_text_stays_within_2000_bytes_for_the_largest_record() -> None:
    budget = 2**63 - 1
    handoff, compaction = thresholds(budget)
    record = HandoffRecord(
        version=1,
        message_id="\U0001f600" * 128,
        observed_tokens=handoff,
        input_budget=budget,
        handoff_threshold=handoff,
        compaction_threshold=compaction,
        created_at="9999-12-31T23:59:59.999Z",
    )
    assert validate_record(encode_record(record)) == record
    assert len(render_text(record).encode()) <= 2_000  # H4, stated literally


_records = st.integers(min_value=10, max_value=2**62).flatmap(
    lambda budget: st.builds(
        HandoffRecord,
        version=st.just(1),
        message_id=st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=128),
        observed_tokens=st.integers(thresholds(budget)[0], thresholds(budget)[1] - 1),
        input_budget=st.just(budget),
        handoff_threshold=st.just(thresholds(budget)[0]),
        compaction_threshold=st.just(thresholds(budget)[1]),
        created_at=st.integers(0, 253_402_300_799_999).map(format_created_at),
    )
)


@given(record=_records, data=st.data())
def test_H5_rendering_and_detection_round_trip_and_reject_any_one_char_change(
    record: HandoffRecord, data: st.DataObject
) -> None:
    assert validate_record(encode_record(record)) == record
    message = handoff_message(record, 0)
    assert is_handoff(message, record)
    text = render_text(record)
    assert len(text.encode()) <= 2_000  # H4, stated literally
    index = data.draw(st.integers(0, len(text) - 1))
    char = data.draw(st.characters(blacklist_categories=("Cs",)).filter(lambda c: c != text[index]))
    for changed in (
        text[:index] + char + text[index + 1 :],  # replaced
        text[:index] + text[index + 1 :],  # deleted
        text[:index] + char + text[index:],  # inserted
    ):
        spoof = msgspec.structs.replace(message, content=changed)
        assert not is_handoff(spoof, record)


def test_H5_every_one_char_change_of_a_rendering_is_rejected() -> None:
    record = _record()
    message = handoff_message(record, 0)
    text = render_text(record)
    for index, char in enumerate(text):
        other = "b" if char == "a" else "a"
        for changed in (text[:index] + other + text[index + 1 :], text[:index] + text[index + 1 :]):
            assert not is_handoff(msgspec.structs.replace(message, content=changed), record)
    assert not is_handoff(msgspec.structs.replace(message, content=text + " "), record)
    assert not is_handoff(msgspec.structs.replace(message, id=record.message_id + "x"), record)


def test_H5_a_copy_from_the_user_is_ordinary_text() -> None:
    record = _record()
    text = render_text(record)
    typed = Message(role="user", content=(TextPart(text),), id="u9")
    assert not is_handoff(typed, record)
    assert is_handoff(Message(role="user", content=(TextPart(text),), id=record.message_id), record)
    assert not is_handoff(Message(role="assistant", content=text, id=record.message_id), record)
    assert not is_handoff(handoff_message(record, 0), None)
    other = _record(observed_tokens=75_001)
    assert not is_handoff(handoff_message(other, 0), record)


def test_H6_hidden_from_client_and_forks_stripped_from_compaction_and_persisted_first() -> None:
    session, view = _band_session()
    before = assemble(session.state, view)
    assert not before.handoff_included
    event = decide_handoff(session.state, before.snapshot, now_ms=1_700_000_000_000)
    assert event is not None and is_hidden_event(event)
    assert not is_hidden_event(UserMessage(message_id="u", content=()))
    session.add(event)  # persisted (and applied) before the request is assembled
    after = assemble(session.state, view)
    assert after.handoff_included and after.messages[-1].meta.origin == "handoff"
    assert request_event(after, request_id="r2", turn_id="t1").handoff_included
    record = epoch_handoff(session.state).record
    spoof = Message(role="user", content=render_text(record), id="typed")  # type: ignore[arg-type]
    stripped = strip_handoff((*after.messages, spoof), record)
    assert stripped == (*after.messages[:-1], spoof)


def test_H7_the_failure_line_names_a_session_hash_and_the_error_class_only() -> None:
    error = PermissionError(13, "Permission denied", "/var/lib/cairn/log/00000000000000000042.jsonl")
    line = handoff_failure_line("customer-acme-42", error)
    assert "PermissionError" in line
    assert "customer-acme-42" not in line
    assert "Permission denied" not in line and "/var/lib" not in line and ".jsonl" not in line
    assert "\n" not in line
    assert line == handoff_failure_line("customer-acme-42", PermissionError("other text"))
    assert line != handoff_failure_line("customer-acme-43", error)
