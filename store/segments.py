"""Segment files: the append-only JSONL files that hold the log (DESIGN §2.3).

Disk contract:

- The log is `<root>/log/<first pos, 20 digits>.jsonl`: one file per segment,
  named by the global position of its first line, in position order. A
  segment is rolled (a new file started) before a write would take it past
  the size limit; one append call is never split across two segments, so a
  segment exceeds the limit only when a single call is larger than it.
- Only the last segment (the *active* one) is ever written, always at its end
  (`O_APPEND`), by one thread of one process (the journal's writer; the
  store's lock file keeps other processes out).
- A new segment's directory entry is fsynced when the file is created, and
  its bytes are fsynced before any line in them is acknowledged. Bytes after
  the last fsync may be lost or torn by a crash; recovery cuts them.
- `log/` holds segments and nothing else. Anything else there -- a symbolic
  link or a directory under a segment's name, a 20-digit name past the
  largest position, any other name or kind of entry -- is reported by
  `read_log_dir` and never opened: a writer refuses to open the store,
  `verify` names it, read-only opens skip it. Segment files are opened with
  `O_NOFOLLOW` and checked to be regular files; new ones are made 0600.

The files are the source of truth; everything else (the index) is rebuilt
from them.
"""

from __future__ import annotations

import mmap
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cairn.events.codec import decode_envelope
from cairn.events.errors import DecodeError
from cairn.store.files import describe, link_target, open_file, shown

SEGMENT_SUFFIX = ".jsonl"
#: the largest position a segment may start at (a line's `pos` is a signed 64-bit integer at most)
MAX_POSITION = (1 << 63) - 1
#: used with fullmatch: `$` would also match before a final newline, and `\d` any Unicode digit
_NAME_RE = re.compile(r"([0-9]{20})\.jsonl")
_LAST_LINE_WINDOW = 64 * 1024

FsyncFn = Callable[[int], None]


def segment_name(first_pos: int) -> str:
    """The file name of the segment whose first line has position `first_pos`."""
    return f"{first_pos:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The first position encoded in a segment file name, or None if it is not one."""
    match = _NAME_RE.fullmatch(name)
    if not match:
        return None
    first = int(match.group(1))
    return first if first <= MAX_POSITION else None


@dataclass(frozen=True)
class LogDir:
    """What `log/` holds: the segments (first positions, ascending) and every other entry."""

    segments: list[int]
    #: (name, what it is) of each entry that is not a segment file; never opened
    unexpected: list[tuple[str, str]]

    def describe_unexpected(self) -> list[str]:
        return [f"log/{name}: {what}" for name, what in self.unexpected]


def read_log_dir(log_dir: Path) -> LogDir:
    """Sort the entries of `log_dir` into segment files and unexpected entries (missing dir: empty).

    An entry is a segment when its name is a segment name of a position up
    to `MAX_POSITION` and it is a regular file (`lstat`: a link is never
    followed). Everything else is unexpected, with what it is.
    """
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return LogDir([], [])
    segments: list[int] = []
    unexpected: list[tuple[str, str]] = []
    for name in names:
        try:
            mode = os.lstat(log_dir / name).st_mode
        except FileNotFoundError:  # removed meanwhile
            continue
        first = parse_segment_name(name)
        if first is not None and stat.S_ISREG(mode):
            segments.append(first)
            continue
        what = describe(mode)
        if stat.S_ISLNK(mode):
            what += f" to {link_target(log_dir / name)}"
        if _NAME_RE.fullmatch(name) and first is None:
            what += f", named past the largest position ({MAX_POSITION})"
        elif first is None and stat.S_ISREG(mode):
            what += " whose name is not a segment's"
        unexpected.append((shown(name), what))
    segments.sort()
    unexpected.sort()
    return LogDir(segments, unexpected)


def list_segments(log_dir: Path) -> list[int]:
    """First positions of every segment file in `log_dir`, ascending (missing dir: none).

    Only regular files with a segment's name: other entries are left out
    (`read_log_dir` reports them).
    """
    return read_log_dir(log_dir).segments


