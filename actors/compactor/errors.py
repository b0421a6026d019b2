"""The compactor's typed errors: blocked, nothing to compact, no effect, a broken guarantee."""

from __future__ import annotations

from cairn.events.errors import CairnError
from cairn.events.kinds import CompactionFailed


class CompactionError(CairnError):
    """Base of every error the compactor raises on purpose."""


class CompactionBlocked(CompactionError):
    """C3: the host's pre-compaction hook refused this compaction.

    Not a failure for the breaker. `event` is a `compaction-failed` record
    with reason `blocked` that the session may persist for audit; the fold
    ignores it for the breaker's count.
    """

    def __init__(self, reason: str, event: CompactionFailed) -> None:
        self.reason = reason
        self.event = event
        super().__init__(f"compaction blocked by the pre-compaction hook: {reason}")


class NothingToCompact(CompactionError):
    """The source is empty once the hand-off is stripped (C1): there is nothing to replace."""


class CompactionIneffective(CompactionError):
    """No strategy gave a replacement that shrinks its source enough (`gates`), so there is nothing
    to commit.

    `events` are this compaction's `compaction-failed` records, to persist
    before the turn fails: the LLM path's failure when it ran (it counts for
    the breaker, C4), then the fallback's `insufficient-reduction`, which
    carries the count unchanged (the model was not at fault). `reason` says
    what was not smaller than what.
    """

    def __init__(self, reason: str, events: tuple[CompactionFailed, ...]) -> None:
        self.reason = reason
        self.events = events
        super().__init__(f"compaction cannot shrink the context: {reason}")


class FallbackOverTarget(CompactionError):
    """F5 broken: the fallback replacement counts more tokens than its target (our bug)."""


class AuditMismatch(CompactionError):
    """A checkpoint cannot be re-derived from its source: wrong source or tampered event."""
