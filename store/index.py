"""The LMDB index: derived data that makes the log seekable (DESIGN §2.4).

Disk contract: `<root>/index/` is an LMDB environment (`data.mdb`,
`lock.mdb`) with five named databases. Keys are binary and order-preserving
(UTF-8 session id, a NUL, then a big-endian integer), so a session's events
and checkpoints are contiguous and sorted by seq / epoch:

| db            | key                          | value                                         |
|---------------|------------------------------|-----------------------------------------------|
| `events`      | sid NUL seq (>Q)             | segment first pos, offset, length, pos (>QQIQ) |
| `sessions`    | sid                          | `SessionSummary` (msgpack)                    |
| `checkpoints` | sid NUL epoch (>Q)           | seq, pos (>QQ)                                 |
| `corrupt`     | segment (>Q), offset (>Q)    | `CorruptEntry` (msgpack)                      |
| `meta`        | b"format", b"through"        | format version; `IndexMeta` (msgpack)         |

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

import os
import stat
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb
import msgspec

from cairn.events.codec import GENESIS
from cairn.events.kinds import CheckpointCommitted, EventBase, SessionStarted, Usage
from cairn.store.errors import UnexpectedEntry
from cairn.store.files import FILE_MODE, check_dir, describe, private_dir

#: the index's format; an index of another format is rebuilt from the log when opened (a
#: read-only open reads through a private rebuilt copy). 2: cumulative usage in the summaries.
FORMAT = b"cairn-index-2"
DEFAULT_MAP_SIZE = 1 << 36  # 64 GiB of address space; the file grows as needed
_PAGE = 256  # keys per read transaction when paging

_LOC = struct.Struct(">QQIQ")
_U64 = struct.Struct(">Q")
_CKPT = struct.Struct(">QQ")
_SEG_OFF = struct.Struct(">QQ")

_BODY_KINDS = frozenset({"usage", "checkpoint-committed", "session-started"})
_DBS = (b"events", b"sessions", b"checkpoints", b"corrupt", b"meta")


class Loc(msgspec.Struct, frozen=True, array_like=True):
    """Where a line is: segment (its first pos), byte offset, length; and its pos."""

    segment: int
    offset: int
    length: int
    pos: int


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What the index knows of a session without replaying it.

    `head` is the chain digest of its last line (the next line's `prev`).
    `info_seq` is the seq of its latest `session-started`; `checkpoint_*`
    describe its latest `checkpoint-committed` (0 when none). `broken_seq` is
    the first seq past which the session cannot be read (a corrupt line, a
    gap or a broken chain), 0 when it is sound.

    Usage, as providers reported it: `prompt_tokens` and `completion_tokens`
    are sums over the usage events that carried each figure, and
    `prompt_reports` / `completion_reports` count those events. A response
    (an `assistant-message`, one per answered request) whose usage was never
    reported leaves the sums short: the figures are complete only when the
    reports equal `counts["assistant-message"]`, and unknown (not 0) when
    responses came without any report. `last_usage_total_tokens` is the
    `total_tokens` of the latest usage event, i.e. of the last request that
    reported usage (None when none did, or it gave no total).
    """

    sid: str
    last_seq: int = 0
    head: str = ""
    last_pos: int = 0
    workspace: str = ""
    model: str = ""
    created_ts: int = 0
    updated_ts: int = 0
    events: int = 0
    counts: dict[str, int] = {}
    info_seq: int = 0
    checkpoint_seq: int = 0
    checkpoint_pos: int = 0
    checkpoint_epoch: int = 0
    last_usage_total_tokens: int | None = None
    broken_seq: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_reports: int = 0
    completion_reports: int = 0


class CheckpointRef(msgspec.Struct, frozen=True):
    """A `checkpoint-committed` of a session: its epoch, seq and global position."""

    epoch: int
    seq: int
    pos: int


class CorruptEntry(msgspec.Struct, frozen=True, kw_only=True):
    """An invalid line found with valid lines after it (never a torn tail)."""

    segment: int
    offset: int
    length: int
    sid: str = ""
    seq: int = 0
    reason: str = ""