def segment_end(path: Path, first_pos: int) -> int | None:
    """The position after the last complete line of the segment at `path` (never through a link).

    `first_pos` (the segment's own first position) when it holds no complete
    line; None when its last complete line cannot be read (a damaged line:
    where the segment ends is then unknown). Reads the file from its end, a
    window at a time: cheap whatever the segment's size.
    """
    fd, _ = open_file(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        window = _LAST_LINE_WINDOW
        while True:
            start = max(0, size - window)
            data = os.pread(fd, size - start, start)
            end = data.rfind(b"\n")  # a partial piece after the last newline holds no line
            if end < 0:
                if start == 0:
                    return first_pos
                window *= 2
                continue
            begin = data.rfind(b"\n", 0, end) + 1
            if begin == 0 and start > 0:
                window *= 2
                continue
            try:
                return decode_envelope(data[begin : end + 1]).pos + 1
            except DecodeError:
                return None
    finally:
        os.close(fd)


def partial_end(path: Path) -> tuple[int, int] | None:
    """(offset, length) of the bytes after the last newline of a segment (a partial line), None if none."""
    fd, _ = open_file(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        window = _LAST_LINE_WINDOW
        while True:
            start = max(0, size - window)
            newline = os.pread(fd, size - start, start).rfind(b"\n")
            if newline >= 0 or start == 0:
                offset = start + newline + 1
                return (offset, size - offset) if size > offset else None
            window *= 2
    finally:
        os.close(fd)


def fsync_dir(path: Path, fsync: FsyncFn = os.fsync) -> None:
    """fsync a directory so that entries created or renamed in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (short writes loop, PITFALLS 7)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def iter_lines(path: Path, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, line) for the lines of a segment from byte `start`.

    Each line keeps its newline; a final piece without one (a torn tail, or a
    line still being written by another process) is yielded as it is. `end`
    bounds the bytes considered (default: the size when the scan starts).
    """
    for offset, chunk in iter_chunks(path, start, end):
        at = 0
        while at < len(chunk):
            newline = chunk.find(b"\n", at)
            stop = len(chunk) if newline < 0 else newline + 1
            yield offset + at, chunk[at:stop]
            at = stop


def iter_chunks(
    path: Path, start: int = 0, end: int | None = None, size: int = 4 << 20
) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, bytes) for a segment from byte `start`, in chunks of whole lines of about `size` bytes.

    Each chunk but the last ends with a newline (a line longer than `size`
    makes its chunk longer); the last may end in a piece without one (a torn
    tail, or a line still being written by another process). `end` bounds
    the bytes considered (default: the size when the scan starts). The
    pieces `iter_lines` yields are those of the chunks, split at their newlines.
    """
    fd, _ = open_file(path, os.O_RDONLY)
    with os.fdopen(fd, "rb"):  # owns the fd: closes it however the loop ends
        limit = os.fstat(fd).st_size if end is None else end
        if limit <= start:
            return
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as view:
            offset = start
            limit = min(limit, len(view))
            while offset < limit:
                stop = min(offset + size, limit)
                if stop < limit:
                    newline = view.rfind(b"\n", offset, stop)
                    if newline < 0:
                        newline = view.find(b"\n", stop, limit)
                    stop = limit if newline < 0 else newline + 1
                yield offset, view[offset:stop]
                offset = stop


class SegmentReader:
    """Reads lines at known (segment, offset, length) locations with pread.

    Thread-safe: file descriptors are opened once per segment (under a lock)
    and shared; `pread` needs no seek, so concurrent reads do not interfere.
    """

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _fd(self, segment: int) -> int:
        fd = self._fds.get(segment)
        if fd is not None:
            return fd
        with self._lock:
            if self._closed:
                raise ValueError("segment reader is closed")
            fd = self._fds.get(segment)
            if fd is None:
                fd, _ = open_file(self._log_dir / segment_name(segment), os.O_RDONLY)
                self._fds[segment] = fd
            return fd

    def read(self, segment: int, offset: int, length: int) -> bytes:
        """The `length` bytes at `offset` of a segment (fewer if the file is shorter)."""
        fd = self._fd(segment)
        data = os.pread(fd, length, offset)
        while len(data) < length:
            more = os.pread(fd, length - len(data), offset + len(data))
            if not more:
                break
            data += more
        return data

    def close(self) -> None:
        with self._lock:
            self._closed = True
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


class SegmentWriter:
    """The active segment, open for appending (O_APPEND) by the writer's syncing thread.

    Not thread-safe: only the journal's syncing thread calls it. `fsync` is the
    injected function used for every fsync (file and directory), the
    fault-injection seam; an exception from it or from a write propagates and
    the journal treats it as fatal.
    """

    def __init__(self, log_dir: Path, first_pos: int, *, fsync: FsyncFn) -> None:
        self.log_dir = log_dir
        self._fsync = fsync
        self.first_pos = first_pos
        self.fd = -1
        self.size = 0
        self._open(first_pos)

    def _open(self, first_pos: int) -> None:
        path = self.log_dir / segment_name(first_pos)
        fd, created = open_file(path, os.O_WRONLY | os.O_APPEND, create=True)
        self.fd = fd
        self.first_pos = first_pos
        self.size = os.fstat(fd).st_size
        if created:
            self._fsync(fd)
            fsync_dir(self.log_dir, self._fsync)

    @property
    def name(self) -> str:
        return segment_name(self.first_pos)

    def write(self, data: bytes) -> int:
        """Append `data`; return the offset it starts at. Not durable until `sync`."""
        offset = self.size
        write_all(self.fd, data)
        self.size += len(data)
        return offset

    def sync(self) -> None:
        self._fsync(self.fd)

    def roll(self, first_pos: int) -> None:
        """Close the active segment (already synced) and start `first_pos`'s."""
        os.close(self.fd)
        self.fd = -1
        self._open(first_pos)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
