"""The content-addressed blob store for large message parts.

Disk contract: `<root>/blobs/<2 hex>/<62 hex>` holds the bytes whose SHA-256
is the 64 hex digits of its path: UTF-8 text for a text part, the decoded
bytes for a base64 image. A blob is written to a temporary name in its
directory, fsynced, renamed into place, and the directory fsynced (and the
parent when the directory is new), all before the event that names it is
appended; so an event in the log never names a blob that is not durable.
Blobs are immutable and never deleted by cairn; a crash can leave a `*.tmp`
file behind, which is ignored. Directories are made 0700 and files 0600,
and none is reached through a link (a link in their place is an
`UnexpectedEntry` on write, a `BlobError` on read).

Which parts go to blobs is decided by `externalize`: any text or image part
of a `user-message` or `tool-result` whose JSON encoding is over the
threshold (256 KiB) becomes a `BlobPart` (hash, size, media type, characters
and, for text, a 2,000-character preview).

Thread-safety: `put` and `get` may run on any thread at once; two threads
writing the same blob race harmlessly (same bytes, atomic rename).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec

from cairn.events.kinds import EventBase, ToolResult, UserMessage
from cairn.events.model import BlobPart, ImagePart, Part, TextPart
from cairn.store.errors import BlobError, UnexpectedEntry
from cairn.store.files import check_dir, open_file, private_dir, read_file
from cairn.store.segments import FsyncFn, fsync_dir, write_all

BLOB_THRESHOLD = 256 * 1024
PREVIEW_CHARS = 2000
_SHA_RE = re.compile(r"[0-9a-f]{64}")  # with fullmatch (`$` matches before a final newline)
_part_encoder = msgspec.json.Encoder()


class BlobStore:
    """Content-addressed files under `<root>/blobs` (see the module doc)."""

    def __init__(self, root: Path, *, fsync: FsyncFn = os.fsync) -> None:
        self.dir = root / "blobs"
        self._fsync = fsync

    def path(self, sha256: str) -> Path:
        if not _SHA_RE.fullmatch(sha256):
            raise BlobError(f"not a SHA-256 hex digest: {sha256[:80]!r}")
        return self.dir / sha256[:2] / sha256[2:]

    def put(self, data: bytes) -> str:
        """Store `data` durably (file and directory fsynced); return its SHA-256."""
        sha = hashlib.sha256(data).hexdigest()
        final = self.path(sha)
        new_dirs = [d for d in (self.dir, final.parent) if private_dir(d)]
        try:
            st = os.lstat(final)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISREG(st.st_mode) and st.st_size == len(data):
                return sha
        tmp = final.parent / f"{final.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd, _ = open_file(tmp, os.O_WRONLY | os.O_TRUNC, create=True)
        try:
            write_all(fd, data)
            self._fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        fsync_dir(final.parent, self._fsync)
        for made in reversed(new_dirs):
            fsync_dir(made.parent, self._fsync)
        return sha

    def get(self, sha256: str) -> bytes:
        """The blob's bytes, checked against its hash (BlobError if missing or altered)."""
        path = self.path(sha256)
        try:
            if not (check_dir(self.dir) and check_dir(path.parent)):
                raise BlobError(f"blob {sha256} is missing ({path})")
            data = read_file(path)
        except UnexpectedEntry as exc:
            raise BlobError(f"blob {sha256} cannot be read: {exc}") from None
        if data is None:
            raise BlobError(f"blob {sha256} is missing ({path})")
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise BlobError(f"blob {sha256} is altered: its content hashes to {actual} ({path})")
        return data

    def problem(self, sha256: str, size: int) -> str | None:
        """Why the blob named (sha256, size) is not sound, or None when it is."""
        try:
            data = self.get(sha256)
        except BlobError as exc:
            return str(exc)
        if len(data) != size:
            return f"blob {sha256} has {len(data)} bytes, the event says {size}"
        return None


#: the event classes whose content parts may go to the blob store (others pass through as they are)
BLOB_CARRIERS: frozenset[type[EventBase]] = frozenset({UserMessage, ToolResult})


def externalize(event: EventBase, put: Callable[[bytes], str], threshold: int = BLOB_THRESHOLD) -> EventBase:
    """The event with every oversized part moved to a blob via `put` (else the same object)."""
    if not isinstance(event, UserMessage | ToolResult):
        return event
    content = event.content
    if not any(oversized(part, threshold) for part in content):
        return event
    parts: list[Part] = []
    for part in content:
        parts.append(_to_blob(part, put) if oversized(part, threshold) else part)
    return msgspec.structs.replace(event, content=tuple(parts))


def blob_refs(event: EventBase) -> list[BlobPart]:
    """The blob parts an event names."""
    if isinstance(event, UserMessage | ToolResult):
        return [part for part in event.content if isinstance(part, BlobPart)]
    return []


def oversized(part: Part, threshold: int) -> bool:
    """Whether `externalize` moves this part to the blob store."""
    if isinstance(part, TextPart):
        if len(part.text) * 6 + 32 <= threshold:  # no character encodes to more than 6 bytes
            return False
    elif isinstance(part, ImagePart):
        if not part.data or len(part.data) + len(part.url) + len(part.media_type) + 64 <= threshold:
            return False
    else:
        return False
    return len(_part_encoder.encode(part)) > threshold


def _to_blob(part: Part, put: Callable[[bytes], str]) -> Part:
    if isinstance(part, TextPart):
        data = part.text.encode()
        return BlobPart(
            sha256=put(data),
            size=len(data),
            media_type="text/plain",
            chars=len(part.text),
            preview=part.text[:PREVIEW_CHARS],
        )
    if isinstance(part, ImagePart) and not part.url:
        try:
            data = base64.b64decode(part.data, validate=True)
        except (binascii.Error, ValueError):
            return part  # not base64: kept inline as it is
        return BlobPart(sha256=put(data), size=len(data), media_type=part.media_type)
    return part
