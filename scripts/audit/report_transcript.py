"""A session's transcript in the report: what was said and done, turn by turn, for an operator.

The user's messages, the model's answers with their tool calls, the tool
results (with the server that ran each, when one did), the turns' ends; and,
where they happened, what the user never sees: each checkpoint with what it
replaced (the seqs and tokens before and after), slimming, provider errors,
failed compactions. Hand-offs (the hidden notes) are left out unless asked
(`cairn report --handoffs`). Requests, usage and owner changes are in the
session page's figures and `cairn log`, not here.

Pure: `add` each record in seq order (or pass them through `tap`); at most
`MAX_ROWS` rows are kept, each text clipped to `MAX_CHARS`, and the rest
counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import assert_never

from msgspec import UNSET

from cairn.events.codec import Record
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
from cairn.events.model import BlobPart, ImagePart, Part, TextPart

#: rows of one session's transcript page; the rest are counted
MAX_ROWS = 5_000
#: characters of one row's text
MAX_CHARS = 2_000


@dataclass(frozen=True)
class Row:
    seq: int
    ts: int
    turn: str
    who: str
    text: str
    #: how the row is shown: "" (said), "tool", "event" (not seen by the user), "bad"
    css: str = ""


def _clip(text: str, width: int = MAX_CHARS) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _parts(content: str | tuple[Part, ...]) -> str:
    if isinstance(content, str):
        return content
    said = []
    for part in content:
        if isinstance(part, TextPart):
            said.append(part.text)
        elif isinstance(part, ImagePart):
            said.append(f"[image {part.media_type}]")
        elif isinstance(part, BlobPart):
            said.append(
                part.preview + (" …" if part.chars > len(part.preview) else "") if part.chars else "[blob]"
            )
    return "\n".join(said)


@dataclass
class TranscriptFold:
    """The transcript rows of one session (see the module doc)."""

    handoffs: bool = False
    rows: list[Row] = field(default_factory=list)
    left_out: int = 0
    _turn: str = ""

    def tap(self, records: Iterable[Record]) -> Iterator[Record]:
        for record in records:
            self.add(record)
            yield record

    def _row(self, record: Record, who: str, text: str, css: str = "") -> None:
        if len(self.rows) >= MAX_ROWS:
            self.left_out += 1
            return
        self.rows.append(Row(record.seq, record.ts, self._turn, who, _clip(text), css))

    def add(self, record: Record) -> None:
        # long: one match arm per event kind
        event = record.event
        match event:
            case SessionStarted():
                self._row(
                    record, "session", f"started: model {event.model}, window {event.context_window}", "event"
                )
            case UserMessage():
                self._row(record, "user", _parts(event.content))
            case TurnStarted():
                self._turn = event.turn_id
                again = (
                    ""
                    if event.continues is UNSET or not event.continues
                    else f", continuing {event.continues}"
                )
                self._row(record, "turn", f"{event.turn_id} started{again}", "event")
            case AssistantMessage():
                calls = "".join(f"\n→ {c.name}({_clip(c.arguments, 300)})" for c in event.tool_calls)
                self._row(record, "assistant", (event.text or "") + calls)
            case ToolResult():
                via = "" if event.server is UNSET else f" (server {event.server}, tool {event.server_tool})"
                self._row(
                    record,
                    f"tool {event.tool_name}{via}",
                    f"{event.status}/{event.effect}: {_parts(event.content)}",
                    "bad" if event.status == "error" else "tool",
                )
            case ToolDeferred():
                self._row(
                    record, "tool", f"{event.tool_name} ({event.call_id}) waits for its result", "event"
                )
            case TurnCompleted():
                self._row(record, "turn", f"{self._turn} completed ({event.requests} requests)", "event")
                self._turn = ""
            case TurnFailed():
                why = ": ".join(p for p in (event.error_class, event.error) if p)
                self._row(record, "turn", f"{self._turn} failed, phase {event.phase}: {why}", "bad")
                self._turn = ""
            case TurnCancelled():
                self._row(
                    record, "turn", f"{self._turn} cancelled: {event.reason or 'no reason given'}", "event"
                )
                self._turn = ""
            case TurnDismissed():
                self._row(
                    record, "turn", f"{event.turn_id} dismissed: {event.reason or 'no reason given'}", "event"
                )
            case CheckpointCommitted():
                self._row(
                    record,
                    "checkpoint",
                    f"epoch {event.epoch} ({event.strategy}, {event.trigger}): seq 1..{event.through_seq} "
                    f"replaced, {event.source_tokens:,} -> {event.replacement_tokens:,} tokens",
                    "event",
                )
            case Handoff():
                if self.handoffs:  # the note as its record holds it (JSON)
                    note = bytes(event.record).decode("utf-8", "replace")
                    self._row(record, "hand-off", f"epoch {event.epoch}: {note}", "event")
            case ContextSlimmed():
                self._row(
                    record,
                    "slimmed",
                    f"{event.mode}: {len(event.removed_call_ids)} tool results, "
                    f"{event.tokens_saved:,} tokens saved",
                    "event",
                )
            case ProviderError():
                code = f" (HTTP {event.status_code})" if event.status_code is not None else ""
                self._row(record, "provider", f"{event.error_class}{code}: {event.message}", "bad")
            case CompactionFailed():
                self._row(record, "compaction", f"failed: {event.reason} {event.detail}".strip(), "bad")
            case Request() | Usage() | OwnerChanged():
                pass  # figures, not things said: the session page and `cairn log` have them
            case _:
                assert_never(event)  # a new kind must be placed here: mypy says so
