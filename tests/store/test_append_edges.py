"""The journal refuses, before writing anything, what it could not read back (issue 10, items 1-2).

Each class of bad input gets a typed error naming the field, and leaves the log's bytes and
the session's last seq as they were: session ids that end in a newline or hold control
characters, fields of the wrong type, non-finite numbers, ints outside 64 bits, lone
surrogates, hand-off records that are not one JSON object, blob parts naming no blob.
"""

from __future__ import annotations

import enum
import hashlib
import json
import threading
from pathlib import Path

import msgspec
import pytest

from cairn.events.errors import InputError, InvalidEvent, InvalidSessionId
from cairn.events.kinds import (
    AssistantMessage,
    Carried,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    EventBase,
    FileAccess,
    Handoff,
    SessionStarted,
    ToolResult,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import BlobPart, Message, TextPart, ToolCall
from cairn.store import Journal, verify_store
from tests.store.helpers import segment_files, started


@pytest.fixture
def journal(tmp_path: Path):
    with Journal.open(tmp_path / "store", clock_ms=lambda: 1_000) as j:
        j.append("s1", [started()], expected_seq=0)
        yield j


def _log(journal: Journal) -> bytes:
    return b"".join(path.read_bytes() for path in segment_files(journal.root))


def _refused(journal: Journal, error: type[Exception], sid: str, events: list, **kwargs) -> Exception:
    """Append must raise `error` and leave the log and the session as they were; return the error."""
    before, last = _log(journal), journal.last_seq("s1")
    expected = kwargs.pop("expected_seq", last if sid == "s1" else 0)
    with pytest.raises(error) as info:
        journal.append(sid, events, expected_seq=expected, **kwargs)
    try:  # the async form refuses the call at once, or fails its future (the writer checks fields)
        future = journal.append_async(sid, events, expected_seq=expected, **kwargs)
    except error:
        pass
    else:
        assert isinstance(future.exception(10), error)
    assert _log(journal) == before
    assert journal.last_seq("s1") == last
    return info.value


# --- item 1: session ids --------------------------------------------------------------------

BAD_SESSION_IDS = [
    "abc\n",  # `$` matches before a final newline: this one used to be written raw into the line
    "abc\r\n",
    "abc\r",
    "a\nb",
    "abc\x00",
    "abc\t",
    "abc ",
    " abc",
    "abc\x0b",
    "abc\x0c",
    "abc\x85",
    "abc\u2028",
    "abc\u2029",
    'ab"c',
    "ab\\c",
    "abé",
    "ab\ud800",
    "\n",
]


@pytest.mark.parametrize("sid", BAD_SESSION_IDS, ids=ascii)
def test_session_ids_with_line_breaks_control_chars_or_other_whitespace_are_refused(
    journal: Journal, sid: str
) -> None:
    _refused(journal, InvalidSessionId, sid, [TurnStarted(turn_id="t")])
    for read in (journal.last_seq, journal.load, journal.replay_full, journal.session, journal.checkpoints):
        with pytest.raises(InvalidSessionId):
            read(sid)
    with pytest.raises(InvalidSessionId):
        list(journal.read(sid))


def test_non_str_session_ids_are_refused(journal: Journal) -> None:
    for sid in (b"abc", 12, None, ["abc"]):
        _refused(journal, InvalidSessionId, sid, [TurnStarted(turn_id="t")])


# --- item 2: every field is checked against its kind's schema --------------------------------


class Tokens(enum.IntEnum):
    TWELVE = 12


class Label(str):
    pass


class FancyText(TextPart, frozen=True, tag="text"):
    pass


WRONG_TYPES: dict[str, tuple[EventBase, str]] = {
    "str in an int field": (Usage(request_id="r", prompt_tokens="12"), "$.prompt_tokens"),
    "str in a required int field": (TurnCompleted(turn_id="t", requests="1"), "$.requests"),
    "int in a str field": (TurnStarted(turn_id=12), "$.turn_id"),
    "float in an int field": (TurnCompleted(turn_id="t", requests=1.5), "$.requests"),
    "whole float in an int field": (Usage(request_id="r", total_tokens=12.0), "$.total_tokens"),
    "bool in an int field": (Usage(request_id="r", total_tokens=True), "$.total_tokens"),
    "int in a bool field": (
        ToolResult(call_id="c", tool_name="t", status="ok", effect="read", content=(), truncated=1),
        "$.truncated",
    ),
    "None in a str field": (TurnStarted(turn_id=None), "$.turn_id"),
    "None in an int field": (TurnCompleted(turn_id="t", requests=None), "$.requests"),
    "bytes in a str field": (TurnStarted(turn_id=b"t"), "$.turn_id"),
    "str subclass": (TurnStarted(turn_id=Label("t")), "$.turn_id"),
    "value outside a literal": (TurnFailed(turn_id="t", phase="lunch"), "$.phase"),
    "list where the schema has a tuple": (
        UserMessage(message_id="m", content=[TextPart("x")]),
        "$.content",
    ),
    "str where the schema has a tuple": (
        ContextSlimmed(mode="micro", removed_call_ids="c1", tokens_saved=1),
        "$.removed_call_ids",
    ),
    "struct of another class in a union": (
        UserMessage(message_id="m", content=(ToolCall(id="c", name="n"),)),
        "$.content[0]",
    ),
    "subclass of a part": (UserMessage(message_id="m", content=(FancyText("x"),)), "$.content[0]"),
    "dict where the schema has a struct": (
        ToolResult(call_id="c", tool_name="t", status="ok", effect="read", content=(), files=({},)),
        "$.files[0]",
    ),
    "int in a tool call's arguments": (
        AssistantMessage(
            message_id="a", request_id="r", tool_calls=(ToolCall(id="c", name="n", arguments=1),)
        ),
        "$.tool_calls[0].arguments",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_fields_of_the_wrong_type_are_refused_naming_the_field(journal: Journal, case: str) -> None:
    event, path = WRONG_TYPES[case]
    error = _refused(journal, InvalidEvent, "s1", [event])
    assert isinstance(error, InvalidEvent) and error.path == path, error
    assert path in str(error)


NON_FINITE = [float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("value", NON_FINITE, ids=repr)
def test_non_finite_numbers_are_refused_not_stored_as_null(journal: Journal, value: float) -> None:
    cases: list[tuple[EventBase, str]] = [
        (Usage(request_id="r", prompt_tokens=value), "$.prompt_tokens"),
        (TurnCompleted(turn_id="t", requests=value), "$.requests"),
        (
            CompactionFailed(epoch=0, attempt=1, reason="error", consecutive_failures=value),
            "$.consecutive_failures",
        ),
        (
            ToolResult(
                call_id="c",
                tool_name="t",
                status="ok",
                effect="read",
                content=(),
                files=(FileAccess("a"),),
                original_chars=value,
            ),
            "$.original_chars",
        ),
    ]
    for event, path in cases:
        error = _refused(journal, InvalidEvent, "s1", [event])
        assert isinstance(error, InvalidEvent) and error.path == path
        assert "non-finite" in str(error)


def test_ints_outside_64_bits_and_negative_epochs_are_refused(journal: Journal) -> None:
    for event, path in [
        (Usage(request_id="r", total_tokens=2**63), "$.total_tokens"),
        (Usage(request_id="r", total_tokens=2**64), "$.total_tokens"),
        (Usage(request_id="r", total_tokens=10**30), "$.total_tokens"),
        (ContextSlimmed(mode="micro", removed_call_ids=(), tokens_saved=-(2**63) - 1), "$.tokens_saved"),
        (CompactionFailed(epoch=-1, attempt=1, reason="error", consecutive_failures=1), "$.epoch"),
        (Handoff(epoch=-1, record=msgspec.Raw(b"{}")), "$.epoch"),
    ]:
        error = _refused(journal, InvalidEvent, "s1", [event])
        assert isinstance(error, InvalidEvent) and error.path == path
    # the edges themselves are fine
    records = journal.append(
        "s1",
        [
            Usage(request_id="r", total_tokens=2**63 - 1),
            ContextSlimmed(mode="micro", removed_call_ids=(), tokens_saved=-(2**63)),
        ],
        expected_seq=1,
    )
    assert [r.event for r in journal.read("s1", 2)] == [r.event for r in records]


LONE_SURROGATES: dict[str, tuple[EventBase, str]] = {
    "message text": (UserMessage(message_id="m", content=(TextPart("ok \ud800"),)), "$.content[0].text"),
    "id": (TurnStarted(turn_id="\udfff"), "$.turn_id"),
    "tool arguments": (
        AssistantMessage(
            message_id="a",
            request_id="r",
            tool_calls=(ToolCall(id="c", name="n", arguments='{"p": "\udc80"}'),),
        ),
        "$.tool_calls[0].arguments",
    ),
    "workspace": (SessionStarted(workspace="/w/\udcff", model="m"), "$.workspace"),
    "tuple of str": (
        ContextSlimmed(mode="snip", removed_call_ids=("a", "\ud83d"), tokens_saved=1),
        "$.removed_call_ids[1]",
    ),
}


@pytest.mark.parametrize("case", sorted(LONE_SURROGATES))
def test_lone_surrogates_are_refused_with_a_typed_error_in_any_string_field(
    journal: Journal, case: str
) -> None:
    event, path = LONE_SURROGATES[case]
    error = _refused(journal, InvalidEvent, "s1", [event])
    assert isinstance(error, InvalidEvent) and error.path == path
    assert "surrogate" in str(error)


def test_a_surrogate_pair_written_as_one_character_is_fine(journal: Journal) -> None:
    text = '\U0001f600 \u2028\u2029\x85\x00\x1f\x7f\ufeff"\\'
    event = UserMessage(message_id="m", content=(TextPart(text),))
    [record] = journal.append("s1", [event], expected_seq=1)
    assert list(journal.read("s1", 2)) == [record] and record.event == event
    assert json.loads(_log(journal).splitlines()[-1])["event"]["content"][0]["text"] == text


def test_a_checkpoint_with_a_lone_surrogate_is_refused_by_its_constructor_with_a_typed_error() -> None:
    with pytest.raises(InvalidEvent, match=r"surrogate|encode"):
        CheckpointCommitted(
            version=1,
            epoch=1,
            through_seq=1,
            trigger="manual",
            strategy="fallback",
            source_tokens=1,
            replacement_tokens=1,
            replacement_messages=(Message(role="user", content="\ud800"),),
        )


@pytest.mark.parametrize(
    "raw",
    [
        b"[1]",
        b'"text"',
        b"1",
        b"{",
        b"not json",
        b'{"a":\n1}',
        b'{"a":1}\r',
        b' {"a":1}',
        b'{"a":1} ',
        b'{"a":"\xff"}',
        rb'{"a":"\ud800"}',
        b"{}{}",
    ],
    ids=repr,
)
def test_hand_off_records_that_are_not_one_json_object_are_refused(journal: Journal, raw: bytes) -> None:
    with pytest.raises(InvalidEvent):
        Handoff(epoch=0, record=msgspec.Raw(raw))
    forced = Handoff(epoch=0, record=msgspec.Raw(b"{}"))  # a record slipped past its constructor
    msgspec.structs.force_setattr(forced, "record", msgspec.Raw(raw))
    error = _refused(journal, InvalidEvent, "s1", [forced])
    assert isinstance(error, InvalidEvent) and error.path == "$.record"


def test_a_blob_part_must_name_a_blob_of_the_store(journal: Journal) -> None:
    missing = BlobPart(sha256="ab" * 32, size=5)
    event = UserMessage(message_id="m", content=(TextPart("x"), missing))
    error = _refused(journal, InvalidEvent, "s1", [event])
    assert isinstance(error, InvalidEvent) and error.path == "$.content[1]"
    big = "z" * (300 * 1024)  # over the blob threshold: the journal puts it in a blob
    [record] = journal.append("s1", [UserMessage(message_id="m", content=(TextPart(big),))], expected_seq=1)
    blob = record.event.content[0]
    assert isinstance(blob, BlobPart) and blob.sha256 == hashlib.sha256(big.encode()).hexdigest()
    reuse = ToolResult(call_id="c", tool_name="t", status="ok", effect="read", content=(blob,))
    journal.append("s1", [reuse], expected_seq=2)  # naming a blob the store has is fine
    wrong_size = msgspec.structs.replace(blob, size=blob.size + 1)
    _refused(journal, InvalidEvent, "s1", [UserMessage(message_id="m", content=(wrong_size,))])
    assert verify_store(journal.root).ok


def test_one_bad_event_refuses_the_whole_call_and_writes_no_blob(journal: Journal) -> None:
    big = "y" * (300 * 1024)
    good = UserMessage(message_id="m", content=(TextPart(big),))
    _refused(journal, InvalidEvent, "s1", [good, Usage(request_id="r", prompt_tokens=float("nan"))])
    assert not (journal.root / "blobs").exists() or not any((journal.root / "blobs").rglob("*"))


def test_not_events_are_refused(journal: Journal) -> None:
    for events in (["not an event"], [{"kind": "usage", "request_id": "r"}], [Carried()], [None]):
        _refused(journal, InvalidEvent, "s1", events)
    for events in (Usage(request_id="r"), "usage", b"x", 12, None):
        _refused(journal, InvalidEvent, "s1", events)


@pytest.mark.parametrize("ts", [-1, 2**63, 1.5, 1_000.0, "1000", True, float("nan")], ids=repr)
def test_bad_timestamps_are_refused(journal: Journal, ts: object) -> None:
    _refused(journal, InputError, "s1", [TurnStarted(turn_id="t")], ts_ms=ts)


@pytest.mark.parametrize("expected", [True, -1, 1.0, "1", None], ids=repr)
def test_bad_expected_seqs_are_refused(journal: Journal, expected: object) -> None:
    _refused(journal, InputError, "s1", [TurnStarted(turn_id="t")], expected_seq=expected)


def test_accepted_events_come_back_with_the_types_a_read_gives(journal: Journal) -> None:
    [record] = journal.append("s1", [Usage(request_id="r", prompt_tokens=Tokens.TWELVE)], expected_seq=1)
    assert type(record.event.prompt_tokens) is int
    assert list(journal.read("s1", 2)) == [record]
    assert journal.load("s1") == journal.replay_full("s1")


def test_a_container_that_holds_itself_is_refused_with_a_typed_error(journal: Journal) -> None:
    loop: list = []
    loop.append(loop)
    _refused(journal, InvalidEvent, "s1", [UserMessage(message_id="m", content=loop)])


class Touchy(enum.IntEnum):
    THREE = 3

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __hash__ = enum.IntEnum.__hash__


def test_a_value_that_fails_on_its_own_is_refused_and_the_store_goes_on(journal: Journal) -> None:
    error = _refused(journal, InvalidEvent, "s1", [Usage(request_id="r", prompt_tokens=Touchy.THREE)])
    assert "no comparing me" in str(error)
    assert journal.failed is None
    assert [r.seq for r in journal.append("s1", [TurnStarted(turn_id="t")], expected_seq=1)] == [2]


def test_a_refused_call_in_a_batch_leaves_the_other_calls_of_the_batch_alone(tmp_path: Path) -> None:
    gate, release = threading.Event(), threading.Event()
    release.set()

    def slow_fsync(fd: int) -> None:
        gate.set()
        release.wait(10)

    with Journal.open(tmp_path / "store", fsync=slow_fsync) as journal:
        for sid in ("a", "b", "c"):
            journal.append(sid, [started()], expected_seq=0)
        release.clear()
        gate.clear()
        blocker = journal.append_async("a", [TurnStarted(turn_id="t")], expected_seq=1)
        assert gate.wait(10)  # the writer is inside fsync: the next calls queue into one batch
        bad = journal.append_async("b", [Usage(request_id="r", total_tokens=float("inf"))], expected_seq=1)
        good = journal.append_async("c", [TurnStarted(turn_id="t")], expected_seq=1)
        release.set()
        assert [r.seq for r in blocker.result(10)] == [2]
        error = bad.exception(10)
        assert isinstance(error, InvalidEvent) and error.path == "$.total_tokens"
        assert [r.seq for r in good.result(10)] == [2]
        assert journal.last_seq("b") == 1 and journal.failed is None


# --- where the check runs (store.admission): the writer reads back what its callers encoded ---------


def test_the_writer_checks_an_ordinary_call_and_names_the_refused_event(journal: Journal) -> None:
    admission = journal._writer._admission  # type: ignore[union-attr]
    good, bad = TurnStarted(turn_id="t"), Usage(request_id="r", total_tokens=float("nan"))
    assert admission.admit([good, bad]) == ([good, bad], None)  # left to the writer
    future = journal.append_async("s1", [good, bad], expected_seq=1)
    error = future.exception(10)
    assert isinstance(error, InvalidEvent) and error.path == "$.total_tokens"
    assert str(error).startswith("event 1 of the call: ")
    assert journal.last_seq("s1") == 1  # the whole call refused, its first event too


def test_calls_with_large_parts_or_blob_parts_are_checked_whole_on_the_callers_thread(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "store", blob_threshold=1_000) as journal:
        admission = journal._writer._admission  # type: ignore[union-attr]
        large = ToolResult(
            call_id="c", tool_name="read", status="ok", effect="read", content=(TextPart(text="x" * 5_000),)
        )
        events, bodies = admission.admit([TurnStarted(turn_id="t"), large])
        assert bodies is not None and isinstance(
            events[1].content[0], BlobPart
        )  # moved to the blob store here
        [record] = journal.append("s1", [large], expected_seq=0)
        part = record.event.content[0]
        assert isinstance(part, BlobPart) and journal.read_blob(part.sha256) == b"x" * 5_000
        naming = UserMessage(message_id="m", content=(part,))
        assert admission.admit([naming])[1] is not None  # a call that names a blob: looked up here
        missing = UserMessage(message_id="m", content=(BlobPart(sha256="0" * 64, size=3),))
        with pytest.raises(InvalidEvent):  # refused on the caller's thread, nothing queued
            admission.admit([missing])
        with pytest.raises(InvalidEvent):  # content that is no sequence of parts: refused here too
            admission.admit([UserMessage(message_id="m", content=5)])  # type: ignore[arg-type]
        small = UserMessage(message_id="m", content=(TextPart(text="x" * 100),))
        assert admission.admit([small])[1] is None
