"""Tenants of the HTTP API (issue 25 point 4): bearer tokens mapped to tenants, their limits, pure checks.

The operator writes a tenants file (`cairn serve --http ... --tenants FILE`):

    {"tenants": [
      {"name": "acme", "token_sha256": "<64 hex digits>",
       "max_live_sessions": 100, "max_message_bytes": 1048576, "turns_per_minute": 60,
       "message_bytes_per_minute": 16777216}
    ]}

The file holds SHA-256 hashes of the tokens, never the tokens
(`printf %s "$TOKEN" | sha256sum`). A request carries `Authorization:
Bearer <token>`; its hash names the tenant (`Tenants.resolve`). A tenant's
sessions live under its own prefix in the store (`acme:s1` for its `s1`), so
it sees, streams and changes only its own: another tenant's session is the
same 404 as one that does not exist. Limits (0: none): live sessions, turns
started per rolling minute, the bytes of message bodies sent per rolling
minute, and the bytes of one message's body. Past one of the first three the
answer is 429 with `Retry-After`, the seconds until the tenant's live sessions
may have left or until enough of its last minute has. A single body larger
than `max_message_bytes` (or than the whole `message_bytes_per_minute`) is 413
without it: no wait would make that message fit (RFC 9110 §15.5.14).

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
#: the rolling window of `turns_per_minute` and `message_bytes_per_minute`
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
    message_bytes_per_minute: int = 0

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
            limits = (
                tenant.max_live_sessions,
                tenant.max_message_bytes,
                tenant.turns_per_minute,
                tenant.message_bytes_per_minute,
            )
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


class RollingQuota:
    """What a tenant spent in the last minute (turns started, message bytes), as a rolling window;
    pure apart from its own deque. `wait_s` asks, `take` spends: a caller checking two quotas asks
    both before it spends either, so a refused request costs nothing."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._spent: deque[tuple[int, int]] = deque()  # (at_ms, amount), oldest first
        self._total = 0

    def wait_s(self, now_ms: int, amount: int = 1) -> int:
        """0 when `amount` more fits the window at `now_ms` (always, without a limit); else the whole
        seconds until enough of the window has left that it does (for `Retry-After`, at least 1).
        An amount over the whole limit never fits: the caller refuses it before (ValueError here)."""
        if self.per_minute <= 0:
            return 0
        if amount > self.per_minute:
            raise ValueError(f"{amount} can never fit a limit of {self.per_minute} per minute")
        while self._spent and self._spent[0][0] <= now_ms - MINUTE_MS:
            self._total -= self._spent.popleft()[1]
        over = self._total + amount - self.per_minute
        if over <= 0:
            return 0
        for at_ms, spent in self._spent:  # the window frees `over` once these have left it
            over -= spent
            if over <= 0:
                return max(1, -(-(at_ms + MINUTE_MS - now_ms) // 1000))
        raise AssertionError("unreachable: the window's total covers any excess")  # pragma: no cover

    def take(self, now_ms: int, amount: int = 1) -> None:
        """Count `amount` spent at `now_ms` (after `wait_s` said 0)."""
        if self.per_minute > 0:
            self._spent.append((now_ms, amount))
            self._total += amount

    def admit(self, now_ms: int, amount: int = 1) -> int:
        """`wait_s`, and `take` when it is 0: one quota asked and spent at once."""
        wait = self.wait_s(now_ms, amount)
        if not wait:
            self.take(now_ms, amount)
        return wait


def example(name: str, token: str) -> str:
    """A tenants file with one tenant, as JSON (for the docs and tests)."""
    entry = {"name": name, "token_sha256": token_hash(token), "max_live_sessions": 0}
    return json.dumps({"tenants": [entry]}, indent=2)
