"""The audit listing of a cluster session's raw lines: envelopes of kinds this cairn does not know.

`cairn log` may read a store written by a newer cairn. A checked read stops
with `CorruptionError` at a line of an unknown kind; `unknown_kind_at` tells
whether that is all that is wrong with the line it names, and
`raw_session_lines` lists the session from a seq on as the local
`store.reader.iter_records` lists a local log: each line's envelope (its
frame and checksum checked), with its record when it decodes. Lines whose
frame does not hold are skipped (the caller sees the seq gap; `verify`
names them).
"""

from __future__ import annotations

from collections.abc import Iterator

from cairn.events.codec import decode_envelope, decode_line
from cairn.events.errors import DecodeError, UnknownKind
from cairn.store.errors import CorruptionError
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.reads import PAGE_MSGS
from cairn.store.reader import AuditRecord


def unknown_kind_at(journal: JetStreamJournal, sid: str, error: CorruptionError) -> str | None:
    """The kind of the line `error` names (subject, stream seq) when that kind is merely unknown here."""
    subject = journal.layout.subject(sid)
    offset = getattr(error, "offset", -1)
    if getattr(error, "segment", "") != subject or offset < 1:
        return None
    stored = journal._call(journal._reader.at(offset))
    if stored is None or stored.subject != subject:
        return None
    try:
        decode_line(stored.data)
    except UnknownKind as exc:
        return exc.kind
    except DecodeError:
        return None
    return None


def raw_session_lines(
    journal: JetStreamJournal, sid: str, from_seq: int, to_seq: int | None = None
) -> Iterator[AuditRecord]:
    """The session's lines with from_seq <= seq (<= to_seq), envelope checked, record when known."""
    subject = journal.layout.subject(sid)
    head = journal._call(journal._reader.last(subject))
    if head is None:
        return
    found = journal._call(journal._reader.locate(subject, max(1, from_seq), 1, head.stream_seq))
    start = found.stream_seq if found is not None else head.stream_seq + 1
    while True:
        page = journal._call(journal._reader.page(subject, start, PAGE_MSGS))
        if not page:
            return
        for stored in page:
            try:
                envelope = decode_envelope(stored.data)
            except DecodeError:
                continue
            if to_seq is not None and envelope.seq > to_seq:
                return
            try:
                record = decode_line(stored.data)
            except DecodeError as exc:
                yield AuditRecord(subject, stored.stream_seq, envelope, None, str(exc))
                continue
            yield AuditRecord(subject, stored.stream_seq, envelope, record)
        if len(page) < PAGE_MSGS:
            return  # a short page is the end: the leader completed it (reads.page)
        start = page[-1].stream_seq + 1
