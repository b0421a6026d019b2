"""The scan pass: the pieces of the log, in order, into index entries, and the invalid ones judged.

Shared by recovery (`store.recovery`, which indexes what lies past the
recovery point) and by `verify` (`rebuild_through`, an index of the log up
to a point, to compare a store's own with), so that both index a line, and
judge an invalid piece, the same way: a sound line goes through the one
`IndexBuilder` path; an invalid piece followed by a valid line, or at the
end of a rolled segment, is durable corruption (recorded, its session fails
closed); only the run after the last whole piece of the last segment is a
torn tail (`split_tail`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from cairn.store.index import Index
from cairn.store.index_builder import IndexBuilder
from cairn.store.index_records import CorruptEntry, IndexMeta
from cairn.store.reader import LogLine, Progress, guess_owner, scan_log, split_tail

log = logging.getLogger("cairn.store")

_COMMIT_EVERY = 20_000


class IndexPass:
    """The scan pass: log pieces, in order, into index entries through the one `IndexBuilder` path.

    Shared by `recover` and `rebuild_through`, so that both index a line,
    and judge an invalid piece, the same way. Commits every `_COMMIT_EVERY`
    lines (entries of lines that are there: never evidence lost).
    """

    def __init__(self, index: Index, meta: IndexMeta) -> None:
        self.index = index
        self.builder = IndexBuilder(index.summary, meta)
        self.next_pos = meta.next_pos
        self.last = (meta.last_segment, meta.last_offset, meta.last_length)
        self.end = (meta.segment, meta.offset)
        self.pending: list[LogLine] = []
        self.corruptions: list[CorruptEntry] = []
        self.indexed = 0

    def flush_corrupt(self) -> None:
        for bad in self.pending:
            sid, seq = guess_owner(bad.raw)
            entry = CorruptEntry(
                segment=bad.segment, offset=bad.offset, length=bad.length, sid=sid, seq=seq, reason=bad.error
            )
            self.builder.add_corrupt(entry)
            self.corruptions.append(entry)
            log.error("cairn: corrupt line at %s (session %s): %s", bad.where, sid or "unknown", bad.error)
        self.pending.clear()

    def run(
        self,
        log_dir: Path,
        segments: list[int],
        start: tuple[int, int],
        progress: Progress | None,
        stop: tuple[int, int] | None = None,
    ) -> None:
        """Index every piece from `start` (segment, offset) to the end of `segments` (or to `stop`)."""
        self.feed(
            scan_log(
                log_dir,
                start_segment=start[0],
                start_offset=start[1],
                progress=progress,
                segments=segments,
                stop=stop,
            ),
            start[0],
        )

    def feed(self, lines: Iterable[LogLine], current: int) -> None:
        # long: one loop over every line of a rebuild, its state in locals; the branches are its line kinds
        """Index `lines`, pieces of the log in order, the first of them in segment `current`."""
        builder, pending = self.builder, self.pending
        # how many entries may come before `builder.pending` is looked at again: a sound line adds
        # at most two (its event; a corrupt entry when its body is bad), so the commits fall where a
        # look after every line puts them
        budget = _COMMIT_EVERY - builder.pending
        for line in lines:
            segment, offset, raw = line.segment, line.offset, line.raw
            length = len(raw)
            if segment != current:
                if pending:
                    self.flush_corrupt()  # invalid bytes at the end of a rolled segment are never a tail
                current = segment
            self.end = (segment, offset + length)
            env = line.envelope
            if env is None:
                if not line.framed:
                    pending.append(line)
                    continue
                if pending:
                    self.flush_corrupt()
                pending.append(line)  # framed, but the envelope is unreadable: a durable bad line
                self.flush_corrupt()
                budget = _COMMIT_EVERY - builder.pending
                continue
            if pending:
                self.flush_corrupt()
                budget = _COMMIT_EVERY - builder.pending
            record = line.record
            builder.add(
                builder.head(env.sid),
                env.seq,
                env.pos,
                env.ts,
                env.prev,
                line.digest,
                env.kind,
                record.event if record is not None else None,
                segment,
                offset,
                length,
            )
            if record is None:
                entry = CorruptEntry(
                    segment=segment,
                    offset=offset,
                    length=length,
                    sid=env.sid,
                    seq=env.seq,
                    reason=line.error,
                )
                builder.add_corrupt(entry)
                self.corruptions.append(entry)
                budget -= 1  # its corrupt entry, besides its event
            if env.pos >= self.next_pos:
                self.next_pos = env.pos + 1
            self.last = (segment, offset, length)
            self.indexed += 1
            budget -= 1
            if budget <= 0:
                if builder.pending >= _COMMIT_EVERY:
                    self.commit(self.end)
                budget = _COMMIT_EVERY - builder.pending

    def commit(self, point: tuple[int, int]) -> None:
        """Commit the entries built so far, with `point` (segment, byte offset) as the recovery point."""
        last_segment, last_offset, last_length = self.last
        self.builder.meta = IndexMeta(
            segment=point[0],
            offset=point[1],
            next_pos=self.next_pos,
            last_segment=last_segment,
            last_offset=last_offset,
            last_length=last_length,
        )
        self.index.commit(self.builder.take())

    def end_of_log(self, last_segment: int) -> list[LogLine]:
        """Judge the invalid pieces the scan ended with; return the torn tail (`split_tail`).

        Pieces at the end of a rolled segment are corruption; in the last
        segment, those up to the last whole one are corruption and keep
        their positions, the run after it is the torn tail.
        """
        pending = self.pending
        if pending and pending[0].segment != last_segment:
            self.flush_corrupt()
        corrupt, torn = split_tail(pending)
        pending[:] = corrupt
        self.next_pos += len(corrupt)
        self.flush_corrupt()
        return torn


def rebuild_through(
    root: Path,
    index: Index,
    segments: list[int],
    point: tuple[int, int],
    lines: Iterable[LogLine] | None = None,
) -> None:
    """Rebuild `index` from nothing with the lines of the log up to `point` (segment, byte offset) only.

    What an index whose recovery point is `point` must hold: `verify`
    compares a store's index with this, so lines a writer appended past the
    point (an index that lags) are no difference. Never changes the log.
    """
    index.reset()
    first = segments[0] if segments else 0
    scan = IndexPass(index, IndexMeta(segment=first, next_pos=first))
    if lines is None:
        scan.run(root / "log", [s for s in segments if s <= point[0]], (first, 0), None, stop=point)
    else:
        scan.feed(lines, first)
    torn = scan.end_of_log(point[0])
    scan.pending[:] = torn  # a point never lies past a torn tail: bytes before it were judged corrupt
    scan.flush_corrupt()
    scan.commit(point)
