"""Session ids as NATS subject tokens and key-value keys: one reversible encoding for both.

A session id (`events.codec.validate_session_id`: 1-128 of `A-Za-z0-9._:@+=-`,
no `..`) may hold characters that NATS gives a meaning: `.` separates
subject tokens and KV key parts, and `:`, `@`, `+` are not allowed in KV
keys. `session_token` keeps letters, digits, `_` and `-` as they are and
writes every other byte of the id's UTF-8 as `=XX` (upper-case hex), so
`demo-1` stays `demo-1`, `a.b` becomes `a=2Eb`, and `=` itself is `=3D`.
The result is a single subject token and a valid KV key, never a
wildcard (`*`, `>`), and `session_of_token` inverts it exactly.

An id that `validate_session_id` refuses never reaches NATS: the encoding
refuses it with the same typed error (`InvalidSessionId`).
"""

from __future__ import annotations

import functools
import re

from cairn.events.codec import validate_session_id
from cairn.events.errors import InvalidSessionId

_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_TOKEN_RE = re.compile(r"(?:[A-Za-z0-9_-]|=[0-9A-F]{2})+")

#: the subject prefix of every session's events in the events stream
EVENTS_SUBJECT_PREFIX = "cairn.events"


@functools.lru_cache(maxsize=8_192)  # on every append: the sessions a host writes to are few and hot
def session_token(sid: str) -> str:
    """The subject token and KV key of session `sid` (refused with InvalidSessionId if `sid` is bad)."""
    validate_session_id(sid)
    return "".join(chr(b) if b in _PLAIN else f"={b:02X}" for b in sid.encode("utf-8"))


def session_of_token(token: str) -> str:
    """The session id that `session_token` encoded as `token`."""
    if not _TOKEN_RE.fullmatch(token):
        raise InvalidSessionId(f"not an encoded session id: {token!r}")
    out = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "=":
            out.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(token[i]))
            i += 1
    sid = out.decode("utf-8", errors="strict")
    if session_token(sid) != token:  # `=61` for `a`: not what the encoder writes
        raise InvalidSessionId(f"not the canonical encoding of a session id: {token!r}")
    return sid


def events_subject(sid: str) -> str:
    """The subject that holds session `sid`'s events: `cairn.events.<token>`."""
    return f"{EVENTS_SUBJECT_PREFIX}.{session_token(sid)}"
