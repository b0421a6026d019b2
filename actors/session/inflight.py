"""What a session actor is waiting for: the turn it drives and a compaction not answered yet.

In-flight bookkeeping of this process only: never persisted, and nothing
of it is needed after a crash (the log's open turn is marked interrupted on
the next load). Only the session actor's own thread touches these objects.
"""

from __future__ import annotations

import concurrent.futures
import threading

from cairn.actors.provider.actor import ProviderFailed
from cairn.actors.provider.base import (
    Finished,
    ProviderOutput,
    ReasoningBlockReady,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
)
from cairn.actors.session.stream import Turn
from cairn.actors.session.verdict import FailureDecision
from cairn.events.codec import Record
from cairn.events.model import Message, ReasoningBlock, ToolCall


class TurnRun:
    """The turn this actor is driving, and the request it waits for."""

    def __init__(self, turn_id: str, handles: list[Turn]) -> None:
        self.turn_id = turn_id
        self.handles = handles
        self.requests = 0
        self.attempt = 1
        self.transient_retries = 0  # sends again after a transient provider error (turn_retries)
        self.handoff_failed = False  # H7: no second try in this turn
        self.text = ""
        self.provider_seconds = 0.0
        self.tool_chars = 0  # X2: chars of the current tool turn's results shown
        self.request_id = ""
        self.cancel = threading.Event()
        self.begin("", 0)

    def begin(self, request_id: str, now_ms: int) -> None:
        """A new request, sent at `now_ms`: what its answer brings is gathered here."""
        self.request_id = request_id
        self.sent_ms = now_ms
        #: ms from sending to the first output (None: none yet)
        self.first_output_ms: int | None = None
        self.cancel = threading.Event()
        self.text_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.reasoning_blocks: list[ReasoningBlock] = []
        self.calls: list[ToolCall] = []
        self.usage: UsageReport | None = None
        self.finish: str | None = None
        self.delivered = False

    def take(self, item: ProviderOutput, now_ms: int) -> None:
        """Gather one item of the response, come at `now_ms`; a delta goes to the turn's handles at once."""
        self.delivered = True  # R2: output crossed the boundary
        if self.first_output_ms is None:
            self.first_output_ms = max(0, now_ms - self.sent_ms)
        match item:
            case TextDelta(text):
                self.text_parts.append(text)
                self._publish(item)
            case ReasoningDelta(text):
                self.reasoning_parts.append(text)
                self._publish(item)
            case ToolCallReady(call):
                self.calls.append(call)
            case ReasoningBlockReady(block):
                self.reasoning_blocks.append(block)
            case UsageReport():
                self.usage = item
            case Finished(reason):
                self.finish = reason

    def _publish(self, delta: TextDelta | ReasoningDelta) -> None:
        for handle in self.handles:
            handle._publish(delta)


class PendingCompaction:
    """A compaction asked of the compactor actor and not answered yet."""

    def __init__(
        self,
        *,
        snipped: tuple[Message, ...] | None = None,
        reply: concurrent.futures.Future[Record | None] | None = None,
        overflow: ProviderFailed | None = None,
    ) -> None:
        self.snipped = snipped
        self.reply = reply
        self.overflow = overflow  # R3: the provider error a reactive compaction answers


class JudgedFailure:
    """A provider error and the decision on it, for the effects of its verdict."""

    __slots__ = ("decision", "failure")

    def __init__(self, failure: ProviderFailed, decision: FailureDecision) -> None:
        self.failure = failure
        self.decision = decision
