"""One LMDB environment per process and index path, shared by every `Index` on it (PITFALLS 14).

LMDB allows one open environment per file in a process: a second `Index` on
the same path (a read-only audit beside the writer, say) reuses the first's,
counted by `refs`. Each shared environment has a `Gate`, which lets reads
run together and the map grow (`set_mapsize`) only when none is active
(PITFALLS 12). `acquire_env` also checks the index's files before LMDB
opens them by name, and its format.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb

from cairn.store.errors import IndexOutdated, IndexUnusable, UnexpectedEntry
from cairn.store.files import FILE_MODE, check_dir, describe, private_dir
from cairn.store.index_records import DBS, FORMAT


class Gate:
    """Many readers or one resizer: set_mapsize needs no active transaction."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._resizing = False

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


class SharedEnv:
    """One LMDB environment shared by every Index of this process on one path."""

    def __init__(self, env: lmdb.Environment, dbs: dict[bytes, Any], readonly: bool) -> None:
        self.env = env
        self.dbs = dbs
        self.readonly = readonly
        self.gate = Gate()
        self.refs = 1


_ENVS: dict[str, SharedEnv] = {}
_ENVS_LOCK = threading.Lock()


def acquire_env(path: Path, readonly: bool, map_size: int) -> SharedEnv:
    key = str(path.resolve())
    with _ENVS_LOCK:
        shared = _ENVS.get(key)
        if shared is not None:
            if shared.readonly and not readonly:
                raise IndexUnusable(f"index at {path} is open read-only in this process; close its readers")
            shared.refs += 1
            return shared
        made = _check_files(path, readonly)
        try:
            env = lmdb.open(
                str(path),
                subdir=True,
                readonly=readonly,
                mode=FILE_MODE,
                map_size=map_size,
                max_dbs=len(DBS) + 1,
                max_readers=1024,
                sync=False,
                metasync=False,
                writemap=False,
                readahead=False,
                create=not readonly,
            )
        except lmdb.Error as exc:
            raise IndexUnusable(f"cannot open index at {path}: {exc}") from exc
        try:
            dbs = {name: env.open_db(name, create=not readonly) for name in DBS}
            if not readonly:
                with env.begin(write=True) as txn:
                    stored = txn.get(b"format", db=dbs[b"meta"])
                    if stored is None:
                        txn.put(b"format", FORMAT, db=dbs[b"meta"])
                        stored = FORMAT
            else:
                with env.begin() as txn:
                    stored = txn.get(b"format", db=dbs[b"meta"])
            if stored != FORMAT:
                if stored is not None and stored.startswith(b"cairn-index-"):
                    raise IndexOutdated(f"index at {path} has the older format {stored!r}, not {FORMAT!r}")
                raise IndexUnusable(f"index at {path} has format {stored!r}, not {FORMAT!r}")
        except lmdb.Error as exc:
            env.close()
            raise IndexUnusable(f"index at {path} is unreadable: {exc}") from exc
        except IndexUnusable:
            env.close()
            raise
        for name in made:  # LMDB's mode went through the umask: make the files it created exactly private
            os.chmod(path / name, FILE_MODE)
        shared = SharedEnv(env, dbs, readonly)
        _ENVS[key] = shared
        return shared


def _check_files(path: Path, readonly: bool) -> list[str]:
    """The index directory (made 0700 for a writer) and its LMDB files, none of them a link; return
    the names of the LMDB files a writer's open will create.

    LMDB opens `data.mdb` and `lock.mdb` by name, and even a reader writes
    its slot into `lock.mdb`: a link there would have it write outside the
    store. `UnexpectedEntry` names what is in the way; nothing is opened.
    """
    if readonly:
        if not check_dir(path):
            raise IndexUnusable(f"no index at {path}")
    else:
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True)
        private_dir(path)
    made: list[str] = []
    for name in ("data.mdb", "lock.mdb"):
        try:
            mode = os.lstat(path / name).st_mode
        except FileNotFoundError:
            if not readonly:
                made.append(name)
            continue
        if not stat.S_ISREG(mode):
            what = describe(mode)
            raise UnexpectedEntry(
                f"{path / name} is {what}, where LMDB keeps its file; the index is not opened",
                [f"{path / name}: {what}"],
            )
    return made


def release_env(path: Path, shared: SharedEnv) -> None:
    with _ENVS_LOCK:
        shared.refs -= 1
        if shared.refs:
            return
        _ENVS.pop(str(path.resolve()), None)
        if not shared.readonly:
            shared.env.sync(True)
        shared.env.close()
