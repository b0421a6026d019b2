"""Reading one session's lines through the index: checked records, replay pages, the folded state.

Every line read is checked: its frame, CRC, envelope, seq, position and
session against what the index says (a bad one raises `CorruptionError`
naming segment, offset and session, for that session only), and, for
`read`, the hash chain. Replay (`load`, `replay_full`) skips the chain
(tamper evidence, a SHA-256 per line, is `read` and `verify`'s business)
and reads adjacent lines in runs, one pread and one `decode_run` each: the
replay hot path. A session the index marks broken fails closed from the
broken seq on.

Thread-safety: any thread, any number at once; each call uses short index
read transactions and preads, and never blocks the writer.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator

from cairn.events.codec import Record, chain_digest, decode_line, decode_run, decode_session_run
from cairn.events.errors import DecodeError
from cairn.events.state import Replayer, SessionState
from cairn.store.errors import CorruptionError
from cairn.store.index import Index
from cairn.store.index_records import LOC, Loc
from cairn.store.segments import SegmentReader, segment_name

#: seqs past every session's last: "to the end"
MAX_SEQ = (1 << 63) - 1
_READ_PAGE = 256
#: seqs per index transaction on the replay hot path
_SCAN_PAGE = 8192
#: bytes of lines read, decoded and checked at a time on the replay hot path (the first line's
#: bytes are still in cache when its crc is checked)
_RUN_BYTES = 128 << 10


class SessionReader:
    """Reads sessions of one store through its index and its segments (see the module doc)."""

    def __init__(self, index: Index, segments: SegmentReader) -> None:
        self._index = index
        self._segments = segments

    def read(self, sid: str, from_seq: int, to_seq: int, *, chain: bool = True) -> Iterator[Record]:
        """The session's records with from_seq <= seq <= to_seq; `chain=False` skips the hash-chain check.

        Replay (`load`, `replay_full`) skips it: every line's CRC, envelope,
        seq and position are still checked, so a damaged line still fails
        closed, while the chain (tamper evidence, costly SHA-256 per line) is
        `read` and `verify`'s business.
        """
        if from_seq > to_seq:
            return
        summary = self._index.summary(sid)
        if summary is None:
            return
        broken = summary.broken_seq
        to_seq = min(to_seq, summary.last_seq)
        cursor = from_seq
        prev_digest: str | None = None
        while cursor <= to_seq:
            page = self._index.locations(sid, cursor, to_seq, _READ_PAGE)
            lines = self._read_page(page)
            for (seq, loc), raw in zip(page, lines, strict=True):
                if broken and seq >= broken:
                    raise broken_session(self._index, sid, broken)
                record, digest = self._read_line(sid, seq, loc, chain, raw)
                if chain and prev_digest is not None and record.prev != prev_digest:
                    raise CorruptionError(
                        "hash chain broken: prev does not name the previous line",
                        segment=segment_name(loc.segment),
                        offset=loc.offset,
                        sid=sid,
                        seq=seq,
                    )
                prev_digest = digest
                cursor = seq + 1
                yield record
            if len(page) < _READ_PAGE:
                break
        if broken and from_seq <= broken <= to_seq and cursor <= broken:
            raise broken_session(self._index, sid, broken)

    def replay_pages(self, sid: str, from_seq: int, to_seq: int = MAX_SEQ) -> Iterator[list[Record]]:
        """The replay hot path: the session's records in pages, checked like `read` minus the chain.

        The index is walked for locations only (`Index.dense_locations`, one
        short transaction per page of `_SCAN_PAGE` seqs, no per-entry key
        work), each run of adjacent lines is read with one pread, decoded with
        one msgspec call and checked in one pass (`decode_session_run`):
        every line's frame, CRC, envelope, seq, position and session. At any
        doubt (a run that does not check, an index with holes) the same seqs
        are read again the exact way (`_exact_pages`), which names the bad
        line in a `CorruptionError` (segment, offset, session) or gives what
        the index holds. The hash chain is `read` and `verify`'s business.
        """
        summary = self._index.summary(sid)
        if summary is None or from_seq > to_seq:
            return
        broken = summary.broken_seq
        to_seq = min(to_seq, summary.last_seq)
        if broken and from_seq >= broken:
            raise broken_session(self._index, sid, broken)
        end = min(to_seq, broken - 1) if broken else to_seq
        cursor = from_seq
        while cursor <= end:
            last = min(end, cursor + _SCAN_PAGE - 1)
            values = self._index.dense_values(sid, cursor, last - cursor + 1)
            if values is None:
                yield from self._exact_pages(sid, cursor, last)
            else:
                yield from self._checked_runs(sid, cursor, values)
            cursor = last + 1
        if broken and from_seq <= broken <= to_seq:
            raise broken_session(self._index, sid, broken)

    def _checked_runs(self, sid: str, first_seq: int, values: bytes) -> Iterator[list[Record]]:
        """The records whose index values are `values` (seqs from `first_seq`), in pages.

        A run is as many next seqs as hold the next positions of one segment
        (found by bisection over the values: positions grow with seqs), so
        the lines of a session written alone make one run per page; the
        lengths the index gives each line must cover the run's bytes.
        """
        count = len(values) // LOC.size
        lengths = _lengths_of(count).unpack(values)
        read = self._segments.read
        at = LOC.unpack_from
        checked: list[Record] = []  # the runs checked so far, fed to the fold in one page
        i = 0
        while i < count:
            segment, offset, _, pos = at(values, i * LOC.size)
            end = _run_end(values, i, count, segment, pos)
            _, last_offset, last_length, _ = at(values, (end - 1) * LOC.size)
            size = last_offset + last_length - offset
            if size > _RUN_BYTES and end - i > 1:  # a shorter run, whose bytes stay in cache while checked
                end = i + max(1, (end - i) * _RUN_BYTES // size)
                _, last_offset, last_length, _ = at(values, (end - 1) * LOC.size)
                size = last_offset + last_length - offset
            records = None
            if size == sum(lengths[i:end]):
                try:
                    blob = read(segment, offset, size)
                except OSError:
                    blob = b""
                records = decode_session_run(blob, lengths[i:end], sid, first_seq + i, pos)
            if records is None:
                if checked:
                    yield checked
                    checked = []
                yield from self._exact_pages(sid, first_seq + i, first_seq + end - 1)
            elif checked:
                checked += records
            else:
                checked = records
            i = end
        if checked:
            yield checked

    def _exact_pages(self, sid: str, from_seq: int, to_seq: int) -> Iterator[list[Record]]:
        """The seqs from_seq..to_seq (none past a broken seq) read the exact way: what the index
        holds of them, one entry at a time, runs decoded by `decode_run`, a bad line named."""
        cursor = from_seq
        read = self._segments.read
        raw_locations = self._index.raw_locations
        page_size = _READ_PAGE * 4
        while cursor <= to_seq:
            page = raw_locations(sid, cursor, to_seq, page_size)
            if not page:
                break
            i, count = 0, len(page)
            while i < count:
                _, segment, offset, _, _ = page[i]
                end, stop = i, offset
                while end < count and page[end][1] == segment and page[end][2] == stop:
                    stop += page[end][3]
                    end += 1
                run = page[i:end]
                yield self._decode_run(sid, run, read, segment, offset, stop)
                cursor = run[-1][0] + 1
                i = end
            if count < page_size:
                break

    def _decode_run(
        self,
        sid: str,
        run: list[tuple[int, int, int, int, int]],
        read: Callable[[int, int, int], bytes],
        segment: int,
        offset: int,
        stop: int,
    ) -> list[Record]:
        """Decode one run of adjacent lines; on any doubt, check them one by one for the precise error."""
        try:
            blob = read(segment, offset, stop - offset)
        except OSError:
            blob = b""
        if len(blob) == stop - offset:
            try:
                records = decode_run(blob, [entry[3] for entry in run])
            except DecodeError:
                records = []
            if len(records) == len(run):
                for record, (seq, _, _, _, pos) in zip(records, run, strict=True):
                    if record.seq != seq or record.pos != pos or record.sid != sid:
                        break
                else:
                    return records
        # the slow path names the first bad line exactly (and raises for it)
        return [
            self._read_line(sid, seq, Loc(seg, off, length, pos), False)[0]
            for seq, seg, off, length, pos in run
        ]

    def _read_page(self, page: list[tuple[int, Loc]]) -> list[bytes | None]:
        """The raw lines of a page of locations, one pread per run of adjacent lines.

        A line that cannot be read here comes back as None and is read (and
        its error reported) one by one in `_read_line`.
        """
        lines: list[bytes | None] = []
        i = 0
        while i < len(page):
            first = page[i][1]
            end = i + 1
            stop = first.offset + first.length
            while end < len(page) and page[end][1].segment == first.segment and page[end][1].offset == stop:
                stop += page[end][1].length
                end += 1
            try:
                blob = self._segments.read(first.segment, first.offset, stop - first.offset)
            except OSError:
                blob = b""
            if len(blob) != stop - first.offset:
                lines.extend([None] * (end - i))
            else:
                start = 0
                for _, loc in page[i:end]:
                    lines.append(blob[start : start + loc.length])
                    start += loc.length
            i = end
        return lines

    def _read_line(
        self, sid: str, seq: int, loc: Loc, chain: bool = True, raw: bytes | None = None
    ) -> tuple[Record, str]:
        where = f"{segment_name(loc.segment)}@{loc.offset}"
        try:
            if raw is None:
                raw = self._segments.read(loc.segment, loc.offset, loc.length)
            record = decode_line(raw, where=where)
            digest = chain_digest(raw) if chain else ""
        except (DecodeError, OSError) as exc:
            raise CorruptionError(
                f"unreadable line: {exc}",
                segment=segment_name(loc.segment),
                offset=loc.offset,
                sid=sid,
                seq=seq,
            ) from exc
        if record.sid != sid or record.seq != seq or record.pos != loc.pos:
            raise CorruptionError(
                f"the line holds {record.sid} seq {record.seq} pos {record.pos}, "
                f"the index expects seq {seq} pos {loc.pos}",
                segment=segment_name(loc.segment),
                offset=loc.offset,
                sid=sid,
                seq=seq,
            )
        return record, digest

    def load(self, sid: str) -> SessionState:
        """The session's state, replayed from its latest checkpoint (DESIGN §2.6).

        Reads the latest `session-started` and then every event from the latest
        `checkpoint-committed` on: O(events since the checkpoint). Equal to
        `replay_full`. An unknown session gives an empty state for `sid`; a
        broken one raises `CorruptionError` (fail closed).
        """
        summary = self._index.summary(sid)
        if summary is None:
            return SessionState(sid=sid)
        if summary.broken_seq:
            raise broken_session(self._index, sid, summary.broken_seq)
        start = summary.checkpoint_seq
        if start <= 1:
            return self._replay(sid, 1)
        replayer = Replayer()
        if 0 < summary.info_seq < start:
            for page in self.replay_pages(sid, summary.info_seq, summary.info_seq):
                replayer.feed(page)
        return self._replay(sid, start, replayer)

    def replay_full(self, sid: str) -> SessionState:
        """The session's state folded from seq 1 (the reference for `load`)."""
        if self._index.summary(sid) is None:
            return SessionState(sid=sid)
        return self._replay(sid, 1)

    def _replay(self, sid: str, from_seq: int, replayer: Replayer | None = None) -> SessionState:
        replayer = replayer if replayer is not None else Replayer()
        for page in self.replay_pages(sid, from_seq):
            replayer.feed(page)
        return replayer.state()


