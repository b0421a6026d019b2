"""Redaction of secrets from text a provider adapter hands us (error messages), before it is kept.

A host's own adapter may raise with a message that quotes a key, a bearer
token or a URL with credentials; that message goes into the log and the
turn's result. `redact` removes the secrets it is given (the configured
keys) and anything shaped like a credential:

| what                                   | becomes                         |
|----------------------------------------|---------------------------------|
| a given secret (4 chars or more)        | `[redacted]`                    |
| `Bearer <token>`, `Basic <token>`        | `Bearer [redacted]`             |
| `sk-…`, `ghp_…`, `xoxb-…`, `AKIA…`, `AIza…`, `hf_…` tokens | `[redacted]` |
| `api_key=…`, `token: …`, `password=…` (and the like) | the name, then `[redacted]` |
| `scheme://user:password@host`           | `scheme://[redacted]@host`      |

Pure: no I/O. Over-redacting an innocent word is the accepted cost.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

REDACTED = "[redacted]"
#: longest message kept from an adapter's exception
MAX_MESSAGE_CHARS = 1_000
#: environment variables whose values are keys, redacted from every adapter message
KEY_VARIABLES = ("CAIRN_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")

_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic)\s+[^\s\"',;]+")
_TOKENS = re.compile(
    r"\b(?:"
    r"sk-[A-Za-z0-9_\-]{8,}"  # OpenAI, Anthropic and look-alikes
    r"|gh[pousr]_[A-Za-z0-9]{16,}"  # GitHub
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{30,}"  # Google
    r"|hf_[A-Za-z0-9]{16,}"  # Hugging Face
    r")"
)
_NAMED = re.compile(
    r"(?i)\b((?:x-)?(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|secret|password|passwd)"
    r"[\"']?\s*[=:]\s*[\"']?)[^\s\"'&,;]+"
)
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@]+@")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` without `secrets` and without anything shaped like a credential (see the module doc)."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _AUTH_HEADER.sub(lambda match: f"{match.group(1)} {REDACTED}", text)
    text = _TOKENS.sub(REDACTED, text)
    text = _NAMED.sub(lambda match: match.group(1) + REDACTED, text)
    return _URL_CREDENTIALS.sub(lambda match: match.group(1) + REDACTED + "@", text)


def adapter_secrets(adapter: object) -> tuple[str, ...]:
    """The keys to redact from what `adapter` says: its `api_key`, and the keys in the environment.

    Read once, when a shell starts wrapping the adapter (the environment is
    the one place this module looks outside its arguments).
    """
    key = getattr(adapter, "api_key", None)
    return tuple(
        value
        for value in (key, *(os.environ.get(name) for name in KEY_VARIABLES))
        if isinstance(value, str) and value
    )


def clean_message(text: str, secrets: Iterable[str | None] = ()) -> str:
    """An adapter's message as cairn may keep it (log, turn result): redacted, then clipped."""
    text = redact(text, secrets)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"
