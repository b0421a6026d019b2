"""The error hierarchy shared by every cairn package.

Two roots under one base: `InputError` (the caller or the data on disk is at
fault; also a `ValueError`) and `StorageError` (the machine or the log is at
fault). Messages name the segment, offset or session involved.
"""

from __future__ import annotations


class CairnError(Exception):
    """Base of every error cairn raises on purpose."""


class InputError(CairnError, ValueError):
    """Bad input: a malformed event, a bad session id, an oversized line."""


class InvalidSessionId(InputError):
    """A session id that is empty, too long, or could escape a path."""


class InvalidEvent(InputError):
    """An event the log refuses to store: it would not read back equal (see `events.codec.checked_body`).

    A field of the wrong type, a value outside its kind's rules, a non-finite
    number, a lone surrogate, an int outside 64 bits, a blob that is not in
    the store. `path` names the field the way msgspec does (`$.content[0].text`),
    or is empty when the whole event is at fault.
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        super().__init__(message)


class DecodeError(InputError):
    """A log line that cannot be turned back into an event.

    `where` names the segment and byte offset when the line came from a file.
    """

    def __init__(self, message: str, *, where: str = "") -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class CorruptLine(DecodeError):
    """Not a well-formed log line (not JSON, missing envelope fields, no newline)."""


class ChecksumMismatch(DecodeError):
    """The line's CRC-32C does not match its content."""


class UnknownKind(DecodeError):
    """The line names an event kind this version of cairn does not know."""

    def __init__(self, kind: str, *, where: str = "") -> None:
        self.kind = kind
        super().__init__(f"unknown event kind {kind!r}", where=where)


class UnsupportedVersion(DecodeError):
    """The line's schema version `v` (or a checkpoint's version) is not supported."""


class LineTooLarge(InputError):
    """An encoded line over the size limit; raised before anything is written."""


class MalformedEvent(DecodeError):
    """A well-framed line whose event body breaks its kind's schema or invariants."""
