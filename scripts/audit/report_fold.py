"""What the report shows of one session, folded from its log as it streams."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, assert_never

from msgspec import UNSET

from cairn.audit.prices import Prices
from cairn.audit.report_chart import StoreChart
from cairn.audit.report_transcript import TranscriptFold
from cairn.audit.table_rows import TurnFold
from cairn.audit.timeline import Timeline, timeline_data
from cairn.events.codec import Record
from cairn.events.errors import DecodeError
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    Handoff,
    OwnerChanged,
    ProviderError,
    Request,
    SessionStarted,
    ToolDeferred,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnDismissed,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.store.errors import CorruptionError
from cairn.store.verify_report import Problem

#: rows listed per table of a session page (its checkpoints, its failures); the counts are complete
MAX_ROWS = 1000
#: runs of seqs the timeline of a session is reduced to (`timeline_data(buckets=...)`)
TIMELINE_RUNS = 800


@dataclass(frozen=True)
class CheckpointRow:
    seq: int
    ts: int
    epoch: int
    through_seq: int
    trigger: str
    strategy: str
    before: int
    after: int

    @property
    def reduction(self) -> int:
        return self.before - self.after

    @property
    def reduction_share(self) -> float | None:
        return self.reduction / self.before if self.before > 0 else None


@dataclass(frozen=True)
class FailureRow:
    seq: int
    ts: int
    turn_id: str | None
    #: `failed turn`, `interrupted turn`, `provider error`, `compaction failed`
    kind: str
    what: str


@dataclass
class SessionFold:
    """The figures of one session's page and table row, folded record by record (O(MAX_ROWS)).

    Pure: `add` each record in seq order (or pass them through `tap`).
    """

    sid: str
    model: str = ""
    workspace: str = ""
    context_window: int | None = None
    parent_session: str | None = None
    parent_seq: int | None = None
    events: int = 0
    first_ts: int = 0
    last_ts: int = 0
    last_seq: int = 0
    turns: int = 0
    turns_completed: int = 0
    turns_cancelled: int = 0
    #: ended by an error (a provider's, a compaction's ...), and stopped by a crash or a stop
    turns_failed: int = 0
    turns_interrupted: int = 0
    open_turn: str | None = None
    requests: int = 0
    handoffs: int = 0
    checkpoints_llm: int = 0
    responses: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_reports: int = 0
    completion_reports: int = 0
    checkpoint_count: int = 0
    checkpoints: list[CheckpointRow] = field(default_factory=list)
    failure_counts: dict[str, int] = field(default_factory=dict)
    failures: list[FailureRow] = field(default_factory=list)
    #: per tool, by (server, the tool's name there, its name to the model): [calls, errors]; a host's
    #: own tools have server "" and their name twice (at most MAX_ROWS tools)
    tools: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    #: with a price table: the cost of the answers it prices (millionths of its currency), and how
    #: many answers it could not price (a model it does not name, or no token counts)
    cost_micros: int = 0
    unpriced: int = 0
    priced: bool = False
    _turns: TurnFold = field(default_factory=TurnFold)

    @property
    def failure_count(self) -> int:
        return sum(self.failure_counts.values())

    @property
    def errors_recovered(self) -> int:
        """Provider errors and failed compactions that did not end a turn (retried, the fallback...)."""
        return self.failure_count - self.turns_failed - self.turns_interrupted

    def add(self, record: Record) -> None:
        # long: one match arm per event kind
        event = record.event
        turn = self._turns.turn_of(event)
        self.events += 1
        self.first_ts = self.first_ts or record.ts
        self.last_ts = record.ts
        self.last_seq = record.seq
        match event:
            case SessionStarted():
                self.model, self.workspace = event.model, event.workspace
                self.context_window = event.context_window
                if event.parent_session is not None:
                    self.parent_session, self.parent_seq = event.parent_session, event.parent_seq
            case TurnStarted():
                self.turns += 1
                self.open_turn = event.turn_id
            case TurnCompleted():
                self.turns_completed += 1
                self.open_turn = None
            case TurnCancelled():
                self.turns_cancelled += 1
                self.open_turn = None
            case AssistantMessage():
                self.responses += 1
            case Usage():
                self._count_cost(event)
                if event.prompt_tokens is not None:
                    self.prompt_tokens += event.prompt_tokens
                    self.prompt_reports += 1
                if event.completion_tokens is not None:
                    self.completion_tokens += event.completion_tokens
                    self.completion_reports += 1
            case CheckpointCommitted():
                self.checkpoint_count += 1
                self.checkpoints_llm += event.strategy == "llm"
                if len(self.checkpoints) < MAX_ROWS:
                    self.checkpoints.append(
                        CheckpointRow(
                            record.seq,
                            record.ts,
                            event.epoch,
                            event.through_seq,
                            event.trigger,
                            event.strategy,
                            event.source_tokens,
                            event.replacement_tokens,
                        )
                    )
            case ToolResult():
                self._count_tool(event)
            case TurnFailed():
                if event.phase == "interrupted":
                    self.turns_interrupted += 1
                else:
                    self.turns_failed += 1
                self.open_turn = None
            case Request():
                self.requests += 1
            case Handoff():
                self.handoffs += 1
            case (
                UserMessage()
                | ProviderError()
                | ContextSlimmed()
                | CompactionFailed()
                | OwnerChanged()
                | TurnDismissed()
                | ToolDeferred()
            ):
                pass  # not counted in the report's totals (failures: below)
            case _:
                assert_never(event)  # a new kind must be placed here: mypy says so
        self._count_failure(record, turn)

    def _count_cost(self, event: Usage) -> None:
        if self._turns.prices is None:
            return
        self.priced = True
        cost = self._turns.cost_of(event)
        if cost is None:
            self.unpriced += 1
        else:
            self.cost_micros += cost

    def _count_tool(self, event: ToolResult) -> None:
        server = "" if event.server is UNSET else event.server
        remote = event.tool_name if event.server_tool is UNSET else event.server_tool
        key = (server, remote, event.tool_name)
        counts = self.tools.get(key)
        if counts is None:
            if len(self.tools) >= MAX_ROWS:
                return
            counts = self.tools[key] = [0, 0]
        counts[0] += 1
        counts[1] += event.status == "error"

    def _count_failure(self, record: Record, turn: str | None) -> None:
        failure = _failure(record.event)
        if failure is not None:
            kind, what = failure
            if isinstance(record.event, TurnFailed):
                self.open_turn = None
            self.failure_counts[kind] = self.failure_counts.get(kind, 0) + 1
            if len(self.failures) < MAX_ROWS:
                self.failures.append(FailureRow(record.seq, record.ts, turn, kind, what))

    def tap(self, records: Iterable[Record]) -> Iterator[Record]:
        """`records`, each folded here as it passes (so another fold can read the same stream)."""
        for record in records:
            self.add(record)
            yield record


def _failure(event: object) -> tuple[str, str] | None:
    """(kind, description) of a failure event, None for any other event."""
    if isinstance(event, TurnFailed):
        text = ": ".join(part for part in (event.error_class, event.error) if part)
        if event.phase == "interrupted":  # the phase is the kind: said once, not again as the class
            named = event.error_class if event.error_class not in ("", "interrupted") else ""
            said = ": ".join(part for part in (named, event.error) if part)
            return "interrupted turn", said or "the host stopped while the turn ran"
        return "failed turn", f"phase {event.phase}" + (f": {text}" if text else "")
    if isinstance(event, ProviderError):
        status = f" (HTTP {event.status_code})" if event.status_code is not None else ""
        delivered = ", after output was delivered" if event.output_delivered else ""
        message = f": {event.message}" if event.message else ""
        return "provider error", f"{event.error_class}{status} on {event.request_id}{delivered}{message}"
    if isinstance(event, CompactionFailed):
        detail = f": {event.detail}" if event.detail else ""
        return "compaction failed", (
            f"{event.reason} (epoch {event.epoch}, attempt {event.attempt}, "
            f"{event.consecutive_failures} in a row, trigger {event.trigger}){detail}"
        )
    return None


@dataclass
class SessionEntry:
    """One session of the report: its fold and timeline, or the error that made it unreadable."""

    sid: str
    key: str
    fold: SessionFold | None = None
    timeline: Timeline | None = None
    transcript: TranscriptFold | None = None
    error: str | None = None
    #: verify's findings that name the session
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def state(self) -> str:
        if self.fold is None:
            return "corrupt"
        return "turn open" if self.fold.open_turn is not None else "ok"

    @property
    def verify_result(self) -> str:
        if self.problems:
            return f"{len(self.problems)} problem" + ("s" if len(self.problems) > 1 else "")
        if self.warnings:
            return f"ok, {len(self.warnings)} warning" + ("s" if len(self.warnings) > 1 else "")
        return "ok"


def page_key(sid: str) -> str:
    """The file name stem of a session's page and picture (see the module doc)."""
    return hashlib.sha256(sid.encode()).hexdigest()[:16]


def read_session(
    journal: Any,
    sid: str,
    span: int,
    *,
    handoffs: bool = False,
    prices: Prices | None = None,
    chart: StoreChart | None = None,
) -> SessionEntry:
    """Fold session `sid` of `journal` (read once, checked): its figures, timeline and transcript
    (with its hand-offs when `handoffs`); corrupt: the entry holds the error only."""
    entry = SessionEntry(sid=sid, key=page_key(sid))
    fold = SessionFold(sid=sid, _turns=TurnFold(prices=prices))
    transcript = TranscriptFold(handoffs=handoffs)
    try:
        records = fold.tap(transcript.tap(journal.read(sid)))
        records = chart.tap(records) if chart is not None else records
        timeline = timeline_data(sid, records, buckets=TIMELINE_RUNS, span=span)
    except (CorruptionError, DecodeError) as exc:
        entry.error = f"{type(exc).__name__}: {exc}"
        return entry
    entry.fold, entry.timeline, entry.transcript = fold, timeline, transcript
    return entry
