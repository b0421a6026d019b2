"""Race-free access to the files of one workspace: every path is opened one name at a time.

A path a model gives is never handed to the kernel whole. It is normalized
lexically first (so its own `..` cannot climb above the workspace), then
walked from a descriptor of the workspace directory, one name at a time,
each looked up relative to the directory descriptor before it (`dir_fd`)
and opened with `O_NOFOLLOW`. A name that is a symlink is read with
`readlink` relative to its directory and its target walked the same way: an
absolute target must lie under the workspace, and a `..` in a target drops
back to a directory descriptor already held, never the kernel's `..`. There
is no check separate from the open, so a symlink swapped in between the two
cannot lead outside: the worst a race does is make the call fail (after
`MAX_LINK_STEPS` lookups that changed under it).

Only regular files are opened for reading or writing, and only directories
listed: FIFOs, sockets and devices are refused without blocking. The type
comes from `lstat` relative to the held directory before the open, every
open uses `O_NONBLOCK`, and the opened descriptor's `fstat` confirms it.

Writing creates missing parent directories (`mkdir` relative to the held
parent) and a missing file with `O_CREAT | O_EXCL`, which never follows a
symlink; an existing file is opened, checked, then truncated.

Not covered: a hard link inside the workspace to a file outside it is that
file, and a mount point inside the workspace is followed. POSIX only (it
needs `dir_fd` support, as on Linux and macOS).

Thread-safety: a `Workspace` belongs to one tool call on one thread; any
number of them may be open at once.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Iterator
from types import TracebackType
from typing import Literal

from cairn.events.errors import InputError
from cairn.store.files import describe as describe_mode

#: lookups of one path that may meet a symlink (or a name that changed under us)
MAX_LINK_STEPS = 40
#: directories below the start that a walk descends into
MAX_WALK_DEPTH = 64

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
_READ_FLAGS = os.O_RDONLY | _NOFOLLOW
_WRITE_FLAGS = os.O_WRONLY | _NOFOLLOW

Want = Literal["file", "dir", "any"]


class Refused(InputError):
    """A path the workspace will not open (the model's path is at fault); the model is shown the message."""


class Opened:
    """An open descriptor inside the workspace, and its real path relative to the workspace root."""

    __slots__ = ("fd", "is_dir", "path")

    def __init__(self, fd: int, path: str, *, is_dir: bool) -> None:
        self.fd = fd
        self.path = path
        self.is_dir = is_dir

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Retry(Exception):
    """The name changed between its lookup and its open: look it up again.

    Not a `CairnError` on purpose: it is control flow inside one walk, raised
    and caught within this module (`Workspace.open`), never seen by a caller.
    """


class Workspace:
    """One workspace directory, held open by a descriptor for one tool call (a context manager)."""

    def __init__(self, root: str) -> None:
        self.given = os.path.normpath(os.path.abspath(root))
        self.root = os.path.realpath(root)
        try:
            self.fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise Refused(f"the workspace cannot be opened: {exc.strerror}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- opening one path ---------------------------------------------------------------------

    def names(self, path: object) -> list[str]:
        """The names of `path` under the root, normalized lexically; Refused when it leaves the root."""
        if not isinstance(path, str) or "\x00" in path:
            raise Refused("path must be a string")
        joined = os.path.normpath(os.path.join(self.root, path))
        if not _inside(joined, self.root):
            if _inside(joined, self.given):  # the workspace as given, before its own symlinks
                joined = os.path.join(self.root, os.path.relpath(joined, self.given))
            else:
                raise Refused(f"{path!r} is outside the workspace")
        rel = os.path.relpath(joined, self.root)
        return [] if rel == "." else rel.split(os.sep)

    def open(self, path: object, want: Want, *, create: bool = False) -> Opened:
        """Open `path` (a regular file, a directory, or either), following only symlinks that stay inside.

        With `create`, missing directories on the way and a missing file at
        the end are created (`want` must then be "file"), and a file opens
        for writing (not truncated: the caller truncates it).
        """
        todo = deque(self.names(path))
        held: list[tuple[str, int]] = []  # directories below the root on the way, with their fds
        steps = 0
        try:
            while True:
                if not todo:
                    if want == "file":
                        raise Refused(f"{_shown(held)} is a directory")
                    return Opened(os.dup(held[-1][1] if held else self.fd), _shown(held), is_dir=True)
                name = todo.popleft()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not held:
                        raise Refused(f"{path!r} leads outside the workspace through a symlink")
                    os.close(held.pop()[1])
                    continue
                here = held[-1][1] if held else self.fd
                shown = _shown(held, name)
                try:
                    info = os.stat(name, dir_fd=here, follow_symlinks=False)
                except FileNotFoundError:
                    info = None
                except OSError as exc:
                    raise Refused(f"cannot open {shown}: {exc.strerror}") from None
                try:
                    if info is not None and stat.S_ISLNK(info.st_mode):
                        steps = self._count(steps, path)
                        self._follow(here, name, todo, held, path)
                    elif (
                        todo
                        or want == "dir"
                        or (want == "any" and info is not None and stat.S_ISDIR(info.st_mode))
                    ):  # a directory on the way, or the one asked for
                        fd = self._open_dir(here, name, info, shown, create=create and bool(todo))
                        held.append((name, fd))
                    else:
                        fd = self._open_file(here, name, info, shown, create=create)
                        return Opened(fd, shown, is_dir=False)
                except _Retry:
                    steps = self._count(steps, path)
                    todo.appendleft(name)
        finally:
            for _, fd in held:
                os.close(fd)

    @staticmethod
    def _count(steps: int, path: object) -> int:
        if steps >= MAX_LINK_STEPS:
            raise Refused(f"{path!r}: too many symlinks (or the path kept changing)")
        return steps + 1

    def _follow(
        self, here: int, name: str, todo: deque[str], held: list[tuple[str, int]], path: object
    ) -> None:
        """Put the target of the symlink `name` in front of the names still to walk."""
        try:
            target = os.readlink(name, dir_fd=here)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                raise _Retry from None  # no longer a symlink
            raise Refused(f"cannot read the symlink {_shown(held, name)}: {exc.strerror}") from None
        if os.path.isabs(target):
            target = os.path.normpath(target)
            base = self.root if _inside(target, self.root) else self.given
            if not _inside(target, base):
                raise Refused(f"{path!r} leads outside the workspace through a symlink")
            for _, fd in held:
                os.close(fd)
            held.clear()
            rest = os.path.relpath(target, base)
            names = [] if rest == "." else rest.split(os.sep)
        else:
            names = target.split("/")
        todo.extendleft(reversed(names))

    @staticmethod
    def _open_dir(here: int, name: str, info: os.stat_result | None, shown: str, *, create: bool) -> int:
        if info is None:
            if not create:
                raise Refused(f"{shown} does not exist")
            try:
                os.mkdir(name, 0o777, dir_fd=here)
            except FileExistsError:
                pass  # made meanwhile: the open below finds out what it is
            except OSError as exc:
                raise Refused(f"cannot create {shown}: {exc.strerror}") from None
        elif not stat.S_ISDIR(info.st_mode):
            raise Refused(f"{shown} is not a directory")
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=here)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                raise _Retry from None
            raise Refused(f"cannot open {shown}: {exc.strerror}") from None

    @staticmethod
    def _open_file(here: int, name: str, info: os.stat_result | None, shown: str, *, create: bool) -> int:
        if info is None:
            if not create:
                raise Refused(f"{shown} does not exist")
            try:
                return os.open(name, _WRITE_FLAGS | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=here)
            except FileExistsError:
                raise _Retry from None
            except OSError as exc:
                raise Refused(f"cannot create {shown}: {exc.strerror}") from None
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{shown} is {describe_mode(info.st_mode)}, not a regular file")
        try:
            fd = os.open(name, _WRITE_FLAGS if create else _READ_FLAGS, dir_fd=here)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
                raise _Retry from None  # replaced since the lstat
            raise Refused(f"cannot open {shown}: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _Retry
        return fd

    # -- walking a tree -----------------------------------------------------------------------

    def files(self, start: Opened) -> Iterator[Opened]:
        """The regular files under `start` (itself, if a file), opened for reading; the caller closes them.

        Order: a directory's files by name, then its subdirectories by name.
        A symlink is followed (through `open`) when it leads to a regular
        file inside the workspace, never into a directory; FIFOs, sockets,
        devices and anything that cannot be opened are skipped, and so are
        directories more than `MAX_WALK_DEPTH` below the start.
        """
        if not start.is_dir:
            yield Opened(os.dup(start.fd), start.path, is_dir=False)
            return
        yield from self._walk(start.fd, "" if start.path == "." else start.path, 0)

    def _walk(self, dir_fd: int, rel: str, depth: int) -> Iterator[Opened]:
        try:
            with os.scandir(dir_fd) as entries:
                listed = sorted(entries, key=lambda entry: entry.name)
        except OSError:
            return
        subdirs: list[str] = []
        for entry in listed:
            path = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_symlink():
                    opened = self._try_open(path)
                    if opened is not None:
                        yield opened
                elif entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                elif entry.is_file(follow_symlinks=False):
                    fd = os.open(entry.name, _READ_FLAGS, dir_fd=dir_fd)
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        yield Opened(fd, path, is_dir=False)
                    else:
                        os.close(fd)
            except OSError:
                continue
        if depth >= MAX_WALK_DEPTH:
            return
        for name in subdirs:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from self._walk(child, f"{rel}/{name}" if rel else name, depth + 1)
            finally:
                os.close(child)

    def _try_open(self, path: str) -> Opened | None:
        try:
            return self.open(path, "file")
        except Refused:
            return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _shown(held: list[tuple[str, int]], name: str = "") -> str:
    parts = [entry[0] for entry in held]
    if name:
        parts.append(name)
    return "/".join(parts) or "."
