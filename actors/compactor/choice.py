"""What each strategy of one compaction offers, as one `Choice` (pure: values in, values out).

Both strategies work from one `Basis` (C1's stripped source and its tokens,
C4's breaker, C10's target, C11's task, C8's records). Each is judged into a
`Choice`: the replacement it would commit and the diagnostics that say how
it came to be, or, when its gate refuses, the `compaction-failed` event that
says why (then `replacement` is empty).

| strategy         | built by          | gate                                | on failure, the breaker (C4) |
|------------------|-------------------|-------------------------------------|------------------------------|
| LLM (C5-C9, W)   | `llm_choice`      | `grounding`, `effect_gate` (C10, 10 % saved), K1 | count + 1       |
| fallback (F1-F5) | `fallback_choice` | `reduction_gate` (10 % saved)       | count kept                   |

The LLM path fails with the sampling's reason (`empty`, `malformed`,
`overflow`, `error`) or its gate's `insufficient-reduction`; the fallback
only with `insufficient-reduction`, which keeps the breaker's count (the
model was not at fault). K1's message and byte limits are checked with the
gate, so a checkpoint is never refused on write. The fallback is built for
at most 90 % of the source (`gates.fallback_target`).

The fallback's diagnostics keep what the model attempt before it recorded
(calls, C6 reductions, delays and hints, prompt sizes, usage, refused
files, its failure and detail), or say `breaker-open` when the open breaker
skipped the model. The sampling itself and the reading of files (the I/O)
happen in `service`; their results come in as `Sampled` and `Restoration`.
"""

from __future__ import annotations

import msgspec

from cairn.actors.compactor.breaker import BreakerView
from cairn.actors.compactor.fallback import fit_tail, plan_fallback
from cairn.actors.compactor.files import Restoration, files_message
from cairn.actors.compactor.gates import GateVerdict, effect_gate, fallback_target, reduction_gate
from cairn.actors.compactor.grounding import transcript_words, ungrounded
from cairn.actors.compactor.ledger import RecordSet, summary_body
from cairn.actors.compactor.prompt import JSON_PROMPT_VERSION, PROMPT_VERSION, images_in
from cairn.actors.compactor.replacement import (
    assemble,
    fallback_summary_message,
    message_ids,
    retained_tail,
    summary_message,
)
from cairn.actors.compactor.sampling import Sampled
from cairn.actors.compactor.structured import render_ledger
from cairn.actors.provider.base import UsageReport
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import (
    MAX_REPLACEMENT_BYTES,
    MAX_REPLACEMENT_MESSAGES,
    CheckpointDiagnostics,
    CompactionFailed,
    FailureReason,
    Strategy,
    Trigger,
)
from cairn.events.model import Message
from cairn.events.state import SessionState

__all__ = ["Basis", "Choice", "fallback_choice", "llm_choice"]


class Basis(msgspec.Struct, frozen=True, kw_only=True):
    """What every strategy of one compaction works from, computed once before either runs."""

    state: SessionState
    trigger: Trigger
    #: the epoch of the checkpoint being built (the session's epoch + 1)
    epoch: int
    #: C1: the source with any earlier hand-off stripped
    source: tuple[Message, ...]
    source_tokens: int
    #: C4: the breaker when the compaction began
    breaker: BreakerView
    #: C10: the most tokens the LLM replacement may have (the room rule's, where it can be met)
    target: int
    #: (beyond C10, `gates.room_for`) the replacement size that leaves room for two turns; 0: none
    room: int = 0
    #: C11: the active task's text and its reminder (None: no open task)
    task: str
    task_message: Message | None
    #: C8: the exact records of the full source
    records: RecordSet


class Choice(msgspec.Struct, frozen=True, kw_only=True):
    """One strategy's answer: the replacement it would commit, or (`failure` set) why it cannot."""

    strategy: Strategy
    diagnostics: CheckpointDiagnostics
    replacement: tuple[Message, ...] = ()
    tokens: int = 0
    files_restored: tuple[str, ...] = ()
    #: the model's text the summary was built from (LLM only; an auditor re-derives from it)
    raw_summary: str | None = None
    #: what the summary calls cost, when any was made
    usage: UsageReport | None = None
    failure: CompactionFailed | None = None
    #: the ledger contract the replacement was built under (the checkpoint's `prompt_version`)
    prompt_version: str = PROMPT_VERSION


