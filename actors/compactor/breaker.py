"""The compaction circuit breaker (C4): closed, open or half-open, derived from the log.

The breaker of a (workspace, session) pair (the workspace compared by
`breaker_key`) is not kept in memory: its consecutive-failure count and the
time of the last failure come from the session's `compaction-failed` events
(folded into `SessionState.carried`, and carried through every checkpoint),
so it survives restarts and passivation.

| failures | since the last failure | state     | the LLM is              |
|----------|------------------------|-----------|-------------------------|
| < 3      | -                      | closed    | called                  |
| >= 3     | < cooldown             | open      | skipped (fallback)      |
| >= 3     | >= cooldown (or unknown)| half-open| called once more        |

A success resets the count to 0; a failed half-open trial adds one and
restarts the cooldown. The count belongs to the session's own workspace: a
compaction asked for under another workspace starts from a closed breaker.
"""

from __future__ import annotations

import posixpath
from typing import Literal

import msgspec

from cairn.events.state import SessionState

FAILURE_LIMIT = 3
DEFAULT_COOLDOWN_MS = 10 * 60 * 1000

BreakerMode = Literal["closed", "open", "half-open"]


class BreakerView(msgspec.Struct, frozen=True):
    """The breaker of one compaction: its key, state and the count it starts from."""

    workspace: str
    session: str
    mode: BreakerMode
    failures: int
    last_failure_ts: int | None

    @property
    def allows_llm(self) -> bool:
        return self.mode != "open"


def breaker_key(workspace: str) -> str:
    """The workspace half of a breaker's key: `\\` read as `/`, then `.`/`..`/`//` folded
    lexically (`/x/.` is `/x`); never made absolute, never resolved on disk.

    Unlike the host's normalization of a workspace (made absolute against
    the process's current directory), this is pure: the key is compared only
    with the key of the workspace the session recorded, so it must not
    depend on where the process runs."""
    if not workspace:
        return ""
    return posixpath.normpath(workspace.replace("\\", "/"))


def breaker_view(
    state: SessionState,
    workspace: str,
    now_ms: int,
    *,
    cooldown_ms: int = DEFAULT_COOLDOWN_MS,
    limit: int = FAILURE_LIMIT,
) -> BreakerView:
    """C4: the breaker for compacting `state`'s session under `workspace` at `now_ms`."""
    key = breaker_key(workspace)
    own = breaker_key(state.info.workspace) if state.info is not None else key
    failures = state.carried.compaction_failures if own == key else 0
    last = state.carried.last_compaction_failure_ts if own == key else None
    mode: BreakerMode = "closed"
    if failures >= limit:
        mode = "half-open" if last is None or now_ms - last >= cooldown_ms else "open"
    return BreakerView(key, state.sid, mode, failures, last)
