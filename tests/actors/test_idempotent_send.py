"""Idempotent sends (issue 23 point 2, locally; issue 25's client message id): a resend with the same
`idempotency_key` records and runs nothing. It joins its turn while that runs, and is answered from
the log once it has ended, across a restart too; the same key with another message is refused.
Real hosts on the scripted provider, real threads and store."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cairn import InputError
from cairn.actors.provider.scripted import Reply, http_error
from cairn.actors.session.stream import Turn, TurnResult
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.events.codec import Record
from cairn.events.kinds import Request, UserMessage
from cairn.events.model import ToolCall
from tests.actors.helpers import WAIT, open_host, scripted
from tests.actors.test_async_host import open_async


class Gate:
    """A tool that waits until `opened` is set, so a turn can be caught running."""

    schemas = ('{"name":"wait","parameters":{"type":"object"}}',)
    read_only = ("wait",)

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        self.entered.set()
        self.opened.wait(30)
        return ToolOutcome(content="opened")


def _records(host: Any, sid: str) -> list[Record]:
    return list(host.journal.read(sid))


def _keyed(host: Any, sid: str) -> list[UserMessage]:
    return [
        r.event for r in _records(host, sid) if isinstance(r.event, UserMessage) and r.event.idempotency_key
    ]


def _items(turn: Turn) -> list[int]:
    return [item.seq for item in turn.events(timeout=WAIT) if isinstance(item, Record)]


def _same(first: TurnResult, second: TurnResult) -> None:
    """The resend's result is the first send's, but the time in the provider, which the log lacks."""
    assert second == msgspec.structs.replace(first, provider_seconds=0.0)


def test_a_resend_after_the_turn_ended_is_answered_from_the_log_and_runs_nothing(tmp_path: Path) -> None:
    provider = scripted(Reply(text="done once"))
    host = open_host(tmp_path / "store", provider)
    try:
        first = host.send("s", "do it", workspace=tmp_path, idempotency_key="k-1")
        first_items = _items(first)
        result = first.result(WAIT)
        assert result.ok and result.text == "done once"
        log_before, asked = _records(host, "s"), len(provider.requests)

        again = host.send("s", "do it", idempotency_key="k-1")
        _same(result, again.result(WAIT))
        assert again.result(WAIT).provider_seconds == 0.0
        assert _items(again) == first_items  # the turn's records, as the first handle saw them
        assert _records(host, "s") == log_before and len(provider.requests) == asked
        assert [m.idempotency_key for m in _keyed(host, "s")] == ["k-1"]
    finally:
        host.close()


def test_a_resend_after_a_restart_is_answered_from_the_log(tmp_path: Path) -> None:
    root = tmp_path / "store"
    host = open_host(root, scripted(Reply(text="before the restart")))
    try:
        result = host.send("s", "do it", workspace=tmp_path, idempotency_key="k-2").result(WAIT)
    finally:
        host.close()
    provider = scripted(Reply(text="must not run"))
    host = open_host(root, provider)
    try:
        again = host.send("s", "do it", idempotency_key="k-2").result(WAIT)
        _same(result, again)
        assert again.text == "before the restart" and provider.requests == []
        fresh = host.send("s", "something new", idempotency_key="k-3").result(WAIT)
        assert fresh.ok and fresh.text == "must not run" and len(provider.requests) == 1
    finally:
        host.close()


def test_a_resend_of_a_failed_turn_gets_the_same_failure_without_asking_again(tmp_path: Path) -> None:
    provider = scripted(http_error(400, "this request is malformed"))
    host = open_host(tmp_path / "store", provider)
    try:
        result = host.send("s", "do it", workspace=tmp_path, idempotency_key="k-f").result(WAIT)
        assert (result.status, result.phase) == ("failed", "provider")
        again = host.send("s", "do it", idempotency_key="k-f").result(WAIT)
        _same(result, again)
        assert len(provider.requests) == 1
    finally:
        host.close()


def test_a_resend_while_the_turn_runs_joins_it(tmp_path: Path) -> None:
    """The first send's turn waits in a tool; the resend gets the items so far, then the rest and
    the same result. One message recorded, one turn run."""
    gate = Gate()
    provider = scripted(
        Reply(text="", tool_calls=(ToolCall("c1", "wait", "{}"),)), Reply(text="after the wait")
    )
    host = open_host(tmp_path / "store", provider, tools=gate)
    try:
        first = host.send("s", "do it", workspace=tmp_path, idempotency_key="k-4")
        assert gate.entered.wait(WAIT)
        again = host.send("s", "do it", idempotency_key="k-4")
        gate.opened.set()
        result = first.result(WAIT)
        assert result.ok and result.text == "after the wait"
        assert again.result(WAIT) == result  # the same handle's result: provider time included
        assert _items(again) == _items(first)
        assert len(_keyed(host, "s")) == 1 and len(provider.requests) == 2
        assert len([r for r in _records(host, "s") if isinstance(r.event, Request)]) == 2
    finally:
        gate.opened.set()
        host.close()


def test_two_sends_with_one_key_during_another_turn_record_one_message(tmp_path: Path) -> None:
    """Both arrive while an earlier turn runs: the first steers it, the second joins; the turn's
    next request carries the message once."""
    gate = Gate()
    provider = scripted(Reply(text="", tool_calls=(ToolCall("c1", "wait", "{}"),)))
    host = open_host(tmp_path / "store", provider, tools=gate)
    try:
        running = host.send("s", "start", workspace=tmp_path)
        assert gate.entered.wait(WAIT)
        one = host.send("s", "also this", idempotency_key="k-5")
        two = host.send("s", "also this", idempotency_key="k-5")
        gate.opened.set()
        results = [turn.result(WAIT) for turn in (running, one, two)]
        assert results[0].ok and results[0] == results[1] == results[2]  # one turn, three handles
        assert [m.idempotency_key for m in _keyed(host, "s")] == ["k-5"]
        texts = [m.content for m in provider.requests[-1].messages if m.role == "user"]
        assert sum(1 for content in texts if "also this" in str(content)) == 1
    finally:
        gate.opened.set()
        host.close()


def test_the_same_key_with_another_message_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted(Reply(text="ok")))
    try:
        assert host.send("s", "first", workspace=tmp_path, idempotency_key="k-6").result(WAIT).ok
        before = _records(host, "s")
        refused = host.send("s", "second", idempotency_key="k-6").result(WAIT)
        assert (refused.status, refused.error_class) == ("rejected", "IdempotencyKeyReused")
        assert "idempotency key 'k-6' was used for another message of session s" in refused.error
        assert _records(host, "s") == before
    finally:
        host.close()


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("", "1..256 chars"),
        ("k" * 257, "1..256 chars"),
        ("a\x00b", "control characters"),
        ("lone \ud800", "lone surrogates"),
        (5, "must be a str"),
    ],
    ids=["empty", "too-long", "control", "surrogate", "int"],
)
def test_a_bad_key_is_refused_before_anything_is_written(tmp_path: Path, key: object, said: str) -> None:
    host = open_host(tmp_path / "store", scripted(Reply(text="never")))
    try:
        with pytest.raises(InputError, match=said):
            host.send("s", "hello", workspace=tmp_path, idempotency_key=key)  # type: ignore[arg-type]
        assert _records(host, "s") == []
    finally:
        host.close()


def test_async_host_sends_with_a_key(tmp_path: Path) -> None:
    provider = scripted(Reply(text="async once"))

    async def main() -> tuple[Any, Any]:
        async with open_async(tmp_path / "store", provider) as host:
            first = await (await host.send("s", "go", workspace=tmp_path, idempotency_key="k-a")).result(WAIT)
            again = await (await host.send("s", "go", idempotency_key="k-a")).result(WAIT)
            return first, again

    first, again = asyncio.run(main())
    _same(first, again)
    assert len(provider.requests) == 1