class IndexMeta(msgspec.Struct, frozen=True, kw_only=True):
    """The log position indexed through: segment, byte offset just past the
    last indexed byte, the next global position, and the last line's place."""

    segment: int = 0
    offset: int = 0
    next_pos: int = 0
    last_segment: int = 0
    last_offset: int = -1
    last_length: int = 0


_encoder = msgspec.msgpack.Encoder(order="deterministic")
_summary_decoder = msgspec.msgpack.Decoder(SessionSummary)
_corrupt_decoder = msgspec.msgpack.Decoder(CorruptEntry)
_meta_decoder = msgspec.msgpack.Decoder(IndexMeta)


def decode_meta(raw: bytes) -> IndexMeta:
    """The `IndexMeta` stored under `meta/through`."""
    return _meta_decoder.decode(raw)


def explain_entry(db: str, key: bytes, value: bytes | None) -> tuple[str, int, str]:
    """An index entry in the words of the log: (session, seq or epoch, what it says).

    `value` None: the entry is absent. For messages that speak of sessions,
    seqs, positions, segments and offsets, never of raw LMDB keys.
    """
    try:
        if db in ("events", "checkpoints"):
            sid = key[:-9].decode(errors="replace")  # sid, NUL, 8 bytes of seq or epoch (NULs among them)
            number = _U64.unpack(key[-8:])[0] if len(key) >= 9 else 0
            if db == "events":
                if value is None:
                    return sid, number, f"seq {number}: not indexed"
                segment, offset, length, pos = _LOC.unpack(value)
                place = f"{_segment_name(segment)}@{offset}"
                return sid, number, f"seq {number} at pos {pos}, {place} ({length} bytes)"
            if value is None:
                return sid, 0, f"checkpoint of epoch {number}: not indexed"
            seq, pos = _CKPT.unpack(value)
            return sid, seq, f"checkpoint of epoch {number} at seq {seq}, pos {pos}"
        if db == "sessions":
            sid = key.decode(errors="replace")
            if value is None:
                return sid, 0, "no summary"
            summary = _summary_decoder.decode(value)
            broken = summary.broken_seq or "-"
            return sid, summary.last_seq, (f"summary: last seq {summary.last_seq} at pos {summary.last_pos}, "
                                           f"{summary.events} events, broken from seq {broken}")
        if db == "corrupt":
            segment, offset = _SEG_OFF.unpack(key)
            entry = _corrupt_decoder.decode(value) if value is not None else None
            who = entry.sid if entry is not None else ""
            said = f"a corrupt line at {_segment_name(segment)}@{offset}"
            return who, entry.seq if entry is not None else 0, said + (" recorded" if value is not None else
                                                                       ": not recorded")
        if db == "meta":
            if key == b"through" and value is not None:
                meta = _meta_decoder.decode(value)
                return "", 0, (f"recovery point {_segment_name(meta.segment)}@{meta.offset}, "
                               f"next pos {meta.next_pos}")
            return "", 0, f"meta {key.decode(errors='replace')}" + ("" if value is not None else ": absent")
    except (struct.error, msgspec.DecodeError, UnicodeDecodeError):
        pass
    return "", 0, f"an unreadable {db} entry"


def _segment_name(first_pos: int) -> str:
    return f"{first_pos:020d}.jsonl"


def event_key(sid: str, seq: int) -> bytes:
    return sid.encode() + b"\x00" + _U64.pack(seq)


def _prefix(sid: str) -> bytes:
    return sid.encode() + b"\x00"


class _Head(msgspec.Struct, dict=True):
    """The mutable summary of one session while a batch is being indexed.

    The same fields, in the same order, as `SessionSummary`, so a head
    encodes to exactly the bytes of its summary without being copied into
    one first (the writer stores one per session touched in every batch).
    `key` (the session's key prefix) is a plain attribute, not encoded.
    """

    sid: str
    last_seq: int
    head: str
    last_pos: int
    workspace: str
    model: str
    created_ts: int
    updated_ts: int
    events: int
    counts: dict[str, int]
    info_seq: int
    checkpoint_seq: int
    checkpoint_pos: int
    checkpoint_epoch: int
    last_usage_total_tokens: int | None
    broken_seq: int
    prompt_tokens: int
    completion_tokens: int
    prompt_reports: int
    completion_reports: int

    def __post_init__(self) -> None:
        self.key = _prefix(self.sid)

    @classmethod
    def of(cls, summary: SessionSummary) -> _Head:
        fields = list(msgspec.structs.astuple(summary))
        fields[_COUNTS] = dict(summary.counts)  # the head's own copy: it is updated in place
        return cls(*fields)


