"""The acknowledgement mark `ACKED`: its one-line record, read by recovery and rewritten per group commit.

Disk contract: one line at the store root, `cairn-acked-1 NEXT SEGMENT
OFFSET CRC` (three 20-digit decimals, then the CRC-32 of what precedes it in
8 hex digits, a newline), always the same size, rewritten in place at
offset 0. What it proves, and how it may lag but never lead, is
`store.loss`'s story.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from cairn.store.errors import UnexpectedEntry
from cairn.store.files import open_file, read_file
from cairn.store.segments import FsyncFn, fsync_dir

ACK_MARK = "ACKED"

_MARK_FORMAT = b"cairn-acked-1 %020d %020d %020d "
_MARK_RE = re.compile(rb"cairn-acked-1 (\d{20}) (\d{20}) (\d{20}) ([0-9a-f]{8})\n")


@dataclass(frozen=True)
class AckMark:
    """Positions below `next_pos` were acknowledged; their bytes reach (`segment`, `offset`)."""

    next_pos: int
    segment: int
    offset: int


def _encode_mark(next_pos: int, segment: int, offset: int) -> bytes:
    head = _MARK_FORMAT % (next_pos, segment, offset)
    return head + b"%08x\n" % zlib.crc32(head)


def read_ack_mark(root: Path) -> tuple[AckMark | None, str]:
    """The store's acknowledgement mark, or None and why not ("" when there is none)."""
    try:
        raw = read_file(root / ACK_MARK)
    except (OSError, UnexpectedEntry) as exc:
        return None, f"{ACK_MARK} cannot be read: {exc}"
    if raw is None:
        return None, ""
    match = _MARK_RE.fullmatch(raw)
    if match is None or zlib.crc32(raw[: match.start(4)]) != int(match.group(4), 16):
        return None, f"{ACK_MARK} is damaged ({len(raw)} bytes, not a sound mark); it is not used as evidence"
    return AckMark(int(match.group(1)), int(match.group(2)), int(match.group(3))), ""


class AckMarkWriter:
    """The writer's handle on `ACKED`. Not thread-safe: the journal's opening thread, then its syncing thread.

    `write` is the group commit's step: one `pwrite` of a fixed-size record
    at offset 0, no fsync (see the module doc). `close` fsyncs it.
    """

    def __init__(self, root: Path, mark: AckMark, *, fsync: FsyncFn) -> None:
        self._fsync = fsync
        self.fd, created = open_file(root / ACK_MARK, os.O_RDWR, create=True)
        try:
            self.write(mark.next_pos, mark.segment, mark.offset)
            fsync(self.fd)
            if created:
                fsync_dir(root, fsync)
        except BaseException:
            os.close(self.fd)
            raise

    def write(self, next_pos: int, segment: int, offset: int) -> None:
        os.pwrite(self.fd, _encode_mark(next_pos, segment, offset), 0)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                self._fsync(fd)
            finally:
                os.close(fd)
