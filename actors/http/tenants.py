"""Tenants of the HTTP API (issue 25 point 4): bearer tokens mapped to tenants, their limits, pure checks.

The operator writes a tenants file (`cairn serve --http ... --tenants FILE`):

    {"tenants": [
      {"name": "acme", "token_sha256": "<64 hex digits>",
       "max_live_sessions": 100, "max_message_bytes": 1048576, "turns_per_minute": 60}
    ]}

The file holds SHA-256 hashes of the tokens, never the tokens
(`printf %s "$TOKEN" | sha256sum`). A request carries `Authorization:
Bearer <token>`; its hash names the tenant (`Tenants.resolve`). A tenant's
sessions live under its own prefix in the store (`acme:s1` for its `s1`), so
it sees, streams and changes only its own: another tenant's session is the
same 404 as one that does not exist. Limits (0: none): live sessions, the
bytes of one message's body, and turns started per rolling minute; past one
the answer is 429 with `Retry-After` (a message over its size: 413).

Without a tenants file there is one tenant, unnamed, with no prefix and no
limits, and the server listens on loopback only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections import deque
from pathlib import Path

import msgspec

from cairn.events.errors import InputError

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
_HEX = re.compile(r"[0-9a-f]{64}")
#: the rolling window of `turns_per_minute`
MINUTE_MS = 60_000


class BadTenants(InputError):
    """A tenants file that cannot be used (its path, its JSON, a field), named in the message."""


class Tenant(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One tenant: its name (the prefix of its sessions), its token's hash, its limits (0: none)."""

    name: str
    token_sha256: str
    max_live_sessions: int = 0
    max_message_bytes: int = 0
    turns_per_minute: int = 0

    @property
    def prefix(self) -> str:
        """What its session ids are stored under: `name:`, or nothing for the unnamed tenant."""
        return f"{self.name}:" if self.name else ""


#: the one tenant of a server without a tenants file
NOBODY = Tenant(name="", token_sha256="")


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tenants: tuple[Tenant, ...]


def token_hash(token: str) -> str:
    """SHA-256 of a token, in hex (what the tenants file holds)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Tenants:
    """The tenants of a file, found by their token (`resolve`)."""

    def __init__(self, tenants: tuple[Tenant, ...]) -> None:
        self.tenants = tenants

    @classmethod
    def load(cls, path: str | Path) -> Tenants:
        """Read and check a tenants file; `BadTenants` naming what is wrong."""
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise BadTenants(f"cannot read the tenants file {path}: {exc.strerror or exc}") from None
        try:
            parsed = msgspec.json.decode(raw, type=_File)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise BadTenants(f"the tenants file {path}: {exc}") from None
        return cls.checked(parsed.tenants, str(path))

    @classmethod
    def checked(cls, tenants: tuple[Tenant, ...], where: str = "tenants") -> Tenants:
        if not tenants:
            raise BadTenants(f"{where}: no tenants")
        names, hashes = set(), set()
        for tenant in tenants:
            if not _NAME.fullmatch(tenant.name):
                raise BadTenants(f"{where}: a tenant name is 1-32 of [a-z0-9-], not {tenant.name!r}")
            if not _HEX.fullmatch(tenant.token_sha256):
                raise BadTenants(f"{where}: {tenant.name}'s token_sha256 is 64 lowercase hex digits")
            limits = (tenant.max_live_sessions, tenant.max_message_bytes, tenant.turns_per_minute)
            if any(limit < 0 for limit in limits):
                raise BadTenants(f"{where}: {tenant.name}'s limits are 0 (none) or positive")
            if tenant.name in names or tenant.token_sha256 in hashes:
                raise BadTenants(f"{where}: {tenant.name}: names and token hashes are each used once")
            names.add(tenant.name)
            hashes.add(tenant.token_sha256)
        return cls(tenants)

    def resolve(self, authorization: str | None) -> Tenant | None:
        """The tenant whose token the `Authorization` header carries (`Bearer <token>`), else None.
        Every hash is compared, in constant time each, so the time says nothing of which matched."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = token_hash(token.strip())
        found = None
        for tenant in self.tenants:
            if hmac.compare_digest(tenant.token_sha256, digest):
                found = tenant
        return found


class TurnRate:
    """Turns a tenant started in the last minute (a rolling window); pure apart from its own deque."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._starts: deque[int] = deque()

    def admit(self, now_ms: int) -> int:
        """0 and the start counted when one more turn fits the window at `now_ms`; else the whole
        seconds until one does (for `Retry-After`, at least 1)."""
        if self.per_minute <= 0:
            return 0
        while self._starts and self._starts[0] <= now_ms - MINUTE_MS:
            self._starts.popleft()
        if len(self._starts) < self.per_minute:
            self._starts.append(now_ms)
            return 0
        return max(1, -(-(self._starts[0] + MINUTE_MS - now_ms) // 1000))


def example(name: str, token: str) -> str:
    """A tenants file with one tenant, as JSON (for the docs and tests)."""
    entry = {"name": name, "token_sha256": token_hash(token), "max_live_sessions": 0}
    return json.dumps({"tenants": [entry]}, indent=2)
