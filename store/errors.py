"""The store's typed errors, under the one cairn base (STYLE 16).

`StorageError` is the root for "the machine or the log is at fault"; bad
calls stay `InputError`s (also `ValueError`s). Every message names the
segment, byte offset or session involved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cairn.events.codec import ts_in_range
from cairn.events.errors import CairnError, InputError

if TYPE_CHECKING:
    from cairn.store.loss import Loss


class StorageError(CairnError):
    """The disk, the log or the index failed; not the caller's fault."""


class StorageFailed(StorageError):
    """An I/O error (a failed write or fsync) stopped the writer (fsyncgate).

    The outcome of every append pending at that moment is unknown: the store
    refuses further appends until it is reopened, and reopening recovers from
    the log, which then says what was written.
    """


class BadClock(StorageError):
    """The journal's clock gave no time a record can carry (not an int in 0..2**63-1 unix ms, or it
    raised): the appends it would have stamped are refused, nothing of them written."""


def read_clock(clock_ms: Callable[[], object]) -> int:
    """The time `clock_ms` gives when a record can carry it, else `BadClock` saying what it gave."""
    try:
        value = clock_ms()
    except Exception as exc:  # the host's clock: its failure is the append's, not the writer's
        raise BadClock(f"the clock raised {type(exc).__name__}: {exc}; nothing was written") from exc
    if type(value) is not int or not ts_in_range(value):
        raise BadClock(f"the clock gave {value!r}, not a time in 0..2**63-1 unix ms: nothing was written")
    return value


class StoreClosed(StorageError):
    """The journal was closed before (or while) the call ran."""


class StoreLocked(StorageError):
    """Another process holds the store's writer lock."""


class CatchUpFailed(StorageError):
    """A read-only open found the index behind the log and could not catch up.

    Checking the log past the index's recovery point, or building the private
    index that shows the lines past it (in the temporary directory), failed.
    Nothing in the store was changed; a writer's next open indexes them.
    """


class AcknowledgedDataMissing(StorageError):
    """Lines the store acknowledged are gone from its log (DESIGN §2.5).

    `losses` names each missing range of positions, and the sessions and
    seqs it held when the store still knows them. A writer refuses to open
    until an operator accepts the loss (`cairn repair --accept-loss`, which
    records it); read-only opens and `cairn verify` show what is left.
    """

    def __init__(self, message: str, losses: Sequence[Loss] = ()) -> None:
        self.losses = tuple(losses)
        super().__init__(message)


class UnexpectedEntry(StorageError):
    """The store holds an entry cairn did not make where it keeps its own.

    A symbolic link, a directory or a file under a segment's name, a name
    past the largest position, anything else in `log/`, or a link in place
    of one of cairn's own files and directories. cairn never follows, cuts
    or removes such an entry: `entries` names each one and what it is, for
    the operator to deal with.
    """

    def __init__(self, message: str, entries: Sequence[str] = ()) -> None:
        self.entries = tuple(entries)
        super().__init__(message)


class NothingToRepair(InputError):
    """A repair was asked of a store that does not need it (nothing was changed)."""


class ReadOnlyStore(InputError):
    """A write was asked of a journal opened with readonly=True."""


class AppendTimeout(StorageError):
    """No acknowledgement within the timeout; the append may still become durable."""


class CorruptionError(StorageError):
    """A line of the log is not what it must be: the session fails closed past it.

    `segment` is the segment file name, `offset` the byte offset of the line
    in it, `sid`/`seq` the session and seq it belongs to ("" / 0 if unknown).
    """

    def __init__(self, message: str, *, segment: str, offset: int, sid: str = "", seq: int = 0) -> None:
        self.segment = segment
        self.offset = offset
        self.sid = sid
        self.seq = seq
        who = f" of session {sid}" if sid else ""
        at = f" seq {seq}" if seq else ""
        super().__init__(f"{segment}@{offset}{who}{at}: {message}")


class IndexUnusable(StorageError):
    """The index cannot be opened or trusted; the caller rebuilds it (or reads through a private one)."""


class IndexOutdated(IndexUnusable):
    """The index was written by an older cairn (an earlier index format): not damage; it is rebuilt
    from the log at the next open for writing (or by `cairn reindex`), and read-only opens read
    through a private rebuild meanwhile."""


class BlobError(StorageError):
    """A blob named by an event is missing or does not match its SHA-256."""


class SeqConflict(InputError):
    """Optimistic concurrency: `expected_seq` is not the session's last seq.

    Also what a duplicate (session, seq) gets: a seq that is already taken is
    never written twice.
    """

    def __init__(self, sid: str, expected: int, actual: int) -> None:
        self.sid = sid
        self.expected = expected
        self.actual = actual
        super().__init__(f"session {sid}: expected last seq {expected}, but it is {actual}")