assert _Head.__struct_fields__ == SessionSummary.__struct_fields__
_COUNTS = _Head.__struct_fields__.index("counts")


class IndexBatch(msgspec.Struct):
    """The puts of one commit, per database, plus the new `through` position."""

    puts: dict[bytes, list[tuple[bytes, bytes]]]
    meta: IndexMeta


class IndexBuilder:
    """Turns log lines, in log order, into index puts: the one indexing path.

    Used by the writer for its batches and by recovery/reindex for scans, so a
    live index and a rebuilt one are equal by construction. It caches the
    sessions it touched (`head`), loading unknown ones with `load`; the cache
    keeps at most `max_cached` sessions beyond those of the batch in hand
    (oldest first out: an evicted one is reloaded from the committed index),
    so a host that touches millions of sessions keeps bounded memory. Not
    thread-safe: owned by one thread (the writer, or a recovery pass).
    """

    def __init__(
        self, load: Callable[[str], SessionSummary | None], meta: IndexMeta, *, max_cached: int = 4096
    ) -> None:
        self._load = load
        self._max_cached = max_cached
        self._heads: dict[str, _Head] = {}
        self._touched: dict[str, _Head] = {}
        self._events: list[tuple[bytes, bytes]] = []
        self._checkpoints: list[tuple[bytes, bytes]] = []
        self._corrupt: list[tuple[bytes, bytes]] = []
        self.meta = meta

    def head(self, sid: str) -> _Head:
        """The session's running summary (a new empty one for an unknown sid)."""
        head = self._heads.get(sid)
        if head is None:
            summary = self._load(sid)
            head = _Head.of(summary if summary is not None else SessionSummary(sid=sid))
            self._heads[sid] = head
        return head

    def add(
        self,
        head: _Head,
        seq: int,
        pos: int,
        ts: int,
        prev: str,
        digest: str,
        kind: str,
        event: EventBase | None,
        segment: int,
        offset: int,
        length: int,
    ) -> None:
        """Index one valid line of `head`'s session (event None: an unknown kind).

        Positional arguments only: this runs once per appended event.
        """
        self._touched[head.sid] = head
        if seq != head.last_seq + 1 or prev != (head.head or GENESIS):
            if not head.broken_seq:
                head.broken_seq = min(seq, head.last_seq + 1)
            if seq <= head.last_seq:  # a duplicate seq: the first line keeps it
                return
        self._events.append((head.key + _U64.pack(seq), _LOC.pack(segment, offset, length, pos)))
        head.last_seq = seq
        head.head = digest
        head.last_pos = pos
        head.events += 1
        counts = head.counts
        counts[kind] = counts.get(kind, 0) + 1
        if not head.created_ts:
            head.created_ts = ts
        head.updated_ts = ts
        if kind in _BODY_KINDS:
            if isinstance(event, Usage):
                head.last_usage_total_tokens = event.total_tokens
                if event.prompt_tokens is not None:
                    head.prompt_tokens += event.prompt_tokens
                    head.prompt_reports += 1
                if event.completion_tokens is not None:
                    head.completion_tokens += event.completion_tokens
                    head.completion_reports += 1
            elif isinstance(event, CheckpointCommitted):
                head.checkpoint_seq = seq
                head.checkpoint_pos = pos
                head.checkpoint_epoch = event.epoch
                self._checkpoints.append((head.key + _U64.pack(event.epoch), _CKPT.pack(seq, pos)))
            elif isinstance(event, SessionStarted):
                head.info_seq = seq
                head.workspace = event.workspace
                head.model = event.model

    def add_corrupt(self, entry: CorruptEntry) -> None:
        """Record an invalid line; its session (when known) fails closed from its seq."""
        key = _SEG_OFF.pack(entry.segment, entry.offset)
        self._corrupt.append((key, _encoder.encode(entry)))
        if entry.sid:
            head = self.head(entry.sid)
            self._touched[entry.sid] = head
            broken = entry.seq if entry.seq else head.last_seq + 1
            if not head.broken_seq or broken < head.broken_seq:
                head.broken_seq = broken

    def take(self) -> IndexBatch:
        """The puts gathered since the last take, ready for `Index.commit`."""
        encode = _encoder.encode
        puts: dict[bytes, list[tuple[bytes, bytes]]] = {
            b"events": self._events,
            b"sessions": [(sid.encode(), encode(head)) for sid, head in self._touched.items()],
            b"checkpoints": self._checkpoints,
            b"corrupt": self._corrupt,
        }
        self._events, self._checkpoints, self._corrupt = [], [], []
        touched, self._touched = self._touched, {}
        self._evict(keep=touched)
        return IndexBatch(puts, self.meta)

    def _evict(self, keep: dict[str, _Head]) -> None:
        """Drop the oldest cached sessions over the cap, never those of the batch being committed."""
        excess = len(self._heads) - self._max_cached
        if excess <= 0:
            return
        for sid in list(self._heads):
            if excess <= 0:
                break
            if sid not in keep:
                del self._heads[sid]
                excess -= 1

    @property
    def pending(self) -> int:
        return len(self._events) + len(self._corrupt)


