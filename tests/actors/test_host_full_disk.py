"""A host whose disk fills up: its turns end with a typed error, nothing dies with a traceback.

The store's fsync seam says ENOSPC once the disk is "full" (as a real full
disk does at the log's write or sync). A turn in flight fails with
`StorageFailed`; every later `send` raises a `StorageFailed` of its own
(never the journal's one instance, whose traceback every caller would
otherwise extend), caused by the OS error; no thread ends on an exception
and nothing logs a traceback. Reopened on a disk with room, the store
recovers and the session goes on.
"""

from __future__ import annotations

import errno
import logging
import os
import traceback
from pathlib import Path

import pytest

from cairn.store.errors import StorageFailed
from tests.actors.helpers import WAIT, GatedTools, open_host, scripted


class FillingDisk:
    """An fsync that fails with ENOSPC once `full` is set."""

    def __init__(self) -> None:
        self.full = False

    def fsync(self, fd: int) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.fsync(fd)


def test_a_full_disk_fails_turns_with_a_typed_error_and_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, thread_crashes: list[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    root = tmp_path / "store"
    disk = FillingDisk()
    tool = GatedTools()
    host = open_host(root, scripted(), tools=tool, disk=disk)  # type: ignore[arg-type]
    assert host.send("other", "a first turn", workspace=tmp_path).result(WAIT).ok
    turn = host.send("s", "tools 1 x 10 #a", workspace=tmp_path)
    assert tool.entered.wait(WAIT)
    disk.full = True
    tool.release.set()

    result = turn.result(WAIT)
    assert result.status == "failed" and result.phase == "tool" and result.error_class == "StorageFailed"
    failed = host.journal.failed
    assert failed is not None and "No space left on device" in str(failed)

    raised: list[StorageFailed] = []
    for session in ("s", "other", "new"):
        with pytest.raises(StorageFailed) as caught:
            host.send(session, "more", workspace=tmp_path)
        raised.append(caught.value)
    assert all(error is not failed for error in raised) and len({id(e) for e in raised}) == 3
    assert all(isinstance(e.__cause__, OSError) and e.__cause__.errno == errno.ENOSPC for e in raised)
    depths = [len(traceback.extract_tb(error.__traceback__)) for error in raised]
    assert depths[0] == depths[-1]  # no caller's frames pile up on another's error
    host.close()

    assert thread_crashes == []
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []  # no actor logged a traceback

    disk.full = False
    with open_host(root, scripted(), disk=disk) as again:  # type: ignore[arg-type]  # room again
        assert again.state("s").open_turn is None  # the unfinished turn was marked interrupted
        assert again.send("s", "carry on").result(WAIT).ok
