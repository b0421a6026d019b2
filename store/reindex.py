"""`reindex`: the index rebuilt from nothing, from the log, and swapped in; and `index_dump`.

`reindex` runs under the writer lock (so no writer may run); the result
equals an index kept up to date by appends (`index_dump` shows both). It
refuses while acknowledged lines are missing and not accepted: the old
index is what names their sessions. The log is never changed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cairn.store.errors import IndexUnusable, UnexpectedEntry
from cairn.store.files import check_dir
from cairn.store.index import Index
from cairn.store.lock import take_lock
from cairn.store.reader import Progress
from cairn.store.recovery import Recovery, recover
from cairn.store.segments import fsync_dir, read_log_dir


def index_dump(root: str | os.PathLike[str]) -> list[tuple[str, bytes, bytes]]:
    """Every (db, key, value) of the store's index, in order (raises IndexUnusable)."""
    index = Index(Path(root) / "index", readonly=True)
    try:
        return index.dump()
    finally:
        index.close()


def reindex(root: str | os.PathLike[str], progress: Progress | None = None) -> Recovery:
    """Rebuild the index of the store at `root` from nothing and swap it in.

    Takes the writer lock (`StoreLocked` while a writer runs). The log is not
    changed: a torn tail is left for the next open to cut. Refuses with
    `AcknowledgedDataMissing` while acknowledged lines are missing and no
    operator accepted their loss (the old index names their sessions), and
    with `UnexpectedEntry` for entries cairn did not make.
    """
    path = Path(root)
    if not check_dir(path / "log"):
        raise IndexUnusable(f"no cairn store at {path}")
    lock_fd = take_lock(path)
    try:
        return reindex_locked(path, progress)
    finally:
        os.close(lock_fd)


def reindex_locked(path: Path, progress: Progress | None = None) -> Recovery:
    """`reindex`, for a caller that holds the writer lock."""
    listing = read_log_dir(path / "log")
    if listing.unexpected:
        raise UnexpectedEntry(
            f"the log of {path} holds entries that are not segments: "
            f"{'; '.join(listing.describe_unexpected())}",
            listing.describe_unexpected(),
        )
    check_dir(path / "index")
    witness: Index | None = None
    if (path / "index" / "data.mdb").exists():
        try:
            witness = Index(path / "index")
        except IndexUnusable:
            witness = None
    try:
        fresh_dir = path / "index.new"
        shutil.rmtree(fresh_dir, ignore_errors=True)
        index = Index(fresh_dir)
        try:
            result = recover(
                path, index, readonly=True, progress=progress, rebuild=True, witness=witness, refuse_loss=True
            )
        except BaseException:
            index.close()
            shutil.rmtree(fresh_dir, ignore_errors=True)
            raise
        index.close()
    finally:
        if witness is not None:
            witness.close()
    old = path / "index.old"
    shutil.rmtree(old, ignore_errors=True)
    if (path / "index").exists():
        os.rename(path / "index", old)
    os.rename(fresh_dir, path / "index")
    fsync_dir(path)
    shutil.rmtree(old, ignore_errors=True)
    return result
