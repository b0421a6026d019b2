"""`export_to_local`: a cluster's log written as a local store that the local `verify_store` accepts.

The events stream is read in stream order (the cluster's one global order)
and every line is checked as `verify_cluster` checks it (frame, checksum,
body, seq, chain); the events are appended to a new local store through the
local `Journal`, session by session in that order, each with its original
`ts` (consecutive lines of one session with one `ts` go in one call, as they
were written). The local journal gives each line its global `pos` in that
order and its local chain (a cluster line's `pos` is its place in its
session, see `writer`, so the local lines differ from the cluster's in
`pos`, `prev` and `crc`, and in nothing else). Blobs are copied first (each
checked against its SHA-256). A corrupt line stops the export with
`CorruptionError` naming it; what was written before it is a sound store.
"""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass
from pathlib import Path

from cairn.events.codec import GENESIS, Record, chain_digest, decode_line
from cairn.events.errors import DecodeError, InputError
from cairn.events.kinds import EventBase
from cairn.store.blobs import BlobStore, blob_refs
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.lines import corrupt
from cairn.store.jetstream.names import session_of_token
from cairn.store.jetstream.reads import PAGE_MSGS, Stored
from cairn.store.journal import Journal

#: calls the export keeps in flight on the local journal before it waits for them
_IN_FLIGHT = 512


@dataclass
class ExportReport:
    """What `export_to_local` wrote."""

    root: str
    sessions: int = 0
    lines: int = 0
    blobs: int = 0


@dataclass
class _Call:
    sid: str
    ts: int
    expected: int
    events: list[EventBase]


def export_to_local(journal: JetStreamJournal, directory: str | os.PathLike[str]) -> ExportReport:
    """Write every session of the cluster store into a new local store at `directory`.

    Refuses (`InputError`) a directory that already holds a store with sessions.
    """
    root = Path(directory)
    local = Journal.open(root)
    try:
        if next(iter(local.sessions()), None) is not None:
            raise InputError(f"{root} already holds a cairn store with sessions: export into a new directory")
        return _copy(journal, local, root)
    finally:
        local.close()


def _copy(journal: JetStreamJournal, local: Journal, root: Path) -> ExportReport:
    report = ExportReport(root=str(root))
    blobs = BlobStore(root)
    copied: set[str] = set()
    heads: dict[str, tuple[int, str]] = {}  # sid -> (last seq, chain digest on the cluster)
    pending: list[concurrent.futures.Future[list[Record]]] = []
    call: _Call | None = None
    cut = len(journal.layout.prefix) + 1
    start = 1
    while True:
        page: list[Stored] = journal._call(journal._reader.page(journal.layout.subjects, start, PAGE_MSGS))
        if not page:
            break
        for stored in page:
            sid = session_of_token(stored.subject[cut:])
            try:
                record = decode_line(stored.data)
            except DecodeError as exc:
                raise corrupt(stored, f"unreadable line: {exc}", sid) from exc
            seq, digest = heads.get(sid, (0, GENESIS))
            if record.sid != sid or record.seq != seq + 1 or record.prev != digest:
                raise corrupt(stored, "not the session's next line (session, seq or chain)", sid, record.seq)
            heads[sid] = (record.seq, chain_digest(stored.data))
            for ref in blob_refs(record.event):
                if ref.sha256 not in copied:
                    blobs.put(journal.read_blob(ref.sha256))
                    copied.add(ref.sha256)
            if call is not None and call.sid == sid and call.ts == record.ts:
                call.events.append(record.event)
                continue
            if call is not None:
                pending.append(
                    local.append_async(call.sid, call.events, expected_seq=call.expected, ts_ms=call.ts)
                )
            call = _Call(sid, record.ts, seq, [record.event])
            if len(pending) >= _IN_FLIGHT:
                _wait(pending)
        if len(page) < PAGE_MSGS:
            break  # a short page is the end: the leader completed it (reads.page)
        start = page[-1].stream_seq + 1
    if call is not None:
        pending.append(local.append_async(call.sid, call.events, expected_seq=call.expected, ts_ms=call.ts))
    _wait(pending)
    report.lines = sum(seq for seq, _ in heads.values())
    report.sessions = len(heads)
    report.blobs = len(copied)
    return report


def _wait(pending: list[concurrent.futures.Future[list[Record]]]) -> None:
    for future in pending:
        future.result(120)
    pending.clear()
