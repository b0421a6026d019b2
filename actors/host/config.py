"""A host's tunables: one frozen settings object, `HostConfig`, passed to `Host.open`."""

from __future__ import annotations

import math

import msgspec

from cairn.actors.compactor.service import CompactionConfig
from cairn.actors.provider.retry import RetryPolicy
from cairn.actors.session.tool_budget import MAX_STORED_OUTPUT_CHARS
from cairn.events.errors import InputError


class HostConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How a host runs its sessions: limits, timeouts, retries, compaction (immutable, safe to share).

    Values only: what a host is given to work with (the provider, the tools,
    the pre-compaction hook, the journal, and the clock, sleep and fsync
    seams) stays an argument of `Host.open`, and what a new session starts
    with is its `SessionSettings`.

    - `max_live_sessions`: session actors alive at once (at least 1); a new
      session waits for an idle one to be passivated (LRU), and raises
      `HostBusy` after `slot_timeout_s` when every slot stays busy.
    - `idle_timeout_s`: a session idle that long is passivated, by a sweeper
      thread when `sweep` (else only by `Host.passivate_idle()`).
    - `ask_timeout_s`: how long a load or a query of a session may take.
    - `request_timeout_s`: each provider request's timeout, passed to the
      adapter as `ProviderRequest.timeout_s` (None: the adapter's own, which
      must be finite: `OpenAIProvider`'s and `AnthropicProvider`'s are
      `CAIRN_TIMEOUT_S`, 600 s);
      `max_requests_per_turn`: requests one turn may make before it fails.
      Every timeout here is finite (README, "The host contract").
    - `turn_retries`: how often a turn's request is sent again after a
      transient provider error (rate limit, 5xx, timeout, reset) that came
      before any output, after 375 ms then 750 ms (as C5 waits for
      summaries), or after the server's `Retry-After` on a 429 or 503 (with
      jitter; a hint over the cap fails the turn at once); 0 fails the turn
      at the first one. Each try is in the log: a `provider-error` (with the
      hint and the wait), then a `request` with the next attempt.
    - `retry`: those waits (the schedule, the cap of 60 s on a server's hint,
      the jitter), for turns and summary calls alike.
    - `compaction`: the compactor's settings (None: its defaults).
    - `tool_timeout_s`: how long one tool call may run (finite); past it the
      model gets an error result saying so and the turn goes on. The call's
      thread is not stopped (Python cannot): its result is dropped when it
      comes. `tool_threads`: the host's threads for tool calls (at least 1),
      hung ones included, so hung tools never cost more; with every one
      busy, a call waits for one within its timeout, else is not run.
    - `append_timeout_s`: how long a session waits for the log to acknowledge
      an append (30 s); past it the append's outcome is unknown
      (`AppendTimeout`), and before the session writes again it reads the
      log to learn whether the append landed (waiting up to as long again).
    - `deferred_timeout_s`: how long a turn waits for the result of a call
      whose executor returned `Deferred` (and `Host.resolve_tool` posts),
      unless the `Deferred` says; past it the model gets an error result.
    - `stop_timeout_s`: how long stopping a session waits for its actor, and
      closing the host for all of them together (10 s): a turn whose provider
      hangs holds its session's stop that long, then is left behind (ended
      interrupted); closing stops every session at once.
    - `max_tool_output_chars`: the text of one tool result kept in the log
      (the first and last halves, after a line saying how much was cut;
      the model sees X1's preview of that); None keeps every result whole
      (X3: large ones go to the blob store).
    """

    max_live_sessions: int = 256
    idle_timeout_s: float = 120.0
    sweep: bool = True
    ask_timeout_s: float = 30.0
    slot_timeout_s: float = 60.0
    request_timeout_s: float | None = None
    max_requests_per_turn: int = 64
    turn_retries: int = 2
    retry: RetryPolicy = RetryPolicy()
    compaction: CompactionConfig | None = None
    tool_timeout_s: float = 300.0
    tool_threads: int = 32
    append_timeout_s: float = 30.0
    max_tool_output_chars: int | None = MAX_STORED_OUTPUT_CHARS
    deferred_timeout_s: float = 3_600.0
    stop_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.stop_timeout_s < math.inf:
            raise InputError(
                f"stop_timeout_s must be a finite number of seconds over 0, not {self.stop_timeout_s}"
            )
        if not 0 < self.deferred_timeout_s < math.inf:
            raise InputError(
                f"deferred_timeout_s must be a finite number of seconds over 0, not {self.deferred_timeout_s}"
            )
        if not 0 < self.append_timeout_s < math.inf:
            raise InputError(
                f"append_timeout_s must be a finite positive number of seconds, got {self.append_timeout_s}"
            )
        if not 0 < self.tool_timeout_s < math.inf:
            raise InputError(
                f"tool_timeout_s must be a finite positive number of seconds, got {self.tool_timeout_s}"
            )
        if self.tool_threads < 1:
            raise InputError(f"tool_threads must be at least 1, got {self.tool_threads}")
        if self.max_tool_output_chars is not None and self.max_tool_output_chars < 1:
            raise InputError(
                f"max_tool_output_chars must be at least 1 or None, got {self.max_tool_output_chars}"
            )
        timeout = self.request_timeout_s
        if timeout is not None and not 0 < timeout < math.inf:
            raise InputError(
                f"request_timeout_s must be a finite positive number of seconds or None, got {timeout}"
            )
        if self.max_live_sessions < 1:
            raise InputError(f"max_live_sessions must be at least 1, got {self.max_live_sessions}")
