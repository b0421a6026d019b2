"""The compaction service (C1-C12): decide a verified replacement and the events that record it.

`Compactor.compact(request)` returns the events the session must persist
(any `compaction-failed`, then the `checkpoint-committed`) and never writes
the log. Its steps, in order:

1. C1: strip the hand-off; count the source. With C4's breaker (keyed by
   the session and the `breaker_key` of the workspace), C10's target
   (beyond C10: at most half the session's input budget, `gates`),
   C11's active task and C8's records (from the full source, next actions
   settled by the spent rule, `ledger`), this is the `Basis` both strategies
   work from.
2. C2/C3: the pre-compaction hook may block (`CompactionBlocked`, not a
   failure for the breaker).
3. C4: an open breaker skips the model. Otherwise the LLM path: restore
   recent files (W), sample the summary (C5-C7, C12), and judge it into a
   `Choice` (`choice.llm_choice`: C8 ledger, C9 assembly, the C10 effect
   gate with minimum progress, K1's limits). A choice that passes is
   committed, and resets the breaker.
4. Otherwise its failure is one `compaction-failed` event (the breaker's
   count goes up) and the deterministic fallback (F1-F5) is judged
   (`choice.fallback_choice`), built for at most 90 % of the source. If it
   still saves under 10 % (the notice and the task alone are that large),
   nothing is committed: `CompactionIneffective` carries the
   `compaction-failed` events (the LLM path's, then the fallback's
   `insufficient-reduction`) for the session to persist before it fails the
   turn (threshold: phase `compaction`; reactive: the original provider
   error, R3).

A summary counts only when it names all seven ledger headings (C7) and its
own lines come from the transcript (beyond C7, `grounding`: not noise, not
one line repeated under every heading); one that does not is a `malformed`
failure, and the fallback applies.

Effects, all injected or handed in: the provider's summary calls (at most
three, C5), the waits between them through `sleep` (their lengths follow
`actors.provider.retry`, with `draw` for jitter), the file reader of W, and
the host's hook. Time comes in as `now_ms`; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from msgspec import UNSET

from cairn.actors.budget_rule import input_budget_of
from cairn.actors.compactor.active_task import active_task_message, task_text
from cairn.actors.compactor.breaker import DEFAULT_COOLDOWN_MS, BreakerView, breaker_view
from cairn.actors.compactor.checkpoint import source_hash, strip_handoff
from cairn.actors.compactor.choice import Basis, Choice, fallback_choice, llm_choice
from cairn.actors.compactor.errors import CompactionBlocked, CompactionIneffective, NothingToCompact
from cairn.actors.compactor.files import FilePlan, Restoration, plan_restoration, read_recent_files
from cairn.actors.compactor.gates import effect_target, median_growth, provider_permille, room_for, turn_sizes
from cairn.actors.compactor.hooks import HookContext, PreCompactionHook
from cairn.actors.compactor.ledger import source_records
from cairn.actors.compactor.replacement import fallback_summary_message, message_ids
from cairn.actors.compactor.sampling import Draw, Sleep, sample_summary
from cairn.actors.provider.base import Provider, UsageReport, endpoint_output_cap, endpoint_window
from cairn.actors.provider.retry import RetryPolicy
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import (
    CHECKPOINT_VERSION,
    Carried,
    CheckpointCommitted,
    CompactionFailed,
    Trigger,
)
from cairn.events.model import Message
from cairn.events.state import SessionState, carried_for_checkpoint

FileReader = Callable[[FilePlan, str], Restoration]


class CompactionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of the compactor (C4 cooldown, W restoration, the summary call's timeout)."""

    breaker_cooldown_ms: int = DEFAULT_COOLDOWN_MS
    restore_files: bool = True
    summary_timeout_s: float | None = None
    #: (beyond C7, `grounding`) refuse a summary whose own lines share no word with the transcript;
    #: False only for a bench baseline that commits a blank summary on purpose
    require_grounding: bool = True


def _smaller_known(session: int | None, endpoint: int | None) -> int | None:
    """The window (or output cap) a summary call is fitted to: the smaller of the session's and
    the endpoint's, either when only one is known."""
    known = [w for w in (session, endpoint) if w is not None]
    return min(known) if known else None


class CompactionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One compaction of `state`'s session.

    `source` defaults to the effective context (pass the snip result when a
    snip was planned, L1); `context_window` and `through_seq` default to the
    session's window and last seq.
    """

    state: SessionState
    workspace: str
    trigger: Trigger
    now_ms: int
    source: tuple[Message, ...] | None = None
    context_window: int | None = None
    through_seq: int | None = None


class CompactionOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What the session persists (in order: `events`) and what it may report."""

    events: tuple[CompactionFailed | CheckpointCommitted, ...]
    checkpoint: CheckpointCommitted
    breaker: BreakerView
    usage: UsageReport | None = None

    @property
    def replacement(self) -> tuple[Message, ...]:
        return self.checkpoint.replacement_messages

    @property
    def strategy(self) -> str:
        return self.checkpoint.strategy

    @property
    def failure(self) -> CompactionFailed | None:
        return next((e for e in self.events if isinstance(e, CompactionFailed)), None)


class Compactor:
    """Builds verified replacements; one per session, used from the compactor actor's thread."""

    def __init__(
        self,
        provider: Provider,
        *,
        model: str,
        sleep: Sleep,
        counter: TokenCounter | None = None,
        hook: PreCompactionHook | None = None,
        read_files: FileReader = read_recent_files,
        config: CompactionConfig | None = None,
        retry: RetryPolicy | None = None,
        draw: Draw | None = None,
    ) -> None:
        """`retry`: the summary calls' wait policy (C5 floor, `Retry-After` cap);
        `draw`: the jitter's random number in [0, 1) (default: no jitter)."""
        self.provider = provider
        self.model = model
        self.sleep = sleep
        self.counter = counter if counter is not None else TokenCounter()
        self.hook = hook
        self.read_files = read_files
        self.config = config if config is not None else CompactionConfig()
        self.retry = retry if retry is not None else RetryPolicy()
        self.draw = draw

    def compact(self, request: CompactionRequest) -> CompactionOutcome:
        """C1-C12: the events recording one compaction of the session (the steps in the module doc).

        Raises `NothingToCompact`, `CompactionBlocked` (C3) or `CompactionIneffective`.
        """
        basis = self._basis(request)  # C1, C4, C8, C10, C11
        self._run_hook(request, basis)  # C2, C3
        llm = self._llm_choice(request, basis) if basis.breaker.allows_llm else None  # C4
        if llm is not None and llm.failure is None:
            return _outcome(request, basis, llm, failed=())
        failed = () if llm is None or llm.failure is None else (llm.failure,)
        fallback = fallback_choice(basis, llm, self.counter)
        if fallback.failure is not None:
            raise CompactionIneffective(fallback.failure.detail, (*failed, fallback.failure))
        return _outcome(request, basis, fallback, failed)

    def _basis(self, request: CompactionRequest) -> Basis:
        """What both strategies work from; raises `NothingToCompact` for an empty source (C1)."""
        state = request.state
        source = strip_handoff(request.source if request.source is not None else state.context)  # C1
        if not source:
            raise NothingToCompact(f"session {state.sid} has nothing to compact")
        source_tokens = self.counter.messages(source)
        window = request.context_window
        if window is None and state.info is not None:
            window = state.info.context_window
        reserve_cap = state.info.max_output_tokens if state.info is not None else None
        epoch = state.epoch + 1
        task = task_text(state.carried.open_turn)  # C11
        task_message = active_task_message(task, message_ids(epoch)[2])
        records = source_records(source)  # C8 and the spent rule, from the full source
        budget = input_budget_of(window, reserve_cap)
        target = effect_target(source_tokens, window, budget)  # C10
        room = self._room(state, source, budget)
        mandatory = [fallback_summary_message(records.records, message_ids(epoch)[0])]
        if task_message is not None:
            mandatory.append(task_message)
        smallest = self.counter.messages(mandatory)
        if room >= smallest:  # the room rule, where even the smallest replacement can meet it
            target = min(target, room)
        return Basis(
            state=state,
            trigger=request.trigger,
            epoch=epoch,
            source=source,
            source_tokens=source_tokens,
            breaker=breaker_view(
                state, request.workspace, request.now_ms, cooldown_ms=self.config.breaker_cooldown_ms
            ),
            target=target,
            room=room,
            task=task,
            task_message=task_message,
            records=records,
        )

    def _room(self, state: SessionState, source: tuple[Message, ...], budget: int | None) -> int:
        """The room rule's target for `source` (`gates.room_for`), 0 when it has none."""
        growth = median_growth(turn_sizes(source, self.counter.messages))
        info = state.info
        fixed = 0
        if info is not None:
            fixed = self.counter.text(info.system_prompt) + sum(
                self.counter.text(t) for t in info.tool_schemas
            )
        return room_for(budget, fixed, growth, _provider_permille(state))

    def _run_hook(self, request: CompactionRequest, basis: Basis) -> None:
        """C2/C3: show the host's hook the compaction; raise `CompactionBlocked` if it refuses."""
        if self.hook is None:
            return
        context = HookContext(
            session=request.state.sid,
            workspace=basis.breaker.workspace,
            trigger=request.trigger,
            message_count=len(basis.source),
            tokens=basis.source_tokens,
        )
        verdict = self.hook(context)
        if verdict is not None and verdict.block:
            reason = verdict.reason or "blocked by the host"
            event = CompactionFailed(
                epoch=request.state.epoch,
                attempt=0,
                reason="blocked",
                consecutive_failures=basis.breaker.failures,
                trigger=request.trigger,
                detail=reason,
                workspace=basis.breaker.workspace,
            )
            raise CompactionBlocked(reason, event)

    def _llm_choice(self, request: CompactionRequest, basis: Basis) -> Choice:
        """The LLM path's I/O (read the recent files, W; sample the summary, C5-C7), then its choice."""
        state = request.state
        restoration = Restoration()
        if self.config.restore_files:
            plan = plan_restoration(state.carried.recent_files, request.workspace)
            restoration = self.read_files(plan, request.workspace)
        sampled = sample_summary(
            self.provider,
            model=self.model,
            source=basis.source,
            files=restoration.files,
            sleep=self.sleep,
            request_id=f"{state.sid}:compact:{basis.epoch}",
            timeout_s=self.config.summary_timeout_s,
            retry=self.retry,
            draw=self.draw,
            context_window=_smaller_known(
                request.context_window or (state.info.context_window if state.info else None),
                endpoint_window(self.provider),
            ),
            output_cap=_smaller_known(
                state.info.max_output_tokens if state.info is not None else None,
                endpoint_output_cap(self.provider),
            ),
            counter=self.counter,
        )
        return llm_choice(
            basis, sampled, restoration, self.counter, require_grounding=self.config.require_grounding
        )