def llm_choice(
    basis: Basis,
    sampled: Sampled,
    restoration: Restoration,
    counter: TokenCounter,
    *,
    require_grounding: bool = True,
) -> Choice:
    """The LLM path's choice: the C9 replacement from the sampled summary, if it passes its gates
    (`grounding` first, unless `require_grounding` is False; then C10 and K1)."""
    diagnostics = _model_diagnostics(basis, sampled, restoration)
    usage = _usage(sampled)
    if sampled.raw_text is None:
        reason = sampled.failure or "error"
        return _llm_failed(basis, sampled, diagnostics, usage, reason, sampled.detail)
    if require_grounding:
        body = render_ledger(sampled.raw_text) if sampled.structured else summary_body(sampled.raw_text)
        why = ungrounded(body, transcript_words(basis.source))
        if why is not None:
            return _llm_failed(basis, sampled, diagnostics, usage, "malformed", why)
    summary_id, files_id, _ = message_ids(basis.epoch)
    summary = summary_message(
        sampled.raw_text, basis.records.records, summary_id, structured=sampled.structured
    )
    files = files_message(restoration.files, files_id)
    replacement = assemble(summary, retained_tail(basis.source), files, basis.task_message)  # C9
    tokens = counter.messages(replacement)
    verdict = _llm_gate(basis, replacement, tokens)
    restored = tuple(f.path for f in restoration.files)
    if not verdict.passed and tokens > basis.target:  # beyond C9: the tail fitted as F2-F5 fit theirs
        fitted = fit_tail(basis.source, summary, basis.task_message, basis.task, basis.target, counter)
        if _llm_gate(basis, fitted.replacement, fitted.tokens).passed:  # its tokens counted once (T1)
            replacement, tokens, restored = fitted.replacement, fitted.tokens, ()
            diagnostics = msgspec.structs.replace(diagnostics, tail_fitted=True)
            verdict = GateVerdict(True)
    if not verdict.passed:
        return _llm_failed(basis, sampled, diagnostics, usage, "insufficient-reduction", verdict.detail)
    kept = sum(1 for message in replacement if message.meta.seq)
    return Choice(
        strategy="llm",
        diagnostics=msgspec.structs.replace(diagnostics, omitted_messages=len(basis.source) - kept),
        replacement=replacement,
        tokens=tokens,
        files_restored=restored,
        raw_summary=sampled.raw_text,
        usage=usage,
        prompt_version=JSON_PROMPT_VERSION if sampled.structured else PROMPT_VERSION,
    )


def fallback_choice(basis: Basis, llm: Choice | None, counter: TokenCounter) -> Choice:
    """The fallback's choice (F1-F5) after the failed LLM choice `llm` (None: the breaker was open)."""
    target = fallback_target(basis.target, basis.source_tokens)  # 90 % of the source at most; F2 may raise it
    summary_id = message_ids(basis.epoch)[0]
    plan = plan_fallback(
        basis.source,
        summary=fallback_summary_message(basis.records.records, summary_id),
        task_message=basis.task_message,
        task=basis.task,
        target=target,
        counter=counter,
    )
    before = llm.diagnostics if llm is not None else _skipped_diagnostics(basis)
    diagnostics = msgspec.structs.replace(
        before,
        omitted_messages=plan.omitted_messages,
        target_tokens=target,
        truncated_messages=plan.truncated_messages,
    )
    usage = llm.usage if llm is not None else None
    reduced = reduction_gate(basis.source_tokens, plan.tokens)
    if not reduced.passed:
        failure = _insufficient(basis, llm, f"fallback: {reduced.detail}")
        return Choice(strategy="fallback", diagnostics=diagnostics, usage=usage, failure=failure)
    return Choice(
        strategy="fallback",
        diagnostics=diagnostics,
        replacement=plan.replacement,
        tokens=plan.tokens,
        usage=usage,
    )


