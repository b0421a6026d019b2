"""Short publish attempts: an append whose leader died is sent again every 2 s, not after 12 s."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from cairn.events.body_check import checked_body
from cairn.events.kinds import kind_name
from cairn.store.errors import AppendTimeout
from cairn.store.jetstream.local_cluster import LocalCluster
from cairn.store.jetstream.names import session_token
from cairn.store.jetstream.writer import Head, attempt_timeout, frame_call, publish_call
from tests.cluster.js_helpers import fresh_layout, open_journal
from tests.store.helpers import msg


def test_attempts_are_2_s_while_a_call_is_young_then_the_request_timeout() -> None:
    assert attempt_timeout(0.0, 30.0, 12.0) == 2.0
    assert attempt_timeout(11.9, 18.1, 12.0) == 2.0
    assert attempt_timeout(12.0, 18.0, 12.0) == 12.0
    assert attempt_timeout(20.0, 10.0, 12.0) == 10.0  # never past the call's deadline
    assert attempt_timeout(0.0, 0.5, 12.0) == 0.5
    assert attempt_timeout(0.0, 30.0, 1.5) == 1.5  # never above the request timeout
    assert attempt_timeout(3.0, 0.0, 12.0) == 0.001  # never 0 (a 0 timeout is no wait at all)
    assert attempt_timeout(3.0, -2.0, 12.0) == 0.001


def test_a_publish_nobody_answers_is_sent_again_with_the_same_ids_within_one_request_timeout(
    cluster: LocalCluster,
) -> None:
    """A subject whose only listener never replies stands in for a stream leader that just died."""
    journal = open_journal(cluster, fresh_layout())
    try:
        silent = f"silent.{uuid.uuid4().hex}"  # outside every stream: only our listener gets it
        seen: list[str] = []

        async def listen() -> None:
            async def swallow(message: object) -> None:
                seen.append(message.headers["Nats-Msg-Id"])  # type: ignore[attr-defined]

            await journal._nc.subscribe(silent, cb=swallow)
            await journal._nc.flush()

        journal._call(listen())
        events = [(e, b, kind_name(e)) for e, b in (checked_body(msg(i)) for i in range(1))]
        framed = frame_call("silent", session_token("silent"), Head(), events, 1_000, 1 << 20)

        async def publish() -> int:
            return await publish_call(
                journal._nc,
                journal._reader,
                "silent",
                silent,
                Head(),
                framed,
                timeout_s=9,
                request_timeout_s=12,
            )

        with pytest.raises(AppendTimeout):
            journal._call(publish(), 60)
        journal._call(asyncio.sleep(0))
        # one 12 s attempt took the whole 9 s before; 2 s attempts go out about every 2 s
        assert len(seen) >= 3, seen
        assert set(seen) == {framed.msg_ids[0]}  # the same id every time: the server can deduplicate
    finally:
        journal.close()
