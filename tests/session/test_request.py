"""Request assembly: the exact messages a provider receives, with the request event they make."""

from __future__ import annotations

import msgspec

from cairn.actors.session.handoff import decide_handoff
from cairn.actors.session.request import assemble, request_event
from cairn.actors.session.tool_budget import render_context
from cairn.actors.session.tracker import occupancy
from tests.session.builders import Session, new_view


def test_assembly_is_system_then_budgeted_history_then_the_handoff() -> None:
    session = Session(window=110_000, cap=10_000, system_prompt="Be exact.")
    session.user("summarise the logs")
    session.tool_turn(output="L" * 120_000)
    view = new_view()
    first = assemble(session.state, view)
    system = first.messages[0]
    assert (system.role, system.content) == ("system", "Be exact.")
    assert first.messages[1:] == render_context(session.state.context)
    assert first.messages[3].content != session.state.context[2].content  # the X1 preview
    assert first.tools == session.state.info.tool_schemas  # type: ignore[union-attr]
    assert first.parts.system == first.projection.local_tokens - first.parts.tools - first.parts.history
    assert first.parts.handoff == 0 and not first.handoff_included
    assert first.parts.total == first.projection.tokens  # no baseline yet: the local estimate

    session.request(view, "r1")
    session.assistant("Reading.", request_id="r1")
    session.usage("r1", 74_000, 500, None)
    occ = occupancy(session.state, view)
    handoff = decide_handoff(session.state, occ.snapshot, now_ms=1_700_000_000_000)
    assert handoff is not None
    session.add(handoff)
    second = assemble(session.state, view)
    assert second.handoff_included and second.messages[-1].meta.hidden
    assert second.parts.handoff == view.counter.message(second.messages[-1])
    # the floor counts what was sent; the hand-off was not, so it is added on top
    assert second.projection.tokens == 74_500 + second.parts.handoff
    assert second.projection.source == "provider_plus_estimate"
    # the event keeps cairn's own count beside the provider-based projection, for the room rule
    counted = request_event(second, request_id="r2", turn_id="t").counted_tokens
    assert counted == second.fixed_tokens + second.parts.history + second.parts.handoff
    assert counted == second.projection.local_tokens != second.projection.tokens


def test_request_event_records_the_baseline_pieces() -> None:
    session = Session()
    session.user("hi")
    assembled = assemble(session.state, new_view())
    event = request_event(assembled, request_id="r9", turn_id="t3", attempt=2)
    assert (event.request_id, event.turn_id, event.attempt) == ("r9", "t3", 2)
    assert event.history_length == len(session.state.context) == 1
    assert event.message_count == len(assembled.messages) == 2
    assert event.history_revision == session.state.revision
    assert (event.model, event.fingerprint) == ("model-a", assembled.fingerprint)
    assert event.fixed_tokens == assembled.fixed_tokens
    assert (event.projected_tokens, event.phase, event.projection_source) == (
        assembled.projection.tokens,
        "below_handoff",
        "local_estimate",
    )
    assert event.counted_tokens == assembled.projection.local_tokens == event.projected_tokens  # no baseline
    # the event survives the line codec unchanged
    assert msgspec.json.decode(msgspec.json.encode(event), type=type(event)) == event