class _Gate:
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


class IndexUnusable(Exception):
    """The index cannot be opened or trusted; the caller rebuilds it."""


class _Env:
    """One LMDB environment shared by every Index of this process on one path."""

    def __init__(self, env: lmdb.Environment, dbs: dict[bytes, Any], readonly: bool) -> None:
        self.env = env
        self.dbs = dbs
        self.readonly = readonly
        self.gate = _Gate()
        self.refs = 1


_ENVS: dict[str, _Env] = {}
_ENVS_LOCK = threading.Lock()


def _acquire_env(path: Path, readonly: bool, map_size: int) -> _Env:
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
                max_dbs=len(_DBS) + 1,
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
            dbs = {name: env.open_db(name, create=not readonly) for name in _DBS}
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
                raise IndexUnusable(f"index at {path} has format {stored!r}, not {FORMAT!r}")
        except lmdb.Error as exc:
            env.close()
            raise IndexUnusable(f"index at {path} is unreadable: {exc}") from exc
        except IndexUnusable:
            env.close()
            raise
        for name in made:  # LMDB's mode went through the umask: make the files it created exactly private
            os.chmod(path / name, FILE_MODE)
        shared = _Env(env, dbs, readonly)
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


def _release_env(path: Path, shared: _Env) -> None:
    with _ENVS_LOCK:
        shared.refs -= 1
        if shared.refs:
            return
        _ENVS.pop(str(path.resolve()), None)
        if not shared.readonly:
            shared.env.sync(True)
        shared.env.close()


