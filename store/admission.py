"""What may be appended: a call's arguments, its large parts moved to blobs, each event checked and encoded.

An append call is refused whole, before anything of it is written, unless
it passes two checks:

- its arguments (`Admission.check_args`, raised at once on the caller's
  thread): the session id, `expected_seq` and `ts_ms`, and that every item
  is an instance of one of the event classes themselves (a subclass would
  encode another tag);
- its events: each must read back equal (`events.body_check`), and every
  blob part it names must be a blob of this store of its size. Only then
  are its large parts written to the blob store (fsynced) and replaced by
  blob parts.

The second check usually runs on the journal's writer, which frames the
calls in batches (`store.batch_framing`, with `checked_event`: its refusals
read as the caller's thread words them). Under hundreds of appending
threads the same work costs several times more on a caller's thread (each
runs with cold caches, and all it does before it blocks delays the next
caller's wake-up in the acknowledgement relay): the store bench's
256-session appends measured 0.357 of the thread-wake ceiling with the whole
check on the callers, 0.391 with only the encoding left there (medians of 8
alternating runs), and 0.440 with none of it. What needs I/O stays with the
caller: a call that may move a part to the blob store, or names a blob part,
is checked whole on the caller's thread (`Admission.admit`).

Refusals are `InvalidSessionId`, `InputError`, or `InvalidEvent` naming
the event's index in the call and the field's `$.path`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from cairn.events.body_check import checked_body
from cairn.events.codec import ts_in_range, validate_session_id
from cairn.events.errors import InputError, InvalidEvent
from cairn.events.kinds import TAG_OF, EventBase, ToolResult, UserMessage
from cairn.events.model import BlobPart
from cairn.store.blobs import BLOB_CARRIERS, BlobStore, externalize, oversized
from cairn.store.errors import BlobError

#: how many valid session ids `Admission.check_args` remembers before it starts again
_VALID_SIDS_KEPT = 65_536


class Admission:
    """The checks of append calls for one store (see the module doc).

    `put_blob` writes a blob and returns its SHA-256 (the journal's, which
    turns an I/O error into the store's failure). Thread-safety: both steps
    run on any caller's thread, at once (they read only the blob store).
    """

    def __init__(
        self, root: Path, blobs: BlobStore, threshold: int, put_blob: Callable[[bytes], str]
    ) -> None:
        self.root = root
        self._blobs = blobs
        self._blob_threshold = threshold
        self._put_blob = put_blob
        #: session ids seen valid (a set lookup instead of the pattern, on every append's thread)
        self._valid_sids: set[str] = set()

    def check_args(
        self, sid: str, events: Sequence[EventBase], expected_seq: int, ts_ms: int | None
    ) -> list[EventBase]:
        """The call's events, its arguments checked (`InvalidSessionId`, `InputError`, `InvalidEvent`)."""
        if type(sid) is not str or sid not in self._valid_sids:
            validate_session_id(sid)
            if len(self._valid_sids) >= _VALID_SIDS_KEPT:
                self._valid_sids.clear()
            self._valid_sids.add(sid)
        if type(expected_seq) is not int or expected_seq < 0:
            raise InputError(f"expected_seq must be an int >= 0, got {expected_seq!r}")
        if ts_ms is not None and (type(ts_ms) is not int or not ts_in_range(ts_ms)):
            raise InputError(f"ts_ms must be None or an int in 0..2**63-1 (unix ms), got {ts_ms!r}")
        if type(events) is not list and (
            isinstance(events, EventBase | str | bytes) or not isinstance(events, Iterable)
        ):
            raise InvalidEvent(f"events must be a sequence of events, got {type(events).__name__}")
        listed: list[EventBase] = list(events)
        tags = TAG_OF
        for event in listed:
            if type(event) not in tags:  # the event classes themselves: a subclass would encode another tag
                index = next(i for i, item in enumerate(listed) if type(item) not in tags)
                raise InvalidEvent(f"event {index} of the call: not an event: {type(event).__name__}")
        return listed

    def admit(self, events: list[EventBase]) -> tuple[list[EventBase], list[bytes] | None]:
        """What the caller's thread does to a call's events: the events and their bodies, or None for
        the bodies when the writer is to encode and check them.

        The common call leaves both to the writer (`store.batch_framing`), in
        its batch, where they cost a fraction of what they cost on one of
        hundreds of appending threads. A call that may move a part to the
        blob store (a text or image part over the threshold) or name a blob
        part is checked here whole (`encode`): blob I/O never runs on the
        writer. A call this cannot look into (its content not a sequence of
        parts) is checked here too, so its refusal is raised on this thread.
        """
        threshold = self._blob_threshold
        try:
            for event in events:
                if type(event) in BLOB_CARRIERS:
                    for part in event.content:  # type: ignore[attr-defined]
                        if isinstance(part, BlobPart) or oversized(part, threshold):
                            return self.encode(events)
        except Exception:  # content that is not a sequence of parts: `encode` names the field
            return self.encode(events)
        return events, None

    def encode(self, events: list[EventBase]) -> tuple[list[EventBase], list[bytes]]:
        """Check every event of the call, move its large parts to blobs: the events as a read gives them
        back, and each one's body.

        Raises `InvalidEvent` for the first bad event, before any blob of the
        call is written; a blob store's I/O error raises the store's failure
        (`put_blob`). `events` is the list `check_args` returned, updated in place.
        """
        bodies: list[bytes] = []
        threshold = self._blob_threshold
        large = False
        for index, event in enumerate(events):
            events[index], body = self._checked_event(index, event)
            bodies.append(body)
            if len(body) > threshold:  # only then can a part be over it
                large = True
        if large:
            for index, body in enumerate(bodies):
                if len(body) > threshold:
                    moved = externalize(events[index], self._put_blob, threshold)
                    if moved is not events[index]:
                        events[index], bodies[index] = checked_body(moved)
        return events, bodies

    def _checked_event(self, index: int, event: EventBase) -> tuple[EventBase, bytes]:
        """`checked_event`, and every blob part it names present; InvalidEvent naming the event's index."""
        stored, body = checked_event(index, event)
        if type(stored) in BLOB_CARRIERS:
            try:
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


def checked_event(index: int, event: EventBase) -> tuple[EventBase, bytes]:
    """`checked_body` of event `index` of a call, whose refusal names the index: on the writer for the
    calls their callers left to it (`store.batch_framing`), on a caller's thread for the others."""
    try:
        return checked_body(event)
    except InvalidEvent as exc:
        raise InvalidEvent(f"event {index} of the call: {exc}", path=exc.path) from None
    except Exception as exc:  # anything else a value does when checked is its own call's refusal
        raise InvalidEvent(
            f"event {index} of the call cannot be checked ({type(exc).__name__}: {exc})"
        ) from None
