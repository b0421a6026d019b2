"""The compaction service (C1-C12): decide a verified replacement and the events that record it.

`Compactor.compact(request)` is a decision, not an effect: it returns the
events the session must persist (any `compaction-failed`, then the
`checkpoint-committed`) and never writes the log. Its steps, in order:

1. C1: strip the hand-off; count the source.
2. C2/C3: the pre-compaction hook may block (`CompactionBlocked`, not a
   failure for the breaker).
3. C4: the breaker of (normalized workspace, session); an open breaker skips
   the model.
4. C10 target; C11 active task; C8 records (from the full source).
5. LLM path: restore recent files (W), sample the summary (C5-C7, C12),
   rebuild the ledger (C8), assemble (C9), pass the effect gate (C10 plus
   minimum progress, and K1's message and byte limits, so a checkpoint is
   never refused on write). Any failure is one `compaction-failed` event and the
   breaker's count goes up.
6. Otherwise the deterministic fallback (F1-F5), built for at most 90 % of
   the source (`gates.fallback_target`). If it still saves under 10 % (the
   notice and the task alone are that large), nothing is committed:
   `CompactionIneffective` carries the
   `compaction-failed` events (the LLM path's, then the fallback's
   `insufficient-reduction`) for the session to persist before it fails the
   turn (threshold: phase `compaction`; reactive: the original provider
   error, R3).

A summary counts only when it names all seven ledger headings (C7); one
that does not is a `malformed` failure, and the fallback applies.

Time comes in as `now_ms`; retries sleep through the injected `sleep`
(their waits follow `actors.provider.retry`, with the injected random
`draw` for jitter); the only I/O is the injected file reader of W.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from cairn.actors.compactor.active_task import active_task_message, task_text
from cairn.actors.compactor.breaker import DEFAULT_COOLDOWN_MS, BreakerView, breaker_view
from cairn.actors.compactor.checkpoint import source_hash, strip_handoff
from cairn.actors.compactor.errors import CompactionBlocked, CompactionIneffective, NothingToCompact
from cairn.actors.compactor.fallback import plan_fallback
from cairn.actors.compactor.files import (
    FilePlan,
    Restoration,
    files_message,
    plan_restoration,
    read_recent_files,
)
from cairn.actors.compactor.gates import effect_gate, effect_target, fallback_target, reduction_gate
from cairn.actors.compactor.hooks import HookContext, PreCompactionHook
from cairn.actors.compactor.ledger import RecordSet, extract_records, record_texts
from cairn.actors.compactor.prompt import PROMPT_VERSION, images_in
from cairn.actors.compactor.replacement import (
    assemble,
    fallback_summary_message,
    message_ids,
    retained_tail,
    summary_message,
)
from cairn.actors.compactor.sampling import Draw, Sampled, Sleep, sample_summary
from cairn.actors.provider.base import Provider, UsageReport
from cairn.actors.provider.retry import RetryPolicy
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import (
    CHECKPOINT_VERSION,
    MAX_REPLACEMENT_BYTES,
    MAX_REPLACEMENT_MESSAGES,
    Carried,
    CheckpointCommitted,
    CheckpointDiagnostics,
    CompactionFailed,
    FailureReason,
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


class _Llm(msgspec.Struct, frozen=True, kw_only=True):
    """The LLM path's result: a checkpoint on success, a failure reason otherwise."""

    sampled: Sampled | None
    restoration: Restoration
    replacement: tuple[Message, ...] = ()
    tokens: int = 0
    failure: FailureReason | None = None
    detail: str = ""


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
        state = request.state
        source = strip_handoff(request.source if request.source is not None else state.context)  # C1
        if not source:
            raise NothingToCompact(f"session {state.sid} has nothing to compact")
        source_tokens = self.counter.messages(source)
        breaker = breaker_view(
            state, request.workspace, request.now_ms, cooldown_ms=self.config.breaker_cooldown_ms
        )
        self._run_hook(request, source, source_tokens, breaker)  # C2, C3
        window = request.context_window
        if window is None and state.info is not None:
            window = state.info.context_window
        target = effect_target(source_tokens, window)  # C10
        epoch = state.epoch + 1
        summary_id, _, task_id = message_ids(epoch)
        task = task_text(state.carried.open_turn)  # C11
        task_message = active_task_message(task, task_id)
        records = extract_records(record_texts(source))  # C8, from the full source

        llm: _Llm | None = None
        if breaker.allows_llm:
            llm = self._llm_path(request, source, source_tokens, target, records, task_message)
        events: list[CompactionFailed | CheckpointCommitted] = []
        carried: Carried
        if llm is not None and llm.failure is None and llm.sampled is not None:
            carried = carried_for_checkpoint(state, reset_breaker=True)
            replacement, tokens, strategy = llm.replacement, llm.tokens, "llm"
            omitted = len(source) - sum(1 for m in replacement if m.meta.seq)
            truncated = 0
            files_restored = tuple(f.path for f in llm.restoration.files)
        else:
            carried = carried_for_checkpoint(state, reset_breaker=False)
            if llm is not None:
                failure = CompactionFailed(
                    epoch=state.epoch,
                    attempt=llm.sampled.calls if llm.sampled is not None else 0,
                    reason=llm.failure or "error",
                    consecutive_failures=breaker.failures + 1,
                    trigger=request.trigger,
                    detail=llm.detail,
                    workspace=breaker.workspace,
                )
                events.append(failure)
                carried = msgspec.structs.replace(
                    carried,
                    compaction_failures=failure.consecutive_failures,
                    last_compaction_failure_ts=request.now_ms,
                )
            target = fallback_target(target, source_tokens)  # 90 % of the source at most; F2 may raise it
            plan = plan_fallback(
                source,
                summary=fallback_summary_message(records.records, summary_id),
                task_message=task_message,
                task=task,
                target=target,
                counter=self.counter,
            )
            reduced = reduction_gate(source_tokens, plan.tokens)
            if not reduced.passed:
                raise self._ineffective(request, breaker, events, f"fallback: {reduced.detail}")
            replacement, tokens, strategy = plan.replacement, plan.tokens, "fallback"
            omitted, truncated, files_restored = plan.omitted_messages, plan.truncated_messages, ()
        if request.trigger == "reactive":
            carried = msgspec.structs.replace(carried, reactive_since_response=True)  # R2
        sampled = llm.sampled if llm is not None else None
        diagnostics = CheckpointDiagnostics(
            attempts=sampled.calls if sampled is not None else 0,
            reductions=sampled.reductions if sampled is not None else (),
            omitted_messages=omitted,
            omitted_files=llm.restoration.rejected if llm is not None else (),
            images_omitted=images_in(source),
            target_tokens=target,
            failure_reason=_failure_reason(llm) if strategy == "fallback" else None,
            model_usage_tokens=sampled.total_tokens if sampled is not None else 0,
            retry_delays_ms=sampled.delays_ms if sampled is not None else (),
            retry_after_ms=_hints(sampled),
            prompt_chars=sampled.prompt_chars if sampled is not None else (),
            records=len(records.records),
            records_omitted=records.omitted,
            breaker=breaker.mode,
            truncated_messages=truncated,
            failure_detail=llm.detail if llm is not None and strategy == "fallback" else "",
        )
        checkpoint = CheckpointCommitted(
            version=CHECKPOINT_VERSION,
            epoch=epoch,
            through_seq=request.through_seq if request.through_seq is not None else state.last_seq,
            trigger=request.trigger,
            strategy="llm" if strategy == "llm" else "fallback",
            source_tokens=source_tokens,
            replacement_tokens=tokens,
            replacement_messages=replacement,
            files_restored=files_restored,
            source_hash=source_hash(source),
            prompt_version=PROMPT_VERSION,
            raw_summary=sampled.raw_text if sampled is not None and strategy == "llm" else None,
            diagnostics=diagnostics,
            carried=carried,
        )
        events.append(checkpoint)
        usage = None
        if sampled is not None and sampled.calls:
            usage = UsageReport(
                prompt_tokens=sampled.prompt_tokens,
                completion_tokens=sampled.completion_tokens,
                total_tokens=sampled.total_tokens,
            )
        return CompactionOutcome(events=tuple(events), checkpoint=checkpoint, breaker=breaker, usage=usage)

    @staticmethod
    def _ineffective(
        request: CompactionRequest,
        breaker: BreakerView,
        events: list[CompactionFailed | CheckpointCommitted],
        detail: str,
    ) -> CompactionIneffective:
        """Nothing to commit: the failures so far, plus the fallback's, keeping the breaker's count."""
        failures = tuple(e for e in events if isinstance(e, CompactionFailed))
        count = failures[-1].consecutive_failures if failures else breaker.failures
        event = CompactionFailed(
            epoch=request.state.epoch,
            attempt=0,
            reason="insufficient-reduction",
            consecutive_failures=count,
            trigger=request.trigger,
            detail=detail,
            workspace=breaker.workspace,
        )
        return CompactionIneffective(detail, (*failures, event))

    def _run_hook(
        self, request: CompactionRequest, source: tuple[Message, ...], tokens: int, breaker: BreakerView
    ) -> None:
        if self.hook is None:
            return
        context = HookContext(
            session=request.state.sid,
            workspace=breaker.workspace,
            trigger=request.trigger,
            message_count=len(source),
            tokens=tokens,
        )
        verdict = self.hook(context)
        if verdict is not None and verdict.block:
            reason = verdict.reason or "blocked by the host"
            event = CompactionFailed(
                epoch=request.state.epoch,
                attempt=0,
                reason="blocked",
                consecutive_failures=breaker.failures,
                trigger=request.trigger,
                detail=reason,
                workspace=breaker.workspace,
            )
            raise CompactionBlocked(reason, event)

    def _llm_path(
        self,
        request: CompactionRequest,
        source: tuple[Message, ...],
        source_tokens: int,
        target: int,
        records: RecordSet,
        task_message: Message | None,
    ) -> _Llm:
        state = request.state
        summary_id, files_id, _ = message_ids(state.epoch + 1)
        restoration = Restoration()
        if self.config.restore_files:
            plan = plan_restoration(state.carried.recent_files, request.workspace)
            restoration = self.read_files(plan, request.workspace)
        sampled = sample_summary(
            self.provider,
            model=self.model,
            source=source,
            files=restoration.files,
            sleep=self.sleep,
            request_id=f"{state.sid}:compact:{state.epoch + 1}",
            timeout_s=self.config.summary_timeout_s,
            retry=self.retry,
            draw=self.draw,
        )
        if sampled.raw_text is None:
            return _Llm(
                sampled=sampled,
                restoration=restoration,
                failure=sampled.failure or "error",
                detail=sampled.detail,
            )
        summary = summary_message(sampled.raw_text, records.records, summary_id)
        files = files_message(restoration.files, files_id)
        replacement = assemble(summary, retained_tail(source), files, task_message)  # C9
        tokens = self.counter.messages(replacement)
        verdict = effect_gate(source_tokens, tokens, target)  # C10 + minimum progress
        if verdict.passed and len(replacement) > MAX_REPLACEMENT_MESSAGES:  # K1, beyond C10
            detail = f"replacement of {len(replacement)} messages, over {MAX_REPLACEMENT_MESSAGES}"
            verdict = msgspec.structs.replace(verdict, passed=False, detail=detail)
        if verdict.passed and len(msgspec.json.encode(replacement)) > MAX_REPLACEMENT_BYTES:
            verdict = msgspec.structs.replace(verdict, passed=False, detail="replacement over 16 MiB")
        if not verdict.passed:
            return _Llm(
                sampled=sampled,
                restoration=restoration,
                failure="insufficient-reduction",
                detail=verdict.detail,
            )
        return _Llm(sampled=sampled, restoration=restoration, replacement=replacement, tokens=tokens)


def _hints(sampled: Sampled | None) -> tuple[int | None, ...]:
    """The server's hint behind each retry delay; empty when no server gave one."""
    if sampled is None or all(hint is None for hint in sampled.hints_ms):
        return ()
    return sampled.hints_ms


def _failure_reason(llm: _Llm | None) -> str:
    """Why the fallback was used: the LLM path's failure, or the open breaker."""
    return "breaker-open" if llm is None else llm.failure or "error"
