"""A session's transcript: what its user saw, read from the log a page at a time (`Host.transcript`).

The entries are the messages, the model's answers with their tool calls,
the tool results and the turn boundaries (started, completed, failed,
cancelled), each in the client's view (`client_view.shown_event`: the one
definition of what a client may see), in seq order. Nothing else of the log
is in it: no requests, usage, provider errors, slimming, compaction,
checkpoints, hand-offs or owner changes.

Paging: a page holds the entries with seq > `after`, at most `limit` of
them; `next_after` is the `after` of the next page, and `more` says whether
an entry lies beyond it now. A page that reaches the end of the log has
`next_after` at the last record read, so polling with it later reads only
what was written since. One record is one entry, so a page never splits one.

Each entry names its turn (`turn_id`): the turn a user message started or
steered, the turn an answer or a tool result belongs to; "" outside any
turn. A page that starts inside a turn finds the turn by reading back from
`after` in doubling windows (16 records, then 32, ... at most 1,024) to the
turn's start.

Memory: the log is read lazily from `after + 1` (`Journal.read` goes through
the index a page of lines at a time) and the reading stops one entry past
the page, so a page costs O(limit) entries and the records between them,
never the whole session.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator

import msgspec

from cairn.actors.errors import UnknownSession
from cairn.actors.host.client_view import (
    ShownEvent,
    ShownTurnCancelled,
    ShownTurnCompleted,
    ShownTurnFailed,
    ShownTurnStarted,
    ShownUserMessage,
    shown_event,
)
from cairn.events.codec import Record, validate_session_id
from cairn.events.errors import InputError
from cairn.events.kinds import TurnCancelled, TurnCompleted, TurnFailed, TurnStarted
from cairn.store.backend import JournalBackend

#: the largest page `Host.transcript` gives
MAX_LIMIT = 1_000
#: records read at first, and at most at a time, when looking back for the turn a page starts in
_BACK_FIRST = 16
_BACK_MOST = 1_024
#: the largest seq a log may hold (a signed 64-bit integer)
_MAX_SEQ = 2**63 - 1


class TranscriptEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One thing the user saw: at `seq` of the log, written at `ts` (unix ms), in turn `turn_id`.

    `item` says what (a `Shown*` view, tagged `kind`): a user message, an
    answer with its tool calls, a tool result, a turn's start or its end.
    """

    seq: int
    ts: int
    turn_id: str
    item: ShownEvent


class TranscriptPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a session's transcript (see the module doc).

    `entries` in seq order; `next_after`: pass it as `after` for the next
    page; `more`: whether the log held an entry past this page when it was
    read; `last_seq`: the session's last seq then.
    """

    session: str
    entries: tuple[TranscriptEntry, ...]
    next_after: int
    more: bool
    last_seq: int


def checked_page(after: object, limit: object) -> tuple[int, int]:
    """`after` and `limit` if they make a page (0 <= `after`, 1 <= `limit` <= MAX_LIMIT), else InputError."""
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= _MAX_SEQ:
        raise InputError(f"after must be a seq: an int from 0 to {_MAX_SEQ}, got {after!r}")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"limit must be an int from 1 to {MAX_LIMIT}, got {limit!r}")
    return after, limit


def _boundary(record: Record) -> str | None:
    """The turn open after `record` when it starts or ends one ("" when ended), else None."""
    event = record.event
    if isinstance(event, TurnStarted):
        return event.turn_id
    if isinstance(event, TurnCompleted | TurnFailed | TurnCancelled):
        return ""
    return None


def open_turn_at(journal: JournalBackend, sid: str, seq: int) -> str:
    """The turn open just after `seq` ("" when none), reading back from `seq` in doubling windows."""
    high, window = seq, _BACK_FIRST
    while high >= 1:
        low = max(1, high - window + 1)
        window = min(window * 2, _BACK_MOST)
        found: str | None = None
        for record in journal.read(sid, low, high):
            boundary = _boundary(record)
            if boundary is not None:
                found = boundary
        if found is not None:
            return found
        high = low - 1
    return ""


def _own_turn(shown: ShownEvent) -> str | None:
    """The turn a turn boundary names (None for the other entries)."""
    if isinstance(shown, ShownTurnStarted | ShownTurnCompleted | ShownTurnFailed | ShownTurnCancelled):
        return str(shown.turn_id)
    return None


def entries(
    records: Iterable[Record], open_turn: str, *, images: bool = False
) -> Generator[TranscriptEntry, None, None]:
    """The transcript entries of `records`, with `open_turn` the turn open before the first.

    Pure. A user message is held back one record: when the next one starts a
    turn with it, it belongs to that turn; else to the turn open when it was
    written (it steered that one, or came outside any turn).
    """
    waiting: tuple[Record, ShownUserMessage] | None = None
    for record in records:
        shown = shown_event(record.event, images=images)
        if waiting is not None:
            held, message = waiting
            waiting = None
            turn = open_turn
            if isinstance(shown, ShownTurnStarted) and shown.message_id in (message.message_id, ""):
                turn = shown.turn_id
            yield TranscriptEntry(seq=held.seq, ts=held.ts, turn_id=turn, item=message)
        if isinstance(shown, ShownUserMessage):
            waiting = (record, shown)
        elif shown is not None:
            own = _own_turn(shown)
            yield TranscriptEntry(seq=record.seq, ts=record.ts, turn_id=own or open_turn, item=shown)
        boundary = _boundary(record)
        if boundary is not None:
            open_turn = boundary
    if waiting is not None:
        held, message = waiting
        yield TranscriptEntry(seq=held.seq, ts=held.ts, turn_id=open_turn, item=message)


def read_page(
    journal: JournalBackend, session: str, *, after: int = 0, limit: int = 100, images: bool = False
) -> TranscriptPage:
    """A page of `session`'s transcript from `journal` (see the module doc).

    Checks every argument first (`InvalidSessionId`, `InputError`), then
    that the session exists (`UnknownSession`); reads only; writes nothing.
    """
    validate_session_id(session)
    after, limit = checked_page(after, limit)
    last = journal.last_seq(session)
    if last == 0:
        raise UnknownSession(f"no session {session} in the store")
    if after >= last:
        return TranscriptPage(session=session, entries=(), next_after=after, more=False, last_seq=last)
    reader = _Counting(journal.read(session, after + 1, last), after)
    stream = entries(reader, open_turn_at(journal, session, after), images=images)
    page: list[TranscriptEntry] = []
    more = False
    try:
        for entry in stream:
            if len(page) == limit:
                more = True  # one entry past the page: there is more
                break
            page.append(entry)
    finally:
        stream.close()
        reader.close()
    next_after = page[-1].seq if more else reader.last
    return TranscriptPage(
        session=session, entries=tuple(page), next_after=next_after, more=more, last_seq=last
    )


class _Counting:
    """Records of a read, remembering the last seq yielded (`last`), closable early."""

    def __init__(self, records: Iterator[Record], after: int) -> None:
        self._records = records
        self.last = after

    def __iter__(self) -> Iterator[Record]:
        for record in self._records:
            self.last = record.seq
            yield record

    def close(self) -> None:
        close = getattr(self._records, "close", None)
        if close is not None:
            close()
