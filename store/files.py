"""How cairn makes and opens the files of a store: private, and never through a link.

Store files carry conversation data, so every directory cairn makes in a
store is created 0700 and every file 0600, whatever the process's umask
(the mode is set again after creation, since the umask only ever removes
bits). Modes of existing entries are left as they are: an operator may have
opened a store to an audit group on purpose; `cairn verify` warns about
store directories and files that others can reach.

Inside a store, nothing is reached through a symbolic link: files are
opened with `O_NOFOLLOW` and checked to be regular files (`fstat`), and
directories are checked with `lstat` before use. A link, or an entry of the
wrong type, where cairn expects one of its own is an `UnexpectedEntry`,
never a path to read, write or truncate through. (The store root itself may
be a link: that is the operator's choice of where the store lives.)
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from cairn.store.errors import UnexpectedEntry

DIR_MODE = 0o700
FILE_MODE = 0o600
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # O_NONBLOCK: a FIFO must not hang an open


def describe(mode: int) -> str:
    """What kind of entry `mode` (an `st_mode`) is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"


def link_target(path: Path) -> str:
    """Where the link at `path` points, as text safe to print: non-printable characters escaped.

    A link's target is whatever its maker wrote, terminal control sequences
    included; messages and logs quote it through here.
    """
    try:
        return shown(os.readlink(path))
    except OSError:
        return "?"


def shown(text: str) -> str:
    """`text` (a name or link target someone else chose) with non-printable characters escaped."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def _what(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "not a regular file"
    what = describe(mode)
    if stat.S_ISLNK(mode):
        what += f" to {link_target(path)}"
    return what


def check_dir(path: Path) -> bool:
    """Whether `path` exists as a real directory (not a link); `UnexpectedEntry` if it is something else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):
        what = _what(path)
        raise UnexpectedEntry(
            f"{path} is {what}, where cairn keeps a directory of its own", [f"{path}: {what}"]
        )
    return True


def private_dir(path: Path) -> bool:
    """Make the directory `path` (mode 0700) unless it is there; True when it was made.

    An existing entry that is not a real directory raises `UnexpectedEntry`.
    The parent must exist.
    """
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        check_dir(path)
        return False
    os.chmod(path, DIR_MODE, follow_symlinks=False)
    return True


def open_file(path: Path, flags: int, *, create: bool = False) -> tuple[int, bool]:
    """`os.open` of a store file without following a link: (fd, whether it was created).

    The fd is of a regular file; a link or any other kind of entry raises
    `UnexpectedEntry` (nothing is opened through it). With `create`, a
    missing file is made with mode 0600.
    """
    flags |= _OPEN_FLAGS
    created = False
    fd = -1
    try:
        if create:
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
                created = True
            except FileExistsError:
                pass
        if fd < 0:
            fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            what = _what(path)
            raise UnexpectedEntry(
                f"{path} is {what}, where cairn keeps a file of its own; it is not opened",
                [f"{path}: {what}"],
            ) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = describe(mode)
            raise UnexpectedEntry(
                f"{path} is {what}, where cairn keeps a file of its own; it is not used", [f"{path}: {what}"]
            )
        if created:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def check_file(path: Path) -> bool:
    """Whether `path` exists as a regular file (not a link); `UnexpectedEntry` if it is something else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(mode):
        what = _what(path)
        raise UnexpectedEntry(f"{path} is {what}, where cairn keeps a file of its own", [f"{path}: {what}"])
    return True


def read_file(path: Path) -> bytes | None:
    """The bytes of the store file `path`, None when it is missing (never read through a link)."""
    try:
        fd, _ = open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def loose_modes(root: Path, names: tuple[str, ...]) -> list[str]:
    """The entries among `root/<name>` that others than the owner may reach (group or other bits)."""
    found = []
    for name in names:
        path = root / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_mode & 0o077 and not stat.S_ISLNK(st.st_mode):
            found.append(f"{name} ({stat.filemode(st.st_mode)})")
    return found