@functools.lru_cache(maxsize=8)
def _lengths_of(count: int) -> struct.Struct:
    """What unpacks the lengths of `count` index values (`LOC`: >QQIQ) packed back to back, all in
    one call (a page is mostly `_SCAN_PAGE` values: one cached Struct serves every full page)."""
    return struct.Struct(">" + "16xI8x" * count)


def _run_end(values: bytes, first: int, count: int, segment: int, pos: int) -> int:
    """The end of the run from entry `first`: the entries after it in `segment` at the next positions.

    Whether entry k is in the run holds up to some k and fails after (positions grow with seqs),
    so the end is found by trying the last entry, then galloping from `first` and bisecting: a
    few lookups for a short run of an interleaved session as for a whole page.
    """
    at = LOC.unpack_from
    last_segment, _, _, last_pos = at(values, (count - 1) * LOC.size)
    if last_segment == segment and last_pos - pos == count - 1 - first:
        return count
    low, high, step = first, count - 1, 1  # entry `low` is in the run, entry `high` is not
    while low + step < high:
        probe = low + step
        probe_segment, _, _, probe_pos = at(values, probe * LOC.size)
        if probe_segment != segment or probe_pos - pos != probe - first:
            high = probe
            break
        low = probe
        step *= 2
    while high - low > 1:
        mid = (low + high) // 2
        mid_segment, _, _, mid_pos = at(values, mid * LOC.size)
        if mid_segment == segment and mid_pos - pos == mid - first:
            low = mid
        else:
            high = mid
    return high


def broken_session(index: Index, sid: str, seq: int) -> CorruptionError:
    """The error for a session unreadable from `seq` on, naming the corrupt line when one is known."""
    for entry in index.corruptions():
        if entry.sid == sid:
            return CorruptionError(
                f"the session is unreadable from seq {seq}: {entry.reason}",
                segment=segment_name(entry.segment),
                offset=entry.offset,
                sid=sid,
                seq=entry.seq or seq,
            )
    loc = index.location(sid, seq) or index.location(sid, seq - 1)
    return CorruptionError(
        f"the session's seq or hash chain breaks at seq {seq}",
        segment=segment_name(loc.segment) if loc else "?",
        offset=loc.offset if loc else -1,
        sid=sid,
        seq=seq,
    )
