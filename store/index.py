"""The LMDB index: derived data that makes the log seekable (DESIGN §2.4).

Disk contract: `<root>/index/` is an LMDB environment (`data.mdb`,
`lock.mdb`) with five named databases; what they hold is laid out in
`store.index_records`, and built by `store.index_builder`.
`index/` is made 0700 and LMDB's files 0600; none of them is opened through
a link (LMDB opens its files by name, readers included: a link there is an
`UnexpectedEntry`).

Everything here is rebuilt from the segments: the log is authoritative. The
index is committed after the log's fsync, in one transaction per batch
together with `meta/through` (the position indexed through), with LMDB's own
syncs off (`sync=False`, no writemap: a crash may lose the last commits but
not the database's integrity, and start-up re-indexes past `through`).
Since it is committed after the log's fsync, `through` is also evidence of
what was acknowledged (it may lag, never lead): recovery reads it before it
ever empties the index (see `store.loss`).

Thread-safety: `Index` reads are safe from any thread (short read
transactions); `commit` must only be called from one thread (the journal's
writer). Growing the map (`MapFullError`) waits until no read transaction of
this process is active (PITFALLS 12).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any

import lmdb

from cairn.store.errors import IndexUnusable
from cairn.store.index_builder import IndexBatch
from cairn.store.index_env import acquire_env, release_env
from cairn.store.index_records import (
    CHECKPOINT,
    DBS,
    FORMAT,
    LOC,
    U64,
    CheckpointRef,
    CorruptEntry,
    IndexMeta,
    Loc,
    SessionSummary,
    corrupt_decoder,
    decode_meta,
    encoder,
    event_key,
    session_prefix,
    summary_decoder,
)

DEFAULT_MAP_SIZE = 1 << 36  # 64 GiB of address space; the file grows as needed
_PAGE = 256  # keys per read transaction when paging


class Index:
    """The store's index (see the module doc). Environments are shared per
    process and path (PITFALLS 14): a read-only Index opened while a writer's
    Index is open in the same process reads through the writer's environment."""

    def __init__(self, path: Path, *, readonly: bool = False, map_size: int = DEFAULT_MAP_SIZE) -> None:
        self.path = path
        self.readonly = readonly
        self.grown = 0
        self._shared = acquire_env(path, readonly, map_size)
        self.env = self._shared.env
        self._dbs = self._shared.dbs
        self._gate = self._shared.gate
        self._closed = False

    # -- reads (any thread) ---------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[lmdb.Transaction]:
        for attempt in (0, 1):
            with self._gate.reading():
                try:
                    txn = self.env.begin()
                except lmdb.MapResizedError:
                    if attempt:
                        raise
                    txn = None
                if txn is not None:
                    try:
                        yield txn
                    finally:
                        txn.abort()
                    return
            with self._gate.exclusive():  # another process grew the map: adopt its size
                self.env.set_mapsize(0)

    def meta(self) -> IndexMeta | None:
        with self._read() as txn:
            raw = txn.get(b"through", db=self._dbs[b"meta"])
        return None if raw is None else decode_meta(raw)

    def summary(self, sid: str) -> SessionSummary | None:
        with self._read() as txn:
            raw = txn.get(sid.encode(), db=self._dbs[b"sessions"])
        return None if raw is None else summary_decoder.decode(raw)

    def summaries(self) -> Iterator[SessionSummary]:
        """Every session in id order, paging with short transactions."""
        after: bytes | None = None
        while True:
            page: list[tuple[bytes, bytes]] = []
            with self._read() as txn:
                cursor = txn.cursor(db=self._dbs[b"sessions"])
                found = cursor.set_range(after) if after is not None else cursor.first()
                while found and len(page) < _PAGE:
                    if cursor.key() != after:
                        page.append((bytes(cursor.key()), bytes(cursor.value())))
                    found = cursor.next()
            if not page:
                return
            after = page[-1][0]
            for _, raw in page:
                yield summary_decoder.decode(raw)

    def location(self, sid: str, seq: int) -> Loc | None:
        with self._read() as txn:
            raw = txn.get(event_key(sid, seq), db=self._dbs[b"events"])
        return None if raw is None else Loc(*LOC.unpack(raw))

    def locations(self, sid: str, from_seq: int, to_seq: int, limit: int = _PAGE) -> list[tuple[int, Loc]]:
        """Up to `limit` (seq, Loc) of a session with from_seq <= seq <= to_seq, in order."""
        prefix = session_prefix(sid)
        result: list[tuple[int, Loc]] = []
        width = len(prefix) + 8
        unpack_seq, unpack_loc = U64.unpack_from, LOC.unpack
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"events"])
            if not cursor.set_range(prefix + U64.pack(max(from_seq, 0))):
                return result
            for key, value in cursor.iternext(keys=True, values=True):
                if len(key) != width or key[: len(prefix)] != prefix:
                    break
                seq = unpack_seq(key, len(prefix))[0]
                if seq > to_seq:
                    break
                result.append((seq, Loc(*unpack_loc(value))))
                if len(result) >= limit:
                    break
        return result

    def raw_locations(
        self, sid: str, from_seq: int, to_seq: int, limit: int = _PAGE
    ) -> list[tuple[int, int, int, int, int]]:
        """Like `locations`, as plain (seq, segment, offset, length, pos) tuples: the replay hot path."""
        prefix = session_prefix(sid)
        width = len(prefix) + 8
        plen = len(prefix)
        unpack_seq, unpack_loc = U64.unpack_from, LOC.unpack
        result: list[tuple[int, int, int, int, int]] = []
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"events"])
            if not cursor.set_range(prefix + U64.pack(max(from_seq, 0))):
                return result
            for key, value in cursor.iternext(keys=True, values=True):
                if len(key) != width or key[:plen] != prefix:
                    break
                seq = unpack_seq(key, plen)[0]
                if seq > to_seq:
                    break
                result.append((seq, *unpack_loc(value)))
                if len(result) >= limit:
                    break
        return result

    def dense_values(self, sid: str, from_seq: int, count: int) -> bytes | None:
        """The `events` values (`LOC`, packed back to back) of the session's seqs from_seq ..
        from_seq + count - 1, or None unless the index holds every one of them.

        The replay hot path: values alone, no per-entry work in Python. Sound
        because keys are unique and sorted, and no other session's key starts
        with this one's prefix (a session id holds no NUL): `count` entries
        from key (sid, from_seq) through key (sid, from_seq + count - 1) can
        only be those seqs.
        """
        if count <= 0:
            return b""
        prefix = session_prefix(sid)
        first = prefix + U64.pack(from_seq)
        last = prefix + U64.pack(from_seq + count - 1)
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"events"])
            if not cursor.set_range(first) or cursor.key() != first:
                return None
            values = list(islice(cursor.iternext(keys=False, values=True), count))
            if len(values) != count or cursor.key() != last:
                return None
        return b"".join(values)

    def seqs_at_positions(self, sid: str, first_pos: int, last_pos: int) -> tuple[int, int] | None:
        """The first and last seq of the session's lines with first_pos <= pos <= last_pos (None: none).

        Binary searches over the session's seqs (its positions grow with its
        seqs) in one short read transaction: what a loss report needs to name
        the seqs a range of missing positions held.
        """
        prefix = session_prefix(sid)
        plen = len(prefix)
        width = plen + 8
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"events"])

            def here() -> tuple[int, int] | None:
                """(seq, pos) under the cursor when it is a line of this session."""
                key = cursor.key()
                if len(key) != width or key[:plen] != prefix:
                    return None
                return U64.unpack_from(key, plen)[0], LOC.unpack(cursor.value())[3]

            def first_from(pos: int) -> int | None:
                """The smallest indexed seq of the session whose line is at `pos` or later."""
                lo, hi, found = 0, (1 << 64) - 1, None
                while lo <= hi:
                    mid = (lo + hi) // 2
                    hit = here() if cursor.set_range(prefix + U64.pack(mid)) else None
                    if hit is None:
                        hi = mid - 1
                    elif hit[1] >= pos:
                        found, hi = hit[0], mid - 1
                    else:
                        lo = hit[0] + 1
                return found

            first = first_from(first_pos)
            if first is None:
                return None
            beyond = first_from(last_pos + 1)
            if beyond is not None:
                cursor.set_range(prefix + U64.pack(beyond))
                moved = cursor.prev()
            elif cursor.set_range(prefix + b"\xff" * 8):
                moved = cursor.prev()
            else:
                moved = cursor.last()
            hit = here() if moved else None
            if hit is None or hit[0] < first:
                return None
            return first, hit[0]

    def checkpoints(self, sid: str) -> list[CheckpointRef]:
        prefix = session_prefix(sid)
        refs: list[CheckpointRef] = []
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"checkpoints"])
            found = cursor.set_range(prefix)
            while found:
                key = bytes(cursor.key())
                if not key.startswith(prefix) or len(key) != len(prefix) + 8:
                    break
                epoch = U64.unpack_from(key, len(prefix))[0]
                seq, pos = CHECKPOINT.unpack(cursor.value())
                refs.append(CheckpointRef(epoch, seq, pos))
                found = cursor.next()
        return refs

    def corruptions(self) -> list[CorruptEntry]:
        with self._read() as txn:
            return [corrupt_decoder.decode(value) for _, value in txn.cursor(db=self._dbs[b"corrupt"])]

    def copy_to(self, path: Path) -> None:
        """Write a consistent snapshot of the index into the empty directory `path`.

        LMDB copies from one read transaction, so it is safe while a writer
        commits; nothing of this index is changed. Raises `IndexUnusable` when
        the copy fails (the caller rebuilds instead).
        """
        for attempt in (0, 1):
            try:
                with self._gate.reading():
                    self.env.copy(str(path))
                return
            except lmdb.MapResizedError:
                if attempt:
                    raise IndexUnusable(f"cannot copy the index at {self.path}: the map grew twice") from None
                with self._gate.exclusive():  # another process grew the map: adopt its size
                    self.env.set_mapsize(0)
            except lmdb.Error as exc:
                raise IndexUnusable(f"cannot copy the index at {self.path} to {path}: {exc}") from exc

    def dump(self) -> list[tuple[str, bytes, bytes]]:
        """Every (db, key, value), in order: two indexes are equal iff their dumps are."""
        return list(self.rows())

    def rows(self) -> Iterator[tuple[str, bytes, bytes]]:
        """Every (db, key, value) in `dump`'s order, one at a time, from one read transaction held
        until the iteration ends: for a private copy (verify's), not the store's own index, whose
        readers must be short (PITFALLS 13)."""
        with self._read() as txn:
            for name in DBS:
                for key, value in txn.cursor(db=self._dbs[name]):
                    yield name.decode(), bytes(key), bytes(value)

    # -- writes (the writer's syncing thread only) -------------------------------

    def commit(self, batch: IndexBatch) -> None:
        """Apply a batch and its `through` position in one transaction.

        MapFullError aborts the transaction; the map is doubled once no read
        transaction is active, and the whole batch is applied again.
        """
        meta_value = encoder.encode(batch.meta)
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    for name, items in batch.puts.items():
                        if items:
                            txn.cursor(db=self._dbs[name]).putmulti(items)
                    txn.put(b"through", meta_value, db=self._dbs[b"meta"])
                return
            except lmdb.MapFullError:
                self._grow()

    def _grow(self) -> None:
        with self._gate.exclusive():
            size = self.env.info()["map_size"]
            self.env.set_mapsize(size * 2)
            self.grown += 1

    def reset(self) -> None:
        """Drop every entry (a rebuild from nothing starts here)."""
        with self.env.begin(write=True) as txn:
            for name in DBS:
                txn.drop(self._dbs[name], delete=False)
            txn.put(b"format", FORMAT, db=self._dbs[b"meta"])

    def info(self) -> dict[str, Any]:
        return dict(self.env.info())

    def sync(self) -> None:
        self.env.sync(True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if not self.readonly and not self._shared.readonly:
                self.env.sync(True)  # our commits skip LMDB's syncs; flush them at close
            release_env(self.path, self._shared)
