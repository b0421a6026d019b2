"""`verify_store`'s report of losses: acknowledged positions the log does not hold, and the gaps they explain.

A loss an operator accepted is a warning, with who accepted it, when and
why (`store.loss`); any other is a problem, for the loss and for each
session it names. A position or seq gap inside an accepted loss is a warning.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from cairn.store.errors import IndexUnusable, UnexpectedEntry
from cairn.store.index import Index
from cairn.store.loss import Evidence, Loss, find_losses
from cairn.store.verify_report import Problem, VerifyReport

if TYPE_CHECKING:
    from cairn.store.verify import LogScan

_SHOWN_SESSIONS = 20


def report_losses(
    root: Path,
    segments: list[int],
    tail_in_acked: bool,
    evidence: Evidence,
    report: VerifyReport,
    scan: LogScan,
) -> None:
    """Acknowledged positions the log does not hold (problems), those accepted (warnings), and the gaps
    they explain."""
    losses = _find_losses(root, segments, tail_in_acked, evidence, scan)
    report.losses = losses
    for loss in losses:
        if loss.accepted:
            report.warnings.append(
                Problem(code="accepted-loss", message=f"{loss.describe()}; {_who(loss, evidence)}")
            )
            continue
        report.problems.append(
            Problem(
                code="acknowledged-missing",
                message=(
                    f"{loss.describe()}. Acknowledged lines are gone: a writer will not open the store "
                    "until an operator accepts the loss (cairn repair --accept-loss)"
                ),
            )
        )
        for session in loss.sessions[:_SHOWN_SESSIONS]:
            report.problems.append(
                Problem(
                    code="acknowledged-missing",
                    sid=session.sid,
                    seq=session.first_seq,
                    message=f"{session} (within positions {loss.first_pos}-{loss.last_pos}) "
                    "acknowledged, not in the log",
                )
            )
    _report_gaps(losses, scan, report)


def _find_losses(
    root: Path, segments: list[int], tail_in_acked: bool, evidence: Evidence, scan: LogScan
) -> list[Loss]:
    """The losses, named with the sessions the index says each held (when the index can be read)."""
    log_next = max(scan.next_pos, segments[-1] if segments else 0)
    names: Index | None = None
    try:
        names = Index(root / "index", readonly=True)
    except (IndexUnusable, UnexpectedEntry):
        names = None
    try:
        return find_losses(root / "log", segments, log_next, evidence, names, tail_in_acked=tail_in_acked)
    finally:
        if names is not None:
            names.close()


def _report_gaps(losses: list[Loss], scan: LogScan, report: VerifyReport) -> None:
    """The position and seq gaps of the scan: problems, but for those an accepted loss explains."""
    spans = [(loss.first_pos, loss.last_pos) for loss in losses]
    for gap, first, last in scan.pos_gaps:
        if not any(low <= first and last <= high for low, high in _merged(spans)):
            report.problems.append(gap)
    accepted = [(loss.first_pos, loss.last_pos) for loss in losses if loss.accepted]
    for gap, before, after in scan.seq_gaps:
        if any(low < after and high > before for low, high in accepted):  # lines between were lost
            report.warnings.append(
                msgspec.structs.replace(
                    gap,
                    message=gap.message + " (the seqs between were lost in a loss an operator accepted; "
                    "the session stays unreadable past the gap)",
                )
            )
        else:
            report.problems.append(gap)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _who(loss: Loss, evidence: Evidence) -> str:
    """Who accepted `loss`, when and why, from the operator log."""
    for record in evidence.accepted:
        if any(span.first_pos <= loss.last_pos and loss.first_pos <= span.last_pos for span in record.ranges):
            when = dt.datetime.fromtimestamp(record.ts / 1000, tz=dt.UTC).isoformat(timespec="seconds")
            why = f" ({record.reason})" if record.reason else ""
            return f"accepted by {record.user or 'an operator'} at {when}{why}"
    return "accepted"
