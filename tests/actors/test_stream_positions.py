"""Resumable turn streams: every item carries its position, and a reader continues after one.

A record's position is its seq (`"42"`), a delta's the seq of the record
before it and its number after that record (`"42.3"`). A reader that lost
the stream passes the last position it saw (`events(after=...)`) and gets
exactly the rest: nothing missed, nothing repeated; after a restart too,
from the log (records only: deltas are not in the log).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cairn import InputError
from cairn.actors.provider.base import ReasoningDelta, TextDelta
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.events.codec import Record
from tests.actors.helpers import WAIT, open_host, scripted
from tests.actors.test_async_host import open_async


def _provider() -> ScriptedProvider:
    """The scripted model, streaming its replies 4 chars a delta."""
    provider = scripted()
    provider.chunk_chars = 4
    return provider


def test_every_item_carries_its_position_and_every_position_resumes_exactly_the_rest(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", _provider())
    try:
        turn = host.send("s", "look around: tools 2 x 5 #p", workspace=tmp_path)
        assert turn.result(WAIT).ok
        whole = list(turn.stream())
        records = [e for e in whole if isinstance(e.item, Record)]
        deltas = [e for e in whole if isinstance(e.item, TextDelta | ReasoningDelta)]
        assert len(records) > 5 and len(deltas) > 5
        assert all(e.position == str(e.item.seq) for e in records)  # type: ignore[union-attr]
        last_seq, count = 0, 0
        for entry in whole:
            if isinstance(entry.item, Record):
                last_seq, count = entry.item.seq, 0
            else:
                count += 1
                assert entry.position == f"{last_seq}.{count}"
        for index, entry in enumerate(whole):
            assert list(turn.stream(after=entry.position)) == whole[index + 1 :]
            assert list(turn.events(after=entry.position)) == [e.item for e in whole[index + 1 :]]
        assert list(turn.stream(after="0")) == whole
    finally:
        host.close()


def test_after_a_restart_the_log_gives_the_records_after_any_position(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", _provider())
    turn = host.send("s", "look around: tools 2 x 5 #r", workspace=tmp_path, idempotency_key="m-1")
    assert turn.result(WAIT).ok
    whole = list(turn.stream())
    host.close()
    host = open_host(tmp_path / "store", _provider())
    try:
        again = host.send("s", "look around: tools 2 x 5 #r", idempotency_key="m-1")  # answered from the log
        assert again.result(WAIT).ok
        for index, entry in enumerate(whole):
            expected = [e for e in whole[index + 1 :] if isinstance(e.item, Record)]
            assert list(again.stream(after=entry.position)) == expected
    finally:
        host.close()


@pytest.mark.parametrize("bad", ["", "x", "1.2.3", "-1", "1.", ".1", "\uff11", " 1", "1e3"])
def test_a_malformed_position_is_refused(tmp_path: Path, bad: str) -> None:
    host = open_host(tmp_path / "store", scripted())
    try:
        turn = host.send("s", "hi", workspace=tmp_path)
        assert turn.result(WAIT).ok
        with pytest.raises(InputError, match="stream position"):
            list(turn.stream(after=bad))
        with pytest.raises(InputError, match="stream position"):
            list(turn.events(after=bad))
    finally:
        host.close()


def test_async_turns_carry_the_same_positions(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_async(tmp_path / "store", _provider()) as host:
            turn = await host.send("s", "look around: tools 1 x 5 #a", workspace=tmp_path)
            await turn.result()
            whole = [entry async for entry in turn.stream()]
            assert whole == list(turn.handle.stream())
            middle = whole[len(whole) // 2].position
            assert [e async for e in turn.stream(after=middle)] == whole[len(whole) // 2 + 1 :]

    asyncio.run(main())
