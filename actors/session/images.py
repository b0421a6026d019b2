"""Images kept in the blob store go to the model as images, not as a note.

The log keeps any part over 256 KiB in the blob store (a screenshot easily
is), and the model-visible history (`tool_budget`) keeps such an image as
its `BlobPart`, so `cairn context` shows what was sent without the bytes.
Just before a request leaves, the session puts the image's bytes back as an
`ImagePart`. Text blobs are not touched: the model sees their preview and a
note (X1), by design.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Sequence

import msgspec

from cairn.events.errors import CairnError
from cairn.events.model import BlobPart, ImagePart, Message, Part

log = logging.getLogger("cairn.session")


def is_image_blob(part: Part) -> bool:
    return isinstance(part, BlobPart) and part.media_type.startswith("image/")


def inline_image_blobs(messages: Sequence[Message], read_blob: Callable[[str], bytes]) -> tuple[Message, ...]:
    """The messages with every image blob read back into an inline image.

    A blob that cannot be read (missing, altered: `BlobError`, or an OS
    error) stays a `BlobPart`, which adapters send as a short note; a
    warning names its hash. The same message objects come back when there is
    nothing to do, so the common case costs one scan.
    """
    out: list[Message] | None = None
    for index, message in enumerate(messages):
        content = message.content
        if isinstance(content, str) or not any(is_image_blob(part) for part in content):
            continue
        parts: list[Part] = []
        for part in content:
            if isinstance(part, BlobPart) and is_image_blob(part):
                try:
                    data = read_blob(part.sha256)
                except (CairnError, OSError) as exc:
                    log.warning(
                        "cairn: image blob %s could not be read (%s); sent as a note",
                        part.sha256,
                        type(exc).__name__,
                    )
                    parts.append(part)
                    continue
                parts.append(ImagePart(media_type=part.media_type, data=base64.b64encode(data).decode()))
            else:
                parts.append(part)
        if out is None:
            out = list(messages)
        out[index] = msgspec.structs.replace(message, content=tuple(parts))
    return tuple(messages) if out is None else tuple(out)
