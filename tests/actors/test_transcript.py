"""Host.transcript / AsyncHost.transcript: what the user saw, paged from the log, bounded, typed errors.

A real host on a real store: the scripted model calls tools, a turn is
steered mid-flight, another fails, one holds an image; the transcript is
read back whole and in pages of every size, and must be the same.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import (
    AsyncHost,
    Host,
    ImagePart,
    InputError,
    InvalidSessionId,
    Reply,
    ShownAssistantMessage,
    ShownImage,
    ShownText,
    ShownToolResult,
    ShownTurnCancelled,
    ShownTurnCompleted,
    ShownTurnFailed,
    ShownTurnStarted,
    ShownUserMessage,
    TextPart,
    ToolCall,
    TranscriptEntry,
    UnknownSession,
    http_error,
)
from cairn.actors.host.transcript import MAX_LIMIT
from cairn.events.codec import Record
from tests.actors.helpers import (
    SETTINGS,
    WAIT,
    Clock,
    GatedTools,
    SizedTools,
    config_from,
    open_host,
    scripted,
)


def _all(host: Host, session: str, limit: int) -> list[TranscriptEntry]:
    """Every entry, page by page, checking each page's bounds and `next_after`."""
    found: list[TranscriptEntry] = []
    after = 0
    while True:
        page = host.transcript(session, after=after, limit=limit)
        assert len(page.entries) <= limit
        assert all(entry.seq > after for entry in page.entries)
        found.extend(page.entries)
        if not page.more:
            assert page.next_after == page.last_seq
            return found
        assert len(page.entries) == limit and page.next_after == page.entries[-1].seq
        after = page.next_after


def test_a_tool_conversation_reads_back_as_the_user_saw_it(tmp_path: Path) -> None:
    with open_host(tmp_path / "store", scripted()) as host:
        assert host.send("s", "tools 2 x 10 #a", workspace=tmp_path).result(WAIT).ok
        assert host.send("s", "thanks").result(WAIT).ok
        whole = host.transcript("s", limit=MAX_LIMIT)
    kinds = [type(entry.item) for entry in whole.entries]
    assert kinds == [
        ShownUserMessage,
        ShownTurnStarted,
        ShownAssistantMessage,
        ShownToolResult,
        ShownAssistantMessage,
        ShownToolResult,
        ShownAssistantMessage,
        ShownTurnCompleted,
        ShownUserMessage,
        ShownTurnStarted,
        ShownAssistantMessage,
        ShownTurnCompleted,
    ]
    seqs = [entry.seq for entry in whole.entries]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    first, second = whole.entries[1].item, whole.entries[9].item
    assert isinstance(first, ShownTurnStarted) and isinstance(second, ShownTurnStarted)
    assert [e.turn_id for e in whole.entries] == [first.turn_id] * 8 + [second.turn_id] * 4
    call = whole.entries[2].item
    assert isinstance(call, ShownAssistantMessage) and call.tool_calls[0].name == "read"
    assert call.tool_calls[0].arguments == '{"tokens": 10}'
    result = whole.entries[3].item
    assert isinstance(result, ShownToolResult) and result.call_id == call.tool_calls[0].id
    assert result.status == "ok" and not result.truncated and result.original_chars > 0
    assert isinstance(result.parts[0], ShownText) and result.parts[0].text.startswith("a-0:")
    assert not whole.more and whole.next_after == whole.last_seq
    assert all(entry.ts > 0 for entry in whole.entries)


