"""When a failed provider call is sent again, and after how long: the C5 schedule and the server's hint.

Both places that retry a provider call use this one decision: a turn's
transient retry (the session's turn policy, at most `turn_retries` times)
and the summary calls of a compaction (C5, `actors.compactor.sampling`). It is a pure function of
(the waits already done, whether the error is transient, its HTTP status,
the server's hint, a random draw in [0, 1), the policy); the callers own the
clock and the sleep, and record what was decided.

| transient | retries left | server hint (429, 503, 529)  | decision                                       |
|-----------|--------------|------------------------------|------------------------------------------------|
| no        | -            | -                            | give up: `not-transient`                       |
| yes       | none         | -                            | give up: `used-up`                             |
| yes       | some         | none (or another status)     | wait the floor: 375 ms, then 750 ms (C5)       |
| yes       | some         | at most the cap              | wait min(cap, max(floor, hint) + jitter)       |
| yes       | some         | over the cap                 | give up: `over-cap` (the turn or summary fails)|

The floor schedule is C5's and stays exact (no jitter): it is tiny, and a
client without a hint has nothing to spread around. A hinted wait gets a
jitter of up to `jitter_percent` of itself (`draw` times that), so clients
told the same `Retry-After` do not all come back in the same instant. The
cap (default 60 s, a setting) bounds how long a turn or a compaction is
held: a server that asks for more (a quota window of an hour, say) would
only refuse a request sent at the cap again, so the call gives up at once
and the error says how long the server asked for.

The hint is honoured on 429 (RFC 6585) and 503 (RFC 9110 §10.2.3), the two
statuses whose meaning the standards tie `Retry-After` to, and on 529,
Anthropic's "overloaded", which is a 503 in all but number. Other transient
statuses (408, 409, 500, 502, 504, ...) and errors without a status use the
floor schedule; a `Retry-After` on them is ignored.

`parse_retry_after(headers, now_ms)` reads the hint, in milliseconds:
`retry-after-ms` first (milliseconds, fractions allowed, rounded up), else
`Retry-After` as seconds (a number) or an HTTP-date (its distance from
`now_ms`, the caller's clock; a date in the past means 0). Header names are
matched case-insensitively; a value that is not a finite, non-negative
number or a date (negative, `inf`, `nan`, control characters, over 100
chars) is ignored, as if absent; a hint over a year counts as a year.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Literal

import msgspec

from cairn.events.errors import InputError

#: C5: the waits before the second and the third call, in milliseconds
RETRY_DELAYS_MS = (375, 750)
#: the longest wait a server's hint can ask for; more than that is given up on
DEFAULT_MAX_WAIT_MS = 60_000
#: a hinted wait grows by up to this share of itself (times the random draw)
DEFAULT_JITTER_PERCENT = 20
#: the statuses whose `Retry-After` is honoured
HINT_STATUSES = frozenset({429, 503, 529})
#: a header value longer than this is not a hint
MAX_HINT_CHARS = 100
#: a longer hint is taken as this (a year): it is over any cap, and it fits every integer field
MAX_HINT_MS = 365 * 24 * 3600 * 1000

GiveUp = Literal["not-transient", "used-up", "over-cap"]


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The floor schedule, the cap on a hinted wait, and its jitter. Immutable, safe to share."""

    delays_ms: tuple[int, ...] = RETRY_DELAYS_MS
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    jitter_percent: int = DEFAULT_JITTER_PERCENT

    def __post_init__(self) -> None:
        if not self.delays_ms or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in self.delays_ms
        ):
            raise InputError(f"retry delays must be non-negative whole milliseconds, got {self.delays_ms!r}")
        if isinstance(self.max_wait_ms, bool) or not isinstance(self.max_wait_ms, int):
            raise InputError(f"the retry cap must be whole milliseconds, got {self.max_wait_ms!r}")
        if self.max_wait_ms < max(self.delays_ms):
            raise InputError(
                f"the retry cap ({self.max_wait_ms} ms) is below the schedule's longest delay "
                f"({max(self.delays_ms)} ms)"
            )
        if (
            isinstance(self.jitter_percent, bool)
            or not isinstance(self.jitter_percent, int)
            or not 0 <= self.jitter_percent <= 100
        ):
            raise InputError(f"the retry jitter must be 0..100 percent, got {self.jitter_percent!r}")


