"""cairn's durable event log: JSONL segments, LMDB index, group commit, recovery."""

from store.errors import (
    CorruptionError,
    SeqConflict,
    StorageError,
    StorageFailed,
    StoreClosed,
    StoreLocked,
)
from store.index import CheckpointRef, SessionSummary
from store.journal import Journal
from store.recovery import Recovery
from store.verify import VerifyReport, index_dump, reindex, verify_store

__all__ = [
    "CheckpointRef",
    "CorruptionError",
    "Journal",
    "Recovery",
    "SeqConflict",
    "SessionSummary",
    "StorageError",
    "StorageFailed",
    "StoreClosed",
    "StoreLocked",
    "VerifyReport",
    "index_dump",
    "reindex",
    "verify_store",
]
