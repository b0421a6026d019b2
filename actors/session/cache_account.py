"""A session's prompt-cache account, derived from its log: what the cache saved, and what broke it.

`cache_account(events)` folds a session's events, in order, from seq 1.
Pure: no I/O, nothing kept beside the log.

Usage (over the `usage` events): `prompt_tokens` sums the whole prompt of
each event that reported the provider's cache reads (`cached_prompt_tokens`,
not null), `cache_read_tokens` those reads and `cache_write_tokens` its
cache writes, so `hit_ratio` = reads / prompt over the same requests; None
when the provider reported no cache figure at all (a provider without a
prompt cache, or one that does not say).

Cache breaks: a decision that rewrote history under a prefix a provider had
cached. Each answered `request` (one an `assistant-message` answered) caches
its prompt up to its newest history message (`actors.session.cache_breakpoints`);
that prefix lasts until the next checkpoint, which replaces all history. So:

| decision               | breaks the cached prefix when                          |
|------------------------|--------------------------------------------------------|
| `context-slimmed`      | it removed a call that was in history when the latest  |
|                        | answered request of the epoch was sent (recorded       |
|                        | before it, or carried by the checkpoint it followed)   |
| `checkpoint-committed` | a request of its epoch was answered (a prefix to lose) |

Each decision is counted once (a micro compaction and a snip before the
same request are two). A removed call the fold never saw recorded (a log
that does not start at seq 1) counts as sent. Whether the provider's cache
had expired by then (its time to live) is not known from the log: the count
is of decisions that broke a prefix, the cost a user pays for slimming and
compaction, not of cache misses.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from cairn.actors.session.tracker import whole_prompt
from cairn.events.codec import Record
from cairn.events.kinds import AssistantMessage, CheckpointCommitted, ContextSlimmed, Request, Usage


class CacheAccount(msgspec.Struct, frozen=True, kw_only=True):
    """A session's prompt-cache figures (see the module doc)."""

    #: usage events that reported cache reads
    cache_reports: int = 0
    #: the whole prompts of those requests (reads and writes included)
    prompt_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    breaks_by_slimming: int = 0
    breaks_by_checkpoint: int = 0

    @property
    def breaks(self) -> int:
        return self.breaks_by_slimming + self.breaks_by_checkpoint

    @property
    def hit_ratio(self) -> float | None:
        """Cache reads over prompt tokens; None when the provider reported no cache figure."""
        if not self.cache_reports:
            return None
        return self.cache_read_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class _Fold:
    """The running state of `cache_account`."""

    def __init__(self) -> None:
        self.reports = self.prompt = self.reads = self.writes = 0
        self.by_slimming = self.by_checkpoint = 0
        #: the seq at which each call in history entered it (its message, or the checkpoint)
        self.entered: dict[str, int] = {}
        #: the seq and id of the latest request of this epoch, and of the latest one answered
        self.request: tuple[int, str] | None = None
        self.answered_seq: int | None = None

    def usage(self, event: Usage) -> None:
        reads = event.cached_prompt_tokens
        if not isinstance(reads, int) or isinstance(reads, bool) or reads < 0:
            return
        self.reports += 1
        self.prompt += whole_prompt(event) or 0
        self.reads += reads
        self.writes += _count(event.cache_write_tokens)

    def answered(self, seq: int, event: AssistantMessage) -> None:
        if self.request is not None and self.request[1] == event.request_id:
            self.answered_seq = self.request[0]
        for call in event.tool_calls:
            self.entered.setdefault(call.id, seq)

    def slimmed(self, event: ContextSlimmed) -> None:
        sent = self.answered_seq
        if sent is None:
            return
        if any(self.entered.get(call_id, 0) < sent for call_id in event.removed_call_ids):
            self.by_slimming += 1

    def checkpoint(self, seq: int, event: CheckpointCommitted) -> None:
        if self.answered_seq is not None:
            self.by_checkpoint += 1
        self.entered = {call.id: seq for m in event.replacement_messages for call in m.tool_calls}
        self.request = None
        self.answered_seq = None

    def result(self) -> CacheAccount:
        return CacheAccount(
            cache_reports=self.reports,
            prompt_tokens=self.prompt,
            cache_read_tokens=self.reads,
            cache_write_tokens=self.writes,
            breaks_by_slimming=self.by_slimming,
            breaks_by_checkpoint=self.by_checkpoint,
        )


def cache_account(records: Iterable[Record]) -> CacheAccount:
    """The prompt-cache account of one session's records, read in seq order from seq 1."""
    fold = _Fold()
    for record in records:
        event = record.event
        match event:
            case Usage():
                fold.usage(event)
            case Request():
                fold.request = (record.seq, event.request_id)
            case AssistantMessage():
                fold.answered(record.seq, event)
            case ContextSlimmed():
                fold.slimmed(event)
            case CheckpointCommitted():
                fold.checkpoint(record.seq, event)
            case _:
                pass
    return fold.result()
