"""What the host gives every session actor: its collaborators and tunables, shared and read-only."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cairn.actors.compactor.hooks import PreCompactionHook
from cairn.actors.compactor.service import CompactionConfig
from cairn.actors.provider.base import Provider
from cairn.actors.provider.retry import RetryPolicy
from cairn.actors.tokens import Encoding
from cairn.actors.tool_runner import ToolRunner
from cairn.actors.tools import ToolExecutor
from cairn.events.codec import Record
from cairn.store.backend import JournalBackend


@dataclass(frozen=True)
class Runtime:
    """The host's dependencies and settings, shared by all its sessions (read-only).

    A dataclass, not a struct: it holds live objects (the journal, callables),
    never encoded. The host builds it once (`Host.open`) from its `HostConfig`.
    """

    journal: JournalBackend
    adapter_for: Callable[[str], Provider]
    tools: ToolExecutor | None
    clock_ms: Callable[[], int]
    sleep: Callable[[float], None]
    hook: PreCompactionHook | None = None
    compaction: CompactionConfig | None = None
    encoding: Encoding | None = None
    request_timeout_s: float | None = None
    max_requests_per_turn: int = 64
    #: transient provider errors before any output: how often a turn's request is sent again
    turn_retries: int = 2
    #: the waits before those retries and the summary calls' (C5 floor, `Retry-After`, cap, jitter)
    retry: RetryPolicy = RetryPolicy()  # noqa: RUF009 (immutable, safe to share)
    #: a random number in [0, 1) for the jitter of a hinted wait
    retry_draw: Callable[[], float] = random.random
    #: the threads tool calls run on, within their timeout (None: on the session's own thread)
    tool_runner: ToolRunner | None = None
    #: the text of one tool result kept in the log (None: all of it)
    max_tool_output_chars: int | None = None
    append_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0
    #: how long a deferred tool call waits for `Host.resolve_tool` (`tools.Deferred`)
    deferred_timeout_s: float = 3_600.0
    #: told `(session, records)` after every append of every session (`Host.add_record_listener`);
    #: the list is the host's, added to while it runs
    record_listeners: list[Callable[[str, list[Record]], None]] = field(default_factory=list)
