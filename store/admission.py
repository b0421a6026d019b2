"""What may be appended: a call's arguments, its large parts moved to blobs, each event checked.

An append call is refused whole, before anything of it is written, unless
it passes two checks:

- on the caller's thread (`Admission.prepare`): the session id,
  `expected_seq` and `ts_ms`, and that every item is an instance of one of
  the event classes themselves (a subclass would encode another tag). A
  call that may hold a part for the blob store is checked whole there
  (below), then its large parts are written to the blob store (fsynced) and
  replaced by blob parts;
- on the writer thread (`Admission.check_call`), for every event not
  checked yet: it must read back equal (`events.body_check.checked_body`),
  and every blob part it names must be a blob of this store of its size.

Refusals are `InvalidSessionId`, `InputError`, or `InvalidEvent` naming
the event's index in the call and the field's `$.path`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from cairn.events.body_check import checked_body
from cairn.events.codec import validate_session_id
from cairn.events.errors import InputError, InvalidEvent
from cairn.events.kinds import TAG_OF, EventBase, ToolResult, UserMessage
from cairn.events.model import BlobPart, ImagePart, TextPart
from cairn.store.blobs import BLOB_CARRIERS, BlobStore, externalize
from cairn.store.errors import BlobError

_MAX_INT64 = (1 << 63) - 1


class Admission:
    """The checks of append calls for one store (see the module doc).

    `put_blob` writes a blob and returns its SHA-256 (the journal's, which
    turns an I/O error into the store's failure). Thread-safety: `prepare`
    runs on any caller's thread, `check_call` on the writer thread only.
    """

    def __init__(
        self, root: Path, blobs: BlobStore, threshold: int, put_blob: Callable[[bytes], str]
    ) -> None:
        self.root = root
        self._blobs = blobs
        self._blob_threshold = threshold
        self._put_blob = put_blob

    def prepare(
        self, sid: str, events: Sequence[EventBase], expected_seq: int, ts_ms: int | None
    ) -> tuple[list[EventBase], list[bytes | None]]:
        """Runs on the caller's thread: the call's events, and their bodies where already checked (else None).

        Raises `InvalidSessionId`, `InputError` or `InvalidEvent` (nothing is
        queued then); writes the blobs of a call that holds large parts.
        """
        validate_session_id(sid)
        if type(expected_seq) is not int or expected_seq < 0:
            raise InputError(f"expected_seq must be an int >= 0, got {expected_seq!r}")
        if ts_ms is not None and (type(ts_ms) is not int or not 0 <= ts_ms <= _MAX_INT64):
            raise InputError(f"ts_ms must be None or an int in 0..2**63-1 (unix ms), got {ts_ms!r}")
        if type(events) is not list and (
            isinstance(events, EventBase | str | bytes) or not isinstance(events, Iterable)
        ):
            raise InvalidEvent(f"events must be a sequence of events, got {type(events).__name__}")
        prepared: list[EventBase] = list(events)
        # None: not checked yet. The writer checks each event (`check_call`), warm and batched;
        # a call that may hold a part for the blob store is checked here, all of it, before
        # any of its blobs is written.
        bodies: list[bytes | None] = [None] * len(prepared)
        threshold = self._blob_threshold
        blobs = False
        for index, event in enumerate(prepared):
            kind = type(event)
            if kind not in TAG_OF:  # the event classes themselves: a subclass would encode another tag
                raise InvalidEvent(f"event {index} of the call: not an event: {kind.__name__}")
            if kind in BLOB_CARRIERS and not blobs:
                blobs = _may_hold_a_blob_part(event, threshold)
        if blobs:
            for index, event in enumerate(prepared):
                prepared[index], bodies[index] = self._checked_event(index, event)
            for index, body in enumerate(bodies):
                if body is not None and len(body) > threshold:  # only then can a part be over it
                    moved = externalize(prepared[index], self._put_blob, threshold)
                    if moved is not prepared[index]:
                        prepared[index], bodies[index] = checked_body(moved)
        return prepared, bodies

    def _checked_event(self, index: int, event: EventBase) -> tuple[EventBase, bytes]:
        """`checked_body`, and every blob part it names present; InvalidEvent naming the event's index."""
        try:
            stored, body = checked_body(event)
            if type(stored) in BLOB_CARRIERS:
                self._check_blob_parts(stored)
        except InvalidEvent as exc:
            raise InvalidEvent(f"event {index} of the call: {exc}", path=exc.path) from None
        return stored, body

    def _check_blob_parts(self, event: EventBase) -> None:
        """Refuse a blob part (of a checked event) that names no blob of this store of its size.

        Blob parts are written by `externalize`, or copied by a caller from an
        earlier event: one that names a missing blob would be acknowledged and
        then reported by `verify`. A stat, not a re-hash (blobs are immutable).
        """
        assert isinstance(event, UserMessage | ToolResult)
        for position, part in enumerate(event.content):
            if type(part) is BlobPart:
                try:
                    present = self._blobs.path(part.sha256).stat().st_size == part.size
                except (BlobError, OSError):
                    present = False
                if not present:
                    raise InvalidEvent(
                        f"no {part.size}-byte blob {part.sha256} in the store at {self.root}",
                        path=f"$.content[{position}]",
                    )

    def check_call(self, events: list[EventBase], bodies: list[bytes | None]) -> None:
        """Runs on the writer thread: check each event of the call `prepare` left unchecked.

        Raises InvalidEvent for the first bad one (the call is then refused
        whole, nothing of it written). Here rather than on the caller's thread
        because there it would run cold: with hundreds of appending threads,
        each switch evicts the caches, and the same encode and decode cost a
        caller several times what they cost the writer, which runs them back
        to back.
        """
        check = checked_body
        carriers = BLOB_CARRIERS
        for index, body in enumerate(bodies):
            if body is None:
                try:
                    stored, bodies[index] = check(events[index])
                    if type(stored) in carriers:
                        self._check_blob_parts(stored)
                except InvalidEvent as exc:
                    raise InvalidEvent(f"event {index} of the call: {exc}", path=exc.path) from None
                events[index] = stored


def _may_hold_a_blob_part(event: EventBase, threshold: int) -> bool:
    """Whether `externalize` might move a part of this unchecked event: a cheap superset of its test.

    A part's JSON is at most six bytes a character plus its keys, so a part
    whose strings are short enough cannot be over the threshold. (Exact
    types and no getattr defaults: a missing attribute costs an exception.)
    """
    content = event.content  # type: ignore[attr-defined]  # a blob carrier
    if type(content) is not tuple:  # not checked yet: the writer refuses anything but a tuple
        return False
    for part in content:
        kind = type(part)
        if kind is TextPart:
            values: tuple[object, ...] = (part.text,)
        elif kind is ImagePart:
            values = (part.data, part.url, part.media_type)
        else:
            continue
        chars = sum(len(value) for value in values if type(value) is str)
        if chars * 6 + 64 > threshold:
            return True
    return False
