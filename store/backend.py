"""`JournalBackend`: what the host, the session actors, fork and the CLI use of a journal.

Two backends satisfy it: the local log (`cairn.store.journal.Journal`, JSONL
segments + LMDB, the default) and the JetStream cluster
(`cairn.store.jetstream.journal.JetStreamJournal`). `Host.open(journal=...)`
takes either and runs unchanged on it. The Protocol names exactly the calls
made through `Host.journal` and `Runtime.journal` (appends with an expected
seq, reads, load from the latest checkpoint, listings, blobs, the failure
state, close); anything else a caller needs of one backend (the local
journal's `index`, `recovery`, `root`) is that backend's own business.

Shared semantics, whichever backend:

- `append` writes a call's events all or nothing, after checking that
  `expected_seq` is the session's last seq (`SeqConflict` otherwise, nothing
  written), and returns the records as stored; it raises `AppendTimeout`
  when no acknowledgement came within `timeout` seconds (the call may still
  become durable: a resend with the same expected seq tells).
- `append_async` gives a future that resolves as `append` would; calls of one
  session queued in order are applied in order.
- `load(sid)` equals `replay_full(sid)`, reading only from the latest
  checkpoint on; an unknown session gives an empty state.
- `read` yields checked records (checksum, envelope, hash chain) in seq order.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from cairn.events.codec import Record
from cairn.events.kinds import EventBase
from cairn.events.state import SessionState
from cairn.store.errors import StorageFailed
from cairn.store.index_records import CheckpointRef, SessionSummary


@runtime_checkable
class JournalBackend(Protocol):
    """The journal interface of `Host`, the session actors, fork and the CLI (see the module doc)."""

    def append(
        self,
        sid: str,
        events: Sequence[EventBase],
        *,
        expected_seq: int,
        ts_ms: int | None = None,
        timeout: float | None = 30.0,
    ) -> list[Record]: ...

    def append_async(
        self,
        sid: str,
        events: Sequence[EventBase],
        *,
        expected_seq: int,
        ts_ms: int | None = None,
    ) -> concurrent.futures.Future[list[Record]]: ...

    def last_seq(self, sid: str) -> int: ...

    def session(self, sid: str) -> SessionSummary | None: ...

    def sessions(self) -> Iterator[SessionSummary]: ...

    def checkpoints(self, sid: str) -> list[CheckpointRef]: ...

    def read(self, sid: str, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Record]: ...

    def load(self, sid: str) -> SessionState: ...

    def replay_full(self, sid: str) -> SessionState: ...

    def read_blob(self, sha256: str) -> bytes: ...

    @property
    def failed(self) -> StorageFailed | None: ...

    def close(self) -> None: ...
