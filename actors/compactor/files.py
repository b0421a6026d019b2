"""Recent-file restoration (W1-W3): plan which files (pure), then read them (this module's I/O).

1. `plan_restoration` (pure): the session's file accesses, newest first, one
   per path; a path whose newest access is a delete is skipped; relative paths
   resolve against the workspace; a path that leaves the workspace lexically
   (`..`) is rejected. Nothing is taken yet: filter first (W1).
2. `read_recent_files` (I/O): for each candidate in order, resolve symlinks;
   a path whose real location is outside the workspace's real location is
   rejected and never opened; a missing, non-regular or unreadable file is
   skipped (and listed as rejected too). Only files that pass are counted,
   and the walk stops at five (W1).
3. Each file keeps its first 200 lines, at most 20,000 chars of them, and a
   count of the rest (W2), rendered in a hidden reminder listing them as
   recently accessed files.

The opener is injectable so tests can prove what was (not) opened; it gets
the real path and must not follow a final symlink (`O_NOFOLLOW`).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Sequence
from typing import BinaryIO

import msgspec

from cairn.actors.compactor.prompt import PromptFile, render_files
from cairn.events.kinds import FileAccess
from cairn.events.model import Message, MessageMeta

MAX_FILES = 5
MAX_LINES = 200
#: beyond the rules: a cap on one file's kept text, so one 50 MB line cannot swamp the target
MAX_FILE_CHARS = 20_000
ORIGIN = "recent-files"

Opener = Callable[[str], BinaryIO]


class FileCandidate(msgspec.Struct, frozen=True):
    """A file that passed the pure filter: where it is, and how the session named it."""

    path: str
    shown: str


class FilePlan(msgspec.Struct, frozen=True):
    candidates: tuple[FileCandidate, ...] = ()
    rejected: tuple[str, ...] = ()


class Restoration(msgspec.Struct, frozen=True):
    files: tuple[PromptFile, ...] = ()
    rejected: tuple[str, ...] = ()


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def plan_restoration(recent: Sequence[FileAccess], workspace: str) -> FilePlan:
    """W1/W3, the pure half: which files may be restored, newest first, none read yet."""
    if not workspace or not posixpath.isabs(workspace):
        return FilePlan(rejected=tuple(access.path for access in recent))
    root = posixpath.normpath(workspace)
    seen: set[str] = set()
    candidates: list[FileCandidate] = []
    rejected: list[str] = []
    for access in sorted(recent, key=lambda a: -a.ts):  # stable: equal times keep log order
        if not access.path or "\x00" in access.path:
            rejected.append(access.path)
            continue
        joined = access.path if posixpath.isabs(access.path) else posixpath.join(root, access.path)
        path = posixpath.normpath(joined)
        if path in seen:
            continue
        seen.add(path)
        if access.op == "delete":
            continue
        if not _inside(path, root) or path == root:
            rejected.append(access.path)
            continue
        candidates.append(FileCandidate(path, posixpath.relpath(path, root)))
    return FilePlan(tuple(candidates), tuple(rejected))


def _open_nofollow(path: str) -> BinaryIO:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(path)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _head(handle: BinaryIO, max_lines: int, max_chars: int) -> tuple[str, int]:
    kept: list[str] = []
    chars = 0
    more = 0
    for raw in handle:
        if len(kept) < max_lines and chars < max_chars:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            line = line[: max_chars - chars]
            kept.append(line)
            chars += len(line) + 1
        else:
            more += 1
    return "\n".join(kept), more


def read_recent_files(
    plan: FilePlan,
    workspace: str,
    *,
    limit: int = MAX_FILES,
    max_lines: int = MAX_LINES,
    max_chars: int = MAX_FILE_CHARS,
    opener: Opener = _open_nofollow,
) -> Restoration:
    """W1-W3, the I/O half: read the first `limit` candidates that really are inside."""
    rejected = list(plan.rejected)
    files: list[PromptFile] = []
    try:
        root = os.path.realpath(workspace)
    except OSError:
        return Restoration(rejected=(*rejected, *(c.shown for c in plan.candidates)))
    for candidate in plan.candidates:
        if len(files) >= limit:
            break
        try:
            real = os.path.realpath(candidate.path)
        except OSError:
            rejected.append(candidate.shown)
            continue
        if not _inside(real, root) or real == root:
            rejected.append(candidate.shown)  # a symlink escaping the workspace: never opened
            continue
        try:
            with opener(real) as handle:
                text, more = _head(handle, max_lines, max_chars)
        except OSError:
            rejected.append(candidate.shown)  # deleted since, not a regular file, unreadable
            continue
        files.append(PromptFile(candidate.shown, text, more))
    return Restoration(tuple(files), tuple(rejected))


def files_message(files: Sequence[PromptFile], message_id: str) -> Message | None:
    """W2: the hidden reminder listing the restored files, or None without files."""
    if not files:
        return None
    body = (
        "<system-reminder>\nThese files were recently accessed in this session; their "
        "contents as last read after earlier context was compacted:\n\n"
        f"{render_files(files)}\n</system-reminder>"
    )
    return Message(role="user", content=body, id=message_id, meta=MessageMeta(hidden=True, origin=ORIGIN))
