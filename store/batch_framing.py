"""Framing a batch: each queued call checked against its session's head, placed, and its lines framed."""

from __future__ import annotations

import msgspec

from cairn.events.codec import GENESIS, SCHEMA_VERSION, Record, frame_line, json_string
from cairn.events.errors import InputError
from cairn.events.kinds import TAG_JSON, TAG_OF
from cairn.store.admission import checked_event
from cairn.store.commit_calls import Batch, Pending
from cairn.store.errors import BadClock, SeqConflict
from cairn.store.index import Index
from cairn.store.index_builder import IndexBuilder
from cairn.store.session_reader import broken_session


def frame_calls(
    calls: list[Pending],
    batch: Batch,
    *,
    builder: IndexBuilder,
    index: Index,
    limit: int,
    plan_size: int,
    now: int,
    clock_error: BadClock | None,
) -> tuple[int, int]:
    # long: one loop run per appended event, kept in locals on purpose (the docstring says why)
    """Check each call's seq, give it pos, seq, ts and chain, frame and index its lines (uncommitted).

    One loop, long on purpose: it runs once per appended event under heavy
    concurrency (the store bench measures it), so it keeps everything in
    locals, calls positionally and makes no per-event objects beyond the
    line and the Record; a function per call would cost a call per append.
    A call whose events its caller did not check is checked here first
    (`checked_event`, see `store.admission`); then what
    depends on the order: the envelope, the CRC and the chain
    digest (`frame_line`). A call that fails its checks (its event
    refused on its thread, `expected_seq`, a broken session, a line too
    large) is rejected alone, nothing of it framed. Lines go in chunks,
    one per segment: a call that would take the segment past `limit` (the
    segment size) starts the next one.

    `plan_size` the size the active segment
    will have before this batch's new lines; `now` stamps calls without a
    time of their own (`clock_error` refuses them instead). The batch gets
    its new end (`next_pos`, `last`); returns the first pos and planned size
    of the segment the batch ends in.
    """
    head_of = builder.head
    add = builder.add
    pos = batch.next_pos
    chunks = batch.chunks
    seg_first, chunk_lines = chunks[-1]
    chunk_size = plan_size
    done = batch.done
    rejected = batch.rejected
    last = batch.last
    tag_of = TAG_OF
    tag_json = TAG_JSON
    frame = frame_line
    checked = checked_event
    version = SCHEMA_VERSION

    for pending in calls:
        if pending.error is not None:  # its event was refused on the caller's thread
            rejected.append((pending, pending.error))
            continue
        sid = pending.sid
        head = head_of(sid)
        if head.broken_seq:
            rejected.append((pending, broken_session(index, sid, head.broken_seq)))
            continue
        if pending.expected != head.last_seq:
            rejected.append((pending, SeqConflict(sid, pending.expected, head.last_seq)))
            continue
        if pending.ts is None and clock_error is not None:
            rejected.append((pending, clock_error))
            continue
        ts = pending.ts if pending.ts is not None else now
        seq = head.last_seq
        prev = head.head or GENESIS
        sid_json = json_string(sid)
        lines: list[bytes] = []
        records: list[Record] = []
        call_pos = pos
        size = 0
        events, bodies = pending.events, pending.bodies
        try:
            for number, event in enumerate(events):
                kind = type(event)
                if bodies is None:  # the writer checks the call (`store.admission`)
                    event, body = checked(number, event)  # the copy a read gives back
                else:
                    body = bodies[number]
                seq += 1
                line, digest = frame(call_pos, sid_json, seq, ts, prev, tag_json[kind], body)
                lines.append(line)
                records.append(Record(call_pos, sid, seq, ts, prev, event, version, tag_of[kind]))  # type: ignore[arg-type]
                size += len(line)
                prev = digest
                call_pos += 1
        except (InputError, msgspec.EncodeError, TypeError, ValueError, OverflowError, KeyError) as exc:
            rejected.append((pending, exc))
            continue
        if chunk_size and chunk_size + size > limit:
            seg_first = pos  # roll before this call: calls never straddle segments
            chunk_lines = []
            chunks.append((seg_first, chunk_lines))
            chunk_size = 0
        # each line's digest is the next record's prev, the last one's the session's new head (`prev`)
        for number, record in enumerate(records):
            length = len(lines[number])
            add(
                head,
                record.seq,
                record.pos,
                ts,
                record.prev,
                records[number + 1].prev if number + 1 < len(records) else prev,
                record.line_kind,
                record.event,
                seg_first,
                chunk_size,
                length,
            )
            last = (seg_first, chunk_size, length)
            chunk_size += length
        chunk_lines += lines
        pos = call_pos
        done.append((pending, records))
    batch.next_pos = pos
    batch.last = last
    return seg_first, chunk_size