def _llm_gate(basis: Basis, replacement: tuple[Message, ...], tokens: int) -> GateVerdict:
    """C10 and minimum progress, then K1's limits (beyond C10): the checkpoint must be writable."""
    verdict = effect_gate(basis.source_tokens, tokens, basis.target)
    if not verdict.passed:
        return verdict
    if len(replacement) > MAX_REPLACEMENT_MESSAGES:
        detail = f"replacement of {len(replacement)} messages, over {MAX_REPLACEMENT_MESSAGES}"
        return GateVerdict(False, detail)
    if len(msgspec.json.encode(replacement)) > MAX_REPLACEMENT_BYTES:
        return GateVerdict(False, "replacement over 16 MiB")
    return verdict


def _llm_failed(
    basis: Basis,
    sampled: Sampled,
    diagnostics: CheckpointDiagnostics,
    usage: UsageReport | None,
    reason: FailureReason,
    detail: str,
) -> Choice:
    """The LLM path's failure: one `compaction-failed` that counts for the breaker (C4)."""
    failure = CompactionFailed(
        epoch=basis.state.epoch,
        attempt=sampled.calls,
        reason=reason,
        consecutive_failures=basis.breaker.failures + 1,
        trigger=basis.trigger,
        detail=detail,
        workspace=basis.breaker.workspace,
    )
    diagnostics = msgspec.structs.replace(diagnostics, failure_reason=reason, failure_detail=detail)
    return Choice(strategy="llm", diagnostics=diagnostics, usage=usage, failure=failure)


def _insufficient(basis: Basis, llm: Choice | None, detail: str) -> CompactionFailed:
    """The fallback's refusal: `insufficient-reduction`, keeping the breaker's count as it stands."""
    count = llm.failure.consecutive_failures if llm is not None and llm.failure else basis.breaker.failures
    return CompactionFailed(
        epoch=basis.state.epoch,
        attempt=0,
        reason="insufficient-reduction",
        consecutive_failures=count,
        trigger=basis.trigger,
        detail=detail,
        workspace=basis.breaker.workspace,
    )


def _basis_diagnostics(basis: Basis) -> CheckpointDiagnostics:
    """The diagnostics every checkpoint of `basis` shares, whichever strategy made it."""
    return CheckpointDiagnostics(
        images_omitted=images_in(basis.source),  # C12
        target_tokens=basis.target,
        room_tokens=basis.room,
        records=len(basis.records.records),
        records_omitted=basis.records.omitted,
        breaker=basis.breaker.mode,
    )


def _model_diagnostics(basis: Basis, sampled: Sampled, restoration: Restoration) -> CheckpointDiagnostics:
    """What the model attempt recorded: its calls, shrink steps, waits, prompt sizes, refused files."""
    return msgspec.structs.replace(
        _basis_diagnostics(basis),
        attempts=sampled.calls,
        reductions=sampled.reductions,
        omitted_files=restoration.rejected,
        model_usage_tokens=sampled.total_tokens,
        retry_delays_ms=sampled.delays_ms,
        retry_after_ms=_hints(sampled),
        prompt_chars=sampled.prompt_chars,
    )


def _skipped_diagnostics(basis: Basis) -> CheckpointDiagnostics:
    """No model attempt: the open breaker skipped it (C4)."""
    return msgspec.structs.replace(_basis_diagnostics(basis), failure_reason="breaker-open")


def _hints(sampled: Sampled) -> tuple[int | None, ...]:
    """The server's hint behind each retry delay; empty when no server gave one."""
    if all(hint is None for hint in sampled.hints_ms):
        return ()
    return sampled.hints_ms


def _usage(sampled: Sampled) -> UsageReport | None:
    """What the summary calls cost (None: none was made)."""
    if not sampled.calls:
        return None
    return UsageReport(
        prompt_tokens=sampled.prompt_tokens,
        completion_tokens=sampled.completion_tokens,
        total_tokens=sampled.total_tokens,
    )
