"""The read side of `JetStreamJournal`: read, load from the checkpoint pointer, replay, listings.

Every read goes through direct gets (`reads.DirectReader`) and every line
through the local log's checks (`lines.decode_page`). `load` starts from the
session's checkpoint pointer when it names a real checkpoint of the session
(checked by reading that one line), else replays from seq 1; either way it
leaves the pointer naming the latest checkpoint it saw (rebuilding a
missing or stale one), and its result equals `replay_full`.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import msgspec
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from cairn.events.codec import Record, chain_digest, decode_line, validate_session_id
from cairn.events.errors import DecodeError
from cairn.events.kinds import CheckpointCommitted, SessionStarted
from cairn.events.state import Replayer, SessionState
from cairn.store.index_builder import IndexBuilder
from cairn.store.index_records import CheckpointRef, IndexMeta, SessionSummary
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.lines import corrupt, decode_page
from cairn.store.jetstream.names import session_of_token, session_token
from cairn.store.jetstream.pointer import Pointer, advanced, get_pointer, put_pointer
from cairn.store.jetstream.reads import PAGE_MSGS, DirectReader, Stored
from cairn.store.jetstream.writer import Head, head_of, log

T = TypeVar("T")
_MAX_SEQ = (1 << 63) - 1
_summary_decoder = msgspec.json.Decoder(SessionSummary)


class SessionReads:
    """Reads of a JetStream store; the journal supplies `_call` (run a coroutine on its loop)."""

    def __init__(
        self, reader: DirectReader, pointers: KeyValue, js: JetStreamContext, layout: Layout
    ) -> None:
        self._reader = reader
        self._pointers = pointers
        self._js = js
        self._layout = layout
        self._stream = layout.stream

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        raise NotImplementedError

    @property
    def messages_read(self) -> int:
        """Messages read from the stream so far (direct gets), for tests and benches."""
        return self._reader.messages

    def _head(self, sid: str) -> Head:
        return head_of(self._call(self._reader.last(self._layout.subject(sid))))

    def last_seq(self, sid: str) -> int:
        """The session's highest seq (0 when unknown): one read of its last message."""
        return self._head(validate_session_id(sid)).last_seq

    def _pages(
        self,
        sid: str,
        from_seq: int,
        to_seq: int,
        *,
        chain: bool,
        head: Head | None = None,
        start_stream: int | None = None,
    ) -> Iterator[tuple[list[Record], list[Stored]]]:
        """The session's records from_seq..to_seq in checked pages, with the messages that hold them."""
        subject = self._layout.subject(sid)
        head = head if head is not None else self._head(sid)
        to_seq = min(to_seq, head.last_seq)
        from_seq = max(1, from_seq)
        if from_seq > to_seq:
            return
        if start_stream is None:
            start_stream = 1
            if from_seq > 1:
                found = self._call(self._reader.locate(subject, from_seq, 1, head.stream_seq))
                if found is None:
                    raise corrupt(
                        Stored(head.stream_seq, subject, b""), f"seq {from_seq} is missing", sid, from_seq
                    )
                start_stream = found.stream_seq
        seq, prev = from_seq, None
        while seq <= to_seq:
            page = self._call(self._reader.page(subject, start_stream, min(PAGE_MSGS, to_seq - seq + 1)))
            if not page:
                raise corrupt(Stored(start_stream, subject, b""), f"seq {seq} is missing", sid, seq)
            records, prev = decode_page(sid, page, seq, prev, chain=chain)
            yield records, page
            seq += len(records)
            start_stream = page[-1].stream_seq + 1

    def read(self, sid: str, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Record]:
        """The session's records with from_seq <= seq <= to_seq, checked (chain included), in seq order."""
        validate_session_id(sid)
        last = _MAX_SEQ if to_seq is None else to_seq

        def records() -> Iterator[Record]:
            for page, _ in self._pages(sid, from_seq, last, chain=True):
                yield from page

        return records()

    def replay_full(self, sid: str) -> SessionState:
        """The session's state folded from seq 1 (the reference for `load`)."""
        validate_session_id(sid)
        replayer = Replayer()
        fed = False
        for records, _ in self._pages(sid, 1, _MAX_SEQ, chain=False):
            replayer.feed(records)
            fed = True
        return replayer.state() if fed else SessionState(sid=sid)

    def load(self, sid: str) -> SessionState:
        """The session's state from its latest checkpoint on (O(tail)); equal to `replay_full`."""
        validate_session_id(sid)
        head = self._head(sid)
        if head.last_seq == 0:
            return SessionState(sid=sid)
        token = session_token(sid)
        stored = self._call(get_pointer(self._pointers, token))
        start = self._usable_start(sid, stored, head)
        replayer = Replayer()
        pointer = Pointer()
        from_seq, from_stream = 1, 1
        if start is not None and stored is not None:
            pointer = stored
            info, from_seq, from_stream = start
            if info is not None:
                replayer.feed([info])
        for records, page in self._pages(
            sid, from_seq, head.last_seq, chain=False, head=head, start_stream=from_stream
        ):
            replayer.feed(records)
            pointer = advanced(pointer, records, [m.stream_seq for m in page])
        if pointer != stored:
            try:
                self._call(put_pointer(self._pointers, token, pointer))
            except Exception as exc:
                log.warning("cairn: the checkpoint pointer of %s was not rebuilt: %s", sid, exc)
        return replayer.state()

    def _usable_start(
        self, sid: str, pointer: Pointer | None, head: Head
    ) -> tuple[Record | None, int, int] | None:
        """Where load may start: the info record, the checkpoint's seq and stream seq (None: replay all)."""
        if pointer is None or not 1 < pointer.checkpoint_seq <= head.last_seq:
            return None
        checkpoint = self._line_at(sid, pointer.checkpoint_stream, pointer.checkpoint_seq)
        if checkpoint is None or not isinstance(checkpoint.event, CheckpointCommitted):
            return None
        info = None
        if 0 < pointer.info_seq < pointer.checkpoint_seq:
            info = self._line_at(sid, pointer.info_stream, pointer.info_seq)
            if info is None or not isinstance(info.event, SessionStarted):
                return None
        return info, pointer.checkpoint_seq, pointer.checkpoint_stream

    def _line_at(self, sid: str, stream_seq: int, seq: int) -> Record | None:
        """The record at `stream_seq` if it is `sid`'s line of seq `seq`, else None."""
        found = self._call(self._reader.at(stream_seq))
        if found is None or found.subject != self._layout.subject(sid):
            return None
        try:
            record = decode_line(found.data)
        except DecodeError:
            return None
        return record if record.sid == sid and record.seq == seq else None

    def checkpoints(self, sid: str) -> list[CheckpointRef]:
        """The session's `checkpoint-committed` events, by epoch (a read of the whole session)."""
        validate_session_id(sid)
        refs = [
            CheckpointRef(record.event.epoch, record.seq, record.pos)
            for records, _ in self._pages(sid, 1, _MAX_SEQ, chain=False)
            for record in records
            if isinstance(record.event, CheckpointCommitted)
        ]
        return sorted(refs, key=lambda ref: ref.epoch)

    def session(self, sid: str) -> SessionSummary | None:
        """The session's full summary, folded from all its lines as the local index folds them."""
        validate_session_id(sid)
        builder = IndexBuilder(lambda _: None, IndexMeta())
        running = builder.head(sid)
        for records, page in self._pages(sid, 1, _MAX_SEQ, chain=True):
            for record, stored in zip(records, page, strict=True):
                builder.add(
                    running,
                    record.seq,
                    record.pos,
                    record.ts,
                    record.prev,
                    chain_digest(stored.data),
                    record.kind,
                    record.event,
                    0,
                    0,
                    0,
                )
        if running.last_seq == 0:
            return None
        return _summary_decoder.decode(msgspec.json.encode(running))

    def session_ids(self) -> list[str]:
        """Every session with events, in id order (one stream-info request)."""
        info = self._call(self._js.stream_info(self._stream, subjects_filter=self._layout.subjects))
        subjects = info.state.subjects or {}
        cut = len(self._layout.prefix) + 1
        return sorted(session_of_token(subject[cut:]) for subject in subjects)

    def sessions(self) -> Iterator[SessionSummary]:
        """Every session's summary, in id order: sid, last seq, head, updated ts (one read each).

        The folded fields (model, counts, usage, checkpoints) need a read of
        the whole session: `session(sid)` gives them.
        """
        for sid in self.session_ids():
            head = self._head(sid)
            if head.last_seq:
                yield SessionSummary(
                    sid=sid,
                    last_seq=head.last_seq,
                    head=head.digest,
                    last_pos=head.last_seq - 1,
                    updated_ts=head.ts,
                    events=head.last_seq,
                )