class RetryDecision(msgspec.Struct, frozen=True, kw_only=True):
    """Send again after `wait_ms`, or give up (`give_up` says why)."""

    retry: bool
    wait_ms: int = 0
    #: the server's hint when it was honoured (429, 503, 529), else None
    hint_ms: int | None = None
    give_up: GiveUp | None = None
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS

    @property
    def note(self) -> str:
        """Why the call was not sent again, when that is worth telling (the hint over the cap)."""
        if self.give_up == "over-cap" and self.hint_ms is not None:
            return (
                f"the server asked to wait {_seconds(self.hint_ms)} before retrying, "
                f"more than the {_seconds(self.max_wait_ms)} cap, so it was not retried"
            )
        return ""


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def decide_retry(
    waits_done: int,
    *,
    transient: bool,
    retries_left: int,
    status: int | None,
    hint_ms: int | None,
    draw: float,
    policy: RetryPolicy,
) -> RetryDecision:
    """The table above: whether to send the call again, and the wait before it."""
    cap = policy.max_wait_ms
    honoured = hint_ms if status in HINT_STATUSES and hint_ms is not None and hint_ms >= 0 else None
    if not transient:
        return RetryDecision(retry=False, give_up="not-transient", hint_ms=honoured, max_wait_ms=cap)
    if retries_left <= 0:
        return RetryDecision(retry=False, give_up="used-up", hint_ms=honoured, max_wait_ms=cap)
    floor = policy.delays_ms[min(max(0, waits_done), len(policy.delays_ms) - 1)]
    if honoured is None:
        return RetryDecision(retry=True, wait_ms=floor, max_wait_ms=cap)
    if honoured > cap:
        return RetryDecision(retry=False, give_up="over-cap", hint_ms=honoured, max_wait_ms=cap)
    base = max(floor, honoured)
    fraction = draw if isinstance(draw, float | int) and 0.0 <= draw < 1.0 else 0.0
    jitter = int(base * policy.jitter_percent * fraction) // 100
    return RetryDecision(retry=True, wait_ms=min(cap, base + jitter), hint_ms=honoured, max_wait_ms=cap)


# --- the hint --------------------------------------------------------------------------------


def _header(headers: Mapping[str, str] | Iterable[tuple[str, str]], name: str) -> str | None:
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if isinstance(key, str) and key.lower() == name and isinstance(value, str):
            return value
    return None


def _number(text: str) -> float | None:
    """A finite, non-negative decimal number (no sign, no exponent tricks like `inf`), else None."""
    if not text or len(text) > MAX_HINT_CHARS or not text.isascii():
        return None
    if not all(c.isdigit() or c == "." for c in text) or text.count(".") > 1 or text == ".":
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _to_ms(value: float) -> int:
    return min(MAX_HINT_MS, math.ceil(value - 1e-9)) if value > 0 else 0


def parse_retry_after(headers: Mapping[str, str] | Iterable[tuple[str, str]], now_ms: int) -> int | None:
    """The server's hint in milliseconds (see the module doc), or None when there is none."""
    raw_ms = _header(headers, "retry-after-ms")
    if raw_ms is not None:
        number = _number(raw_ms.strip())
        if number is not None:
            return _to_ms(number)
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    text = raw.strip()
    if not text or len(text) > MAX_HINT_CHARS or not text.isprintable():
        return None
    number = _number(text)
    if number is not None:
        return _to_ms(number * 1000)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        at_ms = math.floor(when.timestamp() * 1000)
    except (OverflowError, OSError, ValueError):
        return None
    return min(MAX_HINT_MS, max(0, at_ms - now_ms))
