"""The pure parts of serving on a cluster: where a message goes, the wire frames, the names."""

from __future__ import annotations

import pytest

from cairn.actors.cluster.errors import InvalidHostId
from cairn.actors.cluster.frames import (
    Accepted,
    Beat,
    DeltaFrame,
    ErrorFrame,
    ForwardAnswer,
    Forwarded,
    RecordFrame,
    ResultFrame,
    TurnRequest,
    decode_answer,
    decode_forwarded,
    decode_frame,
    decode_request,
    encode,
    frame_item,
    item_frame,
)
from cairn.actors.cluster.names import ClusterNames, checked_host_id, default_host_id
from cairn.actors.cluster.routing import (
    AwaitRelease,
    Claim,
    Done,
    Forward,
    Serve,
    after_forward,
    released,
    route,
)
from cairn.actors.provider.base import ReasoningDelta, TextDelta
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import TurnResult
from cairn.events.codec import decode_line, encode_line
from cairn.events.errors import ChecksumMismatch, InvalidSessionId
from cairn.events.kinds import OwnerChanged
from cairn.events.model import ImagePart, TextPart
from cairn.store.jetstream.lease_policy import Held, Vacant, Vacated

# --- Rule 1 and Rule 2 of routing, as tables -------------------------------------------------------


@pytest.mark.parametrize(
    ("holds", "observed", "decision"),
    [
        (True, Held("host-a", 7), Serve()),
        (True, Vacant(), Serve()),
        (False, Vacant(), Claim()),
        (False, Vacated(9), Claim()),
        (False, Held("host-a", 7), Claim()),  # its own lease its keeper no longer holds: fence again
        (False, Held("host-b", 7), Forward("host-b", 7)),
    ],
)
def test_a_message_is_served_claimed_or_forwarded_as_rule_1_says(
    holds: bool, observed: Held | Vacant | Vacated, decision: object
) -> None:
    assert route(holds, observed, "host-a") == decision


def test_a_holder_that_does_not_take_a_forward_is_waited_out_until_its_lease_moves() -> None:
    forward = Forward("host-b", 7)
    assert after_forward("taken", forward) == Done()
    assert after_forward("not-taken", forward) == AwaitRelease("host-b", 7)
    assert after_forward("unanswered", forward) == AwaitRelease("host-b", 7)
    awaited = AwaitRelease("host-b", 7)
    assert not released(Held("host-b", 7), awaited)
    assert released(Held("host-b", 8), awaited)  # renewed: it lives, ask it again
    assert released(Held("host-c", 9), awaited)
    assert released(Vacant(), awaited) and released(Vacated(8), awaited)


# --- frames ------------------------------------------------------------------------------------------


def test_every_frame_round_trips_and_records_travel_as_their_checked_log_line() -> None:
    result = TurnResult(session="s", status="failed", phase="tool", error="boom", requests=2, last_seq=9)
    frames = [
        Accepted(host_id="host-a"),
        ErrorFrame(n=0, error_class="HostBusy", message="no slot"),
        DeltaFrame(n=3, text="hé", reasoning=True),
        ResultFrame(n=4, result=result),
        Beat(),
    ]
    for frame in frames:
        assert decode_frame(encode(frame)) == frame

    line, _ = encode_line(
        pos=5,
        sid="a.b",
        seq=2,
        ts=1_700_000_000_000,
        prev="0" * 32,
        event=OwnerChanged(host_id="h", lease_revision=1),
    )
    record = decode_line(line)
    framed = item_frame(1, record)
    assert isinstance(framed, RecordFrame) and framed.line == line
    assert frame_item(decode_frame(encode(framed))) == record  # type: ignore[arg-type]
    assert frame_item(item_frame(2, TextDelta("x"))) == TextDelta("x")
    assert frame_item(item_frame(2, ReasoningDelta("y"))) == ReasoningDelta("y")
    tampered = RecordFrame(n=1, line=line.replace(b'"h"', b'"H"'))
    with pytest.raises(ChecksumMismatch):
        frame_item(tampered)


def test_requests_and_forwards_round_trip_with_parts_and_settings() -> None:
    request = TurnRequest(
        sid="s-1",
        content=(TextPart("look"), ImagePart("image/png", "aGVsbG8=")),
        workspace="/repo",
        settings=SessionSettings(model="m", context_window=8_000, tool_schemas=('{"name":"read"}',)),
    )
    assert decode_request(encode(request)) == request
    assert decode_request(encode(TurnRequest(sid="s", content="text"))).content == "text"
    forwarded = Forwarded(request=request, reply_to="_INBOX.x", via="host-b")
    assert decode_forwarded(encode(forwarded)) == forwarded
    assert decode_answer(encode(ForwardAnswer(taken=True, host_id="host-a"))).taken


# --- names -------------------------------------------------------------------------------------------


def test_subjects_encode_session_ids_and_host_ids_must_be_plain_tokens() -> None:
    names = ClusterNames()
    assert names.turn_subject("team.alpha:1") == "cairn.turn.team=2Ealpha=3A1"
    assert names.turn_wildcard == "cairn.turn.*" and names.queue == "cairn-hosts"
    assert names.host_subject("host-a_1") == "cairn.host.host-a_1.turn"
    for bad in ("a b", "a*", "a>", "", "x" * 129):
        with pytest.raises(InvalidSessionId):
            names.turn_subject(bad)
    for bad_host in ("a.b", "a b", "a*", ">", "", "x" * 65):
        with pytest.raises(InvalidHostId):
            checked_host_id(bad_host)
    made = default_host_id()
    assert checked_host_id(made) == made and made != default_host_id()
    other = ClusterNames.named("t1")
    assert (other.prefix, other.lease_bucket, other.layout.stream) == (
        "cairn-t1",
        "cairn_leases_t1",
        "CAIRN_EVENTS_t1",
    )
