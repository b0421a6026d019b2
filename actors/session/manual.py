"""Manual compaction's answer (K4): `CompactResult`, and the pure decision of whether it compacts.

`host.compact(session)` compacts only from half the context window up (K4);
below that it does nothing. The answer says which it was, and why, with the
numbers the decision read: the projected tokens of the next request (P4),
their source, the threshold (half the window, rounded up) and the window.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from cairn.events.codec import Record

#: why a manual compaction did (or did not) compact
CompactReason = Literal["compacted", "below-threshold", "window-unknown"]


class CompactResult(msgspec.Struct, frozen=True, kw_only=True):
    """What `host.compact(session)` did: a checkpoint (`record`), or nothing, and why.

    `compacted` is True exactly when a checkpoint was written; `record` is
    its `checkpoint-committed` record. Otherwise `reason` says why not:
    `below-threshold` (the projection is under `threshold`, half the window)
    or `window-unknown` (the session has no usable context window, so K4
    has no threshold). `projection` and `projection_source` are the P4
    projection the decision read. Truthy exactly when it compacted.
    """

    session: str
    compacted: bool
    reason: CompactReason
    projection: int
    projection_source: str
    threshold: int | None
    context_window: int | None
    record: Record | None = None

    def __bool__(self) -> bool:
        return self.compacted


def manual_threshold(context_window: int | None) -> int | None:
    """K4's threshold: the smallest projection that compacts (half the window, rounded up), or None."""
    if not isinstance(context_window, int) or isinstance(context_window, bool) or context_window <= 0:
        return None
    return (context_window + 1) // 2


def not_compacted(session: str, projection: int, source: str, context_window: int | None) -> CompactResult:
    """The answer that nothing was compacted, with the numbers K4 read (and why, from them).

    `reason` is `window-unknown` without a usable window, else
    `below-threshold`; the session sends it when `manual_compaction_due` is
    False, and turns it into a checkpoint's answer (`with_checkpoint`) once
    one is written.
    """
    threshold = manual_threshold(context_window)
    return CompactResult(
        session=session,
        compacted=False,
        reason="window-unknown" if threshold is None else "below-threshold",
        projection=projection,
        projection_source=source,
        threshold=threshold,
        context_window=context_window,
    )


def with_checkpoint(basis: CompactResult, record: Record) -> CompactResult:
    """`basis` (the numbers the decision read), answered with the checkpoint written."""
    return msgspec.structs.replace(basis, compacted=True, reason="compacted", record=record)
