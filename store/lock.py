"""The store's writer lock: at most one process (and one journal) changes a store at a time.

`<root>/LOCK` is held with `flock` by a journal open for writing, and by
`reindex` and `repair` while they run; readers (read-only opens, `verify`)
never take it. The file holds the holder's pid, for the message a second
writer gets (`StoreLocked`). Never opened through a link (`store.files`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cairn.store.errors import StorageFailed, StoreLocked
from cairn.store.files import open_file


def take_lock(root: Path) -> int:
    """Take the exclusive writer lock (flock on `<root>/LOCK`) and return its fd; `StoreLocked` if held.

    The caller holds it for as long as it may change the store and releases
    it by closing the fd. The lock file names the holder's pid.
    """
    try:
        fd, _ = open_file(root / "LOCK", os.O_RDWR, create=True)
    except OSError as exc:  # a read-only file system, a LOCK the process may not write
        raise StorageFailed(
            f"cannot open the store at {root} for writing: {exc.strerror or type(exc).__name__}"
            f" ({root / 'LOCK'}); a read-only store opens with readonly=True"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        finally:
            os.close(fd)
        raise StoreLocked(
            f"the store at {root} is open for writing by another process or journal"
            + (f" (pid {holder})" if holder else "")
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise StorageFailed(f"cannot write the store's lock file {root / 'LOCK'}: {exc.strerror}") from exc
    return fd
