"""The one indexing path: log lines, in log order, into the index's entries (`IndexBuilder`).

The journal's writer feeds it every line it appends, recovery and reindex
every line they scan, so a live index and a rebuilt one are equal by
construction. It keeps each touched session's running summary (its *head*:
last seq, chain digest, counts, usage, checkpoint, broken seq), which the
writer also reads to check `expected_seq` and to chain the next line.
Pure: it turns lines into puts (`IndexBatch`); `store.index` commits them.

Cache breaks (the prompt-cache account of a summary): a decision that
rewrote history under a prefix a provider had cached. A request that was
answered (an `assistant-message` of its request id) left its prompt cached
up to its newest history message (`actors.session.cache_breakpoints`), and
that prefix lasts until the next checkpoint replaces all history:

| decision                                 | breaks a cached prefix when                  |
|------------------------------------------|----------------------------------------------|
| `context-slimmed` that removed calls     | a request of the epoch was answered          |
| `checkpoint-committed`                   | a request of the epoch was answered          |

Each decision counts once (a micro compaction and a snip before the same
request are two). A slimming removes only calls the latest answered request
had sent: S1, S4 and R3 keep at least the newest three tool turns, and only
the newest one can have come after that request, so "a request of the epoch
was answered" is the whole test and the head needs no list of calls. Whether
the provider's cache had expired by then is not in the log: this counts the
decisions that broke a prefix, the cost of slimming and compaction, not misses.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from cairn.events.codec import GENESIS
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    ContextSlimmed,
    EventBase,
    Request,
    SessionStarted,
    Usage,
)
from cairn.store.index_records import (
    CHECKPOINT,
    CORRUPT_KEY,
    LOC,
    U64,
    CorruptEntry,
    IndexMeta,
    SessionSummary,
    encoder,
    session_prefix,
)

#: the kinds whose body the summary reads
_BODY_KINDS = frozenset(
    {"usage", "checkpoint-committed", "session-started", "request", "assistant-message", "context-slimmed"}
)


class _Head(msgspec.Struct, dict=True):
    """The mutable summary of one session while a batch is being indexed.

    The same fields, in the same order, as `SessionSummary`, so a head
    encodes to exactly the bytes of its summary without being copied into
    one first (the writer stores one per session touched in every batch).
    `key` (the session's key prefix) is a plain attribute, not encoded.
    """

    sid: str
    last_seq: int
    head: str
    last_pos: int
    workspace: str
    model: str
    created_ts: int
    updated_ts: int
    events: int
    counts: dict[str, int]
    info_seq: int
    checkpoint_seq: int
    checkpoint_pos: int
    checkpoint_epoch: int
    last_usage_total_tokens: int | None
    broken_seq: int
    prompt_tokens: int
    completion_tokens: int
    prompt_reports: int
    completion_reports: int
    cache_reports: int
    cache_prompt_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cache_breaks_by_slimming: int
    cache_breaks_by_checkpoint: int
    cache_request_id: str
    cache_answered: bool

    def __post_init__(self) -> None:
        self.key = session_prefix(self.sid)

    @classmethod
    def of(cls, summary: SessionSummary) -> _Head:
        fields = list(msgspec.structs.astuple(summary))
        fields[_COUNTS] = dict(summary.counts)  # the head's own copy: it is updated in place
        return cls(*fields)


assert _Head.__struct_fields__ == SessionSummary.__struct_fields__
_COUNTS = _Head.__struct_fields__.index("counts")


def _count_cache(head: _Head, usage: Usage) -> None:
    """Add a usage event's cache reads and writes, and its whole prompt, when it reported reads."""
    reads = usage.cached_prompt_tokens
    if reads is None or reads < 0:
        return
    writes = usage.cache_write_tokens
    head.cache_reports += 1
    head.cache_prompt_tokens += usage.whole_prompt() or 0
    head.cache_read_tokens += reads
    head.cache_write_tokens += writes if isinstance(writes, int) and writes >= 0 else 0


class IndexBatch(msgspec.Struct):
    """The puts of one commit, per database, plus the new `through` position."""

    puts: dict[bytes, list[tuple[bytes, bytes]]]
    meta: IndexMeta


class IndexBuilder:
    """Turns log lines, in log order, into index puts: the one indexing path.

    Used by the writer for its batches and by recovery/reindex for scans, so a
    live index and a rebuilt one are equal by construction. It caches the
    sessions it touched (`head`), loading unknown ones with `load`; the cache
    keeps at most `max_cached` sessions beyond those of the batch in hand
    (oldest first out: an evicted one is reloaded from the committed index),
    so a host that touches millions of sessions keeps bounded memory. Not
    thread-safe: owned by one thread (the writer, or a recovery pass).
    """

    def __init__(
        self, load: Callable[[str], SessionSummary | None], meta: IndexMeta, *, max_cached: int = 4096
    ) -> None:
        self._load = load
        self._max_cached = max_cached
        self._heads: dict[str, _Head] = {}
        self._touched: dict[str, _Head] = {}
        self._events: list[tuple[bytes, bytes]] = []
        self._checkpoints: list[tuple[bytes, bytes]] = []
        self._corrupt: list[tuple[bytes, bytes]] = []
        self.meta = meta

    def head(self, sid: str) -> _Head:
        """The session's running summary (a new empty one for an unknown sid)."""
        head = self._heads.get(sid)
        if head is None:
            summary = self._load(sid)
            head = _Head.of(summary if summary is not None else SessionSummary(sid=sid))
            self._heads[sid] = head
        return head

    def add(
        self,
        head: _Head,
        seq: int,
        pos: int,
        ts: int,
        prev: str,
        digest: str,
        kind: str,
        event: EventBase | None,
        segment: int,
        offset: int,
        length: int,
    ) -> None:
        # long: runs once per appended event, so one body and no call per kind (the store bench measures it)
        """Index one valid line of `head`'s session (event None: an unknown kind).

        Positional arguments only: this runs once per appended event.
        """
        self._touched[head.sid] = head
        if seq != head.last_seq + 1 or prev != (head.head or GENESIS):
            if not head.broken_seq:
                head.broken_seq = min(seq, head.last_seq + 1)
            if seq <= head.last_seq:  # a duplicate seq: the first line keeps it
                return
        self._events.append((head.key + U64.pack(seq), LOC.pack(segment, offset, length, pos)))
        head.last_seq = seq
        head.head = digest
        head.last_pos = pos
        head.events += 1
        counts = head.counts
        counts[kind] = counts.get(kind, 0) + 1
        if not head.created_ts:
            head.created_ts = ts
        head.updated_ts = ts
        if kind in _BODY_KINDS:
            if isinstance(event, Usage):
                head.last_usage_total_tokens = event.total_tokens
                if event.prompt_tokens is not None:
                    head.prompt_tokens += event.prompt_tokens
                    head.prompt_reports += 1
                if event.completion_tokens is not None:
                    head.completion_tokens += event.completion_tokens
                    head.completion_reports += 1
                _count_cache(head, event)
            elif isinstance(event, Request):
                head.cache_request_id = event.request_id
            elif isinstance(event, AssistantMessage):
                if event.request_id == head.cache_request_id:
                    head.cache_answered = True
            elif isinstance(event, ContextSlimmed):
                if event.removed_call_ids and head.cache_answered:
                    head.cache_breaks_by_slimming += 1
            elif isinstance(event, CheckpointCommitted):
                head.checkpoint_seq = seq
                head.checkpoint_pos = pos
                head.checkpoint_epoch = event.epoch
                self._checkpoints.append((head.key + U64.pack(event.epoch), CHECKPOINT.pack(seq, pos)))
                if head.cache_answered:
                    head.cache_breaks_by_checkpoint += 1
                head.cache_request_id, head.cache_answered = "", False
            elif isinstance(event, SessionStarted):
                head.info_seq = seq
                head.workspace = event.workspace
                head.model = event.model

    def add_corrupt(self, entry: CorruptEntry) -> None:
        """Record an invalid line; its session (when known) fails closed from its seq."""
        key = CORRUPT_KEY.pack(entry.segment, entry.offset)
        self._corrupt.append((key, encoder.encode(entry)))
        if entry.sid:
            head = self.head(entry.sid)
            self._touched[entry.sid] = head
            broken = entry.seq if entry.seq else head.last_seq + 1
            if not head.broken_seq or broken < head.broken_seq:
                head.broken_seq = broken

    def take(self) -> IndexBatch:
        """The puts gathered since the last take, ready for `Index.commit`."""
        encode = encoder.encode
        puts: dict[bytes, list[tuple[bytes, bytes]]] = {
            b"events": self._events,
            b"sessions": [(sid.encode(), encode(head)) for sid, head in self._touched.items()],
            b"checkpoints": self._checkpoints,
            b"corrupt": self._corrupt,
        }
        self._events, self._checkpoints, self._corrupt = [], [], []
        touched, self._touched = self._touched, {}
        self._evict(keep=touched)
        return IndexBatch(puts, self.meta)

    def _evict(self, keep: dict[str, _Head]) -> None:
        """Drop the oldest cached sessions over the cap, never those of the batch being committed."""
        excess = len(self._heads) - self._max_cached
        if excess <= 0:
            return
        for sid in list(self._heads):
            if excess <= 0:
                break
            if sid not in keep:
                del self._heads[sid]
                excess -= 1

    @property
    def pending(self) -> int:
        return len(self._events) + len(self._corrupt)
