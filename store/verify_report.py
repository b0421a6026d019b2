"""What `verify_store` reports: its findings (`Problem`) and the report that holds them."""

from __future__ import annotations

import msgspec

from cairn.store.loss import Loss


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """One finding: what (`code`, `message`) and where (segment, offset, session)."""

    code: str
    message: str
    segment: str = ""
    offset: int = -1
    sid: str = ""
    seq: int = 0

    def __str__(self) -> str:
        where = f"{self.segment}@{self.offset}" if self.segment and self.offset >= 0 else self.segment
        who = f"session {self.sid}" if self.sid else ""
        seq = f"seq {self.seq}" if self.seq else ""
        place = " ".join(part for part in (where, who, seq) if part)
        return f"{place + ': ' if place else ''}[{self.code}] {self.message}"


class VerifyReport(msgspec.Struct, kw_only=True):
    """What `verify_store` found; `ok` when there is no problem (warnings and information allowed)."""

    root: str
    segments: int = 0
    lines: int = 0
    bytes: int = 0
    sessions: int = 0
    blobs: int = 0
    index_checked: bool = False
    #: lines of the log past the index's recovery point (an index that lags), and their bytes
    index_lag_lines: int = 0
    index_lag_bytes: int = 0
    problems: list[Problem] = []
    warnings: list[Problem] = []
    info: list[Problem] = []
    #: acknowledged positions the log does not hold, accepted or not
    losses: list[Loss] = []

    @property
    def ok(self) -> bool:
        return not self.problems
