"""The session actor's compaction: L1 step 4 (threshold), reactive recovery (R3), manual (K4).

A layer of the session actor (`core` explains the chain). The compaction
itself runs in the compactor actor, spawned on first need and stopped with
the session; it answers by message (`CompactionDone`), so this actor never
blocks on it (PITFALLS 18). While it runs, new messages wait (`_sends`,
`_manual`).

What the answer leads to:

| trigger             | answer                         | then                                              |
|---------------------|--------------------------------|---------------------------------------------------|
| threshold           | checkpoint                     | persist it (K2), then the turn's request          |
| reactive            | checkpoint                     | persist it, the same request again (attempt + 1)  |
| threshold, reactive | blocked by the hook (C3, R4)   | recorded (not for the breaker); turn fails        |
| threshold           | nothing smaller (L2), an error | the turn fails (compaction)                       |
| reactive            | nothing, but the snip shrank   | the snip is the checkpoint (R3); request again    |
| reactive            | nothing smaller at all         | the turn fails with the provider's error (R3)     |
| manual (K4)         | anything                       | the caller's future gets the record or the error  |
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from typing import Any

import pykka

from cairn.actors.compactor.actor import CompactionDone, CompactJob, CompactorActor
from cairn.actors.compactor.errors import CompactionIneffective
from cairn.actors.compactor.gates import manual_compaction_due
from cairn.actors.compactor.service import CompactionRequest, Compactor
from cairn.actors.errors import UnknownSession
from cairn.actors.provider.actor import ProviderFailed
from cairn.actors.session.core import SessionCore, reply_error, reply_with
from cairn.actors.session.inflight import PendingCompaction
from cairn.actors.session.machine import CompactionAsked
from cairn.actors.session.manual import CompactResult, not_compacted, with_checkpoint
from cairn.actors.session.messages import ManualCompact
from cairn.actors.session.recovery import recovery_source, snip_checkpoint
from cairn.actors.session.tracker import occupancy
from cairn.events.codec import Record
from cairn.events.errors import CairnError
from cairn.events.kinds import EventBase, Trigger
from cairn.events.model import Message


class Compacting(SessionCore):
    """Compaction for the session actor (see the module doc)."""

    def _compactor_ref(self) -> pykka.ActorRef[Any]:
        if self._compactor is None or not self._compactor.is_alive():
            info = self._state.info
            assert self._adapter is not None
            compactor = Compactor(
                self._adapter,
                model=info.model if info is not None else "",
                sleep=self._rt.sleep,
                counter=self._counter,
                hook=self._rt.hook,
                config=self._rt.compaction,
                retry=self._rt.retry,
                draw=self._rt.retry_draw,
            )
            self._compactor = CompactorActor.start(compactor)
        return self._compactor

    def _compact(
        self,
        trigger: Trigger,
        *,
        source: tuple[Message, ...] | None,
        snipped: tuple[Message, ...] | None = None,
        reply: concurrent.futures.Future[Record | None] | None = None,
        overflow: ProviderFailed | None = None,
    ) -> None:
        state = self._state
        info = state.info
        assert info is not None
        job = next(self._jobs)
        request = CompactionRequest(
            state=state, workspace=info.workspace, trigger=trigger, now_ms=self._rt.clock_ms(), source=source
        )
        self._compaction = PendingCompaction(snipped=snipped, reply=reply, overflow=overflow)
        self._advance(CompactionAsked(job, trigger))
        self._compactor_ref().tell(CompactJob(job, request, self.actor_ref))

    def _take_compaction(self, done: CompactionDone, trigger: Trigger) -> bool:
        """The compactor's answer to the job awaited (the table above); False when the turn ended."""
        pending = self._compaction
        assert pending is not None
        self._compaction = None
        if trigger == "manual":
            self._manual_done(pending, done)
            return True
        if done.blocked is not None:  # C3 / R4: the context stays as it was, no checkpoint
            blocked = done.blocked
            with contextlib.suppress(CairnError):
                self._persist([blocked.event])  # for audit; the breaker ignores it
            self._fail("compaction", "blocked", blocked.reason)
            return False
        if done.outcome is None:
            self._compaction_failed(pending, trigger, done.error or RuntimeError("no outcome"))
        else:
            self._after_checkpoint(list(done.outcome.events), reactive=trigger == "reactive")
        return True

    def _compaction_failed(self, pending: PendingCompaction, trigger: Trigger, error: BaseException) -> None:
        """No checkpoint in a turn: L2 fails it; R3 falls back to the snip alone, else the error stands."""
        if not self._record_failures(error):
            return
        detail = f"{type(error).__name__}: {error}"
        if trigger != "reactive":
            if isinstance(error, CompactionIneffective):  # nothing smaller to swap in (L2)
                return self._fail("compaction", "insufficient-reduction", str(error))
            return self._fail("compaction", type(error).__name__, detail)
        checkpoint = None
        if pending.snipped is not None:
            checkpoint = snip_checkpoint(self._state, pending.snipped, self._counter, detail=detail)
        if checkpoint is None:  # R3: nothing smaller; the provider's error stands
            why = error.reason if isinstance(error, CompactionIneffective) else detail
            return self._recovery_failed(pending, why)
        self._after_checkpoint([checkpoint], reactive=True)

    def _record_failures(self, error: BaseException) -> bool:
        """Persist the `compaction-failed` records of a compaction that committed nothing (C4)."""
        if not isinstance(error, CompactionIneffective) or not error.events:
            return True
        return self._try_persist(list(error.events), "compaction")

    def _recovery_failed(self, pending: PendingCompaction, why: str) -> None:
        """R3: neither compaction nor snip gave a smaller context; fail with the original error."""
        original = pending.overflow
        error_class = original.error_class if original is not None else "context-limit"
        message = original.message if original is not None else "the context is over the provider's limit"
        detail = f"{message} (reactive recovery could not shrink the context: {why})"
        self._fail("provider", error_class, detail)

    def _after_checkpoint(self, events: list[EventBase], *, reactive: bool) -> None:
        """K2: the checkpoint is acknowledged before memory changes and before any request."""
        if not self._try_persist(events, "checkpoint"):
            return
        run = self._run
        assert run is not None
        if reactive:
            run.attempt += 1  # R3: the same request, replayed on the new context
        self._prepare("snip")  # L1 (5) onwards

    def _recover(self, overflow: ProviderFailed) -> None:
        """R3: strip the hand-off, snip keep 3 minimum 10, compact the result (trigger reactive)."""
        snipped = recovery_source(self._state, self._view, self._counter, now_ms=self._rt.clock_ms())
        self._compact("reactive", source=snipped, snipped=snipped, overflow=overflow)

    # -- manual compaction (K4) -------------------------------------------------------------------

    def _manual_start(self, message: ManualCompact) -> None:
        if not self._loaded:
            self._load()
        try:
            self._settle()
        except CairnError as exc:
            reply_error(message.reply, exc)
            return self._resume()
        state = self._state
        if state.info is None:
            reply_error(message.reply, UnknownSession(f"no session {self._sid} in the store"))
            return self._resume()
        occ = occupancy(state, self._view)
        window = state.info.context_window
        basis = not_compacted(self._sid, occ.projection.tokens, occ.projection.source, window)
        if not manual_compaction_due(occ.projection.tokens, window):
            reply_with(message.reply, basis)
            return self._resume()
        self._compact("manual", source=None, reply=_answered(message.reply, basis))

    def _manual_done(self, pending: PendingCompaction, done: CompactionDone) -> None:
        reply = pending.reply
        assert reply is not None
        if done.blocked is not None:
            with contextlib.suppress(CairnError):
                self._persist([done.blocked.event])
            reply_error(reply, done.blocked)  # C3: the caller gets the error
            return
        if done.outcome is None:
            error = done.error or RuntimeError("no outcome")
            if isinstance(error, CompactionIneffective) and error.events:
                with contextlib.suppress(CairnError):  # the breaker counts them (C4)
                    self._persist(list(error.events))
            reply_error(reply, error)
            return
        try:
            records = self._persist(list(done.outcome.events))
        except CairnError as exc:
            reply_error(reply, exc)
            return
        reply_with(reply, records[-1])


def _answered(
    reply: concurrent.futures.Future[CompactResult], basis: CompactResult
) -> concurrent.futures.Future[Record | None]:
    """The future a manual compaction's checkpoint record goes to, answering `reply` with it.

    The caller's future gets `basis` with the record (`with_checkpoint`), or
    the same error; the copy runs on the thread that resolves the inner one.
    """
    inner: concurrent.futures.Future[Record | None] = concurrent.futures.Future()

    def forward(done: concurrent.futures.Future[Record | None]) -> None:
        error = done.exception()
        if error is not None:
            reply_error(reply, error)
            return
        record = done.result()
        reply_with(reply, with_checkpoint(basis, record) if record is not None else basis)

    inner.add_done_callback(forward)
    return inner