def _outcome(
    request: CompactionRequest, basis: Basis, choice: Choice, failed: tuple[CompactionFailed, ...]
) -> CompactionOutcome:
    """The checkpoint of `choice`, after this compaction's `failed` events (at most the LLM path's)."""
    checkpoint = CheckpointCommitted(
        version=CHECKPOINT_VERSION,
        epoch=basis.epoch,
        through_seq=request.through_seq if request.through_seq is not None else request.state.last_seq,
        trigger=request.trigger,
        strategy=choice.strategy,
        source_tokens=basis.source_tokens,
        replacement_tokens=choice.tokens,
        replacement_messages=choice.replacement,
        files_restored=choice.files_restored,
        source_hash=source_hash(basis.source),
        prompt_version=choice.prompt_version,
        raw_summary=choice.raw_summary,
        diagnostics=msgspec.structs.replace(
            choice.diagnostics, room_missed=basis.room > 0 and choice.tokens > basis.room
        ),
        carried=_carried(request, choice, failed),
    )
    return CompactionOutcome(
        events=(*failed, checkpoint), checkpoint=checkpoint, breaker=basis.breaker, usage=choice.usage
    )


def _carried(request: CompactionRequest, choice: Choice, failed: tuple[CompactionFailed, ...]) -> Carried:
    """What the checkpoint carries: the breaker reset by an LLM success or moved by a failure (C4),
    and R2's flag after a reactive compaction."""
    carried = carried_for_checkpoint(request.state, reset_breaker=choice.strategy == "llm")
    if failed:
        carried = msgspec.structs.replace(
            carried,
            compaction_failures=failed[-1].consecutive_failures,
            last_compaction_failure_ts=request.now_ms,
        )
    if request.trigger == "reactive":
        carried = msgspec.structs.replace(carried, reactive_since_response=True)  # R2
    return carried


def _provider_permille(state: SessionState) -> int | None:
    """The room rule's scale: the provider's count of the last request per 1,000 of cairn's own
    (its `counted_tokens`); None when the log has no such pair (no usage, an older line)."""
    request, usage = state.last_request, state.last_usage
    if request is None or usage is None or request.counted_tokens is UNSET:
        return None
    return provider_permille(usage.whole_prompt(), request.counted_tokens)
