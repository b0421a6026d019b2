"""cairn's durable event log: JSONL segments, LMDB index, group commit, recovery."""

from cairn.store.errors import (
    AcknowledgedDataMissing,
    BadClock,
    CorruptionError,
    SeqConflict,
    StorageError,
    StorageFailed,
    StoreClosed,
    StoreLocked,
    UnexpectedEntry,
)
from cairn.store.index_records import CheckpointRef, SessionSummary
from cairn.store.journal import Journal
from cairn.store.recovery import Recovery
from cairn.store.reindex import index_dump, reindex
from cairn.store.verify import verify_store
from cairn.store.verify_report import VerifyReport

__all__ = [
    "AcknowledgedDataMissing",
    "BadClock",
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
    "UnexpectedEntry",
    "VerifyReport",
    "index_dump",
    "reindex",
    "verify_store",
]
