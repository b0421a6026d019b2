"""Large message parts on the cluster: the JetStream object store, content-addressed like the local one.

An object is named by the SHA-256 (hex) of its bytes, as a `BlobPart`
names it; it is written (replicated, acknowledged) before the event that
names it is published, so an event never names a blob the cluster does
not hold. Objects are immutable: a put of a present name is skipped.
"""

from __future__ import annotations

import hashlib
import re

from nats.js.errors import NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from cairn.store.errors import BlobError

_SHA_RE = re.compile(r"[0-9a-f]{64}")


def _checked(sha256: str) -> str:
    if not _SHA_RE.fullmatch(sha256):
        raise BlobError(f"not a SHA-256 hex digest: {sha256[:80]!r}")
    return sha256


async def put_blob(store: ObjectStore, data: bytes) -> str:
    """Store `data` (once) and return its SHA-256."""
    sha = hashlib.sha256(data).hexdigest()
    if await blob_size(store, sha) == len(data):
        return sha
    await store.put(sha, data)
    return sha


async def blob_size(store: ObjectStore, sha256: str) -> int | None:
    """The size of the stored blob, or None when there is none."""
    try:
        info = await store.get_info(_checked(sha256))
    except (ObjectNotFoundError, NotFoundError):
        return None
    return info.size


async def get_blob(store: ObjectStore, sha256: str) -> bytes:
    """The blob's bytes, checked against its name (`BlobError` if missing or altered)."""
    try:
        result = await store.get(_checked(sha256))
    except (ObjectNotFoundError, NotFoundError):
        raise BlobError(f"blob {sha256} is missing from the cluster") from None
    data = bytes(result.data or b"")
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise BlobError(f"blob {sha256} is altered: its content hashes to {actual}")
    return data
