"""Checking a page of a session's stored lines: the local log's line checks, applied to messages (pure).

Every line is decoded strictly (`events.codec.decode_run`: frame, CRC-32C,
version, kind, body), and must belong to the session, follow the previous
seq with no gap, hold `pos == seq - 1` (the cluster's meaning of pos, see
`writer`), and, when `chain` is asked, name the previous line's chain
digest as its `prev`. A bad line raises `CorruptionError` naming the
session's subject (as the "segment") and the message's stream sequence (as
the "offset").
"""

from __future__ import annotations

from collections.abc import Sequence

from cairn.events.codec import GENESIS, Record, chain_digest, decode_line, decode_run
from cairn.events.errors import DecodeError
from cairn.store.errors import CorruptionError
from cairn.store.jetstream.reads import Stored


def corrupt(stored: Stored, message: str, sid: str = "", seq: int = 0) -> CorruptionError:
    return CorruptionError(message, segment=stored.subject, offset=stored.stream_seq, sid=sid, seq=seq)


def decode_page(
    sid: str,
    page: Sequence[Stored],
    first_seq: int,
    prev: str | None,
    *,
    chain: bool,
) -> tuple[list[Record], str | None]:
    """The page's records, checked; and the chain digest of its last line (None when `chain` is off).

    `first_seq` is the seq the first line must hold; `prev` the digest its
    `prev` must name (GENESIS for seq 1; None: unknown, not checked).
    """
    if not page:
        return [], prev
    try:
        records = decode_run(b"".join(s.data for s in page), [len(s.data) for s in page])
    except DecodeError:
        records = []
        for index, stored in enumerate(page):
            try:
                records.append(decode_line(stored.data))
            except DecodeError as exc:
                raise corrupt(stored, f"unreadable line: {exc}", sid, first_seq + index) from exc
    if first_seq == 1:
        prev = GENESIS
    digest = prev
    for index, (record, stored) in enumerate(zip(records, page, strict=True)):
        seq = first_seq + index
        if record.sid != sid:
            raise corrupt(stored, f"the line belongs to session {record.sid!r}", sid, seq)
        if record.seq != seq:
            what = "duplicate" if record.seq < seq else "gap"
            raise corrupt(stored, f"seq {what}: seq {record.seq} where {seq} was expected", sid, seq)
        if record.pos != seq - 1:
            raise corrupt(stored, f"pos {record.pos} where {seq - 1} (seq - 1) was expected", sid, seq)
        if chain:
            if digest is not None and record.prev != digest:
                raise corrupt(stored, "hash chain broken: prev does not name the previous line", sid, seq)
            digest = chain_digest(stored.data)
    return records, digest if chain else None