def test_pages_of_every_size_give_the_same_transcript(tmp_path: Path) -> None:
    with open_host(tmp_path / "store", scripted()) as host:
        assert host.send("s", "tools 3 x 10 #a", workspace=tmp_path).result(WAIT).ok
        assert host.send("s", "tools 1 x 10 #b").result(WAIT).ok
        whole = host.transcript("s", limit=MAX_LIMIT).entries
        for limit in (1, 2, 3, 5, 7):
            assert tuple(_all(host, "s", limit)) == whole, limit
        # a page that starts inside a turn still names it (read back to the turn's start)
        for entry in whole:
            page = host.transcript("s", after=entry.seq - 1, limit=1)
            assert page.entries == (entry,)
        # polling at the end: nothing new, the same place, until something is written
        end = host.transcript("s", after=whole[-1].seq)
        assert end.entries == () and not end.more and end.next_after == end.last_seq
        beyond = host.transcript("s", after=end.last_seq + 10)
        assert beyond.entries == () and beyond.next_after == end.last_seq + 10
        assert host.send("s", "more").result(WAIT).ok
        later = host.transcript("s", after=end.next_after)
    assert isinstance(later.entries[0].item, ShownUserMessage) and later.entries[0].seq > end.last_seq


def test_a_message_sent_mid_turn_belongs_to_the_turn_it_steered(tmp_path: Path) -> None:
    tools = GatedTools()
    with open_host(tmp_path / "store", scripted(), tools=tools) as host:
        turn = host.send("s", "tools 2 x 10 #st", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        steer = host.send("s", "and look at the tests too")
        tools.release.set()
        assert turn.result(WAIT).ok and steer.result(WAIT).ok
        entries = host.transcript("s").entries
    users = [e for e in entries if isinstance(e.item, ShownUserMessage)]
    assert len(users) == 2 and users[0].turn_id == users[1].turn_id == turn.result(WAIT).turn_id
    assert next(e for e in entries if isinstance(e.item, ShownTurnStarted)).turn_id == users[0].turn_id


def test_a_failed_turn_ends_with_its_phase_and_error(tmp_path: Path) -> None:
    provider = scripted(http_error(400, "this request is malformed"))
    with open_host(tmp_path / "store", provider) as host:
        assert host.send("s", "hello", workspace=tmp_path).result(WAIT).status == "failed"
        entries = host.transcript("s").entries
    end = entries[-1].item
    assert isinstance(end, ShownTurnFailed) and end.phase == "provider"
    assert "malformed" in end.error and end.turn_id == entries[-1].turn_id
    assert [type(e.item) for e in entries] == [ShownUserMessage, ShownTurnStarted, ShownTurnFailed]


def test_images_come_as_kind_and_size_and_their_data_only_when_asked(tmp_path: Path) -> None:
    data = base64.b64encode(bytes(range(256)) * 4).decode()  # 1,024 bytes
    with open_host(tmp_path / "store", scripted()) as host:
        parts = [TextPart("what is this?"), ImagePart("image/png", data)]
        assert host.send("s", parts, workspace=tmp_path).result(WAIT).ok
        plain = host.transcript("s").entries[0].item
        full = host.transcript("s", images=True).entries[0].item
    assert isinstance(plain, ShownUserMessage) and isinstance(full, ShownUserMessage)
    assert plain.parts[0] == ShownText("what is this?")
    assert plain.parts[1] == ShownImage(media_type="image/png", size=1024)
    assert isinstance(full.parts[1], ShownImage) and full.parts[1].data == data


def test_the_users_own_text_stays_but_the_host_setup_does_not_appear(tmp_path: Path) -> None:
    workspace = str(tmp_path.resolve())
    with open_host(tmp_path / "store", scripted()) as host:
        assert host.send("s", f"look in {workspace}/src", workspace=tmp_path).result(WAIT).ok
        page = host.transcript("s")
    text = repr(page)
    assert f"look in {workspace}/src" in text  # the user's words, as written
    assert text.count(workspace) == 1 and SETTINGS.system_prompt not in text


BAD_PAGES: list[dict[str, Any]] = [
    {"limit": 0},
    {"limit": MAX_LIMIT + 1},
    {"limit": -1},
    {"limit": True},
    {"limit": "10"},
    {"limit": 2.0},
    {"after": -1},
    {"after": 1.5},
    {"after": False},
    {"after": "3"},
    {"after": 2**63},
]


def _store_state(host: Host) -> list[tuple[str, int]]:
    return [(sid, host.journal.last_seq(sid)) for sid in host.sessions()]


@pytest.mark.parametrize("bad", BAD_PAGES, ids=repr)
def test_a_bad_page_is_refused_before_anything_is_read(tmp_path: Path, bad: dict[str, Any]) -> None:
    with open_host(tmp_path / "store", scripted()) as host:
        assert host.send("s", "hello", workspace=tmp_path).result(WAIT).ok
        before = _store_state(host)
        with pytest.raises(InputError, match=r"after|limit"):
            host.transcript("s", **bad)
        with pytest.raises(InputError):  # checked before the session is looked up
            host.transcript("nobody", **bad)
        assert _store_state(host) == before


def test_a_bad_or_unknown_session_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with open_host(tmp_path / "store", scripted()) as host:
        assert host.send("s", "hello", workspace=tmp_path).result(WAIT).ok
        before = _store_state(host)
        for bad in ("", "../etc", "a b", "x" * 200, 7, None):
            with pytest.raises(InvalidSessionId):
                host.transcript(bad)  # type: ignore[arg-type]
        with pytest.raises(UnknownSession, match="nobody"):
            host.transcript("nobody")
        assert _store_state(host) == before and "nobody" not in host.live_sessions


def test_a_page_reads_the_log_from_after_not_the_whole_session(tmp_path: Path, monkeypatch: Any) -> None:
    with open_host(tmp_path / "store", scripted()) as host:
        assert host.send("s", "start", workspace=tmp_path).result(WAIT).ok
        for n in range(30):
            assert host.send("s", f"tools 1 x 5 #t{n}").result(WAIT).ok
        last = host.journal.last_seq("s")
        read = host.journal.read
        counted: list[int] = []

        def counting(sid: str, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Record]:
            for record in read(sid, from_seq, to_seq):
                counted.append(record.seq)
                yield record

        monkeypatch.setattr(host.journal, "read", counting)
        page = host.transcript("s", after=last // 2, limit=5)
    assert len(page.entries) == 5 and page.more
    assert last > 300 and len(counted) < 40  # the page, one entry past it, and back to its turn's start


def test_async_host_gives_the_same_pages_off_the_loop(tmp_path: Path) -> None:
    async def main() -> tuple[Any, Any]:
        host = await AsyncHost.open(
            tmp_path / "store",
            provider=scripted(Reply(text="one", tool_calls=(ToolCall("c1", "read", '{"tokens": 3}'),))),
            tools=SizedTools(),
            settings=SETTINGS,
            clock_ms=Clock(),
            config=config_from({}),
        )
        async with host:
            turn = await host.send("s", "go", workspace=str(tmp_path))
            assert (await turn.result()).ok
            page = await host.transcript("s", limit=3)
            with pytest.raises(UnknownSession):
                await host.transcript("nobody")
            with pytest.raises(InputError):
                await host.transcript("s", limit=0)
            return page, host.host.transcript("s", limit=3)

    page, threaded = asyncio.run(main())
    assert page == threaded and page.more and len(page.entries) == 3


def test_a_cancelled_turn_ends_with_its_reason(tmp_path: Path) -> None:
    tools = GatedTools()
    with open_host(tmp_path / "store", scripted(), tools=tools) as host:
        try:
            turn = host.send("s", "tools 2 x 5 #c", workspace=tmp_path)
            assert tools.entered.wait(WAIT)
            turn.cancel("the user pressed stop")
            assert turn.result(WAIT).status == "cancelled"
        finally:
            tools.release.set()
        entries = host.transcript("s").entries
    end = entries[-1].item
    assert isinstance(end, ShownTurnCancelled) and end.reason == "the user pressed stop"
    closed = entries[-2].item  # the call left open, closed with an error result first
    assert isinstance(closed, ShownToolResult) and closed.status == "error"
    assert {entry.turn_id for entry in entries} == {turn.result(WAIT).turn_id}