class Index:
    """The store's index (see the module doc). Environments are shared per
    process and path (PITFALLS 14): a read-only Index opened while a writer's
    Index is open in the same process reads through the writer's environment."""

    def __init__(self, path: Path, *, readonly: bool = False, map_size: int = DEFAULT_MAP_SIZE) -> None:
        self.path = path
        self.readonly = readonly
        self.grown = 0
        self._shared = _acquire_env(path, readonly, map_size)
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
        return None if raw is None else _meta_decoder.decode(raw)

    def summary(self, sid: str) -> SessionSummary | None:
        with self._read() as txn:
            raw = txn.get(sid.encode(), db=self._dbs[b"sessions"])
        return None if raw is None else _summary_decoder.decode(raw)

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
                yield _summary_decoder.decode(raw)

    def location(self, sid: str, seq: int) -> Loc | None:
        with self._read() as txn:
            raw = txn.get(event_key(sid, seq), db=self._dbs[b"events"])
        return None if raw is None else Loc(*_LOC.unpack(raw))

    def locations(self, sid: str, from_seq: int, to_seq: int, limit: int = _PAGE) -> list[tuple[int, Loc]]:
        """Up to `limit` (seq, Loc) of a session with from_seq <= seq <= to_seq, in order."""
        prefix = _prefix(sid)
        result: list[tuple[int, Loc]] = []
        width = len(prefix) + 8
        unpack_seq, unpack_loc = _U64.unpack_from, _LOC.unpack
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"events"])
            if not cursor.set_range(prefix + _U64.pack(max(from_seq, 0))):
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
        prefix = _prefix(sid)
        width = len(prefix) + 8
        plen = len(prefix)
        unpack_seq, unpack_loc = _U64.unpack_from, _LOC.unpack
        result: list[tuple[int, int, int, int, int]] = []
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"events"])
            if not cursor.set_range(prefix + _U64.pack(max(from_seq, 0))):
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

    def seqs_at_positions(self, sid: str, first_pos: int, last_pos: int) -> tuple[int, int] | None:
        """The first and last seq of the session's lines with first_pos <= pos <= last_pos (None: none).

        Binary searches over the session's seqs (its positions grow with its
        seqs) in one short read transaction: what a loss report needs to name
        the seqs a range of missing positions held.
        """
        prefix = _prefix(sid)
        plen = len(prefix)
        width = plen + 8
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"events"])

            def here() -> tuple[int, int] | None:
                """(seq, pos) under the cursor when it is a line of this session."""
                key = cursor.key()
                if len(key) != width or key[:plen] != prefix:
                    return None
                return _U64.unpack_from(key, plen)[0], _LOC.unpack(cursor.value())[3]

            def first_from(pos: int) -> int | None:
                """The smallest indexed seq of the session whose line is at `pos` or later."""
                lo, hi, found = 0, (1 << 64) - 1, None
                while lo <= hi:
                    mid = (lo + hi) // 2
                    hit = here() if cursor.set_range(prefix + _U64.pack(mid)) else None
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
                cursor.set_range(prefix + _U64.pack(beyond))
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
        prefix = _prefix(sid)
        refs: list[CheckpointRef] = []
        with self._read() as txn:
            cursor = txn.cursor(db=self._dbs[b"checkpoints"])
            found = cursor.set_range(prefix)
            while found:
                key = bytes(cursor.key())
                if not key.startswith(prefix) or len(key) != len(prefix) + 8:
                    break
                epoch = _U64.unpack_from(key, len(prefix))[0]
                seq, pos = _CKPT.unpack(cursor.value())
                refs.append(CheckpointRef(epoch, seq, pos))
                found = cursor.next()
        return refs

    def corruptions(self) -> list[CorruptEntry]:
        with self._read() as txn:
            return [_corrupt_decoder.decode(value) for _, value in txn.cursor(db=self._dbs[b"corrupt"])]

    def find_location(self, segment: int, offset: int) -> tuple[str, int] | None:
        """The (sid, seq) indexed at a line's place: a full scan, for audits only."""
        with self._read() as txn:
            for key, value in txn.cursor(db=self._dbs[b"events"]):
                loc = _LOC.unpack(value)
                if loc[0] == segment and loc[1] == offset:
                    sid, _, seq = bytes(key).rpartition(b"\x00")
                    return sid.decode(), _U64.unpack(seq)[0] if len(seq) == 8 else 0
        return None

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
        rows: list[tuple[str, bytes, bytes]] = []
        with self._read() as txn:
            for name in _DBS:
                for key, value in txn.cursor(db=self._dbs[name]):
                    rows.append((name.decode(), bytes(key), bytes(value)))
        return rows

    # -- writes (the writer thread only) ----------------------------------------

    def commit(self, batch: IndexBatch) -> None:
        """Apply a batch and its `through` position in one transaction.

        MapFullError aborts the transaction; the map is doubled once no read
        transaction is active, and the whole batch is applied again.
        """
        meta_value = _encoder.encode(batch.meta)
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
            for name in _DBS:
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
            _release_env(self.path, self._shared)
