"""An append whose outcome is unknown (issue 23 point 3, the local half): the session reads the log
for it before it writes anything else, so it never fences itself. Before: after an `AppendTimeout`
whose append landed later, the next message was refused with `SeqConflict` ("expected last seq 7,
but it is 9") although no other writer existed. A real store whose fsync stalls on demand."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cairn.actors.provider.scripted import Reply
from cairn.events.kinds import TurnFailed, TurnStarted, UserMessage
from tests.actors.helpers import WAIT, open_host, scripted


class StallingDisk:
    """An fsync that waits while `stalled` is clear (at most 30 s), and says when one is waiting."""

    def __init__(self) -> None:
        self.flowing = threading.Event()
        self.flowing.set()
        self.waiting = threading.Event()

    def fsync(self, fd: int) -> None:
        if not self.flowing.is_set():
            self.waiting.set()
            self.flowing.wait(30)
        os.fsync(fd)


def test_after_an_append_timeout_the_next_message_reads_the_log_and_is_not_fenced(tmp_path: Path) -> None:
    disk = StallingDisk()
    provider = scripted(Reply(text="one"), Reply(text="three"))  # the second turn never asks
    host = open_host(tmp_path / "store", provider, disk=disk, append_timeout_s=0.5)  # type: ignore[arg-type]
    try:
        assert host.send("s", "first", workspace=tmp_path).result(WAIT).text == "one"
        disk.flowing.clear()
        stuck = host.send("s", "second").result(WAIT)
        assert (stuck.status, stuck.error_class) == ("rejected", "AppendTimeout")
        assert disk.waiting.wait(WAIT)
        threading.Timer(0.2, disk.flowing.set).start()  # the disk recovers while the next message waits
        third = host.send("s", "third").result(WAIT)
        assert third.ok and third.text == "three", third
        events = [r.event for r in host.journal.read("s")]
        texts = [e.content[0].text for e in events if isinstance(e, UserMessage)]  # type: ignore[union-attr]
        assert texts == ["first", "second", "third"]  # the second landed after all
        second_turn = [e for e in events if isinstance(e, TurnStarted)][1]
        marked = [e for e in events if isinstance(e, TurnFailed) and e.turn_id == second_turn.turn_id]
        assert [m.phase for m in marked] == ["interrupted"]  # its turn never ran: marked, not resumed
    finally:
        disk.flowing.set()
        host.close()
